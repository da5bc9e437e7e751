package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"bindery/api"
	"bindery/internal/app"
	"bindery/internal/platform/config"
	"bindery/internal/platform/logging/logtest"
	"bindery/internal/testkit"
	"bindery/schema"
	"bindery/store"
	"bindery/ui"
	"bindery/workflow"
)

// The whole product as `bindery demo` runs it — sample configuration, the real workflow, batch
// service and cron, the simulators over HTTP — booted on :0. The sample's timings are sped up
// (sim.timeScale, the round schedule); nothing else differs.

// demoDir prepares a demo data directory and speeds up its sample configuration.
func demoDir(t *testing.T, edits ...string) (dir, configPath, dsn string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "demo")
	configPath, dsn, err := app.PrepareDemo(dir)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(configPath)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	edits = append([]string{"timeScale: 1", "timeScale: 20", `rounds: "@every 5s"`, `rounds: "@every 1s"`, "  short: 1s", "  short: 100ms"}, edits...)
	for i := 0; i+1 < len(edits); i += 2 {
		if !strings.Contains(text, edits[i]) {
			t.Fatalf("sample config lacks %q", edits[i])
		}
		text = strings.Replace(text, edits[i], edits[i+1], 1)
	}
	if err := os.WriteFile(configPath, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, configPath, dsn
}

// demo is one running `bindery demo` process.
type demo struct {
	*app.App
	logs *logtest.Buffer
	stop func() error
}

func startDemo(t *testing.T, configPath, dsn string) *demo {
	t.Helper()
	logs := &logtest.Buffer{}
	a, stop := run(t, app.Options{
		Mode: app.ModeDemo, ConfigPath: configPath, Addr: "127.0.0.1:0", DSN: dsn,
		Assets: app.Assets{Schema: schema.FS, UI: ui.Dist()}, LogOutput: logs,
	})
	d := &demo{App: a, logs: logs, stop: stop}
	t.Cleanup(func() {
		if err := d.stop(); err != nil {
			t.Errorf("demo stopped with %v", err)
		}
		if t.Failed() {
			t.Logf("demo log:\n%s", logs.String())
		}
	})
	return d
}

// api calls the demo's API as user and decodes the JSON answer into out.
func (d *demo) api(t *testing.T, method, path, user, body string, out any) int {
	t.Helper()
	code, text := do(t, method, d.URL()+path, user, body)
	if out != nil && text != "" {
		if err := json.Unmarshal([]byte(text), out); err != nil {
			t.Fatalf("%s %s: %d %s", method, path, code, text)
		}
	}
	return code
}

// approveInInbox finds op's ticket in the approval simulator's inbox and approves it, as the
// approver does on the demo's inbox page.
func (d *demo) approveInInbox(t *testing.T, op string) {
	t.Helper()
	var id string
	testkit.Eventually(t, "the ticket in the inbox", func() bool {
		var inbox struct {
			Items []struct{ ID, OperationID, Status string }
		}
		d.api(t, "GET", "/sim/approvals", "", "", &inbox)
		for _, tk := range inbox.Items {
			if tk.OperationID == op && tk.Status == "PENDING" {
				id = tk.ID
				return true
			}
		}
		return false
	})
	if code := d.api(t, "POST", "/sim/approvals/"+id+"/decide", "", `{"decision":"APPROVED"}`, nil); code != 200 {
		t.Fatalf("decide: %d", code)
	}
}

func (d *demo) request(t *testing.T, op string) api.RequestView {
	t.Helper()
	var v api.RequestView
	if code := d.api(t, "GET", "/api/requests/"+op, "alice", "", &v); code != 200 {
		t.Fatalf("request %s: %d", op, code)
	}
	return v
}

func apply(t *testing.T, d *demo, user, target string) string {
	t.Helper()
	op := fmt.Sprintf("op-%s-%d", user, time.Now().UnixNano())
	var res api.ApplyResult
	if code := d.api(t, "POST", "/api/apply", user, fmt.Sprintf(`{"operationId":%q,"targetKey":%q,"reason":"demo"}`, op, target), &res); code != 202 || res.Code != "ACCEPTED" {
		t.Fatalf("apply: %d %+v", code, res)
	}
	return op
}

