package smoke_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"bindery/internal/app"
	"bindery/internal/ops/smoke"
	"bindery/schema"
	"bindery/store/storetest"
	"bindery/ui"
)

// bootDemo runs the whole product in demo mode on :0 (as `bindery demo` does) and returns its URL.
func bootDemo(t *testing.T) string {
	t.Helper()
	configPath, _, err := app.PrepareDemo(filepath.Join(t.TempDir(), "demo"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := app.New(context.Background(), app.Options{Mode: app.ModeDemo, ConfigPath: configPath, Addr: "127.0.0.1:0",
		DSN: storetest.SQLiteDSN(t), Assets: app.Assets{Schema: schema.FS, UI: ui.Dist()}, LogOutput: &bytes.Buffer{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return a.URL()
}

func TestSmokePassesAgainstTheRunningDemo(t *testing.T) {
	results, err := smoke.Run(context.Background(), bootDemo(t), http.DefaultClient)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	smoke.Report(&out, results)
	if smoke.Failed(results) != 0 || len(results) != 7 {
		t.Fatalf("smoke against the demo:\n%s", out.String())
	}
	if !regexp.MustCompile(`ok +hashed asset +\S+/assets/[a-z]+-[A-Z0-9]{8}\.(js|css) `).MatchString(out.String()) {
		t.Fatalf("the hashed asset was not found from the index:\n%s", out.String())
	}
}

// wrongServer serves a correct deployment except for one broken rule.
type wrongServer struct {
	indexCache, indexType       string
	assetCache                  string
	assetStatus                 int
	missingStatus, missingCache string
	navStatus                   int
	navBody                     string
	apiStatus                   int
	apiType                     string
	indexBody                   string
	// the browser protections: "" → a good value, "none" → left out
	pageCSP, apiCSP, nosniff, referrer string
}

const goodPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; frame-ancestors 'none'"

func setOr(h http.Header, key, v, def string) {
	switch v {
	case "none":
	case "":
		h.Set(key, def)
	default:
		h.Set(key, v)
	}
}

func (w wrongServer) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	h := rw.Header()
	setOr(h, "X-Content-Type-Options", w.nosniff, "nosniff")
	setOr(h, "Referrer-Policy", w.referrer, "no-referrer")
	if strings.HasPrefix(r.URL.Path, "/api/") {
		setOr(h, "Content-Security-Policy", w.apiCSP, goodPolicy)
	} else {
		setOr(h, "Content-Security-Policy", w.pageCSP, goodPolicy)
	}
	index := w.indexBody
	if index == "" {
		index = `<!doctype html><script type="module" src="/assets/app-ABCDEFGH.js"></script>`
	}
	page := func(status int, body string) {
		h.Set("Cache-Control", "no-store")
		h.Set("Content-Type", "text/html; charset=utf-8")
		rw.WriteHeader(status)
		rw.Write([]byte(body))
	}
	jsonErr := func(status int, typ, cache string) {
		h.Set("Cache-Control", cache)
		h.Set("Content-Type", typ)
		rw.WriteHeader(status)
		rw.Write([]byte(`{"code":"NOT_FOUND","message":"No such file.","requestId":"x"}`))
	}
	switch p := r.URL.Path; {
	case p == "/":
		h.Set("Cache-Control", or(w.indexCache, "no-store"))
		h.Set("Content-Type", or(w.indexType, "text/html; charset=utf-8"))
		rw.Write([]byte(index))
	case p == "/assets/app-ABCDEFGH.js" && w.assetStatus == 0:
		h.Set("Cache-Control", or(w.assetCache, "public, max-age=31536000, immutable"))
		h.Set("Content-Type", "text/javascript")
		rw.Write([]byte("console.log(1)"))
	case p == "/api/openapi.json":
		h.Set("Content-Type", "application/json")
		rw.Write([]byte(`{"openapi":"3.0.3"}`))
	case strings.HasPrefix(p, "/api/"):
		status := w.apiStatus
		if status == 0 {
			status = 404
		}
		if w.apiType != "" {
			page(status, index)
			return
		}
		jsonErr(status, "application/json; charset=utf-8", "no-store")
	case strings.HasPrefix(p, "/assets/"):
		status := 404
		if w.missingStatus == "500" {
			status = 500
		}
		if w.missingStatus == "page" {
			page(200, index)
			return
		}
		jsonErr(status, "application/json; charset=utf-8", or(w.missingCache, "no-store"))
	default:
		status := w.navStatus
		if status == 0 {
			status = 200
		}
		page(status, or(w.navBody, index))
	}
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func TestSmokeFailsTheCheckOfEveryBrokenRule(t *testing.T) {
	for _, tc := range []struct {
		name, failing string
		srv           wrongServer
	}{
		{"index cached by browsers", "index", wrongServer{indexCache: "max-age=600"}},
		{"index served as text", "index", wrongServer{indexType: "text/plain"}},
		{"hashed asset revalidated every time", "hashed asset", wrongServer{assetCache: "no-cache"}},
		{"hashed asset cached for a day only", "hashed asset", wrongServer{assetCache: "public, max-age=86400, immutable"}},
		{"hashed asset the index names is gone", "hashed asset", wrongServer{assetStatus: 404}},
		{"index names no hashed asset", "hashed asset", wrongServer{indexBody: `<!doctype html><script src="/app.js"></script>`}},
		{"missing asset is a 500", "missing asset", wrongServer{missingStatus: "500"}},
		{"missing asset gets the page", "missing asset", wrongServer{missingStatus: "page"}},
		{"missing asset answer is cacheable", "missing asset", wrongServer{missingCache: "max-age=60"}},
		{"client route is a 404", "navigation fallback", wrongServer{navStatus: 404}},
		{"client route gets another page", "navigation fallback", wrongServer{navBody: "<!doctype html><p>not found"}},
		{"unknown API path gets the page", "unknown API path", wrongServer{apiStatus: 200, apiType: "html"}},
		{"unknown API path is a 500", "unknown API path", wrongServer{apiStatus: 500}},
		{"page without a content policy", "page protections", wrongServer{pageCSP: "none"}},
		{"page runs inline scripts", "page protections", wrongServer{pageCSP: "default-src 'self' 'unsafe-inline'; frame-ancestors 'none'"}},
		{"page scripts from anywhere", "page protections", wrongServer{pageCSP: "script-src https:; frame-ancestors 'none'"}},
		{"page may be framed", "page protections", wrongServer{pageCSP: "default-src 'self'"}},
		{"page policy restricts no script", "page protections", wrongServer{pageCSP: "img-src 'self'; frame-ancestors 'none'"}},
		{"API without a content policy", "API protections", wrongServer{apiCSP: "none"}},
		{"API may be framed by anyone", "API protections", wrongServer{apiCSP: "default-src 'none'; frame-ancestors *"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := httptest.NewServer(tc.srv)
			defer ts.Close()
			results, err := smoke.Run(context.Background(), ts.URL, ts.Client())
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			smoke.Report(&out, results)
			for _, r := range results {
				if (r.Err != nil) != (r.Name == tc.failing) {
					t.Errorf("check %q failed=%v, want only %q to fail:\n%s", r.Name, r.Err != nil, tc.failing, out.String())
				}
			}
		})
	}
	// The same server without a broken rule passes: the table above tests the checks, not the fake.
	ts := httptest.NewServer(wrongServer{})
	defer ts.Close()
	results, _ := smoke.Run(context.Background(), ts.URL, ts.Client())
	if n := smoke.Failed(results); n != 0 {
		var out bytes.Buffer
		smoke.Report(&out, results)
		t.Fatalf("a correct server fails %d checks:\n%s", n, out.String())
	}
}

func TestSmokeRejectsAURLItCannotUse(t *testing.T) {
	for _, bad := range []string{"", "127.0.0.1:8080", "ftp://x", "http://"} {
		if _, err := smoke.Run(context.Background(), bad, http.DefaultClient); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
