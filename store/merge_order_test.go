package store_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
	"bindery/workflow"
)

// status reads a request's binding status.
func status(t testing.TB, db *store.DB, opID string) state.BindingStatus {
	t.Helper()
	b, err := db.BindingByOperation(bg, opID)
	if err != nil {
		t.Fatalf("%s: %v", opID, err)
	}
	return b.Status
}

// MR numbers are not merge order: legacy MR !10 waits while batch MR !11 merges and is deployed;
// !10 merges after it. Reconciliation must not take !11's deploy for !10's (no deploy after !10's
// merge ran); a deploy of a merge after !10's does validate it, and its timeline says which.
func TestReconciliationFollowsMergeOrderNotMRNumbers(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		at := mergedAtBase
		seedRequests(t, db, "team/a", []string{"b11"}, state.StatusValidated, state.StepCalledBack, 0)
		seedRequests(t, db, "team/a", []string{"l10"}, state.StatusMerged, state.StepHandleMerged, 0)
		if _, err := db.Raw().ExecContext(bg, "UPDATE operation SET mr_iid = CASE operation_id WHEN 'b11' THEN 11 ELSE 10 END"); err != nil {
			t.Fatal(err)
		}
		seedMerge(t, db, "team/a", 11, "main", at)
		seedMerge(t, db, "team/a", 10, "main", at.Add(time.Minute))
		recordDeploy(t, db, store.Deploy{Project: "team/a", MRIID: 11})
		clockPast(t, db, "SELECT CAST(MAX(updated_at) AS CHAR) FROM binding")
		if r, err := workflow.ReconcileDeploys(bg, db, 0, 2*time.Hour); err != nil || len(r.Validated) != 0 || r.Scanned != 1 {
			t.Fatalf("the deploy of !11, merged before !10, validated: %+v %v", r, err)
		}
		if st := status(t, db, "l10"); st != state.StatusMerged {
			t.Fatalf("l10: %s", st)
		}

		// A human MR !12 merges after !10 and its deploy calls back by commit only.
		seedRequests(t, db, "team/a", []string{"h12"}, state.StatusValidated, state.StepCalledBack, 0)
		if _, err := db.Raw().ExecContext(bg, "UPDATE operation SET mr_iid = 12 WHERE operation_id = 'h12'"); err != nil {
			t.Fatal(err)
		}
		seedMerge(t, db, "team/a", 12, "main", at.Add(2*time.Minute))
		if d := recordDeploy(t, db, store.Deploy{Project: "team/a", SHA: "sha-team/a-12"}); !d.Fresh {
			t.Fatalf("a callback by commit: %+v", d)
		}
		clockPast(t, db, "SELECT CAST(MAX(updated_at) AS CHAR) FROM binding")
		r, err := workflow.ReconcileDeploys(bg, db, 0, 2*time.Hour)
		if got := opIDs(r.Validated); err != nil || len(got) != 1 || got[0] != "l10" {
			t.Fatalf("after the deploy of !12: %v %v", got, err)
		}
		steps, err := db.Steps(bg, "l10")
		if err != nil {
			t.Fatal(err)
		}
		if last := steps[len(steps)-1]; last.Step != state.StepCalledBack || !strings.Contains(last.Note, "deploy of MR !12") {
			t.Fatalf("the timeline does not say which deploy: %+v", last)
		}
	})
}

// An exact callback decides for its MR: operation x of MR 4 was named, y was not, so y is never
// inferred — not from MR 4's own deploy, not from a later merge's.
func TestAnExactCallbackIsNeverOverriddenByInference(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		seedRequests(t, db, "team/a", []string{"x", "y"}, state.StatusMerged, state.StepHandleMerged, 4)
		seedRequests(t, db, "team/a", []string{"later"}, state.StatusMerged, state.StepHandleMerged, 5)
		if d := recordDeploy(t, db, store.Deploy{Project: "team/a", MRIID: 4, OperationIDs: []string{"x"}}); len(d.Validated) != 1 {
			t.Fatalf("exact: %+v", d)
		}
		recordDeploy(t, db, store.Deploy{Project: "team/a", MRIID: 5})
		clockPast(t, db, "SELECT CAST(MAX(updated_at) AS CHAR) FROM binding")
		r, err := workflow.ReconcileDeploys(bg, db, 0, 2*time.Hour)
		if err != nil || len(r.Validated) != 0 {
			t.Fatalf("inferred %v (%v) although MR 4's callback named only x", opIDs(r.Validated), err)
		}
		if st := status(t, db, "y"); st != state.StatusMerged {
			t.Fatalf("y: %s", st)
		}
	})
}

