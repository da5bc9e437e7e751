package notify

import (
	"strings"
	"testing"

	"bindery/internal/platform/config"
	"bindery/internal/vocab/explain"
	"bindery/internal/vocab/state"
	"bindery/store"
)

// A merge held for a person is told in a notification as on the request page and in the ops
// console: what holds it, who must act and where — for the blocked batch and for its request.
func TestABlockedMergeIsToldAsOnThePage(t *testing.T) {
	snap := config.MustParse(string(config.Sample))
	note := explain.BlockerNote("discussions_not_resolved", 4)
	story := "merge request !4 has an unresolved discussion: a maintainer of infra/acl must resolve it in GitLab; bindery merges within a minute after"
	batch := store.Event{Type: state.EventBatchBlocked, Facts: store.EventFacts{BatchID: 7, Project: "infra/acl", MRIID: 4, Why: note}}
	if got := Summary(batch, snap); got != "Batch 7 of infra/acl is BLOCKED: "+story {
		t.Errorf("batch: %q", got)
	}
	req := store.Event{Type: state.EventRequestNeedsAttention, Facts: store.EventFacts{OperationID: "op-1", TargetKey: "db-read", Project: "infra/acl",
		Step: state.StepHandleMRBlocked, Note: note}}
	if got := Summary(req, snap); !strings.HasSuffix(got, "needs a person: "+story) {
		t.Errorf("request: %q", got)
	}
}
