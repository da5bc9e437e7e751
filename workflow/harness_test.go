package workflow_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"bindery/api"
	"bindery/batch"
	"bindery/internal/platform/config"
	"bindery/internal/platform/logging"
	"bindery/internal/platform/logging/logtest"
	"bindery/internal/platform/metric"
	"bindery/internal/remote/approval"
	"bindery/internal/remote/gitlab"
	"bindery/internal/remote/permission"
	"bindery/internal/sim"
	"bindery/internal/testkit"
	"bindery/internal/testkit/enginekit"
	"bindery/internal/vocab/state"
	"bindery/internal/work/change"
	"bindery/internal/work/engine"
	"bindery/server"
	"bindery/store"
	"bindery/workflow"
)

// The workflow runs here with everything real but the clock of the crons: the store (SQLite and
// MariaDB), bindery's HTTP server (signed callbacks, demo identities), the GitLab, approval and
// deploy simulators over real HTTP, the real GitLab and approval clients, the engine. Tests
// call the cron jobs (round, reconcile, sweep, expiry) themselves when they want them to run.

var bg = context.Background()

const project = "infra/access-config"

// baseConfig is the configuration of every test; tests append keys (later keys win only when
// they are not already set, so a test sets what it needs through extra, see configFor).
func configFor(approvalFirst bool, extra string) string {
	if !strings.Contains(extra, "targets:") {
		extra += defaultTargets
	}
	return fmt.Sprintf(`
apply:
  mode: OPEN
workflow:
  approvalFirst: %t
  leaseTTL: 5s
hooks:
  approvalSecret: test-approval-secret
  deployToken: test-deploy-token
  gitlabToken: test-gitlab-token
gitlab:
  botToken: bot-token
  reviewerTokens: [rev1-token, rev2-token]
  timeout: 5s
approval:
  maxRetries: 1
  backoff: 1ms
authz:
  opsRule: ops-rule
# A loaded machine (CI with -race, other test binaries) can take seconds to answer: the deadlines
# that deny or refuse in production are tested on their own, not by every workflow test.
database:
  requestTimeout: 20s
permission:
  timeout: 20s
  rules:
    ops-rule: [ops@example.com]
%s`, approvalFirst, extra)
}

const defaultTargets = `
targets:
  - key: db-read
    title: DB read
    project: infra/access-config
    path: bindings/db-read/{subject}.yaml
    ttl: 720h
  - key: grafana
    title: Grafana
    project: infra/observability-config
    path: grafana/{subject}.yaml
`

// fastPolling and fast simulators unless a test says otherwise.
const fastSims = `
batch:
  flakyRetries: 0
poll:
  short: 5ms
  shortCount: 20
  long: 20ms
  timeout: 10s
sim:
  gitlab:
    pipelineDuration: 0s
    rebaseDuration: 0s
    approvalsRequired: 2
  deploy:
    delay: 0s
`

type harness struct {
	t       testing.TB
	db      *store.DB
	cfg     *config.Source
	sims    *sim.Sims
	wf      *workflow.Workflow
	engine  *engine.Engine
	batches workflow.Batches
	fake    *fakeBatches
	set     *metrics.Set
	url     string
	logs    *logtest.Buffer
	handler *atomic.Value
	log     *slog.Logger
	gl      gitlab.API
	opts    options
	mu      sync.Mutex
}

