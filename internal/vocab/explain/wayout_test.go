package explain

import (
	"strings"
	"testing"

	"bindery/internal/vocab/state"
)

// A failure's words say what bindery knows of the cause and offer the requester both ways out,
// naming where to ask (support.contact, or the operators of bindery); an operator reads retry and
// withdraw, never "contact support".
func TestAFailureOffersBothWaysOut(t *testing.T) {
	cases := []struct {
		f         Failed
		requester string
	}{
		{Failed{Step: state.StepCreatePipelineFailed, Note: "batch 9 isolated the culprit op-1 after 2 bisections: pipeline 55 failed", Job: "lint #7", Contact: "https://chat.example/help"},
			"Your change made the pipeline fail: batch 9 isolated this request as the change that fails, after 2 bisections; pipeline 55 (failed job: lint #7). " +
				"Waiting will not fix it. You can withdraw this request and apply again, or ask the maintainers: https://chat.example/help."},
		{Failed{Step: state.StepHandleRebaseConflict, Note: "MR !4: conflict in a.yaml"},
			"The change conflicts with the target branch, even after bindery regenerated the branch (merge request !4). " +
				"Waiting will not fix it. You can withdraw this request and apply again, or ask the operators of bindery."},
		{Failed{Step: state.StepCreateFailed, Note: "gitlab create_mr: HTTP 502", Contact: "the platform team in #access"},
			"bindery could not prepare the merge request. Operators can retry it. You can withdraw this request and apply again, or ask the platform team in #access."},
	}
	for _, c := range cases {
		if got := WayOut(c.f); got != c.requester {
			t.Errorf("WayOut(%s)\n got %q\nwant %q", c.f.Step, got, c.requester)
		}
		ops := ForOperator(c.f)
		if strings.Contains(strings.ToLower(ops), "contact") || !strings.Contains(ops, "withdraw it") || !strings.Contains(strings.ToLower(ops), "retry") {
			t.Errorf("ForOperator(%s) = %q", c.f.Step, ops)
		}
	}
}

// A closed request says which end it was; a rejected one who decided and what they wrote.
func TestHowARequestEndedIsSaid(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Closed(EndRevoked, "alice@example.com"), "Revoked by alice@example.com: the binding's file was removed and the removal is deployed. You can apply again."},
		{Closed(EndExpired, ""), "Expired: the binding's time ran out, its file was removed and the removal is deployed. You can apply again."},
		{Closed(EndWithdrawn, "ops@example.com"), "Withdrawn by ops@example.com after it failed: nothing of it is in effect. You can apply again."},
		{Rejected("Rejected by carol: not this quarter"), "Rejected by carol: not this quarter. This request is finished without effect. You can apply again."},
		{Rejected("Decision: rejected."), "Rejected by the approvers. This request is finished without effect. You can apply again."},
	} {
		if c.got != c.want {
			t.Errorf("got %q\nwant %q", c.got, c.want)
		}
	}
}