// One command: apply as a requester, approve in the inbox, and the request reaches VALIDATED
// through a batch, its MR, pipeline, approvals, merge and the deploy callback.
func TestTheDemoTakesARequestFromApplyToValidated(t *testing.T) {
	t.Parallel()
	eachDSN(t, func(t *testing.T, dsn string) {
		_, configPath, fileDSN := demoDir(t)
		if strings.HasPrefix(dsn, "sqlite:") {
			dsn = fileDSN
		}
		d := startDemo(t, configPath, dsn)
		op := apply(t, d, "alice", "payments-db-readonly")
		d.approveInInbox(t, op)
		var v api.RequestView
		testkit.Eventually(t, "VALIDATED", func() bool { v = d.request(t, op); return v.Status == "VALIDATED" })
		if v.BatchID == 0 || v.MR == nil || v.Flow != workflow.FlowApprovalFirst || v.NextAction != "NONE" {
			t.Fatalf("view: %+v", v)
		}
		// The operator sees the batch; the cron's round is the one that made it.
		var batches api.Page[api.BatchView]
		if code := d.api(t, "GET", "/api/ops/batches", "ops", "", &batches); code != 200 || len(batches.Items) != 1 || batches.Items[0].Status != "SUCCEEDED" {
			t.Fatalf("ops batches: %d %+v", code, batches)
		}
		if m := batches.Items[0].Members; len(m) != 1 || m[0].OperationID != op {
			t.Fatalf("members %+v", m)
		}
	})
}

// The process stopped in the middle of a batch's pipeline wait, and a new process on the same
// data directory finishes the request: the batch's task is in the database, due for its next
// look, and the new process's dispatcher resumes it from GitLab's state.
func TestAStoppedDemoFinishesTheRequestAfterARestart(t *testing.T) {
	t.Parallel()
	_, configPath, dsn := demoDir(t,
		"timeScale: 20", "timeScale: 1", // real pipeline time (10s): the stop lands inside the wait
		"server:\n", "server:\n  shutdownTimeout: 1s\n",
		"batch:\n  maxRequests: 50\n", "batch:\n  maxRequests: 50\n  leaseTTL: 5s\n",
	)
	first := startDemo(t, configPath, dsn)
	op := apply(t, first, "alice", "payments-db-readonly")
	first.approveInInbox(t, op)
	testkit.Eventually(t, "the batch's MR", func() bool {
		v := first.request(t, op)
		return v.BatchID != 0 && v.MR != nil && v.Status == "MR_CREATING"
	})
	if err := first.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if v := readRequest(t, dsn, op); v == "VALIDATED" || strings.Contains(v, "FAILED") {
		t.Fatalf("after the stop the request is %s: a stop must neither finish nor fail it", v)
	}

	second := startDemo(t, configPath, dsn)
	var v api.RequestView
	testkit.Eventually(t, "VALIDATED after the restart", func() bool { v = second.request(t, op); return v.Status == "VALIDATED" })
	if !strings.Contains(second.logs.String(), `msg="batch settled"`) {
		t.Fatalf("the second process did not finish the batch:\n%s", second.logs.String())
	}
}

// readRequest reads a request's binding status straight from the database of a stopped demo.
func readRequest(t *testing.T, dsn, op string) string {
	t.Helper()
	db, err := store.Open(context.Background(), dsn, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var status string
	if err := db.Raw().QueryRow("SELECT status FROM operation WHERE operation_id = ?", op).Scan(&status); err != nil {
		t.Fatal(err)
	}
	return status
}

// The ops console's effective configuration names the address the process listens on: the
// -addr flag (here 127.0.0.1:0, the port the system picked) wins over server.addr, and the
// row says so.
func TestTheConfigViewShowsTheAddressTheProcessListensOn(t *testing.T) {
	t.Parallel()
	_, configPath, dsn := demoDir(t)
	d := startDemo(t, configPath, dsn)
	var view struct {
		Keys []config.KeyReport `json:"keys"`
	}
	if code := d.api(t, "GET", "/api/ops/config", "ops", "", &view); code != 200 {
		t.Fatalf("ops config: %d", code)
	}
	listening := strings.TrimPrefix(d.URL(), "http://")
	for _, k := range view.Keys {
		if k.Key != "server.addr" {
			continue
		}
		if k.Effective != listening || k.Status != config.StatusFlag || !strings.Contains(k.Note, "-addr") || !strings.Contains(k.Note, "127.0.0.1:8080") {
			t.Fatalf("server.addr row %+v, want %s set by the -addr flag over the file's 127.0.0.1:8080", k, listening)
		}
		return
	}
	t.Fatal("no server.addr row")
}
