package server

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// Path traversal against the SPA's static handler (issue 8, point 3; docs/api.md, 'Serving the
// page'): the build is a directory beside files it must never serve. Raw request lines go over a
// real listener, so neither a client nor a router normalises the path before the handler sees it.
// Whatever the spelling, the answer is the page, a file of the build, a 404 or a 400 — never the
// secret, never a 500.
func TestStaticPathTraversalNeverLeavesTheBuild(t *testing.T) {
	t.Parallel()
	const secret = "TOP-SECRET-CONTENT"
	dir := t.TempDir()
	for name, content := range map[string]string{
		"secret.txt":                  secret,
		"dist/index.html":             "<!doctype html><title>spa</title>",
		"dist/assets/app-3f9a1c2b.js": "console.log(1)",
		"dist-evil/x.txt":             secret, // a sibling whose name starts like the build's
	} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	embedded, _ := fs.Sub(fstest.MapFS{
		"secret.txt":                  {Data: []byte(secret)},
		"dist/index.html":             {Data: []byte("<!doctype html><title>spa</title>")},
		"dist/assets/app-3f9a1c2b.js": {Data: []byte("console.log(1)")},
	}, "dist")
	paths := []string{
		"/../secret.txt", "/../../../../etc/passwd", "/assets/../../secret.txt",
		"/%2e%2e/secret.txt", "/%2E%2E/%2E%2E/secret.txt", "/..%2fsecret.txt", "/assets%2f..%2f..%2fsecret.txt",
		"/%252e%252e/secret.txt", "/%252e%252e%252fsecret.txt", "/..%252fsecret.txt",
		`/..\secret.txt`, "/..%5csecret.txt", "/assets\\..\\..\\secret.txt", "/%5c..%5c..%5csecret.txt",
		"/secret.txt%00.js", "/%00/../secret.txt", "/assets/app-3f9a1c2b.js%00",
		"//secret.txt", "///../secret.txt", "/" + dir + "/secret.txt", "/" + strings.TrimPrefix(dir, "/") + "/secret.txt",
		"/../dist-evil/x.txt", "/./../secret.txt", "/assets/./../../secret.txt",
		"/" + strings.Repeat("a/", 20_000) + "secret.txt", "/" + strings.Repeat("../", 5_000) + "secret.txt",
		"/%c0%ae%c0%ae/secret.txt", "/..;/secret.txt", "/.../secret.txt",
		"http://evil.example/../secret.txt",
	}
	for _, ui := range []struct {
		name  string
		files fs.FS
	}{
		{"embedded build", embedded},
		// bindery embeds its build; a directory on disk is the harder case (real parent
		// directories, real siblings), so the handler is held to it too. Symlinks inside a served
		// directory are followed by os.DirFS and are out of scope: the product never serves one.
		{"build on disk", os.DirFS(filepath.Join(dir, "dist"))},
	} {
		t.Run(ui.name, func(t *testing.T) {
			h := setup(t, options{})
			d := h.srv.deps
			d.UI, d.Metrics = ui.files, metrics.NewSet()
			ts := httptest.NewServer(New(d).Handler())
			defer ts.Close()
			for _, p := range paths {
				for _, accept := range []string{"text/html", "*/*"} {
					status, body := rawGet(t, ts.Listener.Addr().String(), p, accept)
					what := fmt.Sprintf("GET %.80s (Accept %s)", p, accept)
					if strings.Contains(body, secret) {
						t.Errorf("%s: served the secret", what)
					}
					if status >= 500 || status == 0 {
						t.Errorf("%s: %d %.200s", what, status, body)
					}
					if status >= 400 && status != 400 && status != 404 && status != 414 && status != 431 {
						t.Errorf("%s: %d %.200s", what, status, body)
					}
					if status == 404 { // ours: the API's error body, no path or internals echoed
						checkAnswer(t, what, status, []byte(body))
					}
				}
			}
			// The build itself is still served.
			if status, body := rawGet(t, ts.Listener.Addr().String(), "/assets/app-3f9a1c2b.js", "*/*"); status != 200 || body != "console.log(1)" {
				t.Errorf("the build's own asset: %d %q", status, body)
			}
		})
	}
}

// rawGet sends one request line as written and returns the status and body.
func rawGet(t *testing.T, addr, target, accept string) (int, string) {
	return rawRequest(t, addr, target, "Accept: "+accept)
}

// rawRequest sends "GET target" as written (no client normalises it) with one header line.
func rawRequest(t *testing.T, addr, target, header string) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\n%s\r\nConnection: close\r\n\r\n", target, header)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Errorf("GET %.80s: no answer: %v", target, err)
		return 0, ""
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}
