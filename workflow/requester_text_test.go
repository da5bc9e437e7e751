package workflow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"bindery/api"
	"bindery/internal/remote/approval"
	"bindery/internal/remote/gitlab"
	"bindery/internal/sim"
	"bindery/internal/testkit/leakcheck"
	"bindery/internal/vocab/explain"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
	"bindery/workflow"
)

// hostile is what a broken component can carry in its error: an upstream's answer body, a Go
// error, a panic value.
const hostile = "SELECT * FROM operation; panic: runtime error at /home/x/go/src/bindery/x.go:12 (db.internal:3306)"

// rawError is a Go error of the kind a driver or a library returns, with hostile text in it.
func rawError() error {
	return fmt.Errorf("sql: transaction has already been committed or rolled back: dial tcp 127.0.0.1:3306: %s", hostile)
}

// hostileGitLab makes one GitLab call fail: with a panic ("panic") or a raw Go error ("raw").
type hostileGitLab struct {
	gitlab.API
	mode string
}

func (g hostileGitLab) Approve(ctx context.Context, project string, iid int64, sha string) error {
	if g.mode == "panic" {
		panic(hostile)
	}
	return rawError()
}

// requesterLeaks reads every request of owners (user → their operationIds) as its owner — the
// request view and the owner's list — and returns every string in them that holds internals.
func (h *harness) requesterLeaks(owners map[string][]string) []string {
	h.t.Helper()
	scan := leakcheck.New([]string{hostile, "exploded"}, h.url+"/sim/gitlab", h.url+"/sim/approvals")
	var leaks []string
	for user, ops := range owners {
		for _, op := range ops {
			var raw json.RawMessage
			if code := h.api("GET", "/api/requests/"+op, user, "", &raw); code != 200 {
				h.t.Fatalf("GET /api/requests/%s as %s: %d", op, user, code)
			}
			for _, l := range scan.JSON(raw) {
				leaks = append(leaks, "GET /api/requests/"+op+" "+l)
			}
		}
		var raw json.RawMessage
		if code := h.api("GET", "/api/my/requests?limit=100", user, "", &raw); code != 200 {
			h.t.Fatalf("GET /api/my/requests as %s: %d", user, code)
		}
		for _, l := range scan.JSON(raw) {
			leaks = append(leaks, "GET /api/my/requests as "+user+" "+l)
		}
	}
	return leaks
}