// start builds one bindery instance on the shared database, simulators and listener: its engine,
// its workflow and its HTTP server.
func (h *harness) start(o options) {
	t := h.t
	log := h.log
	gl, err := gitlab.New(h.cfg, gitlab.Options{Metrics: h.set, Log: log, DefaultBaseURL: h.url + "/sim/gitlab"})
	if err != nil {
		t.Fatal(err)
	}
	var api gitlab.API = gl
	if o.wrapGitLab != nil {
		api = o.wrapGitLab(gl)
	}
	var tickets workflow.Tickets
	tickets, err = approval.New(h.cfg, approval.Options{Metrics: h.set, Log: log, DefaultURL: h.url + "/sim/approval"})
	if err != nil {
		t.Fatal(err)
	}
	if o.wrapTickets != nil {
		tickets = o.wrapTickets(tickets)
	}
	if o.workers == 0 {
		o.workers = 4
	}
	if o.instance == "" {
		o.instance = "test-instance-1"
	}
	first, idle := o.workers, 100*time.Millisecond // enginekit's default: a shorter idle poll costs MariaDB more than it saves
	if o.first > 0 {
		first = o.first
	}
	if o.idlePoll > 0 {
		idle = o.idlePoll
	}
	eng := enginekit.On(t, h.db).Engine(enginekit.Options{Log: log.With("instance", o.instance), Instance: o.instance, IdlePoll: idle, Held: true,
		Lanes: map[string]int{engine.LaneFirst: first, engine.LaneBackground: o.workers}})
	rec := metric.New(metric.SetSink(h.set), log)
	runner := &change.Runner{GitLab: api, Log: log}
	if o.realBatch {
		h.batches = batch.New(batch.Options{DB: h.db, Config: h.cfg, Change: runner, Engine: eng, Log: log.With("instance", o.instance), Recorder: rec})
	} else if h.fake == nil {
		h.fake = &fakeBatches{db: h.db}
		h.batches = h.fake
	}
	h.opts = o
	wf, err := workflow.New(workflow.Options{
		DB: h.db, Config: h.cfg, Batches: h.batches, Tickets: tickets, Change: runner,
		Engine: eng, Log: log.With("instance", o.instance), Recorder: rec, BaseURL: h.url, GitLabURL: h.url + "/sim/gitlab",
		TicketURL: h.url + "/sim/approvals/{id}",
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(server.Deps{
		Config: h.cfg, DB: h.db, Metrics: metrics.NewSet(), Log: log, Version: "test", Demo: true, Workflow: wf,
		Permissions: permission.New(h.cfg, permission.Options{Metrics: h.set, Log: log}), Recorder: rec,
		Mounts: map[string]http.Handler{"/sim/": h.sims.Handler()},
	})
	h.mu.Lock()
	h.engine, h.wf, h.gl = eng, wf, gl
	h.mu.Unlock()
	h.handler.Store(srv.Handler())
	if !o.noDispatch {
		if err := eng.Start(bg); err != nil {
			t.Fatal(err)
		}
	}
}

func (h *harness) currentEngine() *engine.Engine {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.engine
}

// restart starts a new instance (a new process: new engine, new instance id) on the same
// database and simulators, in place of the current one, which stops taking work: the actions it
// runs go on until they end (a stalled one, until it is released), then it stops.
func (h *harness) restart(instance string, wrap func(workflow.Tickets) workflow.Tickets) {
	old := h.currentEngine()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testkit.Timeout())
		defer cancel()
		_ = old.Stop(ctx)
	}()
	o := h.opts
	o.instance, o.wrapTickets = instance, wrap
	h.start(o)
}

// join starts another instance beside the current one, both dispatching (the API goes to the
// new one): several processes on one database — or one process with two dispatchers when the
// name is the same.
func (h *harness) join(instance string, wrap func(workflow.Tickets) workflow.Tickets) {
	o := h.opts
	o.instance, o.wrapTickets = instance, wrap
	h.start(o)
}

// joinFrontend starts another instance that answers the API and webhooks but takes no work (its
// engine does not dispatch): what it makes due must be run by the others.
func (h *harness) joinFrontend(instance string) {
	o := h.opts
	o.instance, o.noDispatch = instance, true
	h.start(o)
}

// round runs one batch round (the cron's job) and fails the test on a partition error.
func (h *harness) round() api.RoundResult {
	h.t.Helper()
	res, err := h.wf.RunRound(bg)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, p := range res.Partitions {
		if p.Outcome == "ERROR" {
			h.t.Fatalf("round: %+v", res)
		}
	}
	return res
}

