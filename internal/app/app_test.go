package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"bindery/internal/app"
	"bindery/internal/platform/logging/logtest"
	"bindery/internal/testkit"
	"bindery/schema"
	"bindery/store"
	"bindery/store/storetest"
	"bindery/ui"
)

// booted is a running App and what a test needs to poke it.
type booted struct {
	*app.App
	configPath string
	base       string // what boot put before the test's configuration (rewrite the file with it)
	logs       *logtest.Buffer
	stop       func() error
}

// wiredConfig is what the workflow's wiring needs that a test's configuration may leave out: the
// bot's and the reviewers' tokens (demo mode's GitLab is the mounted simulator) and, in serve
// mode, where GitLab and the approval system are (no test here reaches them).
func wiredConfig(mode app.Mode, configText string) string {
	if strings.Contains(configText, "gitlab:") {
		return ""
	}
	base := "gitlab:\n  botToken: bot-token\n  reviewerTokens: [rev1-token, rev2-token]\n"
	if mode == app.ModeServe {
		base = "gitlab:\n  baseURL: http://gitlab.invalid\n  botToken: bot-token\n  reviewerTokens: [rev1-token, rev2-token]\n" +
			"approvalSystem:\n  url: http://approvals.invalid\n"
	}
	return base
}

// boot starts the whole product in demo mode on :0 against dsn with the given config text.
func boot(t *testing.T, dsn, configText string) *booted {
	t.Helper()
	return bootMode(t, app.ModeDemo, dsn, configText)
}

// bootServe is boot in serve mode.
func bootServe(t *testing.T, dsn, configText string) *booted {
	t.Helper()
	return bootMode(t, app.ModeServe, dsn, configText)
}

func bootMode(t *testing.T, mode app.Mode, dsn, configText string) *booted {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	base := wiredConfig(mode, configText)
	if err := os.WriteFile(path, []byte(base+configText), 0o644); err != nil {
		t.Fatal(err)
	}
	logs := &logtest.Buffer{}
	a, stop := run(t, app.Options{
		Mode: mode, ConfigPath: path, Addr: "127.0.0.1:0", DSN: dsn,
		Assets: app.Assets{Schema: schema.FS, UI: ui.Dist()}, LogOutput: logs,
	})
	t.Cleanup(func() { _ = stop() })
	return &booted{App: a, configPath: path, base: base, logs: logs, stop: stop}
}