// A failure's cause — an upstream's error answer, a panic in a step, a raw Go error — reaches the
// log and the operators, never the requester: in both flows, every string of the request view
// and of the requester's list is free of internals, the failure is told in the step's fixed
// sentence, and the operator reading the same request sees the recorded cause.
func TestRequestersReadNoInternalsOfAFailure(t *testing.T) {
	cases := []struct {
		name          string
		approvalFirst bool
		o             options
		fault         func(h *harness)
		approve       bool // the failure comes after the approval
		step          state.Step
		cause         string // what the operator reads of it
	}{
		{name: "legacy: GitLab refuses the MR with internals in its answer", fault: func(h *harness) {
			h.sims.GitLab.Inject("create_mr", sim.FaultStatus(422, hostile), 1000)
		}, step: state.StepCreateFailed, cause: "HTTP 422"},
		{name: "legacy: the approval system fails with internals in its answer", fault: func(h *harness) {
			h.sims.Approval.Inject("open_ticket", sim.FaultStatus(500, hostile), 1000)
		}, step: state.StepApprovalSendFailed, cause: "approval open_ticket"},
		{name: "legacy: the approve step panics", o: options{wrapGitLab: func(api gitlab.API) gitlab.API { return hostileGitLab{api, "panic"} }},
			approve: true, step: state.StepHandleApproveFailed, cause: "server log"},
		{name: "legacy: the approve step returns a raw error", o: options{wrapGitLab: func(api gitlab.API) gitlab.API { return hostileGitLab{api, "raw"} }},
			approve: true, step: state.StepHandleApproveFailed, cause: "server log"},
		{name: "batch: GitLab refuses the MR with internals in its answer", approvalFirst: true, fault: func(h *harness) {
			h.sims.GitLab.Inject("create_mr", sim.FaultStatus(422, hostile), 1000)
		}, approve: true, step: state.StepCreateFailed, cause: "HTTP 422"},
		{name: "batch: the approval system fails with internals in its answer", approvalFirst: true, fault: func(h *harness) {
			h.sims.Approval.Inject("open_ticket", sim.FaultStatus(500, hostile), 1000)
		}, step: state.StepApprovalSendFailed, cause: "approval open_ticket"},
		{name: "batch: the approval client panics", approvalFirst: true, o: options{wrapTickets: func(workflow.Tickets) workflow.Tickets {
			return ticketsFunc(func(context.Context, approval.Ticket) (string, error) { panic(hostile) })
		}}, step: state.StepApprovalSendFailed, cause: "server log"},
		{name: "batch: the approve step panics", approvalFirst: true, o: options{wrapGitLab: func(api gitlab.API) gitlab.API { return hostileGitLab{api, "panic"} }},
			approve: true, step: state.StepHandleApproveFailed, cause: "server log"},
		{name: "batch: the approve step returns a raw error", approvalFirst: true, o: options{wrapGitLab: func(api gitlab.API) gitlab.API { return hostileGitLab{api, "raw"} }},
			approve: true, step: state.StepHandleApproveFailed, cause: "server log"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			storetest.Each(t, func(t *testing.T, db *store.DB) {
				o := c.o
				o.approvalFirst, o.realBatch = c.approvalFirst, c.approvalFirst
				h := setup(t, db, o)
				if c.fault != nil {
					c.fault(h)
				}
				owners := map[string][]string{}
				var failing []string
				for _, user := range []string{"alice", "bob"} {
					op := h.apply(user, "db-read")
					owners[user] = append(owners[user], op)
					failing = append(failing, op)
				}
				if c.approve {
					for _, op := range failing {
						h.decide(op, sim.TicketApproved)
						if c.approvalFirst {
							h.waitState(op, state.StatusMRCreating, state.StepQueued)
						}
					}
					if c.approvalFirst {
						h.round()
					}
				}
				for _, op := range failing {
					v := h.waitState(op, failedStatus(c.step), c.step)
					// The operator reads the recorded cause beside the requester's words.
					last := v.Timeline[len(v.Timeline)-1]
					if !strings.Contains(last.Cause, c.cause) || strings.Contains(last.Note, c.cause) {
						t.Errorf("%s as ops: note %q, cause %q; want the cause (%q) only in cause", op, last.Note, last.Cause, c.cause)
					}
					if strings.Contains(last.Cause, hostile) || strings.Contains(last.Cause, "127.0.0.1") {
						t.Errorf("%s: the recorded cause holds the upstream's text: %q", op, last.Cause)
					}
				}
				for _, leak := range h.requesterLeaks(owners) {
					t.Error(leak)
				}
				// The requester reads the step's fixed sentence.
				var v api.RequestView
				h.api("GET", "/api/requests/"+owners["alice"][0], "alice", "", &v)
				if last := v.Timeline[len(v.Timeline)-1]; !strings.HasPrefix(last.Note, explain.Failure(c.step)) || last.Cause != "" {
					t.Errorf("the requester reads %q (cause %q), want the step's sentence %q", last.Note, last.Cause, explain.Failure(c.step))
				}
				if c.approvalFirst && c.approve {
					// The ops view of the batch keeps the cause.
					var batches api.Page[api.BatchView]
					h.api("GET", "/api/ops/batches", "ops", "", &batches)
					if len(batches.Items) != 1 || !strings.Contains(batches.Items[0].Note, c.cause) {
						t.Errorf("ops batch view %+v: want the cause %q in its note", batches.Items, c.cause)
					}
				}
			})
		})
	}
}

func failedStatus(s state.Step) state.BindingStatus {
	if s >= state.StepHandleStarted {
		return state.StatusHandleFailed
	}
	return state.StatusCreateFailed
}
