package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"bindery/api"
	"bindery/internal/platform/signin"
	"bindery/internal/vocab/apperr"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/workflow"
)

// What the document allows, the server accepts, and the reverse: each operation's example
// request, built from the document, is accepted; then every parameter and every body field
// (nested ones too) is replaced in turn by each value of a pool of edge cases — empty, blank,
// at and over each bound, control characters, other types, huge numbers, the document's own
// enum values. Each probe goes through the harness, so checkContract fails it when the document
// and the server disagree on whether it is valid.

// probeStrings are the string edge cases, around the bounds the server enforces.
func probeStrings() []string {
	return []string{
		"", " ", "a", "op-1", "7", "-x", ".x", "a b", "a/b", "é", "<x>", "a\x00b", "a\x7fb", "a\u0085b",
		"tab\there", "line\nbreak\r\n", "\u00a0", "\u3000", " padded ", "%", "+5", "007", "1.5", "-1", "0", "1", "20",
		"100", "101", "abc", "99999999999999999999", "10501", "99999", "STUCK",
		strings.Repeat("A", 64), strings.Repeat("A", 65), strings.Repeat("é", 128), strings.Repeat("é", 129),
		strings.Repeat("x", 255), strings.Repeat("x", 256), strings.Repeat("x", 257), strings.Repeat("r", 1000),
		strings.Repeat("é", 1000), strings.Repeat("r", 1001), strings.Repeat("1", 18), strings.Repeat("1", 19),
		"MTA", "MTA=", "LTE", "MTcwMDAwMDAwMDAwMDAwMC43", "eyJpZCI6LTF9", "public-a", "infra/access-config",
		"merge_request", "pipeline", "push",
	}
}

// probeJSON are the body values: the strings and the other JSON types.
func probeJSON() []any {
	var out []any
	for _, s := range probeStrings() {
		out = append(out, s)
	}
	ids := func(n int) []any {
		l := make([]any, n)
		for i := range l {
			l[i] = fmt.Sprintf("op-%d", i)
		}
		return l
	}
	return append(out, json.Number("0"), json.Number("1"), json.Number("-1"), json.Number("12"), json.Number("1.5"),
		json.Number("9223372036854775807"), json.Number("99999999999999999999"), true, nil,
		[]any{}, []any{"op-1"}, []any{"a b"}, []any{json.Number("1")}, ids(1000), ids(1001),
		map[string]any{}, map[string]any{"mrId": "12"}, map[string]any{"mrId": json.Number("12")})
}

// storeCursor is the store's cursor format (base64url of "id" or "unixmicro.id"): the fake
// workflow refuses other cursors as the store does, so the probes meet the refusal the real
// lists answer.
var storeCursor = regexp.MustCompile(`^[0-9]+(\.[1-9][0-9]*)?$`)

func fakeCursorCheck(cursor string) error {
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if cursor != "" && (err != nil || !storeCursor.MatchString(string(raw)) || strings.HasPrefix(string(raw), "0")) {
		return apperr.Invalid("cursor", "is not a cursor this API returned")
	}
	return nil
}

