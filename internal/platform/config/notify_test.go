package config

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"bindery/internal/platform/logging/logtest"
	"bindery/internal/vocab/state"
)

// A valid secret: whsec_ and base64 of 32 bytes.
const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func init() {
	probes["notify.webhooks"] = func(s *Snapshot) any {
		var out []string
		for _, w := range s.Webhooks() {
			out = append(out, fmt.Sprintf("%s %s %d %v", w.Name, w.URL, len(w.Secrets), w.Events))
		}
		return strings.Join(out, "; ")
	}
	probes["notify.email"] = func(s *Snapshot) any { return s.Email().describe() }
	probes["notify.chat"] = func(s *Snapshot) any {
		var out []string
		for _, c := range s.Chats() {
			out = append(out, fmt.Sprintf("%s %s %v %v", c.Name, c.URL, c.Events, c.Projects))
		}
		return strings.Join(out, "; ")
	}
	probes["notify.mrNotes"] = func(s *Snapshot) any { return s.MRNotes() }
	probes["notify.timeout"] = func(s *Snapshot) any { return s.NotifyTimeout() }
	probes["notify.disableAfter"] = func(s *Snapshot) any { return s.NotifyDisableAfter() }
	probes["notify.keepAttempts"] = func(s *Snapshot) any { return s.NotifyKeepAttempts() }
	probes["notify.expiryReminders"] = func(s *Snapshot) any { return remindersText(s.ExpiryReminders()) }

	// A refused receiver key at the first load sends nothing through it (no last good value).
	misconfigTable["notify.webhooks"] = []misconfigCase{
		{"missing", nil, ""}, {"blank", nil, ""},
		{"garbage", str(`[{url: "hooks.example.com/x", secrets: [` + testSecret + `]}]`), ""},
		{"negative/zero", str(`[{url: "https://hooks.example.com/x", secrets: [whsec_c2hvcnQ=]}]`), ""},
		{"valid", str(`[{name: ci, url: "https://hooks.example.com/x", secrets: [` + testSecret + `], events: [request.in_effect]}]`),
			"ci https://hooks.example.com/x 1 [request.in_effect]"},
		{"unknown event", str(`[{url: "https://hooks.example.com/x", secrets: [` + testSecret + `], events: [request.done]}]`), ""},
		{"batch's own event", str(`[{url: "https://hooks.example.com/x", secrets: [` + testSecret + `], events: [batch.opened]}]`), ""},
		{"no secret", str(`[{url: "https://hooks.example.com/x"}]`), ""},
	}
	misconfigTable["notify.email"] = []misconfigCase{
		{"missing", nil, "(no email)"}, {"blank", nil, "(no email)"},
		{"garbage", str(`{smtp: "mail.example.com", from: "bindery@example.com"}`), "(no email)"},
		{"negative/zero", str(`{smtp: "mail.example.com:0", from: "bindery@example.com"}`), "(no email)"},
		{"valid", str(`{smtp: "mail.example.com:587", from: "Bindery <bindery@example.com>", username: u, password: p}`),
			"mail.example.com:587, from Bindery <bindery@example.com>, starttls required, as u"},
		{"bad sender", str(`{smtp: "mail.example.com:25", from: "bindery"}`), "(no email)"},
		{"bad starttls", str(`{smtp: "mail.example.com:25", from: "b@example.com", starttls: maybe}`), "(no email)"},
	}
	misconfigTable["notify.chat"] = []misconfigCase{
		{"missing", nil, ""}, {"blank", nil, ""},
		{"garbage", str(`[{url: "chat"}]`), ""},
		{"negative/zero", str(`[{url: "0"}]`), ""},
		{"valid", str(`[{name: ops, url: "https://chat.example.com/hooks/abc", projects: [infra/acl]}]`), "ops https://chat.example.com/hooks/abc [] [infra/acl]"},
	}
	misconfigTable["notify.mrNotes"] = []misconfigCase{
		{"missing", nil, true}, {"blank", nil, true}, {"garbage", str("sometimes"), true},
		{"negative/zero", str("0"), false}, {"valid", str("false"), false},
	}
	misconfigTable["notify.timeout"] = []misconfigCase{
		{"missing", nil, 10 * time.Second}, {"blank", nil, 10 * time.Second}, {"garbage", str("soon"), 10 * time.Second},
		{"negative/zero", str("0s"), 10 * time.Second}, {"valid", str("3s"), 3 * time.Second}, {"too long", str("5m"), 10 * time.Second},
	}
	misconfigTable["notify.disableAfter"] = durationRows(120*time.Hour, 2*time.Hour)
	misconfigTable["notify.keepAttempts"] = durationRows(720*time.Hour, 48*time.Hour)
	misconfigTable["notify.expiryReminders"] = []misconfigCase{
		{"missing", nil, "[7d, 1d]"}, {"blank", nil, "[7d, 1d]"}, {"garbage", str("[soon]"), "[7d, 1d]"},
		{"negative/zero", str("[0d, 1d]"), "[7d, 1d]"}, {"valid", str("[1d, 14d, 36h, 1d]"), "[14d, 36h0m0s, 1d]"},
		{"off", str("off"), "off"}, {"not a list", str("7d"), "[7d, 1d]"}, {"above a year", str("[400d]"), "[7d, 1d]"},
	}
}

