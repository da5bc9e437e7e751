package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/julienschmidt/httprouter"

	"bindery/api"
	"bindery/internal/platform/identity"
	"bindery/internal/platform/ratelimit"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/workflow"
)

// BenchmarkChainOverhead compares routes served bare and behind the whole interceptor chain
// (docs/api.md, 'Interceptors': identity resolution, rate limit, authentication, API metrics,
// business-activity metrics, body checks) on the same router (httprouter, registered as newRouter
// does), for three real handlers: GET /api/targets (config only, a few microseconds), GET
// /api/requests/{id} (the status; the workflow answers the owner's view at once) and POST
// /api/apply (its idempotency record written to SQLite; the workflow accepts at once). It reports
// the time of each variant (bare-ns/op, chain-ns/op) and their ratio. The limiter's clock advances
// a second per request, so the key holds its steady-state window instead of growing with b.N.
// `go run ./cmd/bench` reports the ratios (BENCHMARKS.md, section 1).
func BenchmarkChainOverhead(b *testing.B) {
	h := setup(b, options{config: map[string]string{"ratelimit.apply": "1000"}})
	var mu sync.Mutex
	now := t0
	h.srv.limiter = ratelimit.New(ratelimit.Options{Now: func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Second)
		return now
	}})
	h.srv.deps.Workflow = quietWorkflow{h.wf}
	alice, _ := identity.Resolve("alice@example.com", identity.DemoDirectory())
	// bare: the handler and its own body binding, with the caller the chain would have found.
	bare := func(rt route) http.Handler {
		ep := h.srv.endpoint(rt)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			info := &reqInfo{caller: identity.Caller{Identity: alice, Presented: "alice@example.com"}}
			ep.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), infoKey{}, info)))
		})
	}
	limit := &rateSpec{"apply", "ratelimit.apply", 10, "slow down"}
	routes := map[string]route{
		"targets": {method: "GET", path: "/targets", name: "targets", auth: authUser, handle: h.srv.targets},
		"request": {method: "GET", path: "/requests/:operationId", name: "request", auth: authOwnerOrOps, handle: h.srv.request},
		"apply":   {method: "POST", path: "/apply", name: "apply", auth: authUser, limit: limit, activity: true, body: apiBody, handle: h.srv.apply},
	}
	router := httprouter.New()
	register := func(method, path string, next http.Handler) {
		router.Handle(method, path, func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
			for _, p := range ps {
				r.SetPathValue(p.Key, p.Value)
			}
			next.ServeHTTP(w, r)
		})
	}
	for name, rt := range routes {
		register(rt.method, "/bench/"+name+"/bare"+rt.path, bare(rt))
		register(rt.method, "/bench/"+name+"/chain"+rt.path, h.srv.chain(rt))
	}
	// Bare and chain alternate within one loop and each request is timed on its own, so on a
	// shared machine both variants see the same load and the ratio is of the same moments. A
	// request's time includes building it (httptest parses it as net/http's server would) and
	// its recorder: what serving it costs besides the socket, as in the benchmark's first form.
	variants := [2]string{"bare", "chain"}
	n := 0
	for _, name := range []string{"targets", "request", "apply"} {
		rt := routes[name]
		b.Run(name, func(b *testing.B) {
			var spent [2]time.Duration
			for i := 0; b.Loop(); i++ {
				for k := range 2 {
					v := (i + k) % 2 // alternate which variant goes first
					n++
					start := time.Now()
					var body *strings.Reader
					if rt.method == "POST" {
						body = strings.NewReader(fmt.Sprintf(`{"operationId":"op-%d","targetKey":"public-a","reason":"r"}`, n))
					} else {
						body = strings.NewReader("")
					}
					path := strings.Replace(rt.path, ":operationId", fmt.Sprintf("op-%d", n), 1)
					req := httptest.NewRequest(rt.method, "/bench/"+name+"/"+variants[v]+path, body)
					req.Header.Set("X-Bindery-User", "alice@example.com")
					req.Header.Set("Content-Type", "application/json")
					req.RemoteAddr = "192.0.2.10:4321"
					rec := httptest.NewRecorder()
					router.ServeHTTP(rec, req)
					spent[v] += time.Since(start)
					if rec.Code >= 300 {
						b.Fatalf("%s/%s: %d %s", name, variants[v], rec.Code, rec.Body.String())
					}
				}
			}
			bare, chain := float64(spent[0])/float64(b.N), float64(spent[1])/float64(b.N)
			b.ReportMetric(bare, "bare-ns/op")
			b.ReportMetric(chain, "chain-ns/op")
			b.ReportMetric(chain/bare, "chain/bare")
		})
	}
}

// quietWorkflow answers the benchmark's applications and status reads without the fake's call
// log, which would grow with b.N and make the garbage collector's share grow with it.
type quietWorkflow struct{ *fakeWorkflow }

// Apply writes the idempotency record the server hands it, in a transaction of its own, as the
// workflow's application does (the record is written in the application's transaction): the
// route's bare handler is then what it is in the product, a body binding and a commit.
func (q quietWorkflow) Apply(ctx context.Context, in workflow.ApplyInput) (api.ApplyResult, error) {
	res := api.ApplyResult{Code: api.CodeAccepted, OperationID: in.OperationID, Status: state.StatusApprovalSending, NextAction: state.NextWait}
	if in.Idempotency == nil {
		return res, nil
	}
	err := q.inTx(ctx, func(tx *store.Tx) error {
		rec := *in.Idempotency
		rec.Body, _ = json.Marshal(res)
		return tx.RecordAnswer(ctx, rec)
	})
	return res, err
}

func (quietWorkflow) Request(_ context.Context, id string) (api.RequestView, error) {
	return api.RequestView{OperationID: id, Subject: "alice@example.com", TargetKey: "public-a", Status: state.StatusApprovalSent,
		Step: api.StepView{Code: int(state.StepApprovalSent), Name: "APPROVAL_SENT"}, NextAction: state.NextWait,
		Stages: []api.StageDuration{}, Timeline: []api.TimelineEntry{}}, nil
}
