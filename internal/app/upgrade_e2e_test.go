//go:build e2e

package app_test

import (
	"bindery/internal/testkit"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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
	"bindery/internal/testkit/proc"
	"bindery/schema"
	"bindery/store"
	"bindery/store/storetest"
	"bindery/ui"

	"net/http/httptest"
)

// A rolling upgrade over the newest migration (docs/install.md, 'Upgrading and rolling back'):
// the release before it — the commit before the one that added that migration, built from git
// here — migrates a MariaDB database and serves; this release's migrations are applied while it
// keeps taking requests; an instance of this release joins it on the same database. Every
// request, applied to the old instance before, during and after the migration or to the new
// one, goes through to VALIDATED, and the old instance logs no database error.
//
// Under -tags e2e (.ci/run): building the previous release takes a minute or more of the two
// cores, too long for go test ./....
func TestARollingUpgradeKeepsThePreviousReleaseWorking(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	newest := newestMigration(t)
	added := gitOut(t, root, "log", "--diff-filter=A", "--format=%H", "-1", "--", "schema/mysql/"+newest)
	if added == "" {
		t.Fatalf("git log finds no commit that added schema/mysql/%s: a shallow clone? (git fetch --unshallow)", newest)
	}
	prev := gitOut(t, root, "rev-parse", added+"^")
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.Command("sh", "-c", fmt.Sprintf("git -C %q archive %s | tar -x -C %q", root, prev, src))
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", prev, err, out)
	}
	oldBin := filepath.Join(dir, "bindery-previous")
	start := time.Now()
	if err := proc.Build(ctx, src, oldBin, "."); err != nil {
		t.Fatal(err)
	}
	t.Logf("the previous release (%.12s, before %s) built in %s", prev, newest, time.Since(start).Round(time.Second))

	// The previous release's database.
	dsn := storetest.MySQLDSN(t)
	if out, err := exec.CommandContext(ctx, oldBin, "migrate", "-dsn", dsn).CombinedOutput(); err != nil {
		t.Fatalf("the previous release's migrate: %v\n%s", err, out)
	}
	db, err := store.Open(ctx, dsn, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	before, _ := db.SchemaVersion(ctx)
	if want := migrationNumber(t, newest); before >= want {
		t.Fatalf("the previous release migrated to %04d, want a schema before %s", before, newest)
	}

	// The simulators of this release, their webhooks and deploy callbacks sent to the previous
	// release's instance; both instances use one configuration file.
	oldAddr := testkit.FreeAddr(t)
	cfg := serveConfig("http://unused")
	sims := sim.New(sim.Options{Config: config.NewStatic(config.MustParse(cfg)), BinderyURL: "http://" + oldAddr})
	simSrv := httptest.NewServer(sims.Handler())
	sctx, stopSims := context.WithCancel(context.Background())
	sims.Start(sctx)
	t.Cleanup(func() { stopSims(); sims.Stop(context.Background()); simSrv.Close() })
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(serveConfig(simSrv.URL)+"database:\n  dsn: "+dsn+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	old, err := proc.Start(ctx, dir, nil, "previous", oldBin, "serve", "-config", path, "-addr", oldAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(old.Stop)
	if err := proc.WaitReady(ctx, old, "http://"+oldAddr+"/readyz", time.Minute); err != nil {
		t.Fatal(err)
	}

	var n atomic.Int64
	var mu sync.Mutex
	var ops []string
	apply := func(base string) {
		op := fmt.Sprintf("up-%03d", n.Add(1))
		body := fmt.Sprintf(`{"operationId":%q,"targetKey":"db-read","reason":"r"}`, op)
		if code := serveAs(t, "POST", base+"/api/apply", op+"@example.com", body, nil); code != 202 {
			t.Errorf("apply %s to %s: %d", op, base, code)
			return
		}
		mu.Lock()
		ops = append(ops, op)
		mu.Unlock()
	}
	oldURL := "http://" + oldAddr
	for range 5 {
		apply(oldURL)
	}

	// This release's migrations, while the previous release keeps taking requests.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				apply(oldURL)
			}
		}
	}()
	applied, err := db.Migrate(ctx, schema.FS)
	if err != nil {
		t.Fatalf("this release's migrations under the running previous release: %v", err)
	}
	if !slices.Contains(applied, strings.TrimSuffix(newest, ".sql")) && !slices.Contains(applied, newest) {
		t.Fatalf("applied %v, want %s among them", applied, newest)
	}
	during := n.Load()
	testkit.Eventually(t, "five more requests after the migration", func() bool { return n.Load() >= during+5 }) // and after
	close(stop)
	wg.Wait()

	// This release joins on the same database, beside the previous one.
	logs := &logtest.Buffer{}
	a, stopNew := run(t, app.Options{Mode: app.ModeServe, ConfigPath: path, Addr: testkit.FreeAddr(t), DSN: dsn,
		Assets: app.Assets{Schema: schema.FS, UI: ui.Dist()}, LogOutput: logs})
	t.Cleanup(func() { stopNew() })
	for range 5 {
		apply(a.URL())
		apply(oldURL)
	}

	deadline := time.Now().Add(3 * time.Minute)
	for _, op := range ops {
		for {
			var v api.RequestView
			serveAs(t, "GET", a.URL()+"/api/requests/"+op, "ops@example.com", "", &v)
			if v.Status == "VALIDATED" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s stopped at %s/%s in the rolling upgrade\nprevious release:\n%s", op, v.Status, v.Step.Name, old.Tail(30))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if done, err := old.Exited(); done {
		t.Fatalf("the previous release exited: %v\n%s", err, old.Tail(30))
	}
	oldLog, _ := os.ReadFile(old.Log)
	if bad := regexp.MustCompile(`(?i)(Error 1054|Error 1364|unknown column|doesn't have a default|no such column)`).Find(oldLog); bad != nil {
		t.Errorf("the previous release hit the new schema: %s\n%s", bad, old.Tail(30))
	}
	t.Logf("%d requests through the upgrade (%d of them applied before the migrations ended), schema %04d → %04d", len(ops), during, before, migrationNumber(t, newest))
}

// newestMigration is the file name of this release's newest MySQL migration.
func newestMigration(t *testing.T) string {
	entries, err := fs.ReadDir(schema.FS, "mysql")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".sql") {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names[len(names)-1]
}

func migrationNumber(t *testing.T, name string) int {
	var v int
	if _, err := fmt.Sscanf(name, "%04d_", &v); err != nil {
		t.Fatalf("migration %s: %v", name, err)
	}
	return v
}

func gitOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).Output()
	if err != nil {
		t.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}
