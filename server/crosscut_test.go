package server

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"bindery/api"
	"bindery/internal/platform/config"
	"bindery/internal/platform/ratelimit"
	"bindery/internal/vocab/apperr"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
	"bindery/workflow"
)

// panickingSink is a metrics backend that throws on every sample.
type panickingSink struct{}

func (panickingSink) Inc(string)              { panic("metrics backend exploded") }
func (panickingSink) Observe(string, float64) { panic("metrics backend exploded") }

// docs/api.md, 'Metrics never change a result': the whole handler suite, run with metrics that
// panic, gives identical statuses, bodies, database state and workflow calls.
func TestMetricsThatPanicChangeNothing(t *testing.T) {
	for _, r := range rows() {
		t.Run(r.name, func(t *testing.T) {
			_, normal := runRow(t, r, r.opts)
			o := r.opts
			o.sink = panickingSink{}
			h, broken := runRow(t, r, o)
			if strings.Join(normal.answers, "\n") != strings.Join(broken.answers, "\n") {
				t.Errorf("answers differ\nnormal:\n%s\npanicking metrics:\n%s", strings.Join(normal.answers, "\n"), strings.Join(broken.answers, "\n"))
			}
			if normal.db != broken.db {
				t.Errorf("database differs\nnormal:\n%s\npanicking metrics:\n%s", normal.db, broken.db)
			}
			if strings.Join(normal.calls, "\n") != strings.Join(broken.calls, "\n") {
				t.Errorf("workflow calls differ: %v vs %v", normal.calls, broken.calls)
			}
			if h.srv.rec.Panics() == 0 {
				t.Error("the panicking backend was never called: the comparison proves nothing")
			}
		})
	}
}

// leakPatterns are the shapes of internals: stacks, source paths, SQL, host names, driver and
// upstream messages.
var leakPatterns = regexp.MustCompile(`(?i)goroutine \d|\.go:\d+|/home/|/usr/|/tmp/|\bselect\b.+\bfrom\b|\binsert into\b|\bupdate\b.+\bset\b|error 1062|duplicate entry|\.internal\b|:3306|:443|dial tcp|i/o timeout|upstream said|runtime error|nil map|panic|go struct|unmarshal`)

// leakyWorkflow answers every call with an error full of internals, in every form the workflow
// could produce one: a plain error, an apperr wrapping it, and a panic.
func leakyWorkflow(h *harness, mode int) {
	cause := fmt.Errorf("upstream said: 500 from gitlab.internal:443 (dial tcp 10.0.0.9:443: i/o timeout); SELECT * FROM binding WHERE id = 1 at /home/dev/bindery/store/binding.go:88: %w", store.ErrRetry)
	fail := func() error {
		switch mode {
		case 0:
			return cause
		case 1:
			return apperr.Wrap(cause, apperr.Unavailable, "A dependency is down; please retry later.")
		case 2:
			return apperr.Wrap(cause, apperr.NotFound, "No such request.")
		}
		var m map[string]int
		m["x"]++ // runtime error: assignment to entry in nil map
		return nil
	}
	w := h.wf
	w.ApplyFn = func(context.Context, workflow.ApplyInput) (api.ApplyResult, error) {
		return api.ApplyResult{}, fail()
	}
	w.RequestFn = func(context.Context, string) (api.RequestView, error) { return api.RequestView{}, fail() }
	w.MyRequestsFn = func(context.Context, string, string, int) (api.Page[api.RequestSummary], error) {
		return api.Page[api.RequestSummary]{}, fail()
	}
	w.PreviewFn = func(context.Context, string, string) (api.Preview, error) { return api.Preview{}, fail() }
	w.BatchesFn = func(context.Context, string, int, state.BatchStatus) (api.Page[api.BatchView], error) {
		return api.Page[api.BatchView]{}, fail()
	}
	w.RunRoundFn = func(context.Context) (api.RoundResult, error) { return api.RoundResult{}, fail() }
	w.SettleBatchFn = func(context.Context, int64, string) (api.BatchView, error) { return api.BatchView{}, fail() }
	w.StuckRequestsFn = func(context.Context, workflow.StuckFilter) (api.Page[api.RequestSummary], error) {
		return api.Page[api.RequestSummary]{}, fail()
	}
	w.RetryFn = func(context.Context, string, string) (api.RequestView, error) {
		return api.RequestView{}, fail()
	}
	w.ReconcileFn = func(context.Context) (api.ReconcileResult, error) { return api.ReconcileResult{}, fail() }
	w.ApprovalCallbackFn = func(context.Context, api.ApprovalCallback) (api.CallbackResult, error) {
		return api.CallbackResult{}, fail()
	}
	w.DeployCallbackFn = func(context.Context, api.DeployCallback) (api.CallbackResult, error) {
		return api.CallbackResult{}, fail()
	}
	w.GitLabEventFn = func(context.Context, workflow.GitLabEvent) (api.CallbackResult, error) {
		return api.CallbackResult{}, fail()
	}
	h.perms.CheckFn = func(context.Context, string, []string) (bool, error) { return false, cause }
}

