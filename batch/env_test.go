package batch_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"bindery/batch"
	"bindery/internal/platform/config"
	"bindery/internal/platform/logging/logtest"
	"bindery/internal/platform/metric"
	"bindery/internal/remote/gitlab"
	"bindery/internal/sim"
	"bindery/internal/testkit"
	"bindery/internal/testkit/enginekit"
	"bindery/internal/vocab/state"
	"bindery/internal/work/change"
	"bindery/internal/work/engine"
	"bindery/store"
)

// These tests run the batch service on both databases with bindery's real GitLab client and
// change runner against the simulated GitLab over real HTTP. Requests are set up through the
// store as the workflow leaves them: applied, approved (MR_CREATING / QUEUED) and admitted.

var bg = context.Background()

const (
	projectA = "infra/access-config"
	projectB = "infra/observability-config"
)

// settings are the knobs a test turns; zero values take the defaults below.
type settings struct {
	pollTimeout  time.Duration // default 20s
	pollInterval time.Duration // every poll interval (default 2ms, then 10ms)
	maxRequests  int           // default 50
	maxWait      time.Duration // default 0
	flakyRetries int           // default 1; -1 for 0
	manualClock  bool          // the simulator's pipelines and rebases follow a hand-moved clock
	pipelineTime time.Duration // simulated pipeline duration (default 0: instant)
	train        int           // batch.train (default 1)
	isolation    int           // batch.isolationCars (default 0)
	mergeMethod  string        // sim.gitlab.mergeMethod (default: the simulator's)
}

func (s settings) config() string {
	if s.pollTimeout == 0 {
		s.pollTimeout = 20 * time.Second
	}
	if s.maxRequests == 0 {
		s.maxRequests = 50
	}
	short, long := 2*time.Millisecond, 10*time.Millisecond
	if s.pollInterval > 0 {
		short, long = s.pollInterval, s.pollInterval
	}
	if s.train == 0 {
		s.train = 1
	}
	method := ""
	if s.mergeMethod != "" {
		method = "\n    mergeMethod: " + s.mergeMethod
	}
	flaky := s.flakyRetries
	switch flaky {
	case 0:
		flaky = 1
	case -1:
		flaky = 0
	}
	return fmt.Sprintf(`
gitlab:
  botToken: bot-token
  reviewerTokens: [rev1-token, rev2-token]
  timeout: 5s
approval:
  maxRetries: 1
  backoff: 1ms
breaker:
  failures: 50
  cooldown: 1s
batch:
  maxRequests: %d
  maxWait: %s
  flakyRetries: %d
  leaseTTL: 5s
  blockedTimeout: 1h
  train: %d
  isolationCars: %d
poll:
  short: %s
  shortCount: 50
  long: %s
  timeout: %s
sim:
  gitlab:
    pipelineDuration: %s
    rebaseDuration: 0s
    approvalsRequired: 2%s
targets:
  - key: t1
    project: %s
    branch: main
    path: "bindings/t1/{subject}.yaml"
  - key: t2
    project: %s
    branch: main
    path: "bindings/t2/{subject}.yaml"
  - key: g1
    project: %s
    branch: main
    path: "grafana/{subject}.yaml"
`, s.maxRequests, s.maxWait, flaky, s.train, s.isolation, short, long, s.pollTimeout, s.pipelineTime, method, projectA, projectA, projectB)
}

type env struct {
	db     *store.DB
	src    *config.Source
	gl     *sim.GitLab
	clock  *testkit.Clock
	runner *change.Runner
	sink   *sink
	rec    *metric.Recorder
	// beforeClose, when set, runs when the simulator receives an MR update (the close), before
	// the simulator handles it: a merge landing at that very moment.
	beforeClose atomic.Pointer[func()]
	// failClose, while set, answers every MR update (the close) with a 500 before the simulator
	// sees it: GitLab failing while a batch is settled.
	failClose atomic.Bool
	// beforeServe and afterServe, when set, run before the simulator handles a request and after
	// it answered (something that happens inside a call, or right after bindery read).
	beforeServe, afterServe atomic.Pointer[func(*http.Request)]
	logs                    *logtest.Buffer // every service's log, text
	kit                     *enginekit.Harness
}

// mrUpdate is PUT …/merge_requests/:iid (the close), not …/merge or …/rebase.
var mrUpdate = regexp.MustCompile(`/merge_requests/[0-9]+$`)

