package cli

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"bindery/internal/app"
	"bindery/internal/platform/logging/logtest"
	"bindery/schema"
	"bindery/ui"
)

func TestCommandLineExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{nil, 2, "Usage:"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"-h"}, 0, "Usage:"},
		{[]string{"version"}, 0, "not a release build"},
		{[]string{"serve", "-h"}, 0, "-config"},
		{[]string{"serve", "-nope"}, 2, "flag provided but not defined"},
		{[]string{"serve"}, 2, "-config is required"},
		{[]string{"demo", "-h"}, 0, "-data"},
		{[]string{"demo", "extra"}, 2, "unexpected argument"},
		{[]string{"sim", "-h"}, 0, "-addr"},
		{[]string{"migrate", "-h"}, 0, "-dsn"},
		{[]string{"smoke", "-h"}, 0, "-url"},
		{[]string{"migrate"}, 2, "-config or -dsn is required"},
		{[]string{"migrate", "-dsn", "postgres://x"}, 1, "unknown scheme"},
	} {
		var out bytes.Buffer
		code := run(context.Background(), tc.args, &out, &out)
		if code != tc.code || !strings.Contains(out.String(), tc.out) {
			t.Errorf("bindery %v: exit %d, want %d; output lacks %q:\n%s", tc.args, code, tc.code, tc.out, out.String())
		}
	}
}

var urlRE = regexp.MustCompile(`running at (http://[0-9.:]+)`)

// startDemo runs `bindery demo` in-process and returns its URL and a stop function.
func startDemo(t *testing.T, dir string) (string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &logtest.Buffer{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"demo", "-addr", "127.0.0.1:0", "-data", dir}, out, io.Discard) }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := urlRE.FindStringSubmatch(out.String()); m != nil {
			return m[1], func() {
				cancel()
				if code := <-done; code != 0 {
					t.Errorf("demo exit %d", code)
				}
			}
		}
		select {
		case code := <-done:
			t.Fatalf("demo exited %d: %s", code, out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("demo printed no URL: %s", out.String())
	return "", nil
}

func TestDemoStartsTwiceOnTheSameDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "demo")
	for i := range 2 {
		url, stop := startDemo(t, dir)
		resp, err := http.Get(url + "/healthz")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("start %d: healthz %v %v", i+1, resp, err)
		}
		resp.Body.Close()
		stop()
	}
}

func TestMigrateCommandIsIdempotent(t *testing.T) {
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "m.db")
	for i, want := range []string{"applied 1 migration", "applied 0 migration"} {
		var out bytes.Buffer
		if code := run(context.Background(), []string{"migrate", "-dsn", dsn}, &out, &out); code != 0 {
			t.Fatalf("run %d: exit %d: %s", i, code, out.String())
		}
		if !strings.Contains(out.String(), want) && !(i == 0 && strings.Contains(out.String(), "applied")) {
			t.Fatalf("run %d: %s", i, out.String())
		}
	}
}

func TestSmokeCommandPassesAgainstDemoAndExitsNonZeroOnAMismatch(t *testing.T) {
	url, stop := startDemo(t, filepath.Join(t.TempDir(), "demo"))
	defer stop()
	var out bytes.Buffer
	if code := run(context.Background(), []string{"smoke", "-url", url}, &out, &out); code != 0 {
		t.Fatalf("smoke against demo: exit %d\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "all 7 checks passed") || !strings.Contains(out.String(), "ok    page protections") || !strings.Contains(out.String(), "ok    API protections") {
		t.Fatalf("smoke output:\n%s", out.String())
	}

	// A deployment whose index is cacheable: the release rules are broken, the command says so.
	wrong := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<!doctype html><p>cached forever")
	}))
	defer wrong.Close()
	out.Reset()
	if code := run(context.Background(), []string{"smoke", "-url", wrong.URL}, &out, &out); code != 1 {
		t.Fatalf("smoke against a wrong server: exit %d, want 1\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "FAIL  index") || !strings.Contains(out.String(), "checks failed") {
		t.Fatalf("smoke output does not name the failed check:\n%s", out.String())
	}

	for _, args := range [][]string{{"smoke"}, {"smoke", "-url", "not a url"}} {
		out.Reset()
		if code := run(context.Background(), args, &out, &out); code != 2 {
			t.Errorf("bindery %v: exit %d, want 2 (usage)\n%s", args, code, out.String())
		}
	}
}

// run is the command line as the binary runs it, with the files the binary embeds.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return Run(ctx, args, stdout, stderr, app.Assets{Schema: schema.FS, UI: ui.Dist()})
}
