package server

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"bindery/api"
	"bindery/internal/vocab/state"
)

// Oversized, deeply nested and malformed bodies on every route that reads one (issue 8, point
// 3; docs/api.md, 'Status codes': 413 over the limit, 415 for non-JSON, 400 naming the field, never
// a 500, never a leak). The routes come from the route table, so a new body-reading route is
// covered without editing this file. Everything goes over a real listener: chunked bodies, lying
// Content-Length headers and endless uploads are transport matters an in-process recorder would
// hide.

// bodyRoute is a body-reading route with what it takes to get past authentication.
type bodyRoute struct {
	rt     route
	path   string
	header func(body []byte) map[string]string
}

func bodyRoutes(h *harness) []bodyRoute {
	var out []bodyRoute
	for _, rt := range h.srv.routes() {
		if rt.body == 0 {
			continue
		}
		br := bodyRoute{rt: rt, path: strings.NewReplacer("{operationId}", "op-1", "{id}", "7", "{name}", "webhook:ci").Replace(rt.path)}
		switch rt.auth {
		case authUser:
			br.header = func([]byte) map[string]string { return map[string]string{"X-Bindery-User": "alice"} }
		case authOwnerOrOps, authOps:
			br.header = func([]byte) map[string]string { return map[string]string{"X-Bindery-User": "ops"} }
		case authApprovalHook:
			br.header = func(b []byte) map[string]string { return signed("s3cret", string(b)) }
		case authDeployHook:
			br.header = func([]byte) map[string]string { return map[string]string{"Authorization": "Bearer dtok"} }
		case authGitLabHook:
			br.header = func([]byte) map[string]string { return map[string]string{"X-Gitlab-Token": "gtok"} }
		default:
			br.header = func([]byte) map[string]string { return nil }
		}
		out = append(out, br)
	}
	return out
}

// padded is a JSON object of exactly n bytes (n ≥ 16) that the lenient and strict binders both
// read as an object: strict ones refuse the unknown field (400), lenient ones see missing fields.
func padded(n int) string {
	return `{"pad":"` + strings.Repeat("x", n-10) + `"}`
}

// checkAnswer: never a 5xx; an error has the API's error body (docs/api.md, 'Errors') and leaks
// nothing.
func checkAnswer(t *testing.T, what string, status int, body []byte) {
	t.Helper()
	if status >= 500 || status == 0 {
		t.Errorf("%s: %d %.300s", what, status, body)
		return
	}
	if status < 400 {
		return
	}
	var e api.ErrorBody
	if err := json.Unmarshal(body, &e); err != nil || e.Code == "" || e.Message == "" || e.RequestID == "" {
		t.Errorf("%s: %d, not the API's error body: %.300s", what, status, body)
	}
	if m := leakPatterns.FindString(string(body)); m != "" {
		t.Errorf("%s: error body leaks %q: %.300s", what, m, body)
	}
	if len(body) > 2048 {
		t.Errorf("%s: a %d-byte error body (does it echo the input?)", what, len(body))
	}
}

// checkSigninPage holds the sign-in's page to what checkAnswer holds an error body to: a clear
// 4xx in words with the request id, nothing internal, bounded.
func checkSigninPage(t *testing.T, what string, status int, page string) {
	t.Helper()
	switch {
	case status >= 500 || status == 0:
		t.Errorf("%s: %d %.300s", what, status, page)
	case status < 400:
	case !strings.Contains(page, `id="signin-message"`) || !strings.Contains(page, "request id"):
		t.Errorf("%s: %d, not the sign-in's page: %.300s", what, status, page)
	case leakPatterns.MatchString(page):
		t.Errorf("%s: the page leaks %q", what, leakPatterns.FindString(page))
	case len(page) > 4096:
		t.Errorf("%s: a %d-byte page (does it echo the input?)", what, len(page))
	}
}

