package store_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
	"bindery/workflow"
)

// typesOf lists the types of the events about operationID, oldest first.
func typesOf(t *testing.T, db *store.DB, operationID string) []state.EventType {
	t.Helper()
	evs, err := db.EventsOf(bg, operationID, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []state.EventType
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

// A request's journey writes its news in the transactions of its transitions, each event with
// a stable id and a routing task: accepted, approved, in CI with its MR, merged, in effect; a
// failure tells the requester and the operators; a rejection the requester.
func TestTransitionsWriteTheirNewsInTheirTransaction(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		db.SetEventRoutes(store.RouteAll)
		mustApply(t, db, application("op-ok", "alice@example.com", "t1"))
		mustMove(t, db, "op-ok", state.StatusApprovalSent, state.StatusMRCreating)
		cur, _ := db.Request(bg, "op-ok")
		if _, err := db.Transition(bg, cur, store.Change{To: state.StatusMRCreating, Step: state.StepCreateStarted, MRIID: 7}); err != nil {
			t.Fatal(err)
		}
		mustMove(t, db, "op-ok", state.StatusMRCreated, state.StatusMerging, state.StatusMerged, state.StatusValidated)
		want := []state.EventType{state.EventRequestAccepted, state.EventRequestApproved, state.EventRequestInCI, state.EventRequestMerged, state.EventRequestInEffect}
		if got := typesOf(t, db, "op-ok"); !slices.Equal(got, want) {
			t.Fatalf("events %v, want %v", got, want)
		}
		evs, _ := db.EventsOf(bg, "op-ok", 10)
		inCI := evs[2]
		if inCI.Facts.MRIID != 7 || inCI.SubjectID != "alice@example.com" || inCI.Facts.TargetKey != "t1" || inCI.Facts.Status != state.StatusMRCreating {
			t.Fatalf("in_ci facts %+v", inCI)
		}
		ids := map[string]bool{}
		for _, e := range evs {
			if len(e.ID) < 20 || ids[e.ID] {
				t.Fatalf("event id %q: not a fresh stable id", e.ID)
			}
			ids[e.ID] = true
		}
		// Every event has its routing task, written with it.
		if n := count(t, db, "SELECT COUNT(*) FROM notify_event e JOIN task t ON t.kind = 'notify' AND t.ref = e.event_id AND t.lane = 'notify' AND t.step = 'route' WHERE e.operation_id = 'op-ok'"); n != 5 {
			t.Fatalf("%d routing tasks, want 5", n)
		}

		mustApply(t, db, application("op-no", "bob@example.com", "t1"))
		mustMove(t, db, "op-no", state.StatusApprovalSent, state.StatusRejected)
		if got := typesOf(t, db, "op-no"); !slices.Equal(got, []state.EventType{state.EventRequestAccepted, state.EventRequestRejected}) {
			t.Fatalf("rejected: %v", got)
		}

		mustApply(t, db, application("op-bad", "carol@example.com", "t1"))
		mustMove(t, db, "op-bad", state.StatusApprovalSent, state.StatusMRCreating, state.StatusCreateFailed)
		got := typesOf(t, db, "op-bad")
		if !slices.Equal(got[2:], []state.EventType{state.EventRequestFailed, state.EventRequestNeedsAttention}) {
			t.Fatalf("failed: %v", got)
		}
		evs, _ = db.EventsOf(bg, "op-bad", 10)
		if evs[3].Facts.Reason != store.AttentionFailed {
			t.Fatalf("needs attention: %+v", evs[3].Facts)
		}
	})
}

