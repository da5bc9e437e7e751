package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"bindery/api"
	"bindery/internal/app"
	"bindery/internal/platform/config"
	"bindery/internal/platform/logging/logtest"
	"bindery/internal/sim"
	"bindery/internal/testkit"
	"bindery/internal/vocab/state"
	"bindery/schema"
	"bindery/store"
	"bindery/store/storetest"
	"bindery/ui"
)

// serveConfig is a production configuration pointing at external systems (here the simulators
// served alone, as `bindery sim` does).
func serveConfig(simURL string) string {
	return `
server:
  trustedProxies: [127.0.0.1/32]
  shutdownTimeout: 2s
apply:
  mode: OPEN
workflow:
  approvalFirst: true
hooks:
  approvalSecret: s3cret
  deployToken: deploy-token
  gitlabToken: gitlab-token
gitlab:
  baseURL: ` + simURL + `/sim/gitlab
  botToken: bot-token
  reviewerTokens: [rev1-token, rev2-token]
approvalSystem:
  url: ` + simURL + `/sim/approval
permission:
  rules:
    bindery-ops: [ops@example.com]
poll:
  short: 50ms
  long: 100ms
reconcile:
  minAge: 500ms
cron:
  rounds: "@every 1s"
  reconcile: "@every 1s"
  sweep: "@every 1s"
sim:
  timeScale: 20
  approval:
    autoApprove: true
  deploy:
    delay: 1s
targets:
  - {key: db-read, title: DB read, project: infra/access-config, path: "bindings/db-read/{subject}.yaml"}
  - {key: db-write, title: DB write, project: infra/access-config, path: "bindings/db-write/{subject}.yaml"}
  - {key: grafana, title: Grafana, project: infra/observability-config, path: "grafana/{subject}.yaml"}
`
}

// serveAs calls a serve-mode instance as identity, through the trusted login proxy's header.
func serveAs(t *testing.T, method, url, identity, body string, out any) int {
	t.Helper()
	code, data := send(t, method, url, "X-Forwarded-User", identity, body)
	if out != nil {
		if err := json.Unmarshal([]byte(data), out); err != nil {
			t.Fatalf("%s %s: %d %s", method, url, code, data)
		}
	}
	return code
}

// Two `serve` instances on one MariaDB, one set of external systems: every instance runs every
// cron job, applications and callbacks land on either, and every request is validated exactly
// once, each in one batch.
func TestTwoServeInstancesShareTheWorkOnOneDatabase(t *testing.T) {
	t.Parallel()
	dsn := storetest.MigratedDSN(t, store.MySQL)
	addrA := testkit.FreeAddr(t)
	simSrc := config.NewStatic(config.MustParse(serveConfig("http://unused")))
	sims := sim.New(sim.Options{Config: simSrc, BinderyURL: "http://" + addrA})
	simSrv := httptest.NewServer(sims.Handler())
	sctx, stopSims := context.WithCancel(context.Background())
	sims.Start(sctx)
	t.Cleanup(func() { stopSims(); sims.Stop(context.Background()); simSrv.Close() })

	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(serveConfig(simSrv.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	var instances []*app.App
	for _, addr := range []string{addrA, "127.0.0.1:0"} {
		logs := &logtest.Buffer{}
		a, stop := run(t, app.Options{
			Mode: app.ModeServe, ConfigPath: path, Addr: addr, DSN: dsn,
			Assets: app.Assets{Schema: schema.FS, UI: ui.Dist()}, LogOutput: logs,
		})
		t.Cleanup(func() {
			if err := stop(); err != nil {
				t.Errorf("instance stopped with %v", err)
			}
			if t.Failed() {
				t.Logf("instance %s log:\n%s", a.URL(), logs.String())
			}
		})
		instances = append(instances, a)
	}

	var ops []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, who := range []string{"alice@example.com", "bob@example.com", "ops@example.com"} {
		for j, target := range []string{"db-read", "db-write", "grafana"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a := instances[(i+j)%2]
				op := fmt.Sprintf("op-%d-%d", i, j)
				body := fmt.Sprintf(`{"operationId":%q,"targetKey":%q,"reason":"r"}`, op, target)
				if code := serveAs(t, "POST", a.URL()+"/api/apply", who, body, nil); code != 202 {
					t.Errorf("apply %s on %s: %d", op, a.URL(), code)
				}
				mu.Lock()
				ops = append(ops, op)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()

	for _, op := range ops {
		var v api.RequestView
		if testkit.Poll(testkit.Timeout(), func() bool {
			serveAs(t, "GET", instances[1].URL()+"/api/requests/"+op, "ops@example.com", "", &v)
			return v.Status == "VALIDATED"
		}) != nil {
			t.Fatalf("%s is %s/%s", op, v.Status, v.Step.Name)
		}
	}
	db, err := store.Open(context.Background(), dsn, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Each request validated once and claimed by one batch; at most one active batch per project.
	var twice int
	db.Raw().QueryRow("SELECT COUNT(*) FROM (SELECT operation_id FROM operation_step WHERE step = ? GROUP BY operation_id HAVING COUNT(*) > 1) x",
		int(state.StepCalledBack)).Scan(&twice)
	var rebatched int
	db.Raw().QueryRow("SELECT COUNT(*) FROM (SELECT operation_id FROM merge_batch_member GROUP BY operation_id HAVING COUNT(*) > 1) x").Scan(&rebatched)
	var active int
	db.Raw().QueryRow("SELECT COUNT(*) FROM merge_batch WHERE status IN ('RUNNING', 'BLOCKED')").Scan(&active)
	if twice != 0 || rebatched != 0 || active != 0 {
		t.Fatalf("validated twice: %d, claimed by two batches: %d, batches still active: %d", twice, rebatched, active)
	}
}

// Serve mode refuses to start without the systems it needs, with a message that says which.
func TestServeModeWithoutGitLabRefusesToStart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "config.yaml")
	approval := "approvalSystem:\n  url: http://approvals.invalid\n"
	for _, tc := range []struct{ name, config, want string }{
		{"without GitLab", approval, "gitlab.baseURL is not set"},
		{"without the bot's token", approval + "gitlab:\n  baseURL: http://gitlab.invalid\n", "gitlab.botToken is not set"},
		{"without the approval system", "gitlab:\n  baseURL: http://gitlab.invalid\n  botToken: bot\n  reviewerTokens: [rev]\n", "approvalSystem.url is not set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(tc.config), 0o644); err != nil {
				t.Fatal(err)
			}
			a, err := app.New(context.Background(), app.Options{
				Mode: app.ModeServe, ConfigPath: path, Addr: "127.0.0.1:0", DSN: storetest.SQLiteDSN(t),
				Assets: app.Assets{Schema: schema.FS, UI: ui.Dist()}, LogOutput: io.Discard,
			})
			if err == nil {
				a.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("start %s: %v", tc.name, err)
			}
		})
	}
}