func TestHostileBodiesOnEveryBodyRouteGetAClear4xx(t *testing.T) {
	t.Parallel()
	h := setup(t, options{config: map[string]string{"ratelimit.apply": "<blank>", "ratelimit.revoke": "<blank>", "ratelimit.renew": "<blank>"}})
	h.wf.put(api.RequestView{OperationID: "op-1", Subject: "alice@example.com", TargetKey: "public-a", Status: state.StatusValidated})
	ts := httptest.NewServer(h.srv.Handler())
	defer ts.Close()
	routes := bodyRoutes(h)
	if len(routes) < 8 {
		t.Fatalf("only %d body-reading routes in the table", len(routes))
	}

	send := func(br bodyRoute, body []byte, ct string, chunked bool) (int, []byte) {
		var r io.Reader = strings.NewReader(string(body))
		if chunked {
			r = io.MultiReader(r) // hides the length: the client sends it chunked
		}
		req, _ := http.NewRequest("POST", ts.URL+br.path, r)
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		for k, v := range br.header(body) {
			req.Header.Set(k, v)
		}
		resp, err := contractClient(t).Do(req)
		if err != nil {
			t.Fatalf("%s: %v", br.path, err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, data
	}

	deep := func(n int, open, close string) string {
		return strings.Repeat(open, n) + "1" + strings.Repeat(close, n)
	}
	for _, br := range routes {
		limit := int(br.rt.body)
		cases := []struct {
			name    string
			body    string
			ct      string
			chunked bool
			want    int // 0: any 2xx/4xx but 413/415; -1: 413 over the limit, else 400
		}{
			{"just under the limit", padded(limit - 1), "application/json", false, 0},
			{"exactly the limit", padded(limit), "application/json", false, 0},
			{"one byte over the limit", padded(limit + 1), "application/json", false, 413},
			{"chunked, under the limit", padded(limit - 1), "application/json", true, 0},
			{"chunked, over the limit", padded(limit + 1), "application/json", true, 413},
			{"twice the limit", padded(2 * limit), "application/json", false, 413},
			{"100k-deep lists", deep(100_000, "[", "]"), "application/json", false, -1},
			{"100k-deep objects", deep(100_000, `{"a":`, "}"), "application/json", false, -1},
			{"deep objects under the limit", deep(limit/6-10, `{"a":`, "}"), "application/json", false, 400},
			{"deep lists under the limit", deep(limit/2-10, "[", "]"), "application/json", false, 400},
			{"a huge string field", `{"operationId":"` + strings.Repeat("é", limit/2-40) + `"}`, "application/json", false, 0},
			{"1e999", `{"operationId":1e999,"mrIid":1e999,"project":1e999,"requestId":1e999}`, "application/json", false, 400},
			{"huge integers", `{"mrIid":123456789012345678901234567890,"object_attributes":{"iid":-99999999999999999999}}`, "application/json", false, 400},
			{"duplicate keys", `{"operationId":"op-1","operationId":"op-2","targetKey":"public-a","targetKey":"x","reason":"r"}`, "application/json", false, 0},
			{"invalid UTF-8", "{\"operationId\":\"op-\xff\xfe\",\"reason\":\"\xc3\x28\"}", "application/json", false, 0},
			{"NUL bytes", "{\"operationId\":\"op\u0000\",\"reason\":\"\\u0000\"}", "application/json", false, 0},
			{"trailing data", `{"operationId":"op-1"} {"operationId":"op-2"}`, "application/json", false, 400},
			{"trailing garbage", `{"operationId":"op-1"}xyz`, "application/json", false, 400},
			{"a JSON string", `"text"`, "application/json", false, 400},
			{"a bare number", `12`, "application/json", false, 400},
			{"an empty body", ``, "application/json", false, 400},
			{"text/plain", `{"operationId":"op-1"}`, "text/plain", false, 415},
			{"no content type", `{"operationId":"op-1"}`, "", false, 415},
			{"form encoded", `operationId=op-1`, "application/x-www-form-urlencoded", false, 415},
			{"a broken content type", `{"operationId":"op-1"}`, "application/json; charset", false, 415},
			{"JSON with a charset", `{"operationId":"op-1"}`, "application/json; charset=utf-8", false, 0},
			{"JSON with the charset's other spelling", `{"operationId":"op-1"}`, "application/json; charset=UTF8", false, 0},
			{"JSON declared UTF-16", `{"operationId":"op-1"}`, "application/json; charset=utf-16", false, 415},
			{"JSON declared Latin-1", `{"operationId":"op-1"}`, "application/json; charset=iso-8859-1", false, 415},
		}
		for _, c := range cases {
			if c.want == -1 {
				c.want = map[bool]int{true: 413, false: 400}[len(c.body) > limit]
			}
			status, body := send(br, []byte(c.body), c.ct, c.chunked)
			what := fmt.Sprintf("%s %s: %s", br.rt.method, br.path, c.name)
			checkAnswer(t, what, status, body)
			switch {
			case c.want != 0 && status != c.want:
				t.Errorf("%s: %d, want %d: %.200s", what, status, c.want, body)
			case c.want == 0 && (status == 413 || status == 415):
				t.Errorf("%s: %d: %.200s", what, status, body)
			}
		}
	}
}

// A body larger than the limit is never read whole: an endless chunked upload and a declared
// 10 GiB body are answered 413 after at most the limit (plus what the network buffers).
func TestOversizedBodiesAreNotReadWhole(t *testing.T) {
	t.Parallel()
	h := setup(t, options{config: map[string]string{"ratelimit.apply": "<blank>", "ratelimit.revoke": "<blank>", "ratelimit.renew": "<blank>"}})
	h.wf.put(api.RequestView{OperationID: "op-1", Subject: "alice@example.com", TargetKey: "public-a", Status: state.StatusValidated})
	ts := httptest.NewServer(h.srv.Handler())
	defer ts.Close()
	for _, br := range bodyRoutes(h) {
		var sent atomic.Int64
		const cap = 256 << 20
		body := &endless{sent: &sent, cap: cap}
		req, _ := http.NewRequest("POST", ts.URL+br.path, body)
		req.Header.Set("Content-Type", "application/json")
		for k, v := range br.header(nil) {
			req.Header.Set(k, v)
		}
		resp, err := contractClient(t).Do(req)
		if err == nil {
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 413 && !(br.rt.auth == authApprovalHook && resp.StatusCode == 401) {
				t.Errorf("%s endless upload: %d %s", br.path, resp.StatusCode, data)
			}
		}
		// The client may see a reset instead of the answer once the server stopped reading.
		if n := sent.Load(); n >= cap {
			t.Errorf("%s: the whole %d-byte upload was consumed", br.path, n)
		} else {
			t.Logf("%s: endless upload stopped after %d KiB sent (limit %d KiB)", br.path, n>>10, br.rt.body>>10)
		}

		// A declared length over the limit is refused before a byte of the body is read.
		conn, err := net.Dial("tcp", ts.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", br.path, int64(10)<<30)
		for k, v := range br.header(nil) {
			fmt.Fprintf(conn, "%s: %s\r\n", k, v)
		}
		fmt.Fprint(conn, "\r\n{")
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		resp, err = http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Errorf("%s declared 10 GiB: no answer: %v", br.path, err)
		} else if resp.StatusCode != 413 && !(br.rt.auth == authApprovalHook && resp.StatusCode == 401) {
			t.Errorf("%s declared 10 GiB: %d", br.path, resp.StatusCode)
		}
		conn.Close()

		// A declared length shorter than the body: the body is what was declared (cut JSON, 400),
		// and the rest is not taken for a request of its own with the caller's credentials.
		conn, err = net.Dial("tcp", ts.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		payload := `{"operationId":"op-1","targetKey":"public-a","reason":"r"}`
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5\r\n", br.path)
		for k, v := range br.header([]byte(payload[:5])) {
			fmt.Fprintf(conn, "%s: %s\r\n", k, v)
		}
		fmt.Fprint(conn, "\r\n"+payload)
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		rd := bufio.NewReader(conn)
		resp, err = http.ReadResponse(rd, nil)
		if err != nil {
			t.Errorf("%s short Content-Length: no answer: %v", br.path, err)
		} else {
			data, _ := io.ReadAll(resp.Body)
			checkAnswer(t, br.path+" short Content-Length", resp.StatusCode, data)
			if resp.StatusCode != 400 {
				t.Errorf("%s short Content-Length: %d %s", br.path, resp.StatusCode, data)
			}
		}
		conn.Close()
	}
}

// endless is a body that never ends (up to cap bytes), counting what was read from it.
type endless struct {
	sent *atomic.Int64
	cap  int64
	head bool
}

func (e *endless) Read(p []byte) (int, error) {
	if e.sent.Load() >= e.cap {
		return 0, io.EOF
	}
	n := len(p)
	if !e.head {
		e.head = true
		return copy(p, `{"pad":"`), nil
	}
	for i := range p {
		p[i] = 'x'
	}
	e.sent.Add(int64(n))
	return n, nil
}

// The same for what GET routes read from the URL: hostile path parameters and query strings on
// every GET route of the table get a clear answer, never a 5xx, never an echo of the input.
func TestHostileQueriesOnEveryGetRouteGetAClearAnswer(t *testing.T) {
	t.Parallel()
	h := setup(t, options{})
	ts := httptest.NewServer(h.srv.Handler())
	defer ts.Close()
	long := strings.Repeat("x", 6000)
	params := []string{
		"op-1", "..%2F..%2Fetc%2Fpasswd", "%00", "%ff%fe", "%25%32%65", long, "%27%20OR%201%3D1--", "%3Cscript%3E", "-1", "99999999999999999999999",
	}
	queries := []string{
		"", "?cursor=" + long, "?cursor=%00", "?cursor=%ff", "?cursor=eyJpZCI6LTF9", "?limit=0", "?limit=-1", "?limit=1e9", "?limit=99999999999999999999",
		"?limit=%00", "?status=%27%3B%20DROP%20TABLE%20binding%3B--", "?status=" + long, "?step=abc", "?step=-1", "?step=99999999999999999999",
		"?target=..%2F..%2Fsecret", "?target=" + long, "?target=%00", "?limit=5&limit=6", "?%zz", "?a=%",
	}
	seen := map[int]int{}
	defer func() { t.Logf("answers by status: %v", seen) }()
	for _, rt := range h.srv.routes() {
		if rt.method != "GET" || rt.name == "metrics" {
			continue
		}
		for _, p := range params {
			path := strings.NewReplacer("{operationId}", p, "{id}", p, "{name}", p).Replace(rt.path)
			if path == rt.path && p != params[0] {
				continue // no path parameter: one pass is enough
			}
			for _, q := range queries {
				status, body := rawGetAs(t, ts.Listener.Addr().String(), path+q, "ops")
				what := fmt.Sprintf("GET %.60s%.60s", path, q)
				seen[status]++
				if strings.HasPrefix(rt.path, "/auth/") {
					checkSigninPage(t, what, status, body) // a navigation: its answer is a page
				} else {
					checkAnswer(t, what, status, []byte(body))
				}
				if status >= 400 && strings.Contains(body, long[:200]) {
					t.Errorf("%s: the error echoes the input", what)
				}
			}
		}
	}
}

// rawGetAs sends one request line as written, as a demo user.
func rawGetAs(t *testing.T, addr, target, user string) (int, string) {
	return rawRequest(t, addr, target, "X-Bindery-User: "+user)
}

// Authorization before the body on every owner-checked route: a stranger gets the answer for an
// unknown id (404, the same headers and body but the request id) whatever the body — malformed, of the wrong type, too large —
// and learns neither whether the id exists nor anything from the body's checks.
func TestAStrangerOnAnOwnerCheckedRouteLearnsNothing(t *testing.T) {
	t.Parallel()
	h := setup(t, options{config: map[string]string{"ratelimit.revoke": "<blank>", "ratelimit.renew": "<blank>"}})
	h.wf.put(api.RequestView{OperationID: "op-1", Subject: "alice@example.com", TargetKey: "public-a", Status: state.StatusValidated})
	ts := httptest.NewServer(h.srv.Handler())
	defer ts.Close()
	var owned int
	for _, rt := range h.srv.routes() {
		if rt.auth != authOwnerOrOps {
			continue
		}
		owned++
		big := `{"pad":"` + strings.Repeat("x", int(max(rt.body, 1<<16))+10) + `"}`
		for _, c := range []struct{ name, body, ct string }{
			{"a good body", `{"operationId":"rv-1"}`, "application/json"},
			{"a malformed body", `{"operationId":`, "application/json"},
			{"the wrong content type", `{"operationId":"rv-1"}`, "text/plain"},
			{"an oversized body", big, "application/json"},
		} {
			answer := func(id string) (int, string) {
				var body io.Reader
				if rt.method == "POST" {
					body = strings.NewReader(c.body)
				}
				req, _ := http.NewRequest(rt.method, ts.URL+strings.Replace(rt.path, "{operationId}", id, 1), body)
				req.Header.Set("Content-Type", c.ct)
				req.Header.Set("X-Bindery-User", "bob")
				resp, err := contractClient(t).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				// The whole answer but the request id and the date: status, headers, body.
				var e map[string]any
				_ = json.NewDecoder(resp.Body).Decode(&e)
				delete(e, "requestId")
				resp.Header.Del("X-Request-Id")
				resp.Header.Del("Date")
				return resp.StatusCode, fmt.Sprint(resp.Header, e)
			}
			what := fmt.Sprintf("%s %s, %s", rt.method, rt.path, c.name)
			s1, m1 := answer("op-1")
			s2, m2 := answer("op-unknown")
			if s1 != 404 || s1 != s2 || m1 != m2 {
				t.Errorf("%s: someone else's request %d %q, an unknown one %d %q", what, s1, m1, s2, m2)
			}
		}
	}
	if owned < 2 {
		t.Fatalf("%d owner-checked routes", owned)
	}
}
