package outbound

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
)

func TestErrorTextNeverCarriesTheUpstreamBody(t *testing.T) {
	e := NewStatusError("gitlab", "create_branch", 400, "branch_exists", `{"message":"Branch already exists at internal-host-7"}`, nil)
	if got := e.Error(); got != "gitlab create_branch: HTTP 400 (branch_exists)" {
		t.Fatalf("Error() = %q", got)
	}
	var b strings.Builder
	slog.New(slog.NewTextHandler(&b, nil)).Info("call failed", "err", e)
	if !strings.Contains(b.String(), "internal-host-7") {
		t.Fatalf("the log must keep the upstream text: %s", b.String())
	}
}

func TestSentinelsMatchByReasonStatusOrKind(t *testing.T) {
	e := NewStatusError("gitlab", "merge", 405, "not_mergeable", "", nil)
	for _, tc := range []struct {
		target *Error
		want   bool
	}{
		{&Error{Reason: "not_mergeable"}, true},
		{&Error{Reason: "not_mergeable", System: "approval"}, false},
		{&Error{Status: 405}, true},
		{&Error{Status: 404}, false},
		{&Error{Kind: KindStatus}, true},
		{&Error{Kind: KindTimeout}, false},
		{&Error{}, false},
	} {
		if got := errors.Is(e, tc.target); got != tc.want {
			t.Errorf("Is(%+v) = %v", tc.target, got)
		}
	}
}

func TestGuardClassifiesWhatEndedACall(t *testing.T) {
	g := NewGuard("test", nil, nil)
	l := Limits{Timeout: 20 * time.Millisecond, Failures: 100, Cooldown: time.Second}
	kind := func(err error) Kind {
		var e *Error
		errors.As(err, &e)
		return e.Kind
	}
	slow := func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() }
	if k := kind(g.Call(context.Background(), "t", "e", l, slow)); k != KindTimeout {
		t.Errorf("our deadline: %s", k)
	}
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	if k := kind(g.Call(cctx, "t", "e", l, slow)); k != KindCanceled {
		t.Errorf("caller gone: %s", k)
	}
	refused := func(ctx context.Context) (int, error) { return 0, errors.New("connection refused") }
	if k := kind(g.Call(context.Background(), "t", "e", l, refused)); k != KindUnavailable {
		t.Errorf("refused: %s", k)
	}
	if err := g.Call(context.Background(), "t", "e", l, func(ctx context.Context) (int, error) { return 201, nil }); err != nil {
		t.Errorf("success: %v", err)
	}
}

func TestBreakerSettingsChangeTakesANewBreaker(t *testing.T) {
	g := NewGuard("test", nil, nil)
	fail := func(ctx context.Context) (int, error) { return 503, NewStatusError("test", "e", 503, "", "", nil) }
	l := Limits{Timeout: time.Second, Failures: 2, Cooldown: time.Hour}
	g.Call(context.Background(), "t", "e", l, fail)
	g.Call(context.Background(), "t", "e", l, fail)
	if err := g.Call(context.Background(), "t", "e", l, fail); !errors.Is(err, gobreaker.ErrOpenState) {
		t.Fatalf("after 2 failures: %v", err)
	}
	// An operator raises breaker.failures: the next call runs under a fresh breaker.
	l.Failures = 5
	if err := g.Call(context.Background(), "t", "e", l, fail); errors.Is(err, gobreaker.ErrOpenState) {
		t.Fatal("new settings still refused by the old breaker")
	}
	if g.BreakerState("other", l) != "closed" {
		t.Fatal("breakers are per base URL")
	}
}
