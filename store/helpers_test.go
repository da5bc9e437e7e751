package store_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"bindery/internal/testkit"
	"bindery/internal/testkit/enginekit"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// bg is the context of test steps that must not be cancelled.
var bg = context.Background()

// application returns an approval-first application for subject on target (project "infra/acl").
func application(opID, subject, target string) store.Application {
	return store.Application{
		OperationID: opID, SubjectID: subject, TargetKey: target, Project: "infra/acl", Flow: "approval-first",
		Reason: "test", Status: state.StatusApprovalSending, Step: state.StepApprovalSending,
	}
}

// mustApply applies and fails the test on error.
func mustApply(t testing.TB, db *store.DB, a store.Application) store.Request {
	t.Helper()
	r, err := db.Apply(bg, a)
	if err != nil {
		t.Fatalf("apply %s: %v", a.OperationID, err)
	}
	return r
}

// mustMove reads the request and moves it through each status in turn (legal transitions).
func mustMove(t testing.TB, db *store.DB, opID string, path ...state.BindingStatus) store.Request {
	t.Helper()
	var r store.Request
	for _, to := range path {
		cur, err := db.Request(bg, opID)
		if err != nil {
			t.Fatalf("read %s: %v", opID, err)
		}
		r, err = db.Transition(bg, cur, store.Change{To: to, Step: stepFor(to)})
		if err != nil {
			t.Fatalf("move %s → %s: %v", opID, to, err)
		}
	}
	return r
}

// stepFor is a plausible step for a status, for tests that only care about statuses.
func stepFor(s state.BindingStatus) state.Step {
	switch s {
	case state.StatusApprovalSent:
		return state.StepApprovalSent
	case state.StatusRejected:
		return state.StepApprovalRejected
	case state.StatusMRCreating:
		return state.StepQueued
	case state.StatusMRCreated:
		return state.StepCreateSucceeded
	case state.StatusMerging:
		return state.StepHandleStarted
	case state.StatusMerged:
		return state.StepHandleMerged
	case state.StatusValidated:
		return state.StepCalledBack
	case state.StatusCreateFailed:
		return state.StepCreateFailed
	case state.StatusHandleFailed:
		return state.StepHandleFailed
	case state.StatusClosed:
		return state.StepCloseSucceeded
	}
	return state.StepCreateStarted
}

// queued creates n approved requests in partition and admits them; it returns their ids.
func queued(t testing.TB, db *store.DB, partition string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-op-%04d", strings.ReplaceAll(partition, "/", "-"), i)
	}
	seedQueued(t, db, partition, ids)
	return ids
}

// seedQueued writes requests already approved and waiting (MR_CREATING, step QUEUED) in bulk,
// with raw multi-row inserts so that large fixtures stay fast; then it admits them.
func seedQueued(t testing.TB, db *store.DB, partition string, ids []string) {
	t.Helper()
	seedRequests(t, db, partition, ids, state.StatusMRCreating, state.StepQueued, 0)
	for start := 0; start < len(ids); start += 500 {
		end := min(start+500, len(ids))
		var vals []string
		var args []any
		for _, id := range ids[start:end] {
			vals = append(vals, "(?, ?, ?)")
			args = append(args, id, state.ActionAdd, partition)
		}
		if _, err := db.Raw().ExecContext(bg, "INSERT INTO merge_batch_request (operation_id, action, partition_key) VALUES "+strings.Join(vals, ", "), args...); err != nil {
			t.Fatalf("seed waiting: %v", err)
		}
	}
	claimable(t, db)
}

// claimable waits until the database clock has passed every admission: a claim takes rows
// created strictly before its now, and SQLite's clock has milliseconds.
func claimable(t testing.TB, db *store.DB) {
	t.Helper()
	clockPast(t, db, "SELECT CAST(MAX(created_at) AS CHAR) FROM merge_batch_request")
}

// clockPast waits until the database clock is after the time query returns.
func clockPast(t testing.TB, db *store.DB, query string) {
	t.Helper()
	enginekit.On(t, db).ClockPast(query)
}

// seedRequests writes operation + binding rows in a given state, in bulk (fixtures only; the
// product goes through Apply and Transition).
func seedRequests(t testing.TB, db *store.DB, project string, ids []string, status state.BindingStatus, step state.Step, mrIID int64) {
	t.Helper()
	for start := 0; start < len(ids); start += 500 {
		end := min(start+500, len(ids))
		var ops, binds []string
		var opArgs, bindArgs []any
		for _, id := range ids[start:end] {
			ops = append(ops, "(?, ?, ?, ?, 'approval-first', '', ?, ?, ?)")
			opArgs = append(opArgs, id, "subject-"+id, "target", project, status, step, nullable(mrIID))
			binds = append(binds, "(?, ?, ?, ?)")
			bindArgs = append(bindArgs, "subject-"+id, "target", status, id)
		}
		if _, err := db.Raw().ExecContext(bg, "INSERT INTO operation (operation_id, subject_id, target_key, project, flow, reason, status, step, mr_iid) VALUES "+
			strings.Join(ops, ", "), opArgs...); err != nil {
			t.Fatalf("seed operations: %v", err)
		}
		if _, err := db.Raw().ExecContext(bg, "INSERT INTO binding (subject_id, target_key, status, operation_id) VALUES "+
			strings.Join(binds, ", "), bindArgs...); err != nil {
			t.Fatalf("seed bindings: %v", err)
		}
	}
	if mrIID > 0 && (status == state.StatusMerged || status == state.StatusValidated) {
		seedMerge(t, db, project, mrIID, "main", mergedAtBase.Add(time.Duration(mrIID)*time.Minute))
	}
}