func probeHarness(t *testing.T) *harness {
	h := setup(t, options{config: map[string]string{"ratelimit.apply": "<blank>", "ratelimit.revoke": "<blank>"}})
	h.wf.put(api.RequestView{OperationID: "op-v", Subject: "alice@example.com", TargetKey: "public-a", Status: state.StatusValidated})
	h.wf.put(api.RequestView{OperationID: "op-f", Subject: "alice@example.com", TargetKey: "public-a", Status: state.StatusCreateFailed, Withdrawable: true})
	// Stateless answers: a probe's answer must not depend on the probes before it.
	h.wf.ApplyFn = func(_ context.Context, in workflow.ApplyInput) (api.ApplyResult, error) {
		return api.ApplyResult{OperationID: in.OperationID, Status: state.StatusApprovalSending, NextAction: state.NextWait}, nil
	}
	h.wf.RevokeFn = func(ctx context.Context, id, _ string) (api.RequestView, error) { return h.wf.Request(ctx, id) }
	h.wf.WithdrawFn = func(ctx context.Context, id, _ string) (api.RequestView, error) { return h.wf.Request(ctx, id) }
	h.wf.RenewFn = func(ctx context.Context, id, _, _ string) (api.RequestView, error) { return h.wf.Request(ctx, id) }
	h.wf.MyRequestsFn = func(_ context.Context, _, cursor string, _ int) (api.Page[api.RequestSummary], error) {
		return api.Page[api.RequestSummary]{Items: []api.RequestSummary{}}, fakeCursorCheck(cursor)
	}
	h.wf.StuckRequestsFn = func(_ context.Context, f workflow.StuckFilter) (api.Page[api.RequestSummary], error) {
		return api.Page[api.RequestSummary]{Items: []api.RequestSummary{}}, fakeCursorCheck(f.Cursor)
	}
	h.wf.BatchesFn = func(_ context.Context, cursor string, _ int, _ state.BatchStatus) (api.Page[api.BatchView], error) {
		return api.Page[api.BatchView]{Items: []api.BatchView{}}, fakeCursorCheck(cursor)
	}
	// The example token (id 7) is the probing operator's.
	for i := range 7 {
		tok := signin.NewToken()
		if _, err := h.db.CreateToken(context.Background(), store.APIToken{Owner: "ops@example.com", Name: fmt.Sprint("probe ", i), Scopes: []string{"read"},
			LookupKey: tok.Lookup, SecretHash: tok.Hash}, time.Hour, maxLiveTokens, store.AuditEvent{Actor: "ops@example.com", Action: "token.create"}); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// exampleCall is the operation's request as the document's examples make it, with the
// credentials its security requirement names.
type exampleCall struct {
	method, path string // path with {params}
	params       map[string]string
	query        url.Values
	body         map[string]any // nil: no body
	security     map[string]bool
}

func (e exampleCall) call() call {
	path := e.path
	for k, v := range e.params {
		path = strings.ReplaceAll(path, "{"+k+"}", url.PathEscape(v))
	}
	if q := e.query.Encode(); q != "" {
		path += "?" + q
	}
	c := call{method: e.method, path: path, header: map[string]string{}}
	if e.body != nil {
		data, _ := json.Marshal(e.body)
		c.body = string(data)
	}
	switch {
	case e.security["loginHeader"]:
		c.user = "ops"
	case e.security["approvalSignature"]:
		c.header = signed("s3cret", c.body)
	case e.security["deployToken"]:
		c.header["Authorization"] = "Bearer dtok"
	case e.security["gitlabToken"]:
		c.header["X-Gitlab-Token"] = "gtok"
	case e.security["metricsToken"]:
		c.peer = "127.0.0.1:5000" // loopback: no token needed
	}
	return c
}

func exampleOf(t *testing.T, method, path string, op *openapi3.Operation) exampleCall {
	e := exampleCall{method: method, path: path, params: map[string]string{}, query: url.Values{}, security: map[string]bool{}}
	if op.Security != nil && len(*op.Security) > 0 {
		for name := range (*op.Security)[0] {
			e.security[name] = true
		}
	}
	for _, p := range op.Parameters {
		if p.Value.In == "query" && p.Value.Required && p.Value.Example != nil {
			e.query.Set(p.Value.Name, fmt.Sprint(p.Value.Example)) // a required query's example
		}
		if p.Value.In == "path" {
			// The probe harness's request and batch: examples that exist (a withdrawal's: a
			// request that failed).
			e.params[p.Value.Name] = map[string]string{"operationId": "op-v", "id": "7", "itemId": "3", "name": "webhook:ci"}[p.Value.Name]
			if p.Value.Name == "operationId" && strings.HasSuffix(path, "/withdraw") {
				e.params[p.Value.Name] = "op-f"
			}
		}
	}
	if op.RequestBody != nil {
		s := op.RequestBody.Value.Content.Get("application/json").Schema.Value
		data, err := json.Marshal(s.Example)
		if err != nil || s.Example == nil {
			t.Fatalf("%s %s: the request body's schema has no example", method, path)
		}
		dec := json.NewDecoder(strings.NewReader(string(data)))
		dec.UseNumber()
		if err := dec.Decode(&e.body); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// leaves lists the paths of every field of an example body, nested objects included.
func leaves(v map[string]any, prefix []string) [][]string {
	var out [][]string
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p := append(append([]string{}, prefix...), k)
		out = append(out, p)
		if m, ok := v[k].(map[string]any); ok {
			out = append(out, leaves(m, p)...)
		}
	}
	return out
}

// withField is a deep copy of body with the field at path set to v (remove: deleted).
func withField(body map[string]any, path []string, v any, remove bool) map[string]any {
	data, _ := json.Marshal(body)
	var out map[string]any
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.UseNumber()
	_ = dec.Decode(&out)
	m := out
	for _, k := range path[:len(path)-1] {
		m = m[k].(map[string]any)
	}
	if remove {
		delete(m, path[len(path)-1])
	} else {
		m[path[len(path)-1]] = v
	}
	return out
}

func TestWhatTheDocumentAllowsTheServerAccepts(t *testing.T) {
	t.Parallel()
	doc, err := contractDoc()
	if err != nil {
		t.Fatal(err)
	}
	total, allowed := 0, 0
	for _, path := range doc.Paths.InMatchingOrder() {
		for method, op := range doc.Paths.Value(path).Operations() {
			if strings.HasPrefix(path, "/auth/") {
				// The sign-in's navigations: a redirect through an identity provider and back,
				// which one request cannot make; the sign-in's own tests hold them to the document.
				continue
			}
			t.Run(op.OperationID, func(t *testing.T) {
				h := probeHarness(t)
				base := exampleOf(t, method, path, op)
				n := 0
				send := func(e exampleCall) {
					n++
					if _, ok := e.body["operationId"]; ok && e.path != "/hooks/approval" {
						// A fresh idempotency key per probe: a replay or a reused key would answer
						// before the checks the probe is for.
						e.body = withField(e.body, []string{"operationId"}, fmt.Sprintf("probe-%d", n), false)
					}
					h.do(e.call())
					total++
					if h.lastAllowed.Load() {
						allowed++
					}
				}
				if rec := h.do(base.call()); rec.Code >= 300 || !h.lastAllowed.Load() {
					t.Errorf("the document's example request: %d (allowed by the document: %v) %.300s", rec.Code, h.lastAllowed.Load(), rec.Body)
				}
				for _, p := range op.Parameters {
					for _, v := range probeStrings() {
						e := base
						switch p.Value.In {
						case "query":
							e.query = url.Values{p.Value.Name: {v}}
						case "path":
							e.params = map[string]string{p.Value.Name: v}
						default:
							continue
						}
						send(e)
					}
				}
				for _, field := range leaves(base.body, nil) {
					for _, v := range probeJSON() {
						e := base
						e.body = withField(base.body, field, v, false)
						if field[0] == "operationId" && len(field) == 1 {
							// The probe is the key: sent as is (send keeps a probed operationId).
							h.do(e.call())
							total++
							continue
						}
						send(e)
					}
					e := base
					e.body = withField(base.body, field, nil, true)
					send(e)
				}
			})
		}
	}
	t.Logf("%d probes, %d allowed by the document", total, allowed)
	if allowed == 0 || allowed == total {
		t.Fatalf("%d of %d probes allowed: the pool does not reach both sides of the bounds", allowed, total)
	}
}
