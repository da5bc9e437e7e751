package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"bindery/internal/vocab/state"
	"bindery/store"
)

// submitAll submits apps, each from its own goroutine, lined up behind the held writers (so
// that they wait in the order given), and returns a function that waits for their answers.
func submitAll(t *testing.T, db *store.DB, g *writerGate, ctxs []context.Context, apps []store.Application) (wait func() []error) {
	t.Helper()
	errs := make([]error, len(apps))
	var wg sync.WaitGroup
	g.lineUp(t, len(apps), store.GroupWriters(db), func() int { return store.WaitingSubmissions(db) }, func(i int) {
		ctx := bg
		if ctxs != nil && ctxs[i] != nil {
			ctx = ctxs[i]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = db.Submit(ctx, apps[i])
		}()
	})
	return func() []error { wg.Wait(); return errs }
}

// Group commit: applications that arrive while the writers are busy share one transaction —
// one multi-row statement per table and one commit for each group — and every one of them is
// written whole: its idempotency answer, operation, binding, first step, its news and the tasks.
func TestApplicationsThatArriveTogetherShareOneCommit(t *testing.T) {
	eachCounting(t, func(t *testing.T, db *store.DB, st *statements) {
		db.SetEventRoutes(store.RouteAll)
		g := heldWriters(t, db, "submit.write")
		const n = 16
		apps := make([]store.Application, n)
		for i := range apps {
			apps[i] = answered(fmt.Sprintf("op-%d", i), fmt.Sprintf("user-%d", i), "t", "h")
		}
		var errs []error
		_, verbs, all := st.during(t, func() {
			wait := submitAll(t, db, g, nil, apps)
			g.release()
			errs = wait()
		})
		for i, err := range errs {
			if err != nil {
				t.Fatalf("application %d: %v", i, err)
			}
		}
		// SQLite's one writer takes itself and the 15 behind it; MySQL's two writers take eight
		// each (a group is a power of two, so that its statements' texts are few).
		groups := store.GroupWriters(db)
		txs, seq := st.boundaries()
		if txs["BEGIN"] != groups || txs["COMMIT"] != groups || txs["ROLLBACK"] != 0 || verbs["INSERT"] != 6*groups || len(all) != 6*groups {
			t.Fatalf("%d groups: transactions %v, statements %v, want %d commits of 6 inserts: %q …", groups, txs, verbs, groups, seq[:min(len(seq), 7)])
		}
		for _, q := range []string{
			"SELECT COUNT(*) FROM idempotency_record WHERE scope = 'apply' AND status = 202",
			"SELECT COUNT(*) FROM operation o JOIN binding b ON b.operation_id = o.operation_id AND b.subject_id = o.subject_id WHERE b.status = 'APPROVAL_SENDING' AND b.version = 1",
			"SELECT COUNT(*) FROM operation_step WHERE step = " + fmt.Sprint(int(state.StepApprovalSending)),
			"SELECT COUNT(*) FROM task WHERE kind = 'request' AND ref LIKE 'op-%' AND owner IS NULL",
			"SELECT COUNT(*) FROM notify_event e JOIN task t ON t.kind = 'notify' AND t.ref = e.event_id WHERE e.type = 'request.accepted' AND e.operation_id LIKE 'op-%'",
		} {
			if c := count(t, db, q); c != n {
				t.Errorf("%s: %d, want %d", q, c, n)
			}
		}
	})
}

// A group is all or nothing like each application in it: when one member cannot be written as a
// first application, the group is rolled back and every member is applied on its own, so each
// gets exactly the answer it would have had alone, and the others are written.
func TestAGroupWithAConflictGivesEachApplicationItsOwnAnswer(t *testing.T) {
	eachCounting(t, func(t *testing.T, db *store.DB, st *statements) {
		mustApply(t, db, answered("taken-key", "carol", "t", "h-carol"))
		mustApply(t, db, application("active", "dave", "t"))
		mustApply(t, db, application("rejected", "erin", "t"))
		mustMove(t, db, "rejected", state.StatusRejected)

		g := heldWriters(t, db, "submit.write")
		dupKey := answered("taken-key-again", "frank", "t", "h-frank")
		dupKey.Answer.Key = "taken-key"
		apps := []store.Application{
			application("fresh-1", "u1", "t"),
			dupKey,                                // the idempotency key is held: ErrKeyTaken
			application("taken-key", "gina", "t"), // another request's operationId: ErrDuplicate
			application("busy", "dave", "t"),      // the relation is active: refused
			application("again", "erin", "t"),     // re-applies over the rejected row
			application("twin-1", "hal", "t"),     // two for one new relation in the group:
			application("twin-2", "hal", "t"),     // one wins, the other is refused
			application("fresh-2", "u2", "t"),
		}
		var errs []error
		st.during(t, func() {
			wait := submitAll(t, db, g, nil, apps)
			g.release()
			errs = wait()
		})
		txs, seq := st.boundaries()
		if txs["ROLLBACK"] == 0 {
			t.Fatalf("no group was rolled back: %q", seq)
		}
		var inProgress *store.ErrApplyInProgress
		for i, want := range []func(error) bool{
			func(err error) bool { return err == nil },
			func(err error) bool { return errors.Is(err, store.ErrKeyTaken) },
			func(err error) bool { return errors.Is(err, store.ErrDuplicate) && !errors.Is(err, store.ErrKeyTaken) },
			func(err error) bool { return errors.As(err, &inProgress) && inProgress.Binding.OperationID == "active" },
			func(err error) bool { return err == nil },
			nil, nil,
			func(err error) bool { return err == nil },
		} {
			if want != nil && !want(errs[i]) {
				t.Errorf("%s: %v", apps[i].OperationID, errs[i])
			}
		}
		if (errs[5] == nil) == (errs[6] == nil) || !errors.As(errors.Join(errs[5], errs[6]), &inProgress) {
			t.Errorf("two applications for one relation: %v and %v, want one written and one refused", errs[5], errs[6])
		}
		for _, id := range []string{"fresh-1", "fresh-2", "again"} {
			r, err := db.Request(bg, id)
			if err != nil || !r.Current() || r.Binding.Status != state.StatusApprovalSending {
				t.Errorf("%s: %+v %v", id, r, err)
			}
		}
		// Nothing of a refused application was kept, and the rows they collided with are as
		// they were.
		if c := count(t, db, "SELECT COUNT(*) FROM operation WHERE operation_id IN ('taken-key-again', 'busy')"); c != 0 {
			t.Errorf("%d refused operations kept", c)
		}
		if c := count(t, db, "SELECT COUNT(*) FROM operation"); c != 3+4 {
			t.Errorf("%d operations, want the 3 earlier and 4 written now", c)
		}
		if rec, err := db.IdempotencyRecord(bg, "apply", "taken-key"); err != nil || rec.PayloadHash != "h-carol" {
			t.Errorf("the held key's record: %+v %v", rec, err)
		}
		if r, err := db.Request(bg, "active"); err != nil || !r.Current() || r.Binding.Version != 1 {
			t.Errorf("the active request: %+v %v", r, err)
		}
	})
}

