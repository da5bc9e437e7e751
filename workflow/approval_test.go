package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"bindery/api"
	"bindery/internal/platform/config"
	"bindery/internal/remote/approval"
	"bindery/internal/remote/outbound"
	"bindery/internal/sim"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
	"bindery/workflow"
)

// Approval-first: the ticket first; an approved request is validated and admitted to its
// partition's waiting set in one transaction, and the view says where it stands.
func TestApprovalFirstApprovedRequestIsAdmittedToTheWaitingSet(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true})
		first := h.apply("alice", "db-read")
		second := h.apply("bob", "db-read")
		for _, op := range []string{first, second} {
			v := h.waitState(op, state.StatusApprovalSent, state.StepApprovalSent)
			if v.Flow != workflow.FlowApprovalFirst || v.Waiting == nil || v.Waiting.Stage != "approval" || v.NextAction != state.NextWait {
				t.Fatalf("awaiting approval: %+v", v)
			}
			ext, _, _ := h.sims.Approval.TicketExt(h.ticketOf(op).ID)
			if _, legacy := ext["mrId"]; legacy {
				t.Fatalf("an approval-first ticket carries ext.mrId: %v", ext)
			}
		}
		h.decide(first, sim.TicketApproved)
		h.waitState(first, state.StatusMRCreating, state.StepQueued)
		h.decide(second, sim.TicketApproved)
		h.waitState(second, state.StatusMRCreating, state.StepQueued)
		v1, v2 := h.view(first), h.view(second)
		if v1.Waiting == nil || v1.Waiting.Stage != "batch" || v1.Waiting.Position != 1 || v2.Waiting.Position != 2 || v2.Waiting.Ahead != 1 {
			t.Fatalf("waiting: %+v / %+v", v1.Waiting, v2.Waiting)
		}
		if len(v1.Stages) != 2 || v1.Stages[0].Stage != "approval" || !v1.Stages[0].Done || v1.Stages[1].Stage != "batch" || v1.Stages[1].Done {
			t.Fatalf("stages: %+v", v1.Stages)
		}
		parts, err := db.PartitionsWaiting(bg)
		if err != nil || len(parts) != 1 || parts[0] != project {
			t.Fatalf("partitions waiting: %v %v", parts, err)
		}
		// The approval wait is observed after the callback's commit, which the view may show
		// first: wait for the second observation (a third would never make it "2" again).
		h.waitFor("the approval wait observed twice", func() bool {
			return h.metric(`bindery_request_stage_seconds_count{stage="approval"}`) == "2"
		})
	})
}

func TestApprovalFirstRejectedAndWithdrawnEndRejected(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true})
		rejected := h.apply("alice", "db-read")
		h.decide(rejected, sim.TicketRejected)
		if v := h.waitState(rejected, state.StatusRejected, state.StepApprovalRejected); v.NextAction != state.NextReapply || v.Waiting != nil {
			t.Fatalf("rejected: %+v", v)
		}
		withdrawn := h.apply("bob", "db-read")
		h.waitState(withdrawn, state.StatusApprovalSent, 0)
		if code, answer := h.callback(api.ApprovalCallback{CallbackID: "w-1", OperationID: withdrawn, Result: "WITHDRAWN"}, "test-approval-secret"); code != 200 || answer != "ACCEPTED" {
			t.Fatalf("withdrawn: %d %s", code, answer)
		}
		h.waitState(withdrawn, state.StatusRejected, state.StepApprovalRejected)
		if _, err := db.Waiting(bg, rejected); err == nil {
			t.Fatal("a rejected request is in the waiting set")
		}
	})
}

