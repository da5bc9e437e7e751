package gitlab_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	gl "gitlab.com/gitlab-org/api/client-go/v2"

	"bindery/internal/remote/gitlab"
	"bindery/internal/remote/outbound"
	"bindery/internal/sim"
)

// The approve component against the simulated GitLab: the per-reviewer loop (docs/workflow.md,
// 'The approve step') and the approve call with a checklist (docs/gitlab.md, 'Approving').

func TestApproveHasBothReviewersApprove(t *testing.T) {
	b := setup(t, "")
	mr := b.openMR(t, "both")
	if err := b.client.Approve(ctx, project, mr.IID, mr.SHA); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(b.sim.Approvers(project, mr.IID), ","); got != "reviewer-1,reviewer-2" {
		t.Fatalf("approvers %q", got)
	}
	// Re-running the step (an operator's retry) is safe: the pre-reads see both approvals and
	// no approve call is sent.
	before := b.sim.Calls("approve")
	if err := b.client.Approve(ctx, project, mr.IID, mr.SHA); err != nil {
		t.Fatal(err)
	}
	if b.sim.Calls("approve") != before {
		t.Fatal("a repeated step approved again")
	}
}

func TestLostApproveAnswerIsResolvedByTheNextPreRead(t *testing.T) {
	b := setup(t, "")
	mr := b.openMR(t, "lost")
	// reviewer-1's approval lands but its answer is lost.
	b.sim.Inject("approve", sim.FaultDrop, 1)
	if err := b.client.Approve(ctx, project, mr.IID, mr.SHA); err != nil {
		t.Fatal(err)
	}
	// One approve per reviewer: the retry's pre-read saw reviewer-1's approval, so no 401.
	if got := b.sim.Calls("approve"); got != 2 {
		t.Fatalf("approve calls = %d, want 2", got)
	}
}

func TestLostApproveAnswerIsResolvedByTheFinalReRead(t *testing.T) {
	b := setup(t, strings.Replace(baseConfig, "maxRetries: 2", "maxRetries: -1", 1)) // negative → no retry
	mr := b.openMR(t, "lost-final")
	b.sim.Inject("approve", sim.FaultDrop, 1)
	if err := b.client.Approve(ctx, project, mr.IID, mr.SHA); err != nil {
		t.Fatalf("with no retries left the final re-read must find the approval: %v", err)
	}
	if got := b.sim.Calls("approve"); got != 2 {
		t.Fatalf("approve calls = %d, want 2 (maxRetries -1 means one attempt each)", got)
	}
}

// A repeated approve is refused (older GitLab: 401; newer: 304 with no body). When the
// pre-reads fail, the loop reaches the approve call and gets that refusal; the final re-read
// then finds the approval and the step succeeds.
func TestRepeatedApproveRefusalIsSettledByTheFinalReRead(t *testing.T) {
	for _, status := range []int{401, 304} {
		t.Run(map[int]string{401: "older GitLab 401", 304: "newer GitLab 304"}[status], func(t *testing.T) {
			b := setup(t, "")
			f := b.sim.Faults()
			f.RepeatApprove = status
			b.sim.SetFaults(f)
			mr := b.openMR(t, "repeat")
			if err := b.client.Approve(ctx, project, mr.IID, mr.SHA); err != nil {
				t.Fatal(err)
			}
			before := b.sim.Calls("approve")
			b.sim.Inject("get_approvals", sim.FaultError, 3) // reviewer-1's three pre-reads fail
			if err := b.client.Approve(ctx, project, mr.IID, mr.SHA); err != nil {
				t.Fatalf("repeat answered %d: %v", status, err)
			}
			if got := b.sim.Calls("approve") - before; got != 3 {
				t.Fatalf("reviewer-1 approve attempts = %d, want 3 (1 + maxRetries)", got)
			}
		})
	}
}

func TestReviewerWithoutRightsFailsWithTheRealStatus(t *testing.T) {
	for _, mode := range []string{"false", "true"} { // both implementations
		for _, status := range []int{401, 403} {
			t.Run("checklistMode="+mode+"/"+map[int]string{401: "401", 403: "403"}[status], func(t *testing.T) {
				b := setup(t, strings.Replace(baseConfig, "backoff: 1ms", "backoff: 1ms\n  checklistMode: "+mode, 1))
				f := b.sim.Faults()
				f.DeniedApprovers, f.DeniedApproveStatus = []string{"reviewer-2"}, status
				b.sim.SetFaults(f)
				mr := b.openMR(t, "denied")
				err := b.client.Approve(ctx, project, mr.IID, mr.SHA)
				var er *gl.ErrorResponse
				if !errors.As(err, &er) || er.StatusCode != status {
					t.Fatalf("err = %v, want the library's error with status %d", err, status)
				}
				if !strings.Contains(err.Error(), "reviewer-2") {
					t.Fatalf("error does not name the account: %v", err)
				}
				// reviewer-1 approved; reviewer-2 was tried alone: 401 may mean "already
				// approved" so it is retried, 403 is final.
				want := map[int]int{401: 3, 403: 1}[status]
				if got := b.sim.Calls("approve") - 1; got != want {
					t.Fatalf("reviewer-2 attempts = %d, want %d", got, want)
				}
				if got := strings.Join(b.sim.Approvers(project, mr.IID), ","); got != "reviewer-1" {
					t.Fatalf("approvers %q", got)
				}
			})
		}
	}
}