// docs/api.md, 'Errors': no error body carries a stack, SQL, a file path, a host name or an
// upstream message. Every row of the suite, then every route against a workflow and a permission
// service that fail with internals in every way they can.
func TestNoErrorBodyLeaksInternals(t *testing.T) {
	scan := func(t *testing.T, where, answer string) {
		t.Helper()
		var status int
		fmt.Sscanf(answer, "%d|", &status)
		body := answer[strings.LastIndex(answer, "|")+1:]
		if status >= 400 {
			if m := leakPatterns.FindString(body); m != "" {
				t.Errorf("%s: error body leaks %q: %s", where, m, body)
			}
		}
	}
	for _, r := range rows() {
		_, res := runRow(t, r, r.opts)
		for _, a := range res.answers {
			scan(t, r.name, a)
		}
	}
	cb := `{"requestId":"cb-1","operationId":"op-1","result":"APPROVED"}`
	calls := []call{
		post("/api/apply", "alice", applyJSON("op-1", "public-a")),
		post("/api/apply", "bob", applyJSON("op-2", "restricted-b")),
		get("/api/requests/op-1", "alice"),
		post("/api/requests/op-1/revoke", "alice", `{"operationId":"rv-1"}`),
		get("/api/my/requests", "alice"),
		get("/api/preview?target=public-a", "alice"),
		get("/api/me", "alice"),
		get("/api/ops/batches", "ops"),
		post("/api/ops/batches/run", "ops", `{"operationId":"x-1"}`),
		post("/api/ops/batches/7/settle", "ops", `{"operationId":"x-2"}`),
		get("/api/ops/requests", "ops"),
		post("/api/ops/requests/op-1/retry", "ops", `{"operationId":"x-3"}`),
		post("/api/ops/reconcile", "ops", `{"operationId":"x-4"}`),
		{method: "POST", path: "/hooks/approval", body: cb, header: signed("s3cret", cb)},
		{method: "POST", path: "/hooks/deploy", body: `{"project":"p","mrIid":3}`, header: map[string]string{"Authorization": "Bearer dtok"}},
		{method: "POST", path: "/hooks/gitlab", body: `{"object_kind":"merge_request","project":{"path_with_namespace":"p"},"object_attributes":{"iid":3}}`, header: map[string]string{"X-Gitlab-Token": "gtok"}},
	}
	for mode, name := range []string{"plain error", "unavailable wrapping internals", "not found wrapping internals", "panic"} {
		t.Run(name, func(t *testing.T) {
			h := setup(t, options{})
			leakyWorkflow(h, mode)
			h.offContract = mode == 2 // every workflow call answers NOT_FOUND, which most never do
			errorsSeen := 0
			for _, c := range calls {
				rec := h.do(c)
				if rec.Code >= 400 {
					errorsSeen++
				}
				scan(t, c.method+" "+c.path, fmt.Sprintf("%d|||%s", rec.Code, rec.Body.String()))
			}
			if errorsSeen < len(calls)-2 { // preview answers {} and /api/me answers ops:false
				t.Errorf("only %d of %d calls failed: the leaky fakes were not used", errorsSeen, len(calls))
			}
			if !strings.Contains(h.logs.String(), "gitlab.internal") && mode != 3 {
				t.Error("the internals are not in the log either")
			}
		})
	}
	// A database that is down, through readyz and an idempotent write.
	h := setup(t, options{})
	h.db.Close()
	for _, c := range []call{get("/readyz", ""), post("/api/apply", "alice", applyJSON("op-9", "public-a")), get("/api/ops/audit", "ops")} {
		rec := h.do(c)
		if rec.Code != 503 && rec.Code != 500 {
			t.Errorf("%s with the database closed: %d", c.path, rec.Code)
		}
		scan(t, "closed database "+c.path, fmt.Sprintf("%d|||%s", rec.Code, rec.Body.String()))
	}
}