// crash stops this instance the way a killed process does to its work: every running step's
// context is cancelled at once, nothing more is written by it.
func (h *harness) crash() { h.currentEngine().Kill() }

// options tune setup.
type options struct {
	approvalFirst bool
	extra         string                                  // config keys (YAML) beside fastSims
	workers       int                                     // each lane's workers (default 4)
	first         int                                     // the first-steps lane's, when set
	idlePoll      time.Duration                           // the lanes' idle poll (default 100ms)
	noDispatch    bool                                    // the instance's engine takes no work (it only answers HTTP)
	wrapTickets   func(workflow.Tickets) workflow.Tickets // e.g. hold or break the approval client
	wrapGitLab    func(gitlab.API) gitlab.API             // e.g. record the GitLab calls
	realBatch     bool                                    // package batch's Service instead of the recording fake
	clock         *testkit.Clock                          // the simulators' pipelines and rebases follow it (nil: the real clock)
	instance      string
}

func setup(t testing.TB, db *store.DB, o options) *harness {
	t.Helper()
	if o.extra == "" {
		o.extra = fastSims
	}
	h := &harness{t: t, db: db, set: metrics.NewSet(), logs: &logtest.Buffer{}}
	snap, err := config.Parse([]byte(configFor(o.approvalFirst, o.extra)))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	h.cfg = config.NewStatic(snap)
	level := new(slog.LevelVar)
	level.Set(slog.LevelInfo)
	log := logging.New(h.logs, "text", level)
	t.Cleanup(func() {
		// Whatever a test did, it left no in-flight work without its task (no request or batch
		// that nobody would ever run).
		enginekit.On(t, db).NoOrphans()
		if t.Failed() {
			t.Logf("log:\n%s", h.logs.String())
		}
	})

	var handler atomic.Value
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handler.Load().(http.Handler).ServeHTTP(w, r)
	}))
	h.url = "http://" + ts.Listener.Addr().String()
	var clock sim.Clock
	if o.clock != nil {
		clock = o.clock
	}
	h.sims = sim.New(sim.Options{Config: h.cfg, BinderyURL: h.url, PublicURL: h.url + "/sim", Log: log.With("component", "sim"), Clock: clock})

	h.handler = &handler
	h.log = log
	h.start(o)
	ts.Start()
	ctx, cancel := context.WithCancel(context.Background())
	h.sims.Start(ctx)
	t.Cleanup(func() {
		cancel()
		sctx, stop := context.WithTimeout(context.Background(), 5*time.Second)
		defer stop()
		_ = h.currentEngine().Stop(sctx)
		h.sims.Stop(sctx)
		ts.Close()
	})
	return h
}

// reconfigure swaps the configuration (e.g. flips workflow.approvalFirst), keeping the rest.
func (h *harness) reconfigure(approvalFirst bool, extra string) {
	h.t.Helper()
	snap, err := config.Parse([]byte(configFor(approvalFirst, extra)))
	if err != nil {
		h.t.Fatal(err)
	}
	h.cfg.Replace(snap)
}

// api calls bindery's HTTP API as user (demo identity) and decodes the answer into out.
func (h *harness) api(method, path, user, body string, out any) int {
	h.t.Helper()
	req, _ := http.NewRequest(method, h.url+path, strings.NewReader(body))
	if user != "" {
		req.Header.Set("X-Bindery-User", user)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			h.t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, data, err)
		}
	}
	return resp.StatusCode
}

var opSeq atomic.Int64

// apply submits an application as user and returns its operationId.
func (h *harness) apply(user, target string) string {
	h.t.Helper()
	op := fmt.Sprintf("op-%d-%d", time.Now().UnixNano()%1e9, opSeq.Add(1))
	var res api.ApplyResult
	if code := h.api("POST", "/api/apply", user, fmt.Sprintf(`{"operationId":%q,"targetKey":%q,"reason":"for the test"}`, op, target), &res); code != 202 {
		h.t.Fatalf("apply: %d %+v", code, res)
	}
	return op
}