// docs/workflow.md, 'Approval decisions': deduplicated by the callback's id, accepted only for the
// current application awaiting approval (SENDING included), anything else 2xx IGNORED_STALE,
// unchanged.
func TestCallbacksDuplicateStaleReorderedAndForgedChangeNothing(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true})
		secret := "test-approval-secret"

		op := h.apply("alice", "db-read")
		h.waitState(op, state.StatusApprovalSent, 0)
		// Forged: a wrong secret is refused before the workflow sees it.
		if code, _ := h.callback(api.ApprovalCallback{CallbackID: "forged", OperationID: op, Result: "APPROVED"}, "not-the-secret"); code != 401 {
			t.Fatalf("forged callback: %d", code)
		}
		if v := h.view(op); v.Status != state.StatusApprovalSent {
			t.Fatalf("forged callback moved the request to %s", v.Status)
		}

		// Reordered: the rejection arrives first and wins; the approval is stale.
		if code, answer := h.callback(api.ApprovalCallback{CallbackID: "cb-2", OperationID: op, Result: "REJECTED"}, secret); code != 200 || answer != "ACCEPTED" {
			t.Fatalf("rejection: %d %s", code, answer)
		}
		if code, answer := h.callback(api.ApprovalCallback{CallbackID: "cb-1", OperationID: op, Result: "APPROVED"}, secret); code != 200 || answer != "IGNORED_STALE" {
			t.Fatalf("late approval: %d %s", code, answer)
		}
		// Duplicate: the same callback id again.
		if code, answer := h.callback(api.ApprovalCallback{CallbackID: "cb-2", OperationID: op, Result: "REJECTED"}, secret); code != 200 || answer != "DUPLICATE" {
			t.Fatalf("duplicate: %d %s", code, answer)
		}
		h.waitState(op, state.StatusRejected, state.StepApprovalRejected)

		// Stale: a re-application replaces the operationId; a late callback for the old one finds
		// no row of its own and changes nothing.
		again := h.apply("alice", "db-read")
		h.waitState(again, state.StatusApprovalSent, 0)
		if code, answer := h.callback(api.ApprovalCallback{CallbackID: "cb-3", OperationID: op, Result: "APPROVED"}, secret); code != 200 || answer != "IGNORED_STALE" {
			t.Fatalf("stale: %d %s", code, answer)
		}
		if code, answer := h.callback(api.ApprovalCallback{CallbackID: "cb-4", OperationID: "never-applied", Result: "APPROVED"}, secret); code != 200 || answer != "IGNORED_STALE" {
			t.Fatalf("unknown operation: %d %s", code, answer)
		}
		if v := h.view(again); v.Status != state.StatusApprovalSent {
			t.Fatalf("the new application moved to %s", v.Status)
		}
		if v := h.view(op); v.Status != state.StatusRejected {
			t.Fatalf("the old application moved to %s", v.Status)
		}
		// Already decided: a second decision of another id is stale too.
		h.decide(again, sim.TicketApproved)
		h.waitState(again, state.StatusMRCreating, state.StepQueued)
		if code, answer := h.callback(api.ApprovalCallback{CallbackID: "cb-5", OperationID: again, Result: "REJECTED"}, secret); code != 200 || answer != "IGNORED_STALE" {
			t.Fatalf("decision after the decision: %d %s", code, answer)
		}
	})
}

