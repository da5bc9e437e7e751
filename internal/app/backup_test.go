package app_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"bindery/api"
	"bindery/internal/app"
	"bindery/internal/platform/config"
	"bindery/internal/platform/logging/logtest"
	"bindery/internal/sim"
	"bindery/internal/testkit"
	"bindery/schema"
	"bindery/store"
	"bindery/ui"
)

// A backup taken while requests pour in, restored into a fresh database and started: every
// request the copy holds goes on from where it was (its task resumes, nothing is stranded) and
// reaches VALIDATED; what was applied after the copy is the only loss.
func TestABackupTakenUnderLoadRestoresAndEveryRequestGoesOn(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dsn := "sqlite:" + filepath.Join(dir, "bindery.db")
	addr := testkit.FreeAddr(t)
	sims := sim.New(sim.Options{Config: config.NewStatic(config.MustParse(serveConfig("http://unused"))), BinderyURL: "http://" + addr})
	simSrv := httptest.NewServer(sims.Handler())
	sctx, stopSims := context.WithCancel(context.Background())
	sims.Start(sctx)
	t.Cleanup(func() { stopSims(); sims.Stop(context.Background()); simSrv.Close() })
	path := filepath.Join(dir, "config.yaml")
	// A decision whose callback reached the first instance after the copy is read from its ticket
	// by the restored one, approval.pollAfter after it was asked for (docs/install.md, 'Backup
	// and restore'); deploys after the copy are found by reconciliation.
	cfg := serveConfig(simSrv.URL) + "approval:\n  pollAfter: 2s\n"
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	start := func(dsn string) (*app.App, func() error, *logtest.Buffer) {
		logs := &logtest.Buffer{}
		a, stop := run(t, app.Options{Mode: app.ModeServe, ConfigPath: path, Addr: addr, DSN: dsn,
			Assets: app.Assets{Schema: schema.FS, UI: ui.Dist()}, LogOutput: logs})
		return a, stop, logs
	}

	a, stop, logs := start(dsn)
	var n atomic.Int64
	apply := func(who string) {
		i := n.Add(1)
		body := fmt.Sprintf(`{"operationId":"op-%03d","targetKey":"db-read","reason":"r"}`, i)
		if code := serveAs(t, "POST", a.URL()+"/api/apply", fmt.Sprintf("u%03d@example.com", i), body, nil); code != 202 {
			t.Errorf("apply op-%03d: %d", i, code)
		}
	}
	// Load: four appliers, while the copy is taken in the middle of it.
	var wg sync.WaitGroup
	stopLoad := make(chan struct{})
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stopLoad:
					return
				default:
					apply("")
				}
				if n.Load() >= 200 {
					return
				}
			}
		}()
	}
	testkit.Eventually(t, "20 applications", func() bool { return n.Load() >= 20 })
	backup := filepath.Join(dir, "copy.db")
	if err := a.DB().Backup(context.Background(), backup); err != nil {
		t.Fatalf("backup under load: %v", err)
	}
	// Work goes on after the copy: these are what a restore loses.
	testkit.Eventually(t, "40 applications", func() bool { return n.Load() >= 40 })
	close(stopLoad)
	wg.Wait()
	if err := stop(); err != nil {
		t.Fatalf("first instance: %v\n%s", err, logs.String())
	}
	if err := a.DB().Backup(context.Background(), backup); err == nil {
		t.Error("a backup over an existing file was written")
	}

	// What the copy holds, read before anything runs on it.
	copyDB, err := store.Open(context.Background(), "sqlite:"+backup, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var inCopy []string
	var claimed int // steps running when the copy was taken: the copy names their instance
	if err := copyDB.Raw().QueryRow("SELECT COUNT(*) FROM task WHERE owner IS NOT NULL").Scan(&claimed); err != nil {
		t.Fatal(err)
	}
	rows, err := copyDB.Raw().Query("SELECT operation_id FROM operation ORDER BY operation_id")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var op string
		rows.Scan(&op)
		inCopy = append(inCopy, op)
	}
	rows.Close()
	copyDB.Close()
	if len(inCopy) == 0 || len(inCopy) >= int(n.Load()) {
		t.Fatalf("the copy holds %d of %d requests: want a copy taken in the middle", len(inCopy), n.Load())
	}

	// Restore: the copy is the new database file; start on it.
	restored := filepath.Join(t.TempDir(), "restored.db")
	data, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(restored, data, 0o600); err != nil {
		t.Fatal(err)
	}
	b, stopB, logsB := start("sqlite:" + restored)
	t.Cleanup(func() {
		if err := stopB(); err != nil {
			t.Errorf("restored instance: %v", err)
		}
		if t.Failed() {
			t.Logf("restored instance log:\n%s", logsB.String())
		}
	})
	// The steps that were running when the copy was taken are taken over once the copied
	// heartbeat of the instance that ran them is 15 s old, not when their two-minute leases end:
	// everything goes on within a minute.
	within := time.Minute
	for _, op := range inCopy {
		var v api.RequestView
		if testkit.Poll(within, func() bool {
			serveAs(t, "GET", b.URL()+"/api/requests/"+op, "ops@example.com", "", &v)
			return v.Status == "VALIDATED"
		}) != nil {
			var tasks []string
			rows, _ := b.DB().Raw().Query("SELECT kind, ref, step, due_at, failures FROM task")
			for rows != nil && rows.Next() {
				var k, r, st, due string
				var f int
				rows.Scan(&k, &r, &st, &due, &f)
				tasks = append(tasks, fmt.Sprintf("%s %s %s %s %d", k, r, st, due, f))
			}
			t.Logf("tasks: %v", tasks)
			t.Fatalf("%s is stranded at %s/%s after the restore", op, v.Status, v.Step.Name)
		}
	}
	t.Logf("the copy held %d of %d requests, %d of them with a running step", len(inCopy), n.Load(), claimed)
	if claimed > 0 && !strings.Contains(logsB.String(), "took over the claims of instances whose heartbeat stopped") {
		t.Errorf("the copy held %d running steps; the restored instance never said it took them over", claimed)
	}
	lost := fmt.Sprintf("op-%03d", n.Load())
	if code := serveAs(t, "GET", b.URL()+"/api/requests/"+lost, "ops@example.com", "", nil); code != 404 {
		t.Errorf("%s, applied after the copy, answers %d on the restored database: want 404", lost, code)
	}
}
