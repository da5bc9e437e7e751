package notify

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"bindery/internal/platform/config"
	"bindery/internal/testkit"
	"bindery/internal/testkit/enginekit"
	"bindery/internal/vocab/state"
	"bindery/internal/work/engine"
	"bindery/store"
)

var bg = context.Background()

// Two valid Standard Webhooks secrets (whsec_ and base64 of 32 bytes), for rotation.
const (
	secretA = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	secretB = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
)

// fastSchedule keeps the shape of the standard schedule at test speed.
var fastSchedule = []time.Duration{0, 30 * time.Millisecond, 60 * time.Millisecond, 90 * time.Millisecond, 120 * time.Millisecond}

// env is a notifier on its own engine (one instance), on db.
type env struct {
	t   *testing.T
	db  *store.DB
	src *config.Source
	eng *engine.Engine
	n   *Notifier
}

// newEnv starts a notifier with the configuration text yaml; opts adds to its options.
func newEnv(t *testing.T, db *store.DB, yaml string, opts ...func(*Options)) *env {
	t.Helper()
	src := config.NewStatic(config.MustParse(yaml))
	return startEnv(t, db, src, "test-1", opts...)
}

func startEnv(t *testing.T, db *store.DB, src *config.Source, instance string, opts ...func(*Options)) *env {
	t.Helper()
	eng := enginekit.On(t, db).Engine(enginekit.Options{Instance: instance, Held: true,
		Lanes: map[string]int{engine.LaneNotify: 4, engine.LaneFirst: 1, engine.LaneBackground: 1}})
	o := Options{DB: db, Config: src, Engine: eng, Instance: instance, BaseURL: "http://bindery.test", GitLabURL: "http://gitlab.test", Jitter: func() float64 { return 0.5 }}
	for _, f := range opts {
		f(&o)
	}
	n, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	n.schedule = fastSchedule
	if err := eng.Start(bg); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, db: db, src: src, eng: eng, n: n}
}

// webhookConfig is the configuration of one webhook endpoint named name at url. Its
// notify.timeout of 2 s (the tests' receivers answer at once) is room for a loaded machine: an
// attempt cut after the receiver took the request is sent again (at least once, as documented),
// which the tests that count deliveries would read as a duplicate — as they did at 300 ms with the
// machine's load average at 40.
func webhookConfig(name, url, events string, secrets ...string) string {
	if len(secrets) == 0 {
		secrets = []string{secretA}
	}
	return fmt.Sprintf("notify:\n  timeout: 2s\n  webhooks:\n    - {name: %s, url: %q, secrets: [%s], events: %s}\n", name, url, strings.Join(secrets, ", "), events)
}

// hit is one request a receiver got.
type hit struct {
	header http.Header
	body   []byte
	at     time.Time
}

// receiver is a webhook receiver whose answer to each attempt the test decides.
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	hits   []hit
	answer func(n int, w http.ResponseWriter, r *http.Request) // n: 0-based attempt number
}

func newReceiver(t *testing.T, answer func(n int, w http.ResponseWriter, r *http.Request)) *receiver {
	rc := &receiver{answer: answer}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		n := len(rc.hits)
		rc.hits = append(rc.hits, hit{header: r.Header.Clone(), body: body, at: time.Now()})
		rc.mu.Unlock()
		if rc.answer == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		rc.answer(n, w, r)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) got() []hit {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]hit(nil), rc.hits...)
}

// deliveries reads every delivery of the database.
func deliveries(t *testing.T, db *store.DB) []store.Delivery {
	t.Helper()
	ds, err := db.Deliveries(bg, store.DeliveryFilter{Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// settled waits until no notify task is left and returns the deliveries.
func settled(t *testing.T, db *store.DB) []store.Delivery {
	t.Helper()
	testkit.Eventually(t, "every notify task to end", func() bool { return count(t, db, "SELECT COUNT(*) FROM task WHERE kind = 'notify'") == 0 })
	return deliveries(t, db)
}

func count(t *testing.T, db *store.DB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Raw().QueryRowContext(bg, q, args...).Scan(&n); err != nil && err != sql.ErrNoRows {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// apply records an approval-first application of subject and moves it along path.
func apply(t *testing.T, db *store.DB, opID, subject string, path ...store.Change) {
	t.Helper()
	applyTo(t, db, opID, subject, "team-a", path...)
}

// applyTo is apply for target.
func applyTo(t *testing.T, db *store.DB, opID, subject, target string, path ...store.Change) {
	t.Helper()
	if _, err := db.Apply(bg, store.Application{OperationID: opID, SubjectID: subject, TargetKey: target, Project: "infra/acl", Flow: state.FlowApprovalFirst,
		Reason: "test", Status: state.StatusApprovalSending, Step: state.StepApprovalSending}); err != nil {
		t.Errorf("apply %s: %v", opID, err)
		return
	}
	for _, c := range path {
		cur, err := db.Request(bg, opID)
		if err != nil {
			t.Errorf("read %s: %v", opID, err)
			return
		}
		if _, err := db.Transition(bg, cur, c); err != nil {
			t.Errorf("%s → %s: %v", opID, c.To, err)
			return
		}
	}
}

// toInEffect is the approval-first path from the ticket to VALIDATED.
var toInEffect = []store.Change{
	{To: state.StatusApprovalSent, Step: state.StepApprovalSent},
	{To: state.StatusMRCreating, Step: state.StepQueued},
	{To: state.StatusMRCreating, Step: state.StepCreateStarted, MRIID: 12},
	{To: state.StatusMRCreated, Step: state.StepCreateSucceeded, PipelineID: 77},
	{To: state.StatusMerging, Step: state.StepHandleStarted},
	{To: state.StatusMerged, Step: state.StepHandleMerged},
	{To: state.StatusValidated, Step: state.StepCalledBack},
}

// body decodes a webhook body.
func body(t *testing.T, h hit) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(h.body, &m); err != nil {
		t.Fatalf("body %s: %v", h.body, err)
	}
	return m
}

// engineKindThatFinishes is a kind whose run reports when it ran and ends its task.
func engineKindThatFinishes(name string, ran chan<- time.Time) engine.Kind {
	return engine.Kind{Name: name, Run: func(ctx context.Context, r *engine.Run) error {
		select {
		case ran <- time.Now():
		default:
		}
		return r.Finish(ctx, nil)
	}, Fail: func(ctx context.Context, r *engine.Run, err error) error { return r.Finish(ctx, nil) }}
}

// put makes a task of kind due now in lane.
func put(t *testing.T, db *store.DB, kind, ref, lane string) {
	t.Helper()
	if err := db.InTx(bg, func(tx *store.Tx) error {
		return tx.PutTask(bg, store.TaskSpec{Kind: kind, Ref: ref, Lane: lane, Step: "go"}, false)
	}); err != nil {
		t.Fatal(err)
	}
}