// An event belongs to its change: a transaction that rolls back leaves no event and no routing
// task, one that commits leaves every one of them — checked in SQL after concurrent writers,
// half of whose transactions roll back after their transitions.
func TestTheOutboxHoldsExactlyTheCommittedChanges(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		db.SetEventRoutes(store.RouteAll)
		const n = 40
		for i := range n {
			mustApply(t, db, application(fmt.Sprintf("op-%02d", i), fmt.Sprintf("u%d@example.com", i), "t"))
			mustMove(t, db, fmt.Sprintf("op-%02d", i), state.StatusApprovalSent)
		}
		errRollback := errors.New("roll back")
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprintf("op-%02d", i)
				err := db.InTx(bg, func(tx *store.Tx) error {
					cur, err := tx.Request(bg, id)
					if err != nil {
						return err
					}
					if _, err := tx.Transition(bg, cur, store.Change{To: state.StatusMRCreating, Step: state.StepQueued}); err != nil {
						return err
					}
					if i%2 == 1 {
						return errRollback
					}
					return nil
				})
				if err != nil && !errors.Is(err, errRollback) {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		approved := count(t, db, "SELECT COUNT(*) FROM notify_event WHERE type = 'request.approved'")
		queuedOps := count(t, db, "SELECT COUNT(*) FROM operation WHERE status = 'MR_CREATING'")
		if approved != n/2 || queuedOps != n/2 {
			t.Fatalf("%d approved events for %d approved requests, want %d of each", approved, queuedOps, n/2)
		}
		// Each committed change has its event, and no event is without its change.
		if c := count(t, db, "SELECT COUNT(*) FROM operation o LEFT JOIN notify_event e ON e.operation_id = o.operation_id AND e.type = 'request.approved' "+
			"WHERE (o.status = 'MR_CREATING') <> (e.id IS NOT NULL)"); c != 0 {
			t.Fatalf("%d requests whose approval and event disagree", c)
		}
		if c := count(t, db, "SELECT COUNT(*) FROM notify_event e LEFT JOIN task t ON t.kind = 'notify' AND t.ref = e.event_id WHERE t.id IS NULL"); c != 0 {
			t.Fatalf("%d events without their routing task", c)
		}
		if c := count(t, db, "SELECT COUNT(*) FROM task t LEFT JOIN notify_event e ON e.event_id = t.ref WHERE t.kind = 'notify' AND e.id IS NULL"); c != 0 {
			t.Fatalf("%d routing tasks without their event", c)
		}
	})
}

// The batch's own writes tell what they mean: a merge request opened with the members it holds,
// a batch that stopped for a person, a culprit isolated by a bisection.
func TestBatchWritesTellWhatTheyMean(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ids := queued(t, db, "infra/acl", 3)
		c := claimBatched(t, db, "infra/acl", 10)
		b, _, err := db.AdvanceBatch(bg, store.BatchStep{Batch: c.Batch, Change: store.BatchChange{MRIID: 12, Note: "opened"}, Drop: ids[2:]})
		if err != nil {
			t.Fatal(err)
		}
		b, err = db.UpdateBatch(bg, b, store.BatchChange{Status: state.BatchBlocked, Note: "a person must resolve a thread"})
		if err != nil {
			t.Fatal(err)
		}
		culprit := ids[0]
		if _, err = db.UpdateBatch(bg, b, store.BatchChange{Culprit: &culprit, Note: "isolated"}); err != nil {
			t.Fatal(err)
		}
		evs, err := db.Events(bg, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		var batchEvs []store.Event
		for _, e := range evs {
			if e.BatchID == b.ID && e.OperationID == "" {
				batchEvs = append(batchEvs, e)
			}
		}
		if len(batchEvs) != 3 {
			t.Fatalf("batch events %+v", batchEvs)
		}
		opened, blocked, found := batchEvs[0], batchEvs[1], batchEvs[2]
		if opened.Type != state.EventBatchOpened || opened.Facts.MRIID != 12 || !slices.Equal(opened.Facts.Members, ids[:2]) {
			t.Fatalf("opened: %+v", opened)
		}
		if blocked.Type != state.EventBatchBlocked || blocked.Facts.Why != "a person must resolve a thread" {
			t.Fatalf("blocked: %+v", blocked)
		}
		if found.Type != state.EventBatchCulprit || found.Facts.Culprit != culprit || found.Facts.RootBatch != b.ID || found.Facts.RootMRIID != 12 {
			t.Fatalf("culprit: %+v", found)
		}
		// A write that changes none of it tells nothing.
		before := count(t, db, "SELECT COUNT(*) FROM notify_event")
		cur, _ := db.Batch(bg, b.ID)
		if _, err := db.UpdateBatch(bg, cur, store.BatchChange{Note: "still blocked"}); err != nil {
			t.Fatal(err)
		}
		if after := count(t, db, "SELECT COUNT(*) FROM notify_event"); after != before {
			t.Fatalf("a plain note wrote %d events", after-before)
		}
	})
}

