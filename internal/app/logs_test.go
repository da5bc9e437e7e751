package app_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"bindery/internal/platform/logging/logtest"
	"bindery/internal/testkit"
)

// The demo's whole journey — apply, approve, batch, MR, pipeline, merge, deploy callback, a
// stranger's look and a shutdown — logged as JSON: every line is one JSON object naming each
// key once (encoding/json would read a repeated key without a word), the components all speak,
// each request leaves an access line, and durations are text.
func TestADemoRunLogsEachKeyOncePerLine(t *testing.T) {
	t.Parallel()
	_, configPath, dsn := demoDir(t, "log:\n  level: info\n", "log:\n  level: debug\n  format: json\n")
	d := startDemo(t, configPath, dsn)
	op := apply(t, d, "alice", "payments-db-readonly")
	d.approveInInbox(t, op)
	testkit.Eventually(t, "VALIDATED", func() bool { return d.request(t, op).Status == "VALIDATED" })
	// A stranger's look at the real workflow's request answers as an unknown id does.
	var theirs, unknown map[string]any
	if code := d.api(t, "GET", "/api/requests/"+op, "bob", "", &theirs); code != 404 {
		t.Fatalf("bob reads alice's request: %d", code)
	}
	d.api(t, "GET", "/api/requests/op-unknown-1", "bob", "", &unknown)
	delete(theirs, "requestId")
	delete(unknown, "requestId")
	if fmt.Sprint(theirs) != fmt.Sprint(unknown) {
		t.Fatalf("alice's request answers bob %v, an unknown one %v", theirs, unknown)
	}
	if err := d.stop(); err != nil {
		t.Fatal(err)
	}

	components := map[string]bool{}
	var access, shutdown int
	lines := strings.Split(strings.TrimSpace(d.logs.String()), "\n")
	for _, line := range lines {
		repeated, err := logtest.RepeatedKeys(line)
		if err != nil {
			t.Fatal(err)
		}
		if len(repeated) > 0 {
			t.Errorf("repeated keys %v: %s", repeated, line)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		if c, ok := m["component"].(string); ok {
			components[c] = true
		}
		switch m["msg"] {
		case "http request":
			access++
			if _, ok := m["duration"].(string); !ok || m["route"] == nil || m["requestId"] == nil {
				t.Errorf("access line: %s", line)
			}
		case "shutting down":
			shutdown++
			if _, ok := m["timeout"].(string); !ok {
				t.Errorf("the shutdown timeout is not text: %s", line)
			}
		}
	}
	for _, c := range []string{"workflow", "cron", "batch"} { // the others speak when something goes wrong
		if !components[c] {
			t.Errorf("no line of component %q (have %v)", c, components)
		}
	}
	if access < 5 || shutdown != 1 {
		t.Errorf("%d access lines, %d shutdown lines of %d", access, shutdown, len(lines))
	}
}
