// Package smoke verifies, from outside, that a running bindery serves its SPA by the release
// rules of docs/api.md, 'Serving the page': index.html never cached; hashed assets cached for a
// year; a missing asset and an unknown API path are 404 JSON (never a 500, never the page); a
// client-side route navigated to directly gets the SPA page; the answers for missing things are
// no-store. The page and an API route carry the browser protections: a content policy that runs no
// inline script and allows no framing, no content-type sniffing, a referrer policy that keeps paths
// home. `bindery smoke -url URL` runs it against any deployment, so a release is checked where it
// runs.
package smoke

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strings"
)

// Result is the outcome of one check.
type Result struct {
	Name   string // index, page protections, hashed asset, missing asset, navigation fallback, unknown API path, API protections
	Target string // the URL requested
	Got    string // status and the headers that matter
	Err    error  // nil: the check passed
}

// hashedName matches a build output whose name carries a content hash (app-3F9A1C2B.js); the
// same shape the server uses to decide what is immutable.
var hashedName = regexp.MustCompile(`[.-][A-Za-z0-9_]{8,}\.[a-z0-9]+$`)

// assetRef finds the src/href values in the index.
var assetRef = regexp.MustCompile(`(?i)(?:src|href)\s*=\s*["']([^"']+)["']`)

const (
	htmlAccept = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
	immutable  = "public, max-age=31536000, immutable"
)

// Run performs every check against base (e.g. https://bindery.example.com) and returns one
// Result per check. The error is non-nil only when base itself is not a usable URL.
func Run(ctx context.Context, base string, client *http.Client) ([]Result, error) {
	root, err := url.Parse(strings.TrimRight(base, "/") + "/")
	if err != nil || (root.Scheme != "http" && root.Scheme != "https") || root.Host == "" {
		return nil, fmt.Errorf("-url %q: want an http(s) URL such as http://127.0.0.1:8080", base)
	}
	c := checker{ctx: ctx, client: client, nonce: nonce()}
	var results []Result

	index, indexBody := c.get("index", root.String(), htmlAccept)
	if index.Err == nil {
		index.Err = firstErr(wantStatus(index, 200), wantNoStore(index), wantType(index, "text/html"))
	}
	results = append(results, index.Result)
	results = append(results, protections("page protections", index))

	assetDir := root.ResolveReference(&url.URL{Path: "assets/"})
	asset := Result{Name: "hashed asset"}
	if index.status != 200 {
		asset.Err = fmt.Errorf("not checked: index.html could not be read")
	} else if ref := hashedAsset(root, indexBody); ref == nil {
		asset.Err = fmt.Errorf("index.html names no hashed asset (script or stylesheet) to check")
	} else {
		assetDir = ref.ResolveReference(&url.URL{Path: "./"})
		r, body := c.get("hashed asset", ref.String(), "*/*")
		if r.Err == nil {
			r.Err = firstErr(wantStatus(r, 200), wantImmutable(r))
			if r.Err == nil && len(body) == 0 {
				r.Err = fmt.Errorf("empty body")
			}
		}
		asset = r.Result
	}
	results = append(results, asset)

	missing, body := c.get("missing asset", assetDir.ResolveReference(&url.URL{Path: "smoke-" + c.nonce + ".js"}).String(), "*/*")
	if missing.Err == nil {
		missing.Err = firstErr(wantStatus(missing, 404), wantNoStore(missing), wantErrorJSON(missing, body))
	}
	results = append(results, missing.Result)

	nav, navBody := c.get("navigation fallback", root.ResolveReference(&url.URL{Path: "smoke-" + c.nonce + "/page"}).String(), htmlAccept)
	if nav.Err == nil {
		nav.Err = firstErr(wantStatus(nav, 200), wantNoStore(nav), wantType(nav, "text/html"))
		if nav.Err == nil && index.Err == nil && navBody != indexBody {
			nav.Err = fmt.Errorf("the page differs from index.html; want the SPA page itself")
		}
	}
	results = append(results, nav.Result)

	// A browser-like Accept: an API path must never turn into the page.
	api, apiBody := c.get("unknown API path", root.ResolveReference(&url.URL{Path: "api/smoke-" + c.nonce}).String(), htmlAccept)
	if api.Err == nil {
		api.Err = firstErr(wantStatus(api, 404), wantNoStore(api), wantErrorJSON(api, apiBody))
	}
	results = append(results, api.Result)

	spec, _ := c.get("API protections", root.ResolveReference(&url.URL{Path: "api/openapi.json"}).String(), "application/json")
	results = append(results, protections("API protections", spec))
	return results, nil
}

// protections checks the browser protections of an answer, whatever its status: every answer
// carries them.
func protections(name string, r response) Result {
	out := Result{Name: name, Target: r.Target}
	if r.header == nil {
		out.Err = fmt.Errorf("not checked: no answer (%v)", r.Err)
		return out
	}
	out.Got = fmt.Sprintf("→ %d, Content-Security-Policy %q, X-Content-Type-Options %q, Referrer-Policy %q", r.status,
		r.header.Get("Content-Security-Policy"), r.header.Get("X-Content-Type-Options"), r.header.Get("Referrer-Policy"))
	out.Err = firstErr(wantPolicy(r.header.Get("Content-Security-Policy")), wantNoSniff(r), wantReferrerPolicy(r))
	return out
}