// docs/api.md, 'Interceptors': a refused request consumes nothing after the refusing step — no
// workflow call, no record, no business activity — whichever step refuses it.
func TestARefusedRequestReachesNoLaterStep(t *testing.T) {
	refusals := []struct {
		name   string
		before int // accepted applications first (to reach the limit)
		c      call
		status int
	}{
		{"over the rate limit", 3, post("/api/apply", "alice", applyJSON("op-9", "public-a")), 429},
		{"no identity", 0, post("/api/apply", "", applyJSON("op-9", "public-a")), 401},
		{"not an operator", 0, post("/api/ops/batches/run", "alice", `{"operationId":"x"}`), 403},
		{"forged callback", 0, call{method: "POST", path: "/hooks/approval", body: `{}`, header: signed("wrong", `{}`)}, 401},
	}
	for _, rf := range refusals {
		t.Run(rf.name, func(t *testing.T) {
			h := setup(t, options{})
			for i := 0; i < rf.before; i++ {
				h.do(post("/api/apply", "alice", applyJSON(fmt.Sprintf("op-%d", i), []string{"public-a", "public-a", "restricted-b"}[i])))
			}
			callsBefore, dbBefore := len(h.wf.Calls()), h.dbState()
			received := h.metric(`bindery_activity_total{action="apply",stage="received",caller="other"}`)
			if rec := h.do(rf.c); rec.Code != rf.status {
				t.Fatalf("status %d, want %d", rec.Code, rf.status)
			}
			if len(h.wf.Calls()) != callsBefore || h.dbState() != dbBefore {
				t.Errorf("the refused request reached the workflow or the store: %v", h.wf.Calls()[callsBefore:])
			}
			if got := h.metric(`bindery_activity_total{action="apply",stage="received",caller="other"}`); got != received {
				t.Errorf("the refused request counted as business activity: %s → %s", received, got)
			}
			if got := h.metric(fmt.Sprintf(`bindery_http_requests_total{route="%s",code="%d"}`, routeName(h, rf.c), rf.status)); got != "" {
				t.Errorf("a request refused before step 3 reached the API metrics (%s)", got)
			}
		})
	}
}

func routeName(h *harness, c call) string {
	for _, rt := range h.srv.table {
		if rt.method == c.method && rt.path == c.path {
			return rt.name
		}
	}
	return "?"
}

func TestAPIMetricsCoverEveryRouteAndActivityOnlyTheWhitelist(t *testing.T) {
	h := setup(t, options{})
	h.do(get("/api/targets", "alice"))
	h.do(post("/api/apply", "alice", applyJSON("op-1", "public-a")))
	h.do(post("/api/apply", "alice", applyJSON("op-2", "public-a"))) // 409: received, not success
	h.do(get("/assets/gone-12345678.js", ""))
	for series, want := range map[string]string{
		`bindery_http_requests_total{route="targets",code="200"}`:                "1",
		`bindery_http_requests_total{route="apply",code="202"}`:                  "1",
		`bindery_http_requests_total{route="apply",code="409"}`:                  "1",
		`bindery_http_requests_total{route="static",code="404"}`:                 "1",
		`bindery_activity_total{action="apply",stage="received",caller="other"}`: "2",
		`bindery_activity_total{action="apply",stage="success",caller="other"}`:  "1",
		// not in the whitelist
		`bindery_activity_total{action="targets",stage="received",caller="other"}`: "",
		// the demo header presented "alice": a bare name is not an account, never guessed
		`bindery_activity_total{action="apply",stage="received",caller="account"}`: "",
	} {
		if got := h.metric(series); got != want {
			t.Errorf("%s = %q, want %q", series, got, want)
		}
	}
	h.do(post("/api/apply", "alice@example.com", applyJSON("op-3", "restricted-b")))
	if got := h.metric(`bindery_activity_total{action="apply",stage="received",caller="account"}`); got != "1" {
		t.Errorf("an email-shaped identity was not counted as an account: %q", got)
	}
	// No identity is ever a label value.
	var all strings.Builder
	h.set.WritePrometheus(&all)
	if strings.Contains(all.String(), "alice") {
		t.Errorf("an identity reached /metrics:\n%s", all.String())
	}
	// Every route of the table is wrapped.
	h2 := setup(t, options{})
	var b strings.Builder
	hooks := map[string]map[string]string{
		"/hooks/approval": signed("s3cret", "{}"), "/hooks/deploy": {"Authorization": "Bearer dtok"}, "/hooks/gitlab": {"X-Gitlab-Token": "gtok"},
	}
	for _, rt := range h2.srv.table {
		h2.do(call{method: rt.method, path: strings.NewReplacer("{operationId}", "op-x", "{id}", "7").Replace(rt.path), user: "ops", body: "{}", header: hooks[rt.path], peer: "127.0.0.1:5000"})
	}
	h2.set.WritePrometheus(&b)
	for _, rt := range h2.srv.table {
		if !strings.Contains(b.String(), `bindery_http_request_duration_seconds_count{route="`+rt.name+`"}`) {
			t.Errorf("route %s %s has no API metrics", rt.method, rt.path)
		}
	}
}