// A submission whose caller has gone (its context ended) before its group is written is left
// out of it: nothing is written for it, it is told why, and the rest of the group is written.
func TestAnApplicationWhoseCallerLeftBeforeItsGroupIsLeftOut(t *testing.T) {
	eachCounting(t, func(t *testing.T, db *store.DB, st *statements) {
		g := heldWriters(t, db, "submit.write")
		gone, cancel := context.WithCancel(bg)
		apps := make([]store.Application, 8)
		ctxs := make([]context.Context, len(apps))
		for i := range apps {
			apps[i] = application(fmt.Sprintf("op-%d", i), fmt.Sprintf("user-%d", i), "t")
		}
		left := len(apps) - 1 // the last one queues behind every writer
		ctxs[left] = gone
		wait := submitAll(t, db, g, ctxs, apps)
		cancel()
		g.release()
		errs := wait()
		for i, err := range errs {
			switch {
			case i == left && !errors.Is(err, context.Canceled):
				t.Errorf("the application whose caller left: %v", err)
			case i != left && err != nil:
				t.Errorf("application %d: %v", i, err)
			}
		}
		if c := count(t, db, "SELECT COUNT(*) FROM operation"); c != len(apps)-1 {
			t.Fatalf("%d operations, want %d", c, len(apps)-1)
		}
		if _, err := db.Request(bg, apps[left].OperationID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the left application: %v", err)
		}
	})
}

// Many applications at once from many goroutines, on several connections: every one is
// written whole exactly once whatever groups they formed, and the invariants hold in SQL.
func TestConcurrentSubmissionsAreEachWrittenWholeOnce(t *testing.T) {
	eachCounting(t, func(t *testing.T, db *store.DB, st *statements) {
		const goroutines, each = 16, 25
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					// Every fifth goroutine asks for a relation another one asks for too.
					subject := fmt.Sprintf("user-%d-%d", g, i)
					if g%5 == 4 {
						subject = fmt.Sprintf("user-%d-%d", g-1, i)
					}
					err := db.Submit(bg, answered(fmt.Sprintf("op-%d-%d", g, i), subject, "t", "h"))
					var inProgress *store.ErrApplyInProgress
					if err != nil && !errors.As(err, &inProgress) {
						t.Errorf("submit: %v", err)
					}
				}
			}()
		}
		_, verbs, _ := st.during(t, func() { wg.Wait() })
		txs, _ := st.boundaries()
		written := count(t, db, "SELECT COUNT(*) FROM operation")
		relations := goroutines*each - (goroutines/5)*each
		if written != relations {
			t.Fatalf("%d operations, want one per relation (%d)", written, relations)
		}
		if txs["COMMIT"] >= written {
			t.Logf("no group formed: %d commits for %d applications (statements %v)", txs["COMMIT"], written, verbs)
		}
		for _, q := range []string{
			"SELECT COUNT(*) FROM binding b JOIN operation o ON o.operation_id = b.operation_id",
			"SELECT COUNT(*) FROM idempotency_record r JOIN operation o ON o.operation_id = r.idem_key",
			"SELECT COUNT(DISTINCT s.operation_id) FROM operation_step s JOIN operation o ON o.operation_id = s.operation_id",
			"SELECT COUNT(*) FROM task k JOIN operation o ON o.operation_id = k.ref",
		} {
			if c := count(t, db, q); c != written {
				t.Errorf("%s: %d, want %d", strings.TrimPrefix(q, "SELECT "), c, written)
			}
		}
		if c := count(t, db, "SELECT COUNT(*) FROM idempotency_record"); c != written {
			t.Errorf("%d idempotency records for %d applications: a refused one kept its record", c, written)
		}
	})
}