// A callback can arrive before APPROVAL_SENT is written: SENDING counts as awaiting approval, and
// the ticket step's SENT write, preempted, is not a failure.
func TestACallbackBeforeTheTicketIsRecordedSentStillWorks(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		var held *heldTickets
		h := setup(t, db, options{approvalFirst: true, wrapTickets: func(next workflow.Tickets) workflow.Tickets {
			held = holdTickets(next)
			return held
		}})
		// A lease far longer than the test: the callback removes the step's task, and a renewal
		// of the claim (every third of the lease) or the lease's end would cut the held call
		// before it returns, on a machine slow enough to reach one before the release; what this
		// test checks is the call that returns after the callback.
		h.cfg.Replace(config.MustParse(strings.Replace(configFor(true, fastSims), "leaseTTL: 5s", "leaseTTL: 1h", 1)))
		op := h.apply("alice", "db-read")
		<-held.entered // the step is inside the call to the approval system, SENDING is written
		if v := h.view(op); v.Status != state.StatusApprovalSending {
			t.Fatalf("before the ticket: %s", v.Status)
		}
		if code, answer := h.callback(api.ApprovalCallback{CallbackID: "early", OperationID: op, Result: "APPROVED"}, "test-approval-secret"); code != 200 || answer != "ACCEPTED" {
			t.Fatalf("early callback: %d %s", code, answer)
		}
		h.waitState(op, state.StatusMRCreating, state.StepQueued)
		close(held.release)
		h.waitFor("the ticket to be opened", func() bool { return len(h.sims.Approval.Tickets()) == 1 })
		// The callback removed the ticket's task, so the task's end says nothing of the step: its
		// last write is the ticket it keeps on the request (the page links it).
		h.waitFor("the opened ticket to be kept on the request", func() bool { return h.view(op).Ticket != nil })
		v := h.view(op)
		if v.Status != state.StatusMRCreating || v.Step.Code != int(state.StepQueued) {
			t.Fatalf("after the ticket call returned: %s/%s", v.Status, v.Step.Name)
		}
		for _, e := range v.Timeline {
			if e.Status.Failed() || e.Step.Code == int(state.StepApprovalSent) {
				t.Fatalf("timeline has %s/%s after an early callback", e.Status, e.Step.Name)
			}
		}
		// The ticket the step opened is the one kept.
		if tickets := h.sims.Approval.Tickets(); v.Ticket == nil || v.Ticket.ID != tickets[0].ID {
			t.Fatalf("ticket %+v, want the one opened (%s)", v.Ticket, tickets[0].ID)
		}
	})
}

// Tickets opened before workflow.approvalFirst was switched finish in their own flow: the
// callback's payload decides (ext.mrId → legacy), not the switch.
func TestSwitchingTheFlowWithTicketsInFlight(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: false})
		legacy := h.apply("alice", "db-read")
		lv := h.waitState(legacy, state.StatusApprovalSent, 0)

		h.reconfigure(true, fastSims)
		modern := h.apply("bob", "db-read")
		h.waitState(modern, state.StatusApprovalSent, 0)

		h.reconfigure(false, fastSims) // and back: the approval-first ticket still batches
		h.decide(legacy, sim.TicketApproved)
		h.decide(modern, sim.TicketApproved)
		if v := h.waitState(legacy, state.StatusValidated, 0); v.MR == nil || v.MR.ID != lv.MR.ID {
			t.Fatalf("legacy request merged %+v, want its own MR %+v", v.MR, lv.MR)
		}
		if v := h.waitState(modern, state.StatusMRCreating, state.StepQueued); v.Flow != workflow.FlowApprovalFirst {
			t.Fatalf("modern flow %s", v.Flow)
		}
		if _, err := db.Waiting(bg, modern); err != nil {
			t.Fatalf("approval-first request not admitted: %v", err)
		}
		// A new application follows the switch in force: legacy again.
		third := h.apply("ops", "db-read")
		if v := h.waitState(third, state.StatusApprovalSent, 0); v.Flow != workflow.FlowLegacy || v.MR == nil {
			t.Fatalf("new application after the switch: %+v", v)
		}
	})
}