// Keyed news is told once however often it is found (several instances, a callback sent
// again); a refused callback is recorded with its news in one transaction.
func TestKeyedNewsIsToldOnce(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		db.SetEventRoutes(store.RouteAll)
		ev := store.Event{Type: state.EventConfigRefused, Key: "config.refused:abc", Facts: store.EventFacts{Why: "bad"}}
		var wg sync.WaitGroup
		told := make(chan bool, 8)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, err := db.Tell(bg, ev)
				if err != nil {
					t.Error(err)
				}
				told <- ok
			}()
		}
		wg.Wait()
		close(told)
		n := 0
		for ok := range told {
			if ok {
				n++
			}
		}
		if n != 1 || count(t, db, "SELECT COUNT(*) FROM notify_event WHERE dedupe_key = 'config.refused:abc'") != 1 ||
			count(t, db, "SELECT COUNT(*) FROM task WHERE kind = 'notify'") != 1 {
			t.Fatalf("told %d times", n)
		}
		keys, err := db.KeysTold(bg, []string{"config.refused:abc", "config.refused:def"})
		if err != nil || !keys["config.refused:abc"] || keys["config.refused:def"] {
			t.Fatalf("keys told %v %v", keys, err)
		}

		audit := store.AuditEvent{Key: "hook.deploy.refused:p!9@", Actor: "deploy pipeline", Action: "hook.deploy.refused"}
		for i := range 2 {
			rec, err := db.RefuseCallback(bg, audit, store.EventFacts{Project: "p", MRIID: 9, Why: "unknown MR"})
			if err != nil || rec != (i == 0) {
				t.Fatalf("refusal %d: recorded %v, %v", i, rec, err)
			}
		}
		if c := count(t, db, "SELECT COUNT(*) FROM notify_event WHERE type = 'callback.refused'"); c != 1 {
			t.Fatalf("%d callback.refused events", c)
		}
	})
}

// Events nobody could want are recorded without a routing task (and without a filter, none is
// routed).
func TestUnroutedEventsCostNoTask(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		mustApply(t, db, application("op-0", "zoe@example.com", "t"))
		if c := count(t, db, "SELECT COUNT(*) FROM task WHERE kind = 'notify'"); c != 0 {
			t.Fatalf("%d routing tasks without a filter", c)
		}
		db.SetEventRoutes(func(t state.EventType) bool { return t == state.EventRequestRejected })
		mustApply(t, db, application("op-1", "alice@example.com", "t"))
		mustMove(t, db, "op-1", state.StatusApprovalSent, state.StatusRejected)
		if c := count(t, db, "SELECT COUNT(*) FROM notify_event"); c != 3 {
			t.Fatalf("%d events", c)
		}
		if c := count(t, db, "SELECT COUNT(*) FROM task t JOIN notify_event e ON e.event_id = t.ref WHERE e.type = 'request.rejected'"); c != 1 {
			t.Fatalf("%d routing tasks of the rejection", c)
		}
		if c := count(t, db, "SELECT COUNT(*) FROM task WHERE kind = 'notify'"); c != 1 {
			t.Fatalf("%d routing tasks in all", c)
		}
	})
}

// A deploy callback that lists only requests not of its MR records nothing and validates
// nothing, and operators are told (once, however often it is sent).
func TestACallbackListingNoneOfItsMRsRequestsIsTold(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		seedRequests(t, db, "team/a", []string{"op-1"}, state.StatusMerged, state.StepHandleMerged, 5)
		for range 2 {
			d, err := workflow.RecordDeploy(bg, db, store.Deploy{Project: "team/a", MRIID: 5, OperationIDs: []string{"stranger"}})
			if err != nil || len(d.Refused) != 1 || len(d.Validated) != 0 {
				t.Fatalf("deploy %+v %v", d, err)
			}
		}
		if c := count(t, db, "SELECT COUNT(*) FROM notify_event WHERE type = 'callback.refused'"); c != 1 {
			t.Fatalf("%d callback.refused events", c)
		}
		if c := count(t, db, "SELECT COUNT(*) FROM deploy_callback"); c != 0 {
			t.Fatalf("%d callbacks recorded", c)
		}
	})
}
