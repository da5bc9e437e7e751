package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// The audit export's walk gives every application and audited action of its range once, in time
// order, page after page, and leaves out what is outside the range; the facts of a request name
// who approved it.
func TestTheAuditExportWalksEveryRowOfItsRangeOnce(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		for i := range 5 {
			op := fmt.Sprintf("op-%d", i)
			if _, err := db.Apply(ctx, store.Application{OperationID: op, SubjectID: fmt.Sprintf("u%d@example.com", i), TargetKey: "t", Project: "p/q",
				Flow: state.FlowApprovalFirst, Reason: "r", Status: state.StatusApprovalSending, Step: state.StepApprovalSending}); err != nil {
				t.Fatal(err)
			}
			if _, err := db.RecordAudit(ctx, store.AuditEvent{Key: "revoke:" + op, Actor: "ops@example.com", Action: "revoke", Params: map[string]any{"request": op}}); err != nil {
				t.Fatal(err)
			}
		}
		cur, _ := db.Request(ctx, "op-0")
		if _, err := db.Transition(ctx, cur, store.Change{To: state.StatusApprovalSent, Step: state.StepApprovalSent}); err != nil {
			t.Fatal(err)
		}
		cur, _ = db.Request(ctx, "op-0")
		if _, err := db.Transition(ctx, cur, store.Change{To: state.StatusMRCreating, Step: state.StepQueued, DecidedBy: "dave@example.com"}); err != nil {
			t.Fatal(err)
		}
		now, _ := db.Now(ctx)
		from, to := now.Add(-time.Hour), now.Add(time.Hour)
		var apps []string
		var c store.ExportCursor
		for range 10 {
			page, next, err := db.ApplicationsBetween(ctx, from, to, c, 2)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range page {
				apps = append(apps, f.OperationID)
			}
			if len(page) < 2 {
				break
			}
			c = next
		}
		if fmt.Sprint(apps) != "[op-0 op-1 op-2 op-3 op-4]" {
			t.Fatalf("applications walked %v", apps)
		}
		var actions []string
		c = store.ExportCursor{}
		for range 10 {
			page, err := db.AuditBetween(ctx, from, to, c, 2)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range page {
				actions = append(actions, e.Action+":"+string(e.Params))
			}
			if len(page) < 2 {
				break
			}
			c = store.ExportCursor{At: page[len(page)-1].At, ID: page[len(page)-1].ID}
		}
		if len(actions) != 5 {
			t.Fatalf("actions walked %v", actions)
		}
		if page, _, err := db.ApplicationsBetween(ctx, to, to.Add(time.Hour), store.ExportCursor{}, 10); err != nil || len(page) != 0 {
			t.Fatalf("a later range: %v %v", page, err)
		}
		facts, err := db.FactsOf(ctx, []string{"op-0", "op-9"})
		if err != nil || len(facts) != 1 || facts["op-0"].DecidedBy != "dave@example.com" || facts["op-0"].Project != "p/q" {
			t.Fatalf("facts %+v %v", facts, err)
		}
	})
}