func setup(t *testing.T, db *store.DB, s settings) *env {
	t.Helper()
	e := &env{db: db, src: config.NewStatic(config.MustParse(s.config())), sink: &sink{seen: map[string]int{}}, logs: &logtest.Buffer{}, kit: enginekit.On(t, db)}
	var clock sim.Clock
	if s.manualClock {
		e.clock = testkit.NewClock(time.Now())
		clock = e.clock
	}
	sims := sim.New(sim.Options{Config: e.src, Clock: clock})
	e.gl = sims.GitLab
	handler := sims.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fn := e.beforeClose.Load(); fn != nil && r.Method == http.MethodPut && mrUpdate.MatchString(r.URL.EscapedPath()) {
			(*fn)()
		}
		if e.failClose.Load() && r.Method == http.MethodPut && mrUpdate.MatchString(r.URL.EscapedPath()) {
			http.Error(w, `{"message":"500 Internal Server Error"}`, http.StatusInternalServerError)
			return
		}
		if fn := e.beforeServe.Load(); fn != nil {
			(*fn)(r)
		}
		handler.ServeHTTP(w, r)
		if fn := e.afterServe.Load(); fn != nil {
			(*fn)(r)
		}
	}))
	ctx, cancel := context.WithCancel(bg)
	sims.Start(ctx)
	t.Cleanup(func() { cancel(); sims.Stop(context.Background()); srv.Close() })
	t.Cleanup(e.kit.NoOrphans) // whatever a test did, it left no active batch or in-flight request without its task
	client, err := gitlab.New(e.src, gitlab.Options{Metrics: metrics.NewSet(), DefaultBaseURL: srv.URL + "/sim/gitlab"})
	if err != nil {
		t.Fatal(err)
	}
	e.runner = &change.Runner{GitLab: client, Log: slog.New(slog.DiscardHandler)}
	e.rec = metric.New(e.sink, nil)
	return e
}

// service is one instance's batch service on its own engine, dispatching (killed when the test
// ends).
func (e *env) service(t *testing.T, instance string) *batch.Service {
	svc, eng := e.held(t, instance)
	if err := eng.Start(bg); err != nil {
		t.Fatal(err)
	}
	return svc
}

// held is one instance's batch service on an engine that does not dispatch until it is
// started: work claimed by its rounds waits in the database (for it, or for another instance).
func (e *env) held(t *testing.T, instance string) (*batch.Service, *engine.Engine) {
	var out io.Writer = e.logs
	if os.Getenv("BATCH_TEST_LOG") != "" {
		out = io.MultiWriter(e.logs, os.Stderr)
	}
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug})).With("instance", instance)
	eng := enginekit.On(t, e.db).Engine(enginekit.Options{Instance: instance, Log: log, Recorder: e.rec, Held: true,
		Lanes: map[string]int{engine.LaneFirst: 1, engine.LaneBackground: 2}})
	return batch.New(batch.Options{DB: e.db, Config: e.src, Change: e.runner, Engine: eng, Recorder: e.rec, Log: log}), eng
}

// steps is a request's timeline.
func (e *env) steps(t *testing.T, opID string) []store.StepRecord {
	t.Helper()
	steps, err := e.db.Steps(bg, opID)
	if err != nil {
		t.Fatal(err)
	}
	return steps
}

// task is the batch's task as the dispatcher sees it (failing the test when it has none).
func (e *env) task(t *testing.T, id int64) store.Task {
	t.Helper()
	task, ok := enginekit.On(t, e.db).Task(state.TaskBatch, fmt.Sprint(id))
	if !ok {
		t.Fatalf("batch %d has no task", id)
	}
	return task
}

// dueNow makes batch id's task due now, as if its time (a wait, a BLOCKED window) had passed.
func (e *env) dueNow(t *testing.T, id int64) {
	t.Helper()
	enginekit.On(t, e.db).DueNow(state.TaskBatch, fmt.Sprint(id))
}

// admit creates an approved request waiting in its partition, as the workflow leaves it.
func (e *env) admit(t *testing.T, opID, subject, target, reason string) {
	t.Helper()
	tg, ok := e.src.Current().Target(target)
	if !ok {
		t.Fatalf("no target %s", target)
	}
	r, err := e.db.Apply(bg, store.Application{OperationID: opID, SubjectID: subject, TargetKey: target, Project: tg.Project,
		Flow: "approval-first", Reason: reason, Status: state.StatusApprovalSending, Step: state.StepApprovalSending})
	if err != nil {
		t.Fatalf("apply %s: %v", opID, err)
	}
	if _, err := e.db.Transition(bg, r, store.Change{To: state.StatusMRCreating, Step: state.StepQueued}); err != nil {
		t.Fatalf("approve %s: %v", opID, err)
	}
	op, err := e.db.Operation(bg, opID) // with its request time, as the file records it
	if err != nil {
		t.Fatal(err)
	}
	a, err := batch.Admission(tg, op, state.ActionAdd)
	if err != nil {
		t.Fatalf("render %s: %v", opID, err)
	}
	if added, err := e.db.Admit(bg, a); err != nil || !added {
		t.Fatalf("admit %s: %v %v", opID, added, err)
	}
}

// admitMany admits n requests on target, ids prefix-00 … and subjects user-<prefix>-00 ….
func (e *env) admitMany(t *testing.T, prefix, target string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%02d", prefix, i)
		e.admit(t, ids[i], fmt.Sprintf("user-%s-%02d", prefix, i), target, "needs access")
	}
	return ids
}