// A deploy proves only its own branch, and a merge GitLab gave no time for is never placed:
// neither is inferred. A callback naming a commit no recorded merge landed is refused; one naming
// its MR and the commit of a later merge places the deploy at that later merge.
func TestMergeOrderIsPerBranchAndNeedsGitLabsTime(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		at := mergedAtBase
		seedRequests(t, db, "team/a", []string{"rel"}, state.StatusMerged, state.StepHandleMerged, 0)
		seedRequests(t, db, "team/a", []string{"untimed"}, state.StatusMerged, state.StepHandleMerged, 0)
		seedRequests(t, db, "team/a", []string{"d3", "e4"}, state.StatusMerged, state.StepHandleMerged, 0)
		if _, err := db.Raw().ExecContext(bg, "UPDATE operation SET mr_iid = CASE operation_id WHEN 'rel' THEN 1 WHEN 'untimed' THEN 2 WHEN 'd3' THEN 3 ELSE 4 END"); err != nil {
			t.Fatal(err)
		}
		seedMerge(t, db, "team/a", 1, "release", at)
		seedMerge(t, db, "team/a", 2, "main", time.Time{})
		seedMerge(t, db, "team/a", 3, "main", at.Add(time.Minute))
		seedMerge(t, db, "team/a", 4, "main", at.Add(2*time.Minute))

		if _, err := workflow.RecordDeploy(bg, db, store.Deploy{Project: "team/a", SHA: "0000"}); !errors.Is(err, workflow.ErrUnknownCommit) {
			t.Fatalf("an unknown commit: %v", err)
		}
		// The deploy of !3 shipped the branch at !4's commit.
		d := recordDeploy(t, db, store.Deploy{Project: "team/a", MRIID: 3, SHA: "sha-team/a-4"})
		if got := opIDs(d.Validated); len(got) != 1 || got[0] != "d3" {
			t.Fatalf("the callback of !3: %v", got)
		}
		clockPast(t, db, "SELECT CAST(MAX(updated_at) AS CHAR) FROM binding")
		r, err := workflow.ReconcileDeploys(bg, db, 0, 2*time.Hour)
		if got := opIDs(r.Validated); err != nil || len(got) != 1 || got[0] != "e4" {
			t.Fatalf("inferred %v (%v), want only e4 (rel is on another branch, untimed was never placed)", got, err)
		}
	})
}

// RecordMerge takes the project's next sequence and keeps an MR's first record.
func TestRecordMergeTakesTheProjectsNextSequenceOnce(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		seedMerge(t, db, "team/a", 7, "main", mergedAtBase)
		seedMerge(t, db, "team/b", 3, "main", mergedAtBase)
		seedMerge(t, db, "team/a", 2, "main", mergedAtBase.Add(time.Second))
		seedMerge(t, db, "team/a", 7, "other", mergedAtBase.Add(time.Hour)) // a replay
		for _, c := range []struct {
			project string
			iid     int64
			seq     int64
			branch  string
		}{{"team/a", 7, 1, "main"}, {"team/a", 2, 2, "main"}, {"team/b", 3, 1, "main"}} {
			var seq int64
			var branch string
			err := db.Raw().QueryRowContext(bg, "SELECT seq, branch FROM mr_merge WHERE project = ? AND mr_iid = ?", c.project, c.iid).Scan(&seq, &branch)
			if err != nil || seq != c.seq || branch != c.branch {
				t.Fatalf("%s!%d: seq %d on %q (%v), want seq %d on %s", c.project, c.iid, seq, branch, err, c.seq, c.branch)
			}
		}
		if n := count(t, db, "SELECT COUNT(*) FROM mr_merge"); n != 3 {
			t.Fatalf("%d merges recorded, want 3 (the replay adds none)", n)
		}
	})
}