// wantPolicy checks a content policy: scripts from named sources only (script-src, else
// default-src, holds no 'unsafe-*', wildcard or scheme source) and no framing.
func wantPolicy(policy string) error {
	if policy == "" {
		return fmt.Errorf("no Content-Security-Policy")
	}
	dirs := map[string][]string{}
	for _, d := range strings.Split(policy, ";") {
		if f := strings.Fields(strings.ToLower(d)); len(f) > 0 {
			if _, dup := dirs[f[0]]; !dup { // a browser obeys the first of a repeated directive
				dirs[f[0]] = f[1:]
			}
		}
	}
	scripts, ok := dirs["script-src"]
	if !ok {
		scripts, ok = dirs["default-src"]
	}
	if !ok {
		return fmt.Errorf("the policy does not restrict scripts (no script-src or default-src)")
	}
	for _, src := range scripts {
		if strings.HasPrefix(src, "'unsafe-") || strings.Contains(src, "*") || strings.HasSuffix(src, ":") {
			return fmt.Errorf("the policy allows scripts from %s", src)
		}
	}
	if fa := dirs["frame-ancestors"]; len(fa) != 1 || fa[0] != "'none'" {
		return fmt.Errorf("frame-ancestors %q, want 'none'", strings.Join(fa, " "))
	}
	return nil
}

func wantNoSniff(r response) error {
	if v := r.header.Get("X-Content-Type-Options"); !strings.EqualFold(strings.TrimSpace(v), "nosniff") {
		return fmt.Errorf("X-Content-Type-Options %q, want nosniff", v)
	}
	return nil
}

// wantReferrerPolicy accepts the policies that never send a path to another site.
func wantReferrerPolicy(r response) error {
	v := strings.ToLower(strings.TrimSpace(r.header.Get("Referrer-Policy")))
	switch v {
	case "no-referrer", "same-origin", "strict-origin", "strict-origin-when-cross-origin":
		return nil
	}
	return fmt.Errorf("Referrer-Policy %q, want no-referrer, same-origin or strict-origin(-when-cross-origin)", v)
}

// Failed counts the failed results.
func Failed(results []Result) int {
	n := 0
	for _, r := range results {
		if r.Err != nil {
			n++
		}
	}
	return n
}

// Report writes one line per result.
func Report(w io.Writer, results []Result) {
	for _, r := range results {
		mark, detail := "ok  ", r.Got
		if r.Err != nil {
			mark = "FAIL"
			detail = strings.TrimSpace(r.Got + " — " + r.Err.Error())
		}
		fmt.Fprintf(w, "%s  %-20s %s  %s\n", mark, r.Name, r.Target, detail)
	}
}

type checker struct {
	ctx    context.Context
	client *http.Client
	nonce  string
}

// response is a Result with the response headers the checks read.
type response struct {
	Result
	status int
	header http.Header
}

func (c checker) get(name, target, accept string) (response, string) {
	r := response{Result: Result{Name: name, Target: target}}
	req, err := http.NewRequestWithContext(c.ctx, http.MethodGet, target, nil)
	if err != nil {
		r.Err = err
		return r, ""
	}
	req.Header.Set("Accept", accept)
	resp, err := c.client.Do(req)
	if err != nil {
		r.Err = err
		return r, ""
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		r.Err = fmt.Errorf("read body: %w", err)
	}
	r.status, r.header = resp.StatusCode, resp.Header
	r.Got = fmt.Sprintf("→ %d, Cache-Control %q, Content-Type %q", resp.StatusCode, resp.Header.Get("Cache-Control"), resp.Header.Get("Content-Type"))
	return r, string(body)
}

// hashedAsset returns the first same-origin hashed script or stylesheet the index names.
func hashedAsset(root *url.URL, index string) *url.URL {
	for _, m := range assetRef.FindAllStringSubmatch(index, -1) {
		u, err := root.Parse(m[1])
		if err != nil || u.Host != root.Host || u.Scheme != root.Scheme {
			continue
		}
		if ext := path.Ext(u.Path); (ext == ".js" || ext == ".css") && hashedName.MatchString(path.Base(u.Path)) {
			return u
		}
	}
	return nil
}

func wantStatus(r response, want int) error {
	if r.status != want {
		return fmt.Errorf("status %d, want %d", r.status, want)
	}
	return nil
}

func directives(h http.Header) map[string]string {
	d := map[string]string{}
	for _, part := range strings.Split(h.Get("Cache-Control"), ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		if k != "" {
			d[strings.ToLower(k)] = strings.Trim(v, `"`)
		}
	}
	return d
}

func wantNoStore(r response) error {
	if _, ok := directives(r.header)["no-store"]; !ok {
		return fmt.Errorf("Cache-Control %q, want no-store", r.header.Get("Cache-Control"))
	}
	return nil
}

func wantImmutable(r response) error {
	d := directives(r.header)
	_, public := d["public"]
	_, imm := d["immutable"]
	if !public || !imm || d["max-age"] != "31536000" {
		return fmt.Errorf("Cache-Control %q, want %q", r.header.Get("Cache-Control"), immutable)
	}
	return nil
}

func wantType(r response, prefix string) error {
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, prefix) {
		return fmt.Errorf("Content-Type %q, want %s", ct, prefix)
	}
	return nil
}

// wantErrorJSON checks the API's error body (docs/api.md, 'Errors'): JSON with a code.
func wantErrorJSON(r response, body string) error {
	if err := wantType(r, "application/json"); err != nil {
		return err
	}
	var e struct {
		Code string `json:"code"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Code == "" {
		return fmt.Errorf("body is not an error JSON with a code: %.80q", body)
	}
	return nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// nonce makes the probed names unguessable, so a cache or a real file never answers for them.
func nonce() string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}