// docs/api.md, 'Rate limits': the limit is read from config at every request.
func TestHotReloadChangesTheLimitOnTheNextRequest(t *testing.T) {
	h := setup(t, options{config: map[string]string{"ratelimit.apply": "1"}})
	me := func(op string) int { return h.do(post("/api/apply", "alice", applyJSON(op, "public-a"))).Code }
	if me("op-1") != 202 || me("op-2") != 429 {
		t.Fatal("limit 1 not enforced")
	}
	h.src.Replace(config.MustParse(configYAML(map[string]string{"ratelimit.apply": "2"})))
	if got := me("op-3"); got != 409 { // admitted by the limiter (the relation is busy: 409)
		t.Fatalf("after raising the limit: %d, want the request through the limiter", got)
	}
	if me("op-4") != 429 {
		t.Fatal("raised limit not enforced")
	}
	h.src.Replace(config.MustParse(configYAML(map[string]string{"ratelimit.apply": "<blank>"})))
	for i := 0; i < 20; i++ {
		if me(fmt.Sprintf("op-x%d", i)) == 429 {
			t.Fatal("a blank limit still limits")
		}
	}
}

// Every key the HTTP layer reads, observed through HTTP: missing, blank, garbage and valid
// values do what docs/config.md says.
func TestMisconfigOfEveryKeyTheHTTPLayerReads(t *testing.T) {
	applyA := post("/api/apply", "alice", applyJSON("op-1", "public-a"))
	burst := func(h *harness, n int) int { // n applications by alice; answers the last status
		code := 0
		for i := 0; i < n; i++ {
			code = h.do(post("/api/apply", "alice", applyJSON(fmt.Sprintf("op-b%d", i), "public-a"))).Code
		}
		return code
	}
	deploy := func(token string) call {
		return call{method: "POST", path: "/hooks/deploy", body: `{"project":"p","mrIid":1}`, header: map[string]string{"Authorization": "Bearer " + token}}
	}
	gitlab := func(token string) call {
		return call{method: "POST", path: "/hooks/gitlab", body: `{"object_kind":"push"}`, header: map[string]string{"X-Gitlab-Token": token}}
	}
	cb := `{"requestId":"c","operationId":"op-1","result":"APPROVED"}`
	login := func(header, value, peer string) call {
		// The document names the default login header; another one configured is outside it.
		return call{method: "GET", path: "/api/me", peer: peer, header: map[string]string{header: value}, outside: header != "X-Forwarded-User"}
	}
	type row struct {
		key, value string
		serve      bool
		probe      func(h *harness) int
		want       int
	}
	table := []row{
		{"ratelimit.apply", "", false, func(h *harness) int { return burst(h, 11) }, 429}, // missing → default 10
		{"ratelimit.apply", "<blank>", false, func(h *harness) int { return burst(h, 12) }, 409},
		{"ratelimit.apply", "lots", false, func(h *harness) int { return burst(h, 12) }, 409},
		{"ratelimit.apply", "-1", false, func(h *harness) int { return burst(h, 12) }, 409},
		{"ratelimit.apply", "2", false, func(h *harness) int { return burst(h, 3) }, 429},
		{"ratelimit.revoke", "0", false, func(h *harness) int {
			h.wf.put(api.RequestView{OperationID: "op-v", Subject: "alice@example.com", Status: state.StatusValidated})
			code := 0
			for i := 0; i < 12; i++ {
				code = h.do(post("/api/requests/op-v/revoke", "alice", fmt.Sprintf(`{"operationId":"rv-%d"}`, i))).Code
			}
			return code
		}, 202},
		{"ratelimit.window", "garbage", false, func(h *harness) int { return burst(h, 4) }, 429}, // → 1m, limit 3 holds
		{"apply.mode", "", false, func(h *harness) int { return h.do(applyA).Code }, 403},        // missing → TEST_WINDOW; t0 is Monday 12:00 in Shanghai but the window is set below
		{"apply.mode", "<blank>", false, func(h *harness) int { return h.do(applyA).Code }, 202}, // TEST_WINDOW, default window open at t0
		{"apply.mode", "closed ", false, func(h *harness) int { return h.do(applyA).Code }, 403},
		{"apply.mode", " open ", false, func(h *harness) int { return h.do(applyA).Code }, 202},
		{"apply.timezone", "Mars/Olympus", false, func(h *harness) int { return h.do(applyA).Code }, 403},
		{"apply.window", "whenever", false, func(h *harness) int { return h.do(applyA).Code }, 403},
		{"hooks.approvalSecret", "<blank>", false, func(h *harness) int {
			return h.do(call{method: "POST", path: "/hooks/approval", body: cb, header: signed("", cb)}).Code
		}, 401},
		{"hooks.approvalSkew", "nonsense", false, func(h *harness) int { // → 5m: 4 minutes old passes
			return h.do(call{method: "POST", path: "/hooks/approval", body: cb, header: map[string]string{"X-Bindery-Timestamp": fmt.Sprint(t0.Unix() - 240), "X-Bindery-Signature": approvalSig("s3cret", t0.Unix()-240, cb)}}).Code
		}, 200},
		{"hooks.approvalSkew", "1m", false, func(h *harness) int {
			return h.do(call{method: "POST", path: "/hooks/approval", body: cb, header: map[string]string{"X-Bindery-Timestamp": fmt.Sprint(t0.Unix() - 240), "X-Bindery-Signature": approvalSig("s3cret", t0.Unix()-240, cb)}}).Code
		}, 401},
		{"hooks.deployToken", "<blank>", false, func(h *harness) int { return h.do(deploy("")).Code }, 401},
		{"hooks.deployToken", "", false, func(h *harness) int { return h.do(deploy("dtok")).Code }, 401},
		{"hooks.gitlabToken", "<blank>", false, func(h *harness) int { return h.do(gitlab("")).Code }, 401},
		{"hooks.gitlabToken", "'%%%'", false, func(h *harness) int { return h.do(gitlab("%%%")).Code }, 200},
		{"server.trustedProxies", "", true, func(h *harness) int { return h.do(login("X-Forwarded-User", "carol@corp.example", "10.1.2.3:1")).Code }, 401},
		{"server.trustedProxies", "[garbage, 10.1.2.3]", true, func(h *harness) int { return h.do(login("X-Forwarded-User", "carol@corp.example", "10.1.2.3:1")).Code }, 200},
		{"identity.loginHeader", "", true, func(h *harness) int { return h.do(login("X-Forwarded-User", "77001", "10.1.2.3:1")).Code }, 200},
		{"identity.loginHeader", "<blank>", true, func(h *harness) int { return h.do(login("X-Forwarded-User", "77001", "10.1.2.3:1")).Code }, 200},
		{"identity.loginHeader", "'X User'", true, func(h *harness) int { return h.do(login("X-Forwarded-User", "77001", "10.1.2.3:1")).Code }, 401},
		{"identity.loginHeader", "X-Auth-Request-Email", true, func(h *harness) int { return h.do(login("X-Auth-Request-Email", "77001", "10.1.2.3:1")).Code }, 200},
		{"identity.directory", "", true, func(h *harness) int { return h.do(login("X-Forwarded-User", "77001", "10.1.2.3:1")).Code }, 401},
		{"identity.directory", "<blank>", true, func(h *harness) int { return h.do(login("X-Forwarded-User", "carol@corp.example", "10.1.2.3:1")).Code }, 200},
		{"authz.opsRule", "", false, func(h *harness) int { return h.do(get("/api/ops/batches", "ops")).Code }, 200},
		{"authz.opsRule", "<blank>", false, func(h *harness) int { return h.do(get("/api/ops/batches", "ops")).Code }, 403},
		{"authz.opsRule", "sre-admins", false, func(h *harness) int { return h.do(get("/api/ops/batches", "ops")).Code }, 403},
		{"idempotency.ttl", "soon", false, func(h *harness) int { // → 24h: the repeat is a replay
			h.do(applyA)
			rec := h.do(applyA)
			if !strings.Contains(rec.Body.String(), "DUPLICATE_SUBMIT") {
				return 0
			}
			return rec.Code
		}, 202},
	}
	for i, r := range table {
		// No '#' or '%' in the name: it becomes the SQLite file's directory, and the store's
		// file: URI would cut the path there.
		t.Run(fmt.Sprintf("%s_%d", r.key, i), func(t *testing.T) {
			over := map[string]string{r.key: r.value}
			if r.key == "apply.mode" && r.value == "" {
				over["apply.window"] = "Sat 10:00-11:00" // the default mode must be TEST_WINDOW: closed now
			}
			if strings.HasPrefix(r.key, "apply.") && r.key != "apply.mode" {
				over["apply.mode"] = "TEST_WINDOW"
			}
			h := setup(t, options{config: over, serve: r.serve})
			if got := r.probe(h); got != r.want {
				t.Fatalf("%s: %q → %d, want %d", r.key, r.value, got, r.want)
			}
		})
	}
	read := map[string]bool{}
	for _, r := range table {
		read[r.key] = true
	}
	for _, k := range []string{"ratelimit.apply", "ratelimit.revoke", "ratelimit.window", "apply.mode", "apply.window", "apply.timezone", "hooks.approvalSecret",
		"hooks.approvalSkew", "hooks.deployToken", "hooks.gitlabToken", "server.trustedProxies", "identity.loginHeader", "identity.directory", "authz.opsRule", "idempotency.ttl"} {
		if !read[k] {
			t.Errorf("key %s read by the HTTP layer has no row", k)
		}
	}
}