func TestChecklistModeSwitchesWithoutRestart(t *testing.T) {
	b := setup(t, "")
	b.sim.SetChecklist(project, []string{"Security review done", "Rollback plan exists"})
	mr := b.openMR(t, "switch")
	// The library's call cannot carry the checklist the project now requires.
	err := b.client.Approve(ctx, project, mr.IID, mr.SHA)
	var er *gl.ErrorResponse
	if !errors.As(err, &er) || er.StatusCode != 422 || !errors.Is(err, gitlab.ErrChecklistMismatch) {
		t.Fatalf("library approve with a required checklist: %v", err)
	}
	// The operator flips the switch; the same client takes the raw-HTTP path on the next call.
	b.reconfigure(t, strings.Replace(baseConfig, "backoff: 1ms", "backoff: 1ms\n  checklistMode: true", 1))
	if err := b.client.Approve(ctx, project, mr.IID, mr.SHA); err != nil {
		t.Fatalf("checklist approve: %v", err)
	}
	if got := strings.Join(b.sim.Approvers(project, mr.IID), ","); got != "reviewer-1,reviewer-2" {
		t.Fatalf("approvers %q", got)
	}
	// And back: with no checklist required the library path works again.
	b.sim.SetChecklist(project, nil)
	b.reconfigure(t, baseConfig)
	mr2 := b.openMR(t, "switch-back")
	if err := b.client.Approve(ctx, project, mr2.IID, mr2.SHA); err != nil {
		t.Fatalf("library approve after switching back: %v", err)
	}
}

func TestChangedChecklistHealsFromThe422Body(t *testing.T) {
	b := setup(t, strings.Replace(baseConfig, "backoff: 1ms", "backoff: 1ms\n  checklistMode: true", 1))
	b.sim.SetChecklist(project, []string{"Security review done"})
	mr := b.openMR(t, "heal-1")
	if err := b.client.Approve(ctx, project, mr.IID, mr.SHA); err != nil {
		t.Fatal(err)
	}
	if got := b.sim.Calls("checklist"); got != 1 {
		t.Fatalf("checklist reads = %d, want 1 (cached per project)", got)
	}
	// The project's checklist changes; our cached copy is now stale.
	b.sim.SetChecklist(project, []string{"Security review done", "Change window respected"})
	mr2 := b.openMR(t, "heal-2")
	before := b.sim.Calls("approve")
	if err := b.client.Approve(ctx, project, mr2.IID, mr2.SHA); err != nil {
		t.Fatalf("approve after the checklist changed: %v", err)
	}
	// reviewer-1: 422 then the rebuilt request; reviewer-2: right the first time, from the
	// list the 422 carried. No extra checklist read.
	if got := b.sim.Calls("approve") - before; got != 3 {
		t.Fatalf("approve calls = %d, want 3", got)
	}
	if got := b.sim.Calls("checklist"); got != 1 {
		t.Fatalf("checklist reads = %d, want still 1", got)
	}
}

func TestChecklistSelfHealRetriesOnlyOnce(t *testing.T) {
	b := setup(t, strings.Replace(strings.Replace(baseConfig, "backoff: 1ms", "backoff: 1ms\n  checklistMode: true", 1), "maxRetries: 2", "maxRetries: 0", 1))
	b.sim.SetChecklist(project, []string{"A"})
	mr := b.openMR(t, "unstable")
	changed := map[string]any{"message": "Approval checklist does not match the project's current checklist",
		"checklist": []map[string]string{{"id": "b", "title": "B"}}}
	b.sim.Inject("approve", sim.FaultAnswer(422, changed), 2)
	err := b.client.Approve(ctx, project, mr.IID, mr.SHA)
	if !errors.Is(err, gitlab.ErrChecklistMismatch) || outbound.StatusOf(err) != 422 {
		t.Fatalf("err = %v", err)
	}
	if got := b.sim.Calls("approve"); got != 2 {
		t.Fatalf("approve calls = %d, want 2 (the request, one rebuilt retry)", got)
	}
}