// docs/workflow.md, 'Admission': the change is validated at admission; a member that would collide
// with another active binding's file never enters a batch.
func TestAChangeThatCollidesIsRefusedAtAdmissionAndTakesNoDecision(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true, extra: fastSims + `
targets:
  - {key: team-a, title: A, project: infra/access-config, path: "shared/{subject}.yaml"}
  - {key: team-b, title: B, project: infra/access-config, path: "shared/{subject}.yaml"}
`})
		a := h.apply("alice", "team-a")
		h.decide(a, sim.TicketApproved)
		h.waitState(a, state.StatusMRCreating, state.StepQueued)
		b := h.apply("alice", "team-b")
		h.decide(b, sim.TicketApproved)
		v := h.waitState(b, state.StatusCreateFailed, state.StepCreateInvalid)
		if v.NextAction != state.NextContactSupport {
			t.Fatalf("next action %s", v.NextAction)
		}
		if last := v.Timeline[len(v.Timeline)-1]; last.Note == "" {
			t.Fatal("no note says why the change is invalid")
		}
		if _, err := db.Waiting(bg, b); err == nil {
			t.Fatal("the colliding request was admitted")
		}
		// CREATE_FAILED, but not because a send looked failed: no decision is awaited, so a
		// late one is stale and changes nothing.
		if code, answer := h.callback(api.ApprovalCallback{CallbackID: "late-1", OperationID: b, Result: "APPROVED"}, "test-approval-secret"); code != 200 || answer != "IGNORED_STALE" {
			t.Fatalf("callback on CREATE_INVALID: %d %s", code, answer)
		}
		h.waitState(b, state.StatusCreateFailed, state.StepCreateInvalid)
	})
}

// The approval system created the ticket but its answer was lost (dropped on every attempt):
// the request shows APPROVAL_SEND_FAILED, yet the ticket exists and people decide it. The
// decision is the user's and is not lost: approved → admitted to the waiting set, rejected →
// REJECTED. An operator's retry of the send afterwards opens no second ticket and changes
// nothing. A callback for a request that failed before any ticket was sent stays stale.
func TestADecisionOnATicketWhoseSendLookedFailedIsAccepted(t *testing.T) {
	t.Parallel()
	for _, decision := range []string{sim.TicketApproved, sim.TicketRejected} {
		t.Run(decision, func(t *testing.T) {
			storetest.Each(t, func(t *testing.T, db *store.DB) {
				h := setup(t, db, options{approvalFirst: true})
				h.sims.Approval.Inject("open_ticket", sim.FaultDrop, 10)
				op := h.apply("alice", "db-read")
				h.waitState(op, state.StatusCreateFailed, state.StepApprovalSendFailed)
				h.decide(op, decision)
				if decision == sim.TicketApproved {
					h.waitState(op, state.StatusMRCreating, state.StepQueued)
					if _, err := db.Waiting(bg, op); err != nil {
						t.Fatalf("approved request not admitted: %v", err)
					}
				} else {
					h.waitState(op, state.StatusRejected, state.StepApprovalRejected)
				}
				// The simulator records the callback once bindery's answer is back.
				h.waitFor("the callback's record", func() bool { return len(h.sims.Approval.Callbacks()) > 0 })
				if cbs := h.sims.Approval.Callbacks(); len(cbs) != 1 || cbs[0].Status != 200 {
					t.Fatalf("callbacks %+v", cbs)
				}
				// The operator's retry of the send comes too late: nothing to run, no new ticket.
				if code := h.retry(op); code != 409 {
					t.Fatalf("retry after the decision: %d", code)
				}
				if n := len(h.sims.Approval.Tickets()); n != 1 {
					t.Fatalf("%d tickets for one request", n)
				}
			})
		})
	}
}