// docs/api.md, 'Idempotency', over HTTP, on both databases: concurrent duplicates of one
// application, exactly one proceeds, every other gets the winner's answer.
func TestConcurrentDuplicateApplicationsProceedOnce(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, options{db: db, config: map[string]string{"ratelimit.apply": "100"}})
		const n = 12
		var wg sync.WaitGroup
		codes := make(chan string, n)
		start := make(chan struct{})
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				rec := h.do(post("/api/apply", "alice", applyJSON("op-race", "public-a")))
				var res api.ApplyResult
				json.Unmarshal(rec.Body.Bytes(), &res)
				codes <- fmt.Sprintf("%d %s %s", rec.Code, res.Code, res.OperationID)
			}()
		}
		close(start)
		wg.Wait()
		close(codes)
		count := map[string]int{}
		for c := range codes {
			count[c]++
		}
		if h.wf.count("Apply") != 1 || count["202 ACCEPTED op-race"] != 1 || count["202 DUPLICATE_SUBMIT op-race"] != n-1 {
			t.Fatalf("Apply ran %d times; answers %v", h.wf.count("Apply"), count)
		}
	})
}

// The HTTP layer adds no commit of its own to an application: the whole POST /api/apply is
// the workflow's one transaction (here the fake's, which writes the idempotency record it is
// given, as the workflow does) — no claim before it, no stored answer after it. A repeat is a
// read of that record and no write at all. Counted by the driver wrapper, on both databases.
func TestAnApplicationOverHTTPIsOneCommit(t *testing.T) {
	var mu sync.Mutex
	var seq []string
	storetest.EachWith(t, func(*testing.T) store.Options {
		return store.Options{MaxOpenConns: 20, MaxIdleConns: 20, OnStatement: func(st store.Statement) {
			mu.Lock()
			seq = append(seq, st.Query)
			mu.Unlock()
		}}
	}, func(t *testing.T, db *store.DB) {
		h := setup(t, options{db: db})
		during := func(c call) []string {
			mu.Lock()
			seq = nil
			mu.Unlock()
			if rec := h.do(c); rec.Code != 202 {
				t.Fatalf("apply: %d %s", rec.Code, rec.Body.String())
			}
			mu.Lock()
			defer mu.Unlock()
			return seq
		}
		first := during(post("/api/apply", "alice", applyJSON("op-1", "public-a")))
		if len(first) < 3 || first[0] != "BEGIN" || first[len(first)-1] != "COMMIT" || slices.Contains(first[1:len(first)-1], "COMMIT") {
			t.Fatalf("an application ran %q, want one transaction and nothing outside it", first)
		}
		repeat := during(post("/api/apply", "alice", applyJSON("op-1", "public-a")))
		if slices.Contains(repeat, "COMMIT") || !slices.ContainsFunc(repeat, func(q string) bool { return strings.Contains(q, "FROM idempotency_record") }) {
			t.Fatalf("a repeat ran %q, want its key refused, the record read and nothing committed", repeat)
		}
	})
}