func TestChecklist422WithoutAListIsNotRetried(t *testing.T) {
	b := setup(t, strings.Replace(baseConfig, "backoff: 1ms", "backoff: 1ms\n  checklistMode: true", 1))
	mr := b.openMR(t, "nolist")
	b.sim.Inject("approve", sim.FaultStatus(422, "Unprocessable"), 1)
	if err := b.client.Approve(ctx, project, mr.IID, mr.SHA); !errors.Is(err, gitlab.ErrChecklistMismatch) {
		t.Fatalf("err = %v", err)
	}
	if got := b.sim.Calls("approve"); got != 1 {
		t.Fatalf("approve calls = %d, want 1", got)
	}
}

func TestApproveWithoutReviewerTokensIsNotConfigured(t *testing.T) {
	b := setup(t, "")
	mr := b.openMR(t, "none")
	b.reconfigure(t, strings.Replace(baseConfig, "reviewerTokens: [rev1-token, rev2-token]", "reviewerTokens: []", 1))
	if err := b.client.Approve(ctx, project, mr.IID, mr.SHA); !errors.Is(err, gitlab.ErrNotConfigured) {
		t.Fatalf("err = %v", err)
	}
	if b.sim.Calls("approve") != 0 {
		t.Fatal("an approve was sent without reviewer tokens")
	}
}

func TestApproveAtAMovedHeadIsNotRetried(t *testing.T) {
	b := setup(t, "")
	mr := b.openMR(t, "moved")
	err := b.client.Approve(ctx, project, mr.IID, strings.Repeat("b", 40))
	if !errors.Is(err, gitlab.ErrSHAMismatch) {
		t.Fatalf("err = %v", err)
	}
	if got := b.sim.Calls("approve"); got != 1 {
		t.Fatalf("approve calls = %d, want 1 (a moved head does not heal by waiting)", got)
	}
}

// The waits inside one Approve call are bounded (ApproveWaitBudget): a long approval.backoff or
// many approval.maxRetries never keep a worker asleep; the retries left are the step's, so the
// answer is a temporary failure the step backs off from — and the next call approves.
func TestApproveWaitsInsideTheCallOnlyWithinItsBudget(t *testing.T) {
	b, c := budgeted(t)
	mr := b.openMR(t, "budget")
	b.sim.Inject("approve", sim.FaultError, 2)
	before := b.sim.Calls("approve")
	err := c.Approve(ctx, project, mr.IID, mr.SHA)
	var oe *outbound.Error
	if !errors.As(err, &oe) || !oe.Temporary() {
		t.Fatalf("approve past its wait budget: %v, want a temporary failure", err)
	}
	if got := b.sim.Calls("approve") - before; got != 2 {
		t.Fatalf("%d approve attempts, want 2 (a wait of 20ms fits the 30ms budget, the next 40ms does not)", got)
	}
	if err := c.Approve(ctx, project, mr.IID, mr.SHA); err != nil {
		t.Fatalf("the step's next run: %v", err)
	}
}

// The wait budget is the whole call's, not each reviewer's: the first reviewer's wait leaves
// the second too little for its own, so the call answers a temporary failure instead of
// sleeping once per reviewer; the step's next run approves.
func TestTheApproveWaitBudgetIsSharedByTheReviewers(t *testing.T) {
	b, c := budgeted(t)
	mr := b.openMR(t, "shared-budget")
	// First reviewer: fails, waits 20ms, approves. Second: fails, and 10ms are left of 30.
	b.sim.Inject("approve", sim.FaultError, 1)
	b.sim.Inject("approve", sim.Fault{}, 1)
	b.sim.Inject("approve", sim.FaultError, 1)
	before := b.sim.Calls("approve")
	err := c.Approve(ctx, project, mr.IID, mr.SHA)
	var oe *outbound.Error
	if !errors.As(err, &oe) || !oe.Temporary() {
		t.Fatalf("the second reviewer past the call's budget: %v, want a temporary failure", err)
	}
	if got := b.sim.Calls("approve") - before; got != 3 {
		t.Fatalf("%d approve attempts, want 3", got)
	}
	if err := c.Approve(ctx, project, mr.IID, mr.SHA); err != nil {
		t.Fatalf("the step's next run: %v", err)
	}
}

// budgeted is a client whose approve retries back off 20ms, 40ms, … within a wait budget of 30ms
// per call.
func budgeted(t *testing.T) (*bundle, *gitlab.Client) {
	t.Helper()
	b := setup(t, strings.Replace(baseConfig, "  backoff: 1ms\n", "  backoff: 20ms\n", 1))
	c, err := gitlab.New(b.src, gitlab.Options{Metrics: metrics.NewSet(), DefaultBaseURL: b.url + "/sim/gitlab", ApproveWaitBudget: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return b, c
}
