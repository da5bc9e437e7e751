package change

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"bindery/internal/platform/config"
)

var target = config.Target{Key: "db-ro", Project: "infra/access", Branch: "main", Path: "bindings/{target}/{subject}.yaml"}

func TestRenderPathStaysInsideTheRepository(t *testing.T) {
	p, err := RenderPath(target, "alice@example.com")
	if err != nil || p != "bindings/db-ro/alice@example.com.yaml" {
		t.Fatalf("%q %v", p, err)
	}
	for _, bad := range []string{"", "../etc", "a/b", "..", "a..b", "-rf", "x y", "a\x00b", strings.Repeat("a", 200)} {
		if _, err := RenderPath(target, bad); !errors.Is(err, ErrInvalidChange) {
			t.Errorf("subject %q: %v", bad, err)
		}
	}
	if _, err := RenderPath(config.Target{Key: "x", Path: "a/{subject}/{nope}"}, "alice"); !errors.Is(err, ErrInvalidChange) {
		t.Error("unknown placeholder accepted")
	}
}

func TestRenderFileQuotesFreeTextAndCapsSize(t *testing.T) {
	at := time.Date(2026, 11, 30, 10, 0, 0, 123456789, time.UTC)
	reason := "need it\nsubject: mallory@example.com\n---\n!!python/object: x"
	_, content, err := RenderFile(target, BindingFile{Subject: "alice@example.com", OperationID: "op-1", Reason: reason, RequestedAt: at})
	if err != nil {
		t.Fatal(err)
	}
	var back BindingFile
	if err := yaml.Unmarshal(content, &back); err != nil {
		t.Fatal(err)
	}
	if back.Subject != "alice@example.com" || back.Reason != reason || back.Target != "db-ro" || !back.RequestedAt.Equal(at.Truncate(time.Millisecond)) {
		t.Fatalf("round trip changed the document: %+v", back)
	}
	if _, _, err := RenderFile(target, BindingFile{Subject: "alice", Reason: strings.Repeat("x", MaxFileSize)}); !errors.Is(err, ErrInvalidChange) {
		t.Fatalf("oversized file: %v", err)
	}
}

func TestValidateBatchRefusesCollisionsAndEscapes(t *testing.T) {
	ok := []FileAction{{Action: "create", Path: "a/x.yaml", OperationID: "1"}, {Action: "delete", Path: "a/y.yaml", OperationID: "2"}}
	if err := ValidateBatch(ok); err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string][]FileAction{
		"collision": {{Action: "create", Path: "a/x.yaml", OperationID: "1"}, {Action: "update", Path: "a/x.yaml", OperationID: "2"}},
		"escape":    {{Action: "create", Path: "a/../../x", OperationID: "1"}},
		"absolute":  {{Action: "create", Path: "/etc/x", OperationID: "1"}},
		"action":    {{Action: "chmod", Path: "a/x", OperationID: "1"}},
	} {
		if err := ValidateBatch(bad); !errors.Is(err, ErrInvalidChange) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