// An operationId is at most 64 characters, the width of the key columns: the longest one is
// recorded on both databases (MySQL in strict mode refuses a longer value with a 500), and one
// character more is a 400 that names the field before anything is written.
func TestTheLongestOperationIDIsRecordedAndALongerOneIsRefused(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, options{db: db})
		longest := strings.Repeat("a", 64)
		if rec := h.do(post("/api/apply", "alice", applyJSON(longest, "public-a"))); rec.Code != 202 {
			t.Fatalf("64 characters: %d %s", rec.Code, rec.Body.String())
		}
		if rec := h.do(post("/api/apply", "alice", applyJSON(longest, "public-a"))); rec.Code != 202 || !strings.Contains(rec.Body.String(), "DUPLICATE_SUBMIT") {
			t.Fatalf("64 characters again (the recorded answer): %d %s", rec.Code, rec.Body.String())
		}
		rec := h.do(post("/api/apply", "alice", applyJSON(longest+"a", "public-a")))
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), `"field":"operationId"`) {
			t.Fatalf("65 characters: %d %s", rec.Code, rec.Body.String())
		}
		if n := h.wf.count("Apply"); n != 1 {
			t.Fatalf("Apply ran %d times, want 1", n)
		}
	})
}

// docs/api.md, 'Rate limits': the subject is the identity, else the client address behind trusted
// proxies.
func TestRateLimitSubjectIsTheIdentityElseTheUntrustedClientAddress(t *testing.T) {
	h := setup(t, options{config: map[string]string{"ratelimit.apply": "1"}})
	from := func(user, peer, xff string) int {
		c := post("/api/apply", user, applyJSON("op-1", "public-a"))
		c.peer = peer
		if xff != "" {
			c.header = map[string]string{"X-Forwarded-For": xff}
		}
		return h.do(c).Code
	}
	// One person from two addresses and two spellings: one bucket.
	if from("alice", "192.0.2.1:1", "") == 429 || from("E1001", "192.0.2.2:1", "") != 429 {
		t.Fatal("an identity's quota is not shared across addresses and spellings")
	}
	// Anonymous callers: each address behind the trusted proxy has its own bucket, whatever
	// they forge on the left of the chain; all are 401 after passing the limiter.
	if from("", "10.0.0.1:1", "6.6.6.6, 198.51.100.1") != 401 || from("", "10.0.0.1:1", "7.7.7.7, 198.51.100.2") != 401 {
		t.Fatal("different clients share a bucket")
	}
	if from("", "10.0.0.1:1", "8.8.8.8, 198.51.100.1") != 429 {
		t.Fatal("a forged first hop escaped the client's bucket")
	}
	if from("", "192.0.2.9:1", "198.51.100.1") != 401 {
		t.Fatal("an untrusted peer's X-Forwarded-For was believed")
	}
}