// A decision whose callback never got through (bindery refused every attempt: its secret was
// blank) is not lost: approval.pollAfter after the ticket was sent, bindery reads the ticket and
// applies the decision as the callback would have — for both flows — and the callback, were it
// sent again, is a duplicate. The ops retry of a request waiting for its decision reads the ticket
// at once.
func TestALostApprovalDecisionIsReadFromTheTicket(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		withPoll := func(secret string) string {
			c := strings.Replace(configFor(true, fastSims), "approval:\n", "approval:\n  pollAfter: 300ms\n", 1)
			c = strings.Replace(c, "sim:\n", "sim:\n  timeScale: 100\n", 1) // the sender's six attempts in ~30ms
			return strings.Replace(c, "approvalSecret: test-approval-secret", "approvalSecret: "+secret, 1)
		}
		h := setup(t, db, options{approvalFirst: true, extra: fastSims})
		h.cfg.Replace(config.MustParse(withPoll("test-approval-secret")))
		op := h.apply("alice", "db-read")
		h.waitState(op, state.StatusApprovalSent, state.StepApprovalSent)
		h.cfg.Replace(config.MustParse(withPoll(`""`)))
		h.decide(op, sim.TicketApproved)
		h.waitFor("the sender to give up", func() bool {
			cbs := h.sims.Approval.Callbacks()
			return len(cbs) == 1 && cbs[0].Attempts == 6
		})
		// Every attempt was refused; on a loaded machine the ticket look (every 300 ms) may have
		// read the decision before the sender gave up — which is what it is for.
		if cb := h.sims.Approval.Callbacks()[0]; cb.Status != http.StatusUnauthorized {
			t.Fatalf("the callback's last answer: %d, want 401", cb.Status)
		}
		h.cfg.Replace(config.MustParse(withPoll("test-approval-secret")))
		h.waitState(op, state.StatusMRCreating, state.StepQueued)
		if _, err := db.Waiting(bg, op); err != nil {
			t.Fatalf("the decision read from the ticket did not admit the request: %v", err)
		}
		// The callback arriving after all changes nothing.
		cb := h.sims.Approval.Callbacks()[0]
		if code, answer := h.callback(api.ApprovalCallback{CallbackID: cb.CallbackID, OperationID: op, Result: cb.Result}, "test-approval-secret"); code != 200 || answer != api.CallbackDuplicate {
			t.Fatalf("the late callback: %d %s", code, answer)
		}
		if _, ok := h.task(op); ok {
			t.Fatal("the request still has a task after its decision")
		}
	})
}

// A legacy request waiting for its decision has its ticket read every approval.pollAfter, not at
// each event of its MR: a GitLab webhook of the MR is no news of the decision and leaves the
// ticket look where it was (it used to make it due now, so that a decision was read from the
// ticket at the MR's next pipeline event).
func TestAWebhookOfALegacyMRLeavesItsTicketLookAlone(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{extra: fastSims})
		op := h.apply("alice", "db-read")
		v := h.waitState(op, state.StatusApprovalSent, state.StepApprovalSent)
		var before store.Task
		h.waitFor("the ticket look to wait", func() bool {
			var ok bool
			before, ok = h.task(op)
			return ok && before.Step == "ticket_poll" && before.Owner == ""
		})
		reads := h.sims.Approval.Calls("get_ticket")
		body := fmt.Sprintf(`{"object_kind":"merge_request","project":{"path_with_namespace":%q},"object_attributes":{"iid":%d,"state":"opened","action":"update"}}`, project, v.MR.ID)
		var res api.CallbackResult
		if code, _ := h.hookJSON("/hooks/gitlab", []byte(body), map[string]string{"X-Gitlab-Token": "test-gitlab-token"}, &res); code != 200 || res.Code != api.CallbackAccepted {
			t.Fatalf("the webhook: %d %+v", code, res)
		}
		after, ok := h.task(op)
		if !ok || after.Step != "ticket_poll" || after.Wakes != before.Wakes || !after.DueAt.Equal(before.DueAt) {
			t.Fatalf("the ticket look after the MR's webhook: %+v (before: %+v)", after, before)
		}
		if n := h.sims.Approval.Calls("get_ticket"); n != reads {
			t.Fatalf("the ticket was read %d times after the MR's webhook", n-reads)
		}
	})
}

