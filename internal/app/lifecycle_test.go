package app_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"bindery/internal/app"
	"bindery/internal/testkit"
	"bindery/store/storetest"
)

// serviceLog is the order of the services in the log lines with message msg.
func serviceLog(t *testing.T, b *booted, msg string) []string {
	t.Helper()
	var out []string
	for _, line := range b.logs.Lines(`"msg":"` + msg + `"`) {
		var rec struct{ Service string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, rec.Service)
	}
	return out
}

// The app keeps one list of the services it started and Close stops them in the reverse order:
// in serve mode the HTTP server is the last to start and so the first to stop accepting; in demo
// mode the listener and the simulators it serves outlive the engine whose steps call them.
func TestCloseStopsEveryServiceInTheReverseOrderOfItsStart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode    app.Mode
		started []string
	}{
		{app.ModeServe, []string{"config watcher", "heartbeat", "engine", "cron", "notify watch", "http"}},
		{app.ModeDemo, []string{"config watcher", "heartbeat", "http", "simulators", "engine", "cron", "notify watch"}},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			b := bootMode(t, tc.mode, storetest.SQLiteDSN(t), "log:\n  level: debug\n  format: json\n")
			testkit.Eventually(t, "the listening line", func() bool { return len(serviceLog(t, b, "bindery listening")) == 1 })
			if got := serviceLog(t, b, "service started"); !slices.Equal(got, tc.started) {
				t.Fatalf("started %v, want %v", got, tc.started)
			}
			if err := b.stop(); err != nil {
				t.Fatal(err)
			}
			want := slices.Clone(tc.started)
			slices.Reverse(want)
			if got := serviceLog(t, b, "service stopped"); !slices.Equal(got, want) {
				t.Fatalf("stopped %v, want %v", got, want)
			}
			if err := b.Close(); err != nil { // a second Close stops nothing again
				t.Fatal(err)
			}
			if n := len(serviceLog(t, b, "service stopped")); n != len(want) {
				t.Fatalf("%d stops after a second Close, want %d", n, len(want))
			}
			if strings.Contains(b.logs.String(), "shutdown incomplete") {
				t.Fatalf("a service did not stop in time:\n%s", b.logs.String())
			}
		})
	}
}