// view reads the request view through the API as ops.
func (h *harness) view(op string) api.RequestView {
	h.t.Helper()
	var v api.RequestView
	if code := h.api("GET", "/api/requests/"+op, "ops", "", &v); code != 200 {
		h.t.Fatalf("view %s: %d", op, code)
	}
	return v
}

// waitState waits until the request is in status (and step, when not 0).
func (h *harness) waitState(op string, status state.BindingStatus, step state.Step) api.RequestView {
	h.t.Helper()
	var v api.RequestView
	if testkit.Poll(testkit.Timeout(), func() bool {
		v = h.view(op)
		return v.Status == status && (step == 0 || v.Step.Code == int(step))
	}) != nil {
		h.t.Fatalf("timed out waiting for %s to reach %s/%s; it is %s/%s, timeline %+v", op, status, step, v.Status, v.Step.Name, v.Timeline)
	}
	return v
}

func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	testkit.Eventually(h.t, what, cond)
}

// ticketOf waits for the approval ticket of op and returns it.
func (h *harness) ticketOf(op string) sim.Ticket {
	h.t.Helper()
	var out sim.Ticket
	h.waitFor("the ticket of "+op, func() bool {
		for _, tk := range h.sims.Approval.Tickets() {
			if tk.OperationID == op {
				out = tk
				return true
			}
		}
		return false
	})
	return out
}

// decide decides op's ticket in the approval simulator, which sends the signed callback.
func (h *harness) decide(op, decision string) {
	h.t.Helper()
	if _, err := h.sims.Approval.Decide(h.ticketOf(op).ID, decision); err != nil {
		h.t.Fatal(err)
	}
}

// callback posts a signed approval callback to bindery and returns the HTTP status and code.
func (h *harness) callback(cb api.ApprovalCallback, secret string) (int, string) {
	h.t.Helper()
	body, _ := json.Marshal(cb)
	now := time.Now()
	return h.hook("/hooks/approval", body, map[string]string{
		approval.TimestampHeader: fmt.Sprint(now.Unix()),
		approval.SignatureHeader: approval.Sign([]byte(secret), now, body),
	})
}

// deploy posts a deploy callback.
func (h *harness) deploy(cb api.DeployCallback) (int, string) {
	h.t.Helper()
	body, _ := json.Marshal(cb)
	return h.hook("/hooks/deploy", body, map[string]string{"Authorization": "Bearer test-deploy-token"})
}

// hook posts a webhook body and returns the HTTP status and the answer's code.
func (h *harness) hook(path string, body []byte, headers map[string]string) (int, string) {
	h.t.Helper()
	var res struct{ Code string }
	code, _ := h.hookJSON(path, body, headers, &res)
	return code, res.Code
}

// hookJSON posts a webhook body and decodes the answer into out.
func (h *harness) hookJSON(path string, body []byte, headers map[string]string, out any) (int, error) {
	h.t.Helper()
	req, _ := http.NewRequest("POST", h.url+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.StatusCode, json.NewDecoder(resp.Body).Decode(out)
}

// metric returns the value of one series ("" when absent).
func (h *harness) metric(series string) string {
	var b bytes.Buffer
	h.set.WritePrometheus(&b)
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, series+" ") {
			return strings.TrimPrefix(line, series+" ")
		}
	}
	return ""
}

// dueNow makes op's task due now: its wait passed, or — while an instance holds it — its claim
// expired, as if the holder crashed a lease TTL ago.
func (h *harness) dueNow(op string) {
	h.t.Helper()
	enginekit.On(h.t, h.db).DueNow(state.TaskRequest, op)
}

// expire ends the claim of op's task as a stalled holder's lease runs out (enginekit.Expire).
func (h *harness) expire(op string) {
	h.t.Helper()
	enginekit.On(h.t, h.db).Expire(state.TaskRequest, op)
}