// run starts an App with opts and runs it until stop, which returns Run's error and is safe to
// call more than once. The caller decides what its cleanup checks.
func run(t *testing.T, opts app.Options) (a *app.App, stop func() error) {
	t.Helper()
	a, err := app.New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	var runErr error
	return a, func() error {
		once.Do(func() { cancel(); runErr = <-done })
		return runErr
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// eachDSN runs fn on a fresh migrated SQLite and MariaDB database (the product's own migration
// at boot then finds nothing to do); eachEmptyDSN on empty ones, which the boot migrates.
func eachDSN(t *testing.T, fn func(t *testing.T, dsn string)) {
	t.Run("sqlite", func(t *testing.T) { fn(t, storetest.MigratedDSN(t, store.SQLite)) })
	t.Run("mysql", func(t *testing.T) { fn(t, storetest.MigratedDSN(t, store.MySQL)) })
}

func eachEmptyDSN(t *testing.T, fn func(t *testing.T, dsn string)) {
	t.Run("sqlite", func(t *testing.T) { fn(t, storetest.SQLiteDSN(t)) })
	t.Run("mysql", func(t *testing.T) { fn(t, storetest.MySQLDSN(t)) })
}

// The product booted on an empty database migrates it and serves.
func TestBootedProductAnswersHealthReadinessAndMetrics(t *testing.T) {
	t.Parallel()
	eachEmptyDSN(t, func(t *testing.T, dsn string) {
		b := boot(t, dsn, "log:\n  level: debug\n")
		if code, body := get(t, b.URL()+"/healthz"); code != 200 || !strings.Contains(body, "ok") {
			t.Fatalf("healthz %d %s", code, body)
		}
		if code, body := get(t, b.URL()+"/readyz"); code != 200 {
			t.Fatalf("readyz %d %s", code, body)
		}
		code, body := get(t, b.URL()+"/metrics")
		for _, want := range []string{"bindery_build_info{", "bindery_config_generation 1", "bindery_config_reload_errors_total 0", "process_resident_memory_bytes"} {
			if code != 200 || !strings.Contains(body, want) {
				t.Errorf("metrics lack %q", want)
			}
		}
		resp, err := http.Get(b.URL() + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		id := resp.Header.Get("X-Request-Id")
		if id == "" {
			t.Fatal("no request id")
		}
		// Every log line of a request carries its id.
		if testkit.Poll(testkit.Timeout(), func() bool { return strings.Contains(b.logs.String(), "requestId="+id) }) != nil {
			t.Fatalf("no log line with requestId=%s in:\n%s", id, b.logs.String())
		}
	})
}

// TestConfigEditAppliesWithoutRestartAndBrokenEditKeepsLastGood is the foundation's promise:
// edit the config of a running instance → the dynamic value changes; break it → the last
// good value stays and the error is counted.
func TestConfigEditAppliesWithoutRestartAndBrokenEditKeepsLastGood(t *testing.T) {
	t.Parallel()
	b := boot(t, storetest.SQLiteDSN(t), "ratelimit:\n  apply: 3\n")
	limit := func() int { return b.Config().Current().RateLimit("ratelimit.apply", 10) }
	if limit() != 3 {
		t.Fatalf("limit %d", limit())
	}
	// An editor-style atomic replace.
	tmp := b.configPath + ".tmp"
	os.WriteFile(tmp, []byte(b.base+"ratelimit:\n  apply: 42\n"), 0o644)
	if err := os.Rename(tmp, b.configPath); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the reloaded limit of 42", func() bool { return limit() == 42 })
	if _, body := get(t, b.URL()+"/readyz"); !strings.Contains(body, `"configGeneration":2`) {
		t.Fatalf("readyz: %s", body)
	}

	os.WriteFile(b.configPath, []byte(b.base+"ratelimit:\n  apply: [oops\n"), 0o644)
	testkit.Eventually(t, "the bad file to be refused", func() bool { return b.Config().LastError() != nil })
	if limit() != 42 {
		t.Fatalf("after a broken edit limit = %d, want the last good 42", limit())
	}
	_, metricsText := get(t, b.URL()+"/metrics")
	if !strings.Contains(metricsText, "bindery_config_reload_errors_total 1") {
		t.Fatalf("reload error not counted:\n%s", metricsText)
	}
}

func TestReadyzFailsWhenTheDatabaseIsGone(t *testing.T) {
	t.Parallel()
	b := boot(t, storetest.SQLiteDSN(t), "")
	b.DB().Close()
	code, body := get(t, b.URL()+"/readyz")
	if code != http.StatusServiceUnavailable {
		t.Fatalf("readyz %d %s", code, body)
	}
	var e map[string]string
	json.Unmarshal([]byte(body), &e)
	if e["code"] != "UNAVAILABLE" || e["requestId"] == "" || strings.Contains(body, "sql") {
		t.Fatalf("body %s", body)
	}
}

func TestGracefulShutdownDeregistersAndStops(t *testing.T) {
	t.Parallel()
	eachDSN(t, func(t *testing.T, dsn string) {
		b := boot(t, dsn, "")
		testkit.Eventually(t, "the instance's heartbeat row", func() bool {
			var n int
			b.DB().Raw().QueryRow("SELECT COUNT(*) FROM instance WHERE id = ?", b.Instance()).Scan(&n)
			return n == 1
		})
		if err := b.stop(); err != nil {
			t.Fatalf("run: %v", err)
		}
		if _, err := http.Get(b.URL() + "/healthz"); err == nil {
			t.Fatal("still serving after shutdown")
		}
		// The database is closed too; reopen to check the instance row is gone.
		b2 := boot(t, dsn, "")
		var n int
		b2.DB().Raw().QueryRow("SELECT COUNT(*) FROM instance WHERE id = ?", b.Instance()).Scan(&n)
		if n != 0 {
			t.Fatal("instance row left behind after a clean shutdown")
		}
	})
}

func TestStartFailsClearlyOnBadInputs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	for name, tc := range map[string]struct{ config, dsn, want string }{
		"broken config":  {"apply: [", storetest.SQLiteDSN(t), "parse"},
		"missing dsn":    {"", "", "database.dsn is empty"},
		"unknown scheme": {"", "postgres://x", "unknown scheme"},
	} {
		t.Run(name, func(t *testing.T) {
			os.WriteFile(path, []byte(tc.config), 0o644)
			_, err := app.New(context.Background(), app.Options{Mode: app.ModeServe, ConfigPath: path, Addr: "127.0.0.1:0", DSN: tc.dsn,
				Assets: app.Assets{Schema: schema.FS, UI: ui.Dist()}, LogOutput: io.Discard})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestPrepareDemoKeepsExistingConfigAndData(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "demo")
	path, dsn, err := app.PrepareDemo(dir)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(path, []byte("# mine\n"), 0o644)
	path2, dsn2, err := app.PrepareDemo(dir)
	if err != nil || path2 != path || dsn2 != dsn {
		t.Fatal("second prepare differs")
	}
	if data, _ := os.ReadFile(path); string(data) != "# mine\n" {
		t.Fatal("user's config overwritten")
	}
}

// With server.metricsAddr, /metrics is served there alone (and not on the API's listener).
func TestMetricsOnTheirOwnListener(t *testing.T) {
	t.Parallel()
	b := boot(t, storetest.SQLiteDSN(t), "server:\n  metricsAddr: 127.0.0.1:0\n")
	if b.MetricsURL() == "" {
		t.Fatal("no metrics listener")
	}
	if code, body := get(t, b.MetricsURL()); code != 200 || !strings.Contains(body, "bindery_build_info{") {
		t.Fatalf("metrics listener: %d", code)
	}
	if code, _ := get(t, b.URL()+"/metrics"); code != 404 {
		t.Fatalf("the API's listener still answered /metrics: %d", code)
	}
	if code, _ := get(t, strings.Replace(b.MetricsURL(), "/metrics", "/api/me", 1)); code != 404 {
		t.Fatalf("the metrics listener served another path: %d", code)
	}
}

func TestVersionSaysWhatABuildDoesNotCarry(t *testing.T) {
	t.Parallel()
	got := app.Build{Version: "dev", Go: "go1.26", Platform: "linux/amd64"}.String()
	for _, want := range []string{"bindery dev", "commit:   unknown", "built:    unknown", "not a release build"} {
		if !strings.Contains(got, want) {
			t.Errorf("an unstamped build's version lacks %q:\n%s", want, got)
		}
	}
	got = app.Build{Version: "v1.2.0", Commit: "0123abc", Modified: true, BuildTime: "2025-01-02T03:04:05Z", Go: "go1.26", Platform: "linux/arm64"}.String()
	for _, want := range []string{"bindery v1.2.0", "0123abc, with uncommitted changes", "built:    2025-01-02T03:04:05Z", "go1.26 linux/arm64"} {
		if !strings.Contains(got, want) {
			t.Errorf("a stamped build's version lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "unknown") || strings.Contains(got, "not a release") {
		t.Errorf("a stamped build claims a missing stamp:\n%s", got)
	}
}