// claimable waits until the database clock passed every admission (a claim takes the rows
// created strictly before its now; SQLite's clock has milliseconds).
func (e *env) claimable(t *testing.T) {
	t.Helper()
	enginekit.On(t, e.db).ClockPast("SELECT CAST(MAX(created_at) AS CHAR) FROM merge_batch_request")
}

// round runs one round after the admissions became claimable and returns the outcome of
// partition (failing the test on an error).
func (e *env) round(t *testing.T, svc *batch.Service, partition string) batch.Outcome {
	t.Helper()
	e.claimable(t)
	outs, err := svc.Round(bg)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range outs {
		if o.Partition == partition {
			return o
		}
	}
	return batch.Outcome{Partition: partition, Result: state.RoundNothingWaiting}
}

// stopped waits until batch id is no longer RUNNING and returns it.
func (e *env) stopped(t *testing.T, id int64) store.Batch {
	t.Helper()
	return e.batchWhen(t, id, "to stop running", func(b store.Batch) bool { return b.Status != state.BatchRunning })
}

// settled waits until batch id is SUCCEEDED or FAILED and returns it.
func (e *env) settled(t *testing.T, id int64) store.Batch {
	t.Helper()
	return e.batchWhen(t, id, "to be settled", func(b store.Batch) bool { return !b.Status.Active() })
}

// batchWhen waits until batch id satisfies cond and returns it.
func (e *env) batchWhen(t *testing.T, id int64, what string, cond func(store.Batch) bool) store.Batch {
	t.Helper()
	var b store.Batch
	testkit.Eventually(t, fmt.Sprintf("batch %d %s", id, what), func() bool {
		var err error
		b, err = e.db.Batch(bg, id)
		return err == nil && cond(b)
	})
	return b
}

// drain runs rounds until partition has nothing waiting and no active batch, each batch to its
// end; it returns the batches in claim order.
func (e *env) drain(t *testing.T, svc *batch.Service, partition string) []store.Batch {
	t.Helper()
	var out []store.Batch
	for range 40 {
		o := e.round(t, svc, partition)
		if o.Err != nil {
			t.Fatalf("round: %v", o.Err)
		}
		if o.Result != state.RoundClaimed {
			if n := e.count(t, "SELECT COUNT(*) FROM merge_batch_request WHERE partition_key = ? AND batch_id IS NULL", partition); n == 0 {
				return out
			}
			continue
		}
		b := e.stopped(t, o.BatchID)
		if b.Status == state.BatchBlocked {
			t.Fatalf("batch %d blocked: %s", b.ID, b.Note)
		}
		out = append(out, b)
	}
	t.Fatal("the partition did not drain in 40 rounds")
	return nil
}

// landedOnOneMR waits for batch id to end and checks it succeeded with every member merged, on
// the one MR the simulator saw created: a resumed batch goes on with its MR, never a new one.
func (e *env) landedOnOneMR(t *testing.T, id int64, ids []string) {
	t.Helper()
	b := e.stopped(t, id)
	if b.Status != state.BatchSucceeded {
		t.Fatalf("batch: %+v", b)
	}
	for _, op := range ids {
		e.expect(t, op, state.StatusMerged, state.StepHandleMerged, state.NextWait)
	}
	// One MR, whatever the calls: on a loaded machine a create whose answer came too late is
	// asked again, and GitLab's 409 names the MR the first call opened.
	if b.MRIID != 1 || e.gl.MergeRequestState(b.Project, 2) != "" {
		t.Fatalf("the batch landed on MR !%d; MR !2 is %q: want one MR", b.MRIID, e.gl.MergeRequestState(b.Project, 2))
	}
}

func (e *env) request(t *testing.T, opID string) store.Request {
	t.Helper()
	r, err := e.db.Request(bg, opID)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// expect checks a request's binding status, step and what the client is told to do.
func (e *env) expect(t *testing.T, opID string, status state.BindingStatus, step state.Step, next state.NextAction) {
	t.Helper()
	r := e.request(t, opID)
	got := state.NextActionFor(r.Binding.Status, r.Operation.Step)
	if r.Binding.Status != status || r.Operation.Step != step || got != next {
		t.Errorf("%s: %s / %s / %s, want %s / %s / %s", opID, r.Binding.Status, r.Operation.Step, got, status, step, next)
	}
}

func (e *env) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := e.db.Raw().QueryRowContext(bg, query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// onMain reports whether the binding file of subject on target is on the main branch.
func (e *env) onMain(t *testing.T, target, subject string) bool {
	t.Helper()
	tg, _ := e.src.Current().Target(target)
	path, err := change.RenderPath(tg, subject)
	if err != nil {
		t.Fatal(err)
	}
	_, ok := e.gl.File(tg.Project, "main", path)
	return ok
}

// sink records metric series.
type sink struct {
	mu   sync.Mutex
	seen map[string]int
}

func (s *sink) Inc(series string)                { s.add(series) }
func (s *sink) Observe(series string, _ float64) { s.add(series) }
func (s *sink) add(series string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen[series]++
}

func (s *sink) count(series string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[series]
}