// An operator's retry of a request waiting for its decision reads the ticket at once (no 500, no
// waiting for approval.pollAfter), and a rejection found there ends the legacy request's MR.
func TestRetryingARequestWaitingForItsDecisionReadsTheTicket(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{extra: fastSims})
		c := strings.Replace(configFor(false, fastSims), "approvalSecret: test-approval-secret", `approvalSecret: ""`, 1)
		op := h.apply("alice", "db-read")
		v := h.waitState(op, state.StatusApprovalSent, state.StepApprovalSent)
		h.cfg.Replace(config.MustParse(strings.Replace(c, "sim:\n", "sim:\n  timeScale: 100\n", 1)))
		h.decide(op, sim.TicketRejected)
		h.waitFor("the sender to give up", func() bool {
			cbs := h.sims.Approval.Callbacks()
			return len(cbs) == 1 && cbs[0].Attempts == 6
		})
		h.cfg.Replace(config.MustParse(configFor(false, fastSims)))
		// The ticket's look is due approval.pollAfter (15m) after it was sent: the decision is
		// still unread, and only the retry reads it. A retry that meets a step of the request's
		// running (a database conflict with one) is refused with 409, try again; a 409 because
		// the request was decided meanwhile means something else read the ticket.
		h.waitFor("the retry to be accepted", func() bool {
			code := h.retry(op)
			if code != 202 && code != 409 {
				t.Fatalf("retry: %d", code)
			}
			if code == 409 {
				if v := h.view(op); v.Status != state.StatusApprovalSent {
					t.Fatalf("the decision was read before the operator's retry: %s", v.Status)
				}
			}
			return code == 202
		})
		h.waitState(op, state.StatusRejected, state.StepApprovalRejected)
		h.waitFor("the rejected request's MR closed", func() bool { return h.sims.GitLab.MergeRequestState(project, v.MR.ID) == "closed" })
	})
}

// brokenTicketReads is the real approval client whose ticket reads fail as told: the approval
// system lost the ticket (ErrNoTicket) or does not answer.
type brokenTicketReads struct {
	workflow.Tickets
	mu    sync.Mutex
	fails []error
	opens int
}

func (b *brokenTicketReads) Open(ctx context.Context, tk approval.Ticket) (string, error) {
	b.mu.Lock()
	b.opens++
	b.mu.Unlock()
	return b.Tickets.Open(ctx, tk)
}

func (b *brokenTicketReads) Get(ctx context.Context, id string) (approval.TicketState, error) {
	b.mu.Lock()
	if len(b.fails) > 0 {
		err := b.fails[0]
		b.fails = b.fails[1:]
		b.mu.Unlock()
		return approval.TicketState{}, err
	}
	b.mu.Unlock()
	return b.Tickets.Get(ctx, id)
}

// Reading the ticket fails: the approval system does not answer (the request goes on waiting and
// bindery asks again later), then no longer knows the ticket (it is sent again — the approval
// system opens one ticket per operationId — and read again); the decision then lands.
func TestATicketThatCannotBeReadIsAskedAgainOrSentAgain(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		broken := &brokenTicketReads{fails: []error{
			outbound.NewError("approval", "get_ticket", outbound.KindTimeout, errors.New("no answer")),
			fmt.Errorf("ticket: %w", approval.ErrNoTicket),
		}}
		h := setup(t, db, options{approvalFirst: true, extra: fastSims, wrapTickets: func(next workflow.Tickets) workflow.Tickets {
			broken.Tickets = next
			return broken
		}})
		c := strings.Replace(configFor(true, fastSims), "approval:\n", "approval:\n  pollAfter: 200ms\n", 1)
		c = strings.Replace(c, "sim:\n", "sim:\n  approval:\n    callbackLossRate: 1\n", 1)
		h.cfg.Replace(config.MustParse(c))
		op := h.apply("alice", "db-read")
		h.waitState(op, state.StatusApprovalSent, state.StepApprovalSent)
		h.decide(op, sim.TicketApproved) // its callback is lost: only the ticket tells
		h.waitState(op, state.StatusMRCreating, state.StepQueued)
		broken.mu.Lock()
		defer broken.mu.Unlock()
		if len(broken.fails) != 0 || broken.opens != 2 {
			t.Fatalf("failures left %d, tickets opened %d (want the first and the one sent again)", len(broken.fails), broken.opens)
		}
		if n := len(h.sims.Approval.Tickets()); n != 1 {
			t.Fatalf("%d tickets in the approval system", n)
		}
	})
}