// mergedAtBase is when seedRequests' MRs merged: MR n n minutes after it, so that by default
// merge order is MR number order (tests of other orders seed their merges themselves).
var mergedAtBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// seedMerge records that project!iid landed on branch at (by GitLab's clock), with the next
// sequence of its project; an MR recorded already keeps its record.
func seedMerge(t testing.TB, db *store.DB, project string, iid int64, branch string, at time.Time) {
	t.Helper()
	err := db.InTx(bg, func(tx *store.Tx) error {
		return tx.RecordMerge(bg, store.MergeRecord{Project: project, MRIID: iid, Branch: branch, SHA: fmt.Sprintf("sha-%s-%d", project, iid), MergedAt: at})
	})
	if err != nil {
		t.Fatalf("seed merge %s!%d: %v", project, iid, err)
	}
}

func nullable(v int64) any {
	if v == 0 {
		return nil
	}
	return v
}

// count runs a COUNT(*) query.
func count(t testing.TB, db *store.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Raw().QueryRowContext(bg, query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// statements counts what the driver runs, by statement kind (first word) and in total.
// Transaction boundaries are counted apart, in txs (BEGIN, COMMIT, ROLLBACK), and kept in
// order with the statements in seq.
type statements struct {
	mu     sync.Mutex
	on     atomic.Bool
	all    []store.Statement
	counts map[string]int
	txs    map[string]int
	seq    []string
}

func (s *statements) observe(st store.Statement) {
	if !s.on.Load() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq = append(s.seq, st.Query)
	switch st.Query {
	case "BEGIN", "COMMIT", "ROLLBACK":
		s.txs[st.Query]++
		return
	}
	s.all = append(s.all, st)
	verb, _, _ := strings.Cut(strings.TrimSpace(st.Query), " ")
	s.counts[strings.ToUpper(verb)]++
}

// during counts the statements fn runs.
func (s *statements) during(t testing.TB, fn func()) (total int, byVerb map[string]int, all []store.Statement) {
	t.Helper()
	s.mu.Lock()
	s.all, s.counts, s.txs, s.seq = nil, map[string]int{}, map[string]int{}, nil
	s.mu.Unlock()
	s.on.Store(true)
	fn()
	s.on.Store(false)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.counts {
		total += n
	}
	return total, s.counts, s.all
}

// boundaries returns the transaction boundaries of the last during, and every query in the
// order the driver received them.
func (s *statements) boundaries() (map[string]int, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.txs, s.seq
}

// eachCounting is storetest.Each with a statement observer on the database.
func eachCounting(t *testing.T, fn func(t *testing.T, db *store.DB, st *statements)) {
	t.Helper()
	storetest.EachWith(t, func(*testing.T) (store.Options, *statements) {
		st := &statements{counts: map[string]int{}}
		return store.Options{OnStatement: st.observe}, st
	}, fn)
}

// writerGate holds the writers of groups (application groups, shared transactions) at a pause
// point until released, counting them, so that a test can line callers up behind them and know
// the groups they form.
type writerGate struct {
	held    atomic.Int32
	release func()
}

// heldWriters holds every writer that reaches point (store.SetPause) until g.release.
func heldWriters(t *testing.T, db *store.DB, point string) *writerGate {
	t.Helper()
	g := &writerGate{}
	gate := make(chan struct{})
	store.SetPause(db, func(p string) {
		if p == point {
			g.held.Add(1)
			<-gate
		}
	})
	var once sync.Once
	g.release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(func() { g.release(); store.SetPause(db, nil) })
	return g
}

// lineUp starts n callers one after another (start(i)): the first writers ones take the free
// writer slots and are held, each later one is seen waiting before the next starts.
func (g *writerGate) lineUp(t *testing.T, n, writers int, waiting func() int, start func(i int)) {
	t.Helper()
	for i := range n {
		start(i)
		want, writing := max(0, i+1-writers), min(i+1, writers)
		testkit.Eventually(t, fmt.Sprintf("%d writing, %d waiting", writing, want), func() bool {
			return int(g.held.Load()) == writing && waiting() == want
		})
	}
}

// markValidated is the deploy's move as workflow makes it (MERGED → VALIDATED, CALLED_BACK),
// with note in the history: the flips it really made.
func markValidated(db *store.DB, note string, ids ...string) ([]store.Operation, error) {
	return db.TransitionMany(bg, ids, store.MemberChange{From: []state.BindingStatus{state.StatusMerged}, To: state.StatusValidated, Step: state.StepCalledBack, Note: note})
}

// closeRemoval is a removal's deploy as workflow makes it (VALIDATED at CLOSE_MERGED → CLOSED).
func closeRemoval(db *store.DB, note string, ids ...string) ([]store.Operation, error) {
	return db.TransitionMany(bg, ids, store.MemberChange{From: []state.BindingStatus{state.StatusValidated}, FromStep: state.StepCloseMerged,
		To: state.StatusClosed, Step: state.StepCloseSucceeded, Note: note})
}
