package ui_test

// The real product for the browser tests that need it: `bindery demo` (SQLite, the in-process
// GitLab, approval and deploy simulators, the demo users), booted in the test's process, and the
// calls a test makes to it beside the browser.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"bindery/internal/app"
	"bindery/internal/testkit"
	"bindery/schema"
	"bindery/ui"
)

// bootDemo starts the product exactly as `bindery demo` does, on :0 in a fresh data directory.
func bootDemo(t *testing.T) string {
	t.Helper()
	url, _ := bootDemoAt(t)
	return url
}

// bootDemoAt is bootDemo that also says where the demo's configuration file is (a test edits it,
// as a person trying the demo does).
func bootDemoAt(t *testing.T) (url, configPath string) {
	t.Helper()
	configPath, dsn, err := app.PrepareDemo(filepath.Join(t.TempDir(), "demo"))
	if err != nil {
		t.Fatal(err)
	}
	logs := &bytes.Buffer{}
	a, err := app.New(context.Background(), app.Options{Mode: app.ModeDemo, ConfigPath: configPath, Addr: "127.0.0.1:0", DSN: dsn,
		Assets: app.Assets{Schema: schema.FS, UI: ui.Dist()}, LogOutput: logs})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("demo stopped with %v", err)
		}
		if t.Failed() {
			t.Logf("demo log:\n%s", logs.String())
		}
	})
	return a.URL(), configPath
}

// demoApply applies through the demo's API as user and returns the operationId.
func demoApply(t *testing.T, url, user, target, reason string) string {
	t.Helper()
	op := fmt.Sprintf("%s-%s-%d", user, target, time.Now().UnixNano())
	body := fmt.Sprintf(`{"operationId":%q,"targetKey":%q,"reason":%q}`, op, target, reason)
	if code, text := demoCall(t, "POST", url+"/api/apply", user, body); code != 202 {
		t.Fatalf("apply %s: %d %s", target, code, text)
	}
	return op
}

// demoDecide decides op's ticket in the approval simulator's inbox.
func demoDecide(t *testing.T, url, op, decision string) {
	t.Helper()
	decided := false
	if testkit.Poll(testkit.Timeout(), func() bool {
		_, text := demoCall(t, "GET", url+"/sim/approvals", "", "")
		var inbox struct {
			Items []struct{ ID, OperationID string }
		}
		if err := json.Unmarshal([]byte(text), &inbox); err != nil {
			t.Fatal(err)
		}
		for _, tk := range inbox.Items {
			if tk.OperationID == op {
				if code, text := demoCall(t, "POST", url+"/sim/approvals/"+tk.ID+"/decide", "", `{"decision":"`+decision+`"}`); code != 200 {
					t.Fatalf("decide: %d %s", code, text)
				}
				decided = true
			}
		}
		return decided
	}) != nil {
		t.Fatalf("no ticket for %s", op)
	}
}

// demoWait waits until op has status.
func demoWait(t *testing.T, url, op, status string) {
	t.Helper()
	var text string
	// The demo's pipelines and deploys take real time (minutes at most): a longer hang guard.
	if testkit.Poll(3*testkit.Timeout(), func() bool {
		_, text = demoCall(t, "GET", url+"/api/requests/"+op, "ops", "")
		return strings.Contains(text, `"status":"`+status+`"`)
	}) != nil {
		t.Fatalf("%s never reached %s: %s", op, status, text)
	}
}

func demoCall(t *testing.T, method, url, user, body string) (int, string) {
	t.Helper()
	code, data, err := demoSend(method, url, user, body)
	if err != nil {
		t.Fatal(err)
	}
	return code, string(data)
}

// demoSend is demoCall for a goroutine beside the test's own: it returns its error.
func demoSend(method, url, user, body string) (int, []byte, error) {
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if user != "" {
		req.Header.Set("X-Bindery-User", user)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// editDemoConfig edits the demo's configuration file as a person trying the demo does (old → new,
// which must be there), then waits until the operators' config view shows inForce: the edit is
// in force.
func editDemoConfig(t *testing.T, url, configPath, old, new, inForce string) {
	t.Helper()
	data, err := os.ReadFile(configPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), old) {
		t.Fatalf("the demo's configuration has no %q to edit", old)
	}
	if err := os.WriteFile(configPath, []byte(strings.Replace(string(data), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	demoWaitAPI(t, url+"/api/ops/config", inForce)
}

// demoWaitAPI waits until an operator's GET of url answers with want in its body.
func demoWaitAPI(t *testing.T, url, want string) {
	t.Helper()
	var text string
	// The demo's pipelines and deploys take real time: a longer hang guard.
	if testkit.Poll(3*testkit.Timeout(), func() bool {
		_, text = demoCall(t, "GET", url, "ops", "")
		return strings.Contains(text, want)
	}) != nil {
		t.Fatalf("%s never answered %s: %s", url, want, text)
	}
}