// docs/api.md, 'Rate limits': each instance enforces ⌈limit ÷ live instances⌉, from a count
// refreshed in the background.
func TestLiveInstancesShareTheQuota(t *testing.T) {
	live := 3
	share := ratelimit.NewShare(func(context.Context) (int, error) { return live, nil })
	if err := share.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	h := setup(t, options{config: map[string]string{"ratelimit.apply": "5"}}) // ⌈5 ÷ 3⌉ = 2
	d := h.srv.deps
	d.Share = share
	d.Metrics = h.set
	h.set.UnregisterAllMetrics()
	h.srv = New(d)
	codes := []int{}
	for i := 0; i < 3; i++ {
		codes = append(codes, h.do(post("/api/apply", "alice", applyJSON(fmt.Sprintf("op-%d", i), []string{"public-a", "restricted-b", "public-a"}[i]))).Code)
	}
	if codes[2] != 429 || codes[1] == 429 {
		t.Fatalf("answers %v, want the third refused (2 per instance)", codes)
	}
}

// docs/api.md, 'Routes': the OpenAPI document lists every route with its auth and rate limit, and
// nothing else.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]struct {
			Auth      string `json:"x-auth"`
			RateLimit *struct {
				Bucket, Key string
				Default     int
			} `json:"x-rate-limit"`
			Responses map[string]json.RawMessage `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(openAPIDoc, &doc); err != nil {
		t.Fatal(err)
	}
	auth := map[authKind]string{authPublic: "public", authUser: "user", authOwnerOrOps: "owner-or-ops", authOps: "ops", authApprovalHook: "hmac", authGitLabHook: "gitlab-token", authDeployHook: "bearer", authMetrics: "metrics"}
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for m := range ops {
			documented[strings.ToUpper(m)+" "+path] = true
		}
	}
	h := setup(t, options{})
	for _, rt := range h.srv.table {
		key := rt.method + " " + rt.path
		op, ok := doc.Paths[rt.path][strings.ToLower(rt.method)]
		if !ok {
			t.Errorf("%s is not documented", key)
			continue
		}
		delete(documented, key)
		if op.Auth != auth[rt.auth] {
			t.Errorf("%s: documented auth %q, route has %q", key, op.Auth, auth[rt.auth])
		}
		if (op.RateLimit == nil) != (rt.limit == nil) || (rt.limit != nil && (op.RateLimit.Bucket != rt.limit.bucket || op.RateLimit.Key != rt.limit.key || op.RateLimit.Default != rt.limit.def)) {
			t.Errorf("%s: documented rate limit %+v, route has %+v", key, op.RateLimit, rt.limit)
		}
		want := []string{}
		if rt.limit != nil {
			want = append(want, "429")
		}
		if rt.auth != authPublic {
			want = append(want, "401")
		}
		if rt.body > 0 {
			want = append(want, "413", "415", "400")
		}
		switch rt.auth {
		case authOps:
			want = append(want, "403")
		case authOwnerOrOps:
			want = append(want, "404") // a stranger is answered like an unknown id
		}
		for _, code := range want {
			if _, ok := op.Responses[code]; !ok {
				t.Errorf("%s does not document its %s", key, code)
			}
		}
	}
	var extra []string
	for k := range documented {
		extra = append(extra, k)
	}
	sort.Strings(extra)
	if len(extra) > 0 {
		t.Errorf("documented but not routed: %v", extra)
	}
}

// The default beside each route is the default of its config key, so the docs tell the truth.
func TestRouteRateLimitDefaultsEqualTheRegistry(t *testing.T) {
	h := setup(t, options{})
	checked := 0
	for _, rt := range h.srv.table {
		if rt.limit == nil {
			continue
		}
		found := false
		for _, k := range config.Keys {
			if k.Name == rt.limit.key {
				found = true
				if k.Default != fmt.Sprint(rt.limit.def) {
					t.Errorf("%s: route default %d, registry %s", rt.path, rt.limit.def, k.Default)
				}
			}
		}
		if !found {
			t.Errorf("%s: rate-limit key %s is not registered", rt.path, rt.limit.key)
		}
		checked++
	}
	if checked < 2 {
		t.Fatalf("only %d rate-limited routes", checked)
	}
}

// The demo sample configuration sets the HTTP keys (and nothing falls back).
func TestSampleConfigSetsTheHTTPKeys(t *testing.T) {
	s := config.MustParse(string(config.Sample))
	if s.OpsRule() != "bindery-ops" || s.LoginHeader() != config.DefaultLoginHeader || s.RateLimit("ratelimit.revoke", -1) != 10 {
		t.Fatalf("sample: opsRule %q loginHeader %q revoke %d", s.OpsRule(), s.LoginHeader(), s.RateLimit("ratelimit.revoke", -1))
	}
}