// task is op's own task (ok false: it has none).
func (h *harness) task(op string) (store.Task, bool) {
	h.t.Helper()
	return enginekit.On(h.t, h.db).Task(state.TaskRequest, op)
}

// fakeBatches stands in for package batch where a test checks only what the workflow asks of
// the batch path; it records the calls.
type fakeBatches struct {
	db *store.DB

	mu      sync.Mutex
	rounds  int
	resumed []int64
	settled []int64
	woken   []string
	outcome []batch.Outcome
	onRound func() // runs inside Round, outside the lock (block, panic)
}

var _ workflow.Batches = (*fakeBatches)(nil)

// Repair answers as package batch does: a RUNNING batch resumes at its open step, a BLOCKED one
// gets its window again.
func (f *fakeBatches) Repair(b store.Batch) store.TaskSpec {
	t := store.TaskSpec{Kind: state.TaskBatch, Ref: strconv.FormatInt(b.ID, 10), Lane: engine.LaneBackground, Step: "open", Memo: "{}"}
	if b.Status == state.BatchBlocked {
		t.Step, t.In = "blocked", time.Hour
	}
	return t
}

func (f *fakeBatches) Waiting(string) string { return "" }

func (f *fakeBatches) Round(ctx context.Context) ([]batch.Outcome, error) {
	f.mu.Lock()
	f.rounds++
	hook := f.onRound
	out := f.outcome
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	return out, nil
}

func (f *fakeBatches) Resume(ctx context.Context, id int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resumed = append(f.resumed, id)
	return nil
}

func (f *fakeBatches) Settle(ctx context.Context, id int64, actor string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settled = append(f.settled, id)
	return nil
}

func (f *fakeBatches) Wake(ctx context.Context, project string, iid int64) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.woken = append(f.woken, fmt.Sprintf("%s!%d", project, iid))
	return 0, nil
}

// heldTickets holds every Open until released (with firstOnly, its first Open only); entered
// receives each held call.
type heldTickets struct {
	next      workflow.Tickets
	entered   chan string
	release   chan struct{}
	firstOnly bool
	held      atomic.Bool
}

func holdTickets(next workflow.Tickets) *heldTickets {
	return &heldTickets{next: next, entered: make(chan string, 16), release: make(chan struct{})}
}

func (k *heldTickets) Open(ctx context.Context, t approval.Ticket) (string, error) {
	if k.held.Swap(true) && k.firstOnly {
		return k.next.Open(ctx, t)
	}
	k.entered <- t.OperationID
	select {
	case <-k.release:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	return k.next.Open(ctx, t)
}

func (k *heldTickets) Get(ctx context.Context, id string) (approval.TicketState, error) {
	return k.next.Get(ctx, id)
}

// ticketsFunc is a Tickets made of a function (a panicking or failing approval client); it
// cannot read tickets.
type ticketsFunc func(ctx context.Context, t approval.Ticket) (string, error)

func (f ticketsFunc) Open(ctx context.Context, t approval.Ticket) (string, error) { return f(ctx, t) }

func (f ticketsFunc) Get(context.Context, string) (approval.TicketState, error) {
	return approval.TicketState{}, errors.New("this approval client cannot read tickets")
}

// doneStages is the view's stages in order, space-separated, each checked done (a finished
// request).
func doneStages(t testing.TB, v api.RequestView) string {
	t.Helper()
	var stages []string
	for _, s := range v.Stages {
		if !s.Done {
			t.Errorf("stage %s not done on a finished request", s.Stage)
		}
		stages = append(stages, s.Stage)
	}
	return strings.Join(stages, " ")
}

type page struct {
	status int
	body   string
}

// get fetches a web page a view links (the simulators' pages), as a browser would.
func (h *harness) get(url string) page {
	h.t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		h.t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return page{resp.StatusCode, string(body)}
}