// A receiver key whose value is wrong is refused on its own: the rest of the file loads, the
// key keeps the value in force, the report says so, and the refusal hooks of a whole-file
// refusal are not what tells it (the snapshot's RefusedKeys is).
func TestARefusedReceiverKeepsTheLastGoodValue(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	good := "notify:\n  webhooks: [{name: ci, url: \"https://hooks.example.com/x\", secrets: [" + testSecret + "]}]\n  email: {smtp: \"mail.example.com:25\", from: \"b@example.com\"}\nbatch:\n  maxRequests: 5\n"
	write(good)
	src, err := Open(path, slog.New(slog.NewTextHandler(&logtest.Buffer{}, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	var refusedFiles []error
	src.OnRefused(func(err error) { refusedFiles = append(refusedFiles, err) })
	if ws := src.Current().Webhooks(); len(ws) != 1 || ws[0].Name != "ci" || !ws[0].Wants(state.EventRequestInEffect) || ws[0].Wants(state.EventBatchOpened) {
		t.Fatalf("webhooks %+v", ws)
	}

	// A bad secret and a bad sender: both keys refused, the batch size still changes.
	write("notify:\n  webhooks: [{name: ci, url: \"https://hooks.example.com/y\", secrets: [nope]}]\n  email: {smtp: \"mail.example.com\", from: \"b@example.com\"}\nbatch:\n  maxRequests: 7\n")
	if err := src.Reload(); err != nil {
		t.Fatalf("reload: %v", err)
	}
	cur := src.Current()
	if cur.BatchMaxRequests() != 7 {
		t.Fatalf("the rest of the file did not load: %d", cur.BatchMaxRequests())
	}
	if ws := cur.Webhooks(); len(ws) != 1 || ws[0].URL != "https://hooks.example.com/x" {
		t.Fatalf("webhooks after a refused value: %+v", ws)
	}
	if cur.Email().SMTP != "mail.example.com:25" {
		t.Fatalf("email after a refused value: %+v", cur.Email())
	}
	if got := cur.RefusedKeys(); !slices.Equal(got, []string{"notify.webhooks", "notify.email"}) {
		t.Fatalf("refused keys %v", got)
	}
	r := reportFor(t, cur, "notify.webhooks")
	if r.Status != StatusFallback || !strings.Contains(r.Note, "whsec_") || !strings.Contains(r.Note, "last good") {
		t.Fatalf("report %+v", r)
	}
	if len(refusedFiles) != 0 {
		t.Fatalf("a refused key refused the file: %v", refusedFiles)
	}
	// Fixed: in force again, nothing refused.
	write(strings.Replace(good, "/x", "/z", 1))
	if err := src.Reload(); err != nil {
		t.Fatal(err)
	}
	if ws := src.Current().Webhooks(); ws[0].URL != "https://hooks.example.com/z" || len(src.Current().RefusedKeys()) != 0 {
		t.Fatalf("after the fix: %+v %v", ws, src.Current().RefusedKeys())
	}
	// A file that cannot load at all tells the refusal hooks.
	write("notify: [\n")
	if err := src.Reload(); err == nil || len(refusedFiles) != 1 {
		t.Fatalf("a broken file: %v, hooks told %d", err, len(refusedFiles))
	}
}

// The email password never shows in the report.
func TestTheEmailPasswordIsNotReported(t *testing.T) {
	t.Parallel()
	s := MustParse("notify:\n  email: {smtp: \"mail.example.com:587\", from: \"b@example.com\", username: bot, password: hunter2-secret}\n")
	for _, r := range s.Report {
		if strings.Contains(r.Effective, "hunter2") || strings.Contains(r.Note, "hunter2") {
			t.Fatalf("%s reports the password: %+v", r.Key, r)
		}
	}
	if s.Email().Password != "hunter2-secret" {
		t.Fatal("password not kept")
	}
}
