package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"bindery/api"
	"bindery/internal/remote/approval"
	"bindery/internal/vocab/apperr"
	"bindery/internal/vocab/state"
	"bindery/workflow"
)

// The handler suite: one row per behaviour of the API (docs/api.md) that a client can observe,
// covering every status code the API answers. Each row runs on a fresh server (fakes of the
// workflow and the permission service, the real store on SQLite). The same rows are run again with
// metrics that panic (TestMetricsThatPanicChangeNothing) and scanned for leaks
// (TestNoErrorBodyLeaksInternals).

func post(path, user, body string) call {
	return call{method: "POST", path: path, user: user, body: body}
}
func get(path, user string) call { return call{method: "GET", path: path, user: user} }

// lenient marks a call that spells something as the server forgives but the document does not
// (lower case): outside the document on purpose.
func lenient(c call) call { c.outside = true; return c }

func applyJSON(op, target string) string {
	return fmt.Sprintf(`{"operationId":%q,"targetKey":%q,"reason":"need read access for the quarterly report"}`, op, target)
}

type row struct {
	name   string
	opts   options
	prep   func(h *harness) // before any request
	before []call           // requests whose answers are not checked
	mid    func(h *harness) // after before, before the checked request
	call
	status        int
	want, notWant []string
	header        map[string]string
	check         func(t *testing.T, h *harness)
}

// leak markers: what an error body must never carry.
var leakMarkers = []string{"goroutine", ".go:", "Error 1062", "SELECT", "INSERT", "/home/", "gitlab.internal", "db.internal", ":3306", "upstream said", "panic", "Go struct", "api.ApplyRequest"}

// rows is the suite.
func rows() []row {
	validated := func(h *harness) {
		h.wf.put(api.RequestView{OperationID: "op-v", Subject: "alice@example.com", TargetKey: "public-a", Status: state.StatusValidated,
			Step: api.StepView{Code: int(state.StepCalledBack), Name: state.StepCalledBack.String()}})
	}
	failed := func(h *harness) {
		h.wf.put(api.RequestView{OperationID: "op-f", Subject: "alice@example.com", TargetKey: "public-a", Status: state.StatusHandleFailed, Withdrawable: true,
			Step: api.StepView{Code: int(state.StepHandlePipelineFailed), Name: state.StepHandlePipelineFailed.String()}, NextAction: state.NextContactSupport})
	}
	bobs := func(h *harness) {
		h.wf.put(api.RequestView{OperationID: "op-bob", Subject: "bob@example.com", TargetKey: "public-a", Status: state.StatusMerging,
			Step: api.StepView{Code: int(state.StepHandlePipelinePending), Name: state.StepHandlePipelinePending.String()}})
	}
	leaky := errors.New("Error 1062: Duplicate entry 'x' for key 'binding.uq' at /home/dev/bindery/store/binding.go:88 (db.internal:3306)")
	deploy := map[string]string{"Authorization": "Bearer dtok"}
	gitlab := map[string]string{"X-Gitlab-Token": "gtok", "Idempotency-Key": "ev-1"}
	pipeline := `{"object_kind":"pipeline","project":{"path_with_namespace":"infra/access-config"},"object_attributes":{"id":991,"status":"success","iid":5,"ref":"refs/merge-requests/12/head"},"merge_request":{"iid":12},"builds":[]}`
	branchPipeline := `{"object_kind":"pipeline","project":{"path_with_namespace":"infra/access-config"},"object_attributes":{"id":992,"status":"failed","ref":"bindery/batch-7","source":"push"},"merge_request":null}`
	cb := `{"requestId":"cb-1","operationId":"op-1","result":"APPROVED","ext":{}}`
	none := func(t *testing.T, h *harness) {
		if calls := h.wf.Calls(); len(calls) != 0 {
			t.Errorf("a refused request reached the workflow: %v", calls)
		}
		if st := h.dbState(); st != "" {
			t.Errorf("a refused request recorded something:\n%s", st)
		}
	}
	return []row{
		// ---- POST /api/apply ----
		{name: "apply is accepted with 202 ACCEPTED", call: post("/api/apply", "alice", applyJSON("op-1", "public-a")), status: 202,
			want: []string{`"code":"ACCEPTED"`, `"operationId":"op-1"`, `"status":"APPROVAL_SENDING"`, `"nextAction":"WAIT"`},
			check: func(t *testing.T, h *harness) {
				if c := h.wf.Calls(); len(c) != 1 || c[0] != `Apply(op-1,alice@example.com,public-a,"need read access for the quarterly report")` {
					t.Errorf("workflow calls %v", c)
				}
			}},
		{name: "the same application again is DUPLICATE_SUBMIT with its current status", before: []call{post("/api/apply", "alice", applyJSON("op-1", "public-a"))},
			mid: func(h *harness) {
				h.wf.put(api.RequestView{OperationID: "op-1", Subject: "alice@example.com", TargetKey: "public-a", Status: state.StatusApprovalSent})
			},
			call: post("/api/apply", "E1001", applyJSON("op-1", "public-a")), status: 202,
			want: []string{`"code":"DUPLICATE_SUBMIT"`, `"operationId":"op-1"`, `"status":"APPROVAL_SENT"`},
			check: func(t *testing.T, h *harness) {
				if n := h.wf.count("Apply"); n != 1 {
					t.Errorf("Apply ran %d times", n)
				}
			}},
		{name: "the same operationId with another payload is 422", before: []call{post("/api/apply", "alice", applyJSON("op-1", "public-a"))},
			call: post("/api/apply", "alice", `{"operationId":"op-1","targetKey":"public-a","reason":"something else"}`), status: 422,
			want: []string{`"code":"IDEMPOTENCY_KEY_REUSED"`}},
		{name: "another user's operationId is never a replay of their answer", before: []call{post("/api/apply", "alice", applyJSON("op-1", "public-a"))},
			call: post("/api/apply", "bob", applyJSON("op-1", "public-a")), status: 422, notWant: []string{"alice"}},
		{name: "a second request for an active relation is 409 APPLY_IN_PROGRESS", before: []call{post("/api/apply", "alice", applyJSON("op-1", "public-a"))},
			call: post("/api/apply", "alice", applyJSON("op-2", "public-a")), status: 409, want: []string{`"code":"APPLY_IN_PROGRESS"`},
			check: func(t *testing.T, h *harness) {
				if st := h.dbState(); strings.Contains(st, "op-2") {
					t.Errorf("a refused application kept its idempotency record:\n%s", st)
				}
			}},
		{name: "over the limit is 429 with Retry-After and not business activity",
			before: []call{post("/api/apply", "alice", applyJSON("op-1", "public-a")), post("/api/apply", "alice", applyJSON("op-2", "public-a")), post("/api/apply", "alice", applyJSON("op-3", "restricted-b"))},
			call:   post("/api/apply", "alice", applyJSON("op-1", "public-a")), status: 429,
			want: []string{`"code":"RATE_LIMITED"`, "Too many applications"}, header: map[string]string{"Retry-After": "60"},
			check: func(t *testing.T, h *harness) {
				if got := h.metric(`bindery_activity_total{action="apply",stage="received",caller="other"}`); got != "3" {
					t.Errorf("activity received = %s, want 3 (the 429 is not activity)", got)
				}
				if got := h.metric(`bindery_ratelimited_total{bucket="apply"}`); got != "1" {
					t.Errorf("ratelimited_total = %q", got)
				}
				if n := h.wf.count("Apply"); n != 2 {
					t.Errorf("Apply ran %d times", n)
				}
			}},
		{name: "apply without an identity is 401", call: post("/api/apply", "", applyJSON("op-1", "public-a")), status: 401,
			want: []string{`"code":"UNAUTHENTICATED"`, "alice, bob, ops"}, check: none},
		{name: "a malformed body without an identity is 401, never 400", call: post("/api/apply", "", `{"operationId": nope`), status: 401, check: none},
		{name: "a malformed body from a non-operator on an ops route is 403, never 400", call: post("/api/ops/reconcile", "alice", `{nope`), status: 403,
			want: []string{`"message":"Access denied"`}, check: none},
		{name: "a missing operationId names the field", call: post("/api/apply", "alice", `{"targetKey":"public-a","reason":"r"}`), status: 400,
			want: []string{`"code":"INVALID_ARGUMENT"`, `"field":"operationId"`}},
		{name: "an unknown field is named, not ignored", call: post("/api/apply", "alice", `{"operationId":"op-1","target_key":"public-a","reason":"r"}`), status: 400,
			want: []string{`"field":"target_key"`}},
		{name: "a field of the wrong type is named in our words", call: post("/api/apply", "alice", `{"operationId":5,"targetKey":"public-a","reason":"r"}`), status: 400,
			want: []string{`"field":"operationId"`, "must be a string"}},
		{name: "a body that is not JSON is 400 body", call: post("/api/apply", "alice", `{"operationId":"op-1",`), status: 400, want: []string{`"field":"body"`}},
		{name: "a JSON array is not an application", call: post("/api/apply", "alice", `[1,2]`), status: 400, want: []string{`"field":"body"`}},
		{name: "an unknown target is 400 targetKey", call: post("/api/apply", "alice", applyJSON("op-1", "nope")), status: 400, want: []string{`"field":"targetKey"`}},
		{name: "a reason over 1000 characters is 400 reason", call: post("/api/apply", "alice", `{"operationId":"op-1","targetKey":"public-a","reason":"`+strings.Repeat("é", 1001)+`"}`), status: 400,
			want: []string{`"field":"reason"`}},
		{name: "a reason with control characters is 400 reason", call: post("/api/apply", "alice", `{"operationId":"op-1","targetKey":"public-a","reason":"ok\u0000\u001b[31mred"}`), status: 400,
			want: []string{`"field":"reason"`, "control characters"}},
		{name: "a reason on several lines is fine", call: post("/api/apply", "alice", `{"operationId":"op-1","targetKey":"public-a","reason":"line one\r\n\tline two"}`), status: 202},
		{name: "a revocation reason with control characters is 400 reason", prep: validated, call: post("/api/requests/op-v/revoke", "alice", `{"operationId":"rv-1","reason":"\u0007"}`), status: 400,
			want: []string{`"field":"reason"`}},
		{name: "a restricted target without its rule code is 403 after one round trip", call: post("/api/apply", "alice", applyJSON("op-1", "restricted-b")), status: 403,
			want: []string{`"code":"ACCESS_DENIED"`, `"message":"Access denied"`}, notWant: []string{"b-owners"},
			check: func(t *testing.T, h *harness) {
				if c := h.perms.Checks(); len(c) != 1 || c[0] != "alice@example.com:b-owners|bindery-ops" {
					t.Errorf("permission round trips %v, want one with the target's codes and the ops rule", c)
				}
			}},
		{name: "a restricted target with its rule code is accepted", call: post("/api/apply", "bob", applyJSON("op-1", "restricted-b")), status: 202},
		{name: "a permission service error is 403",
			prep: func(h *harness) {
				h.perms.CheckFn = func(context.Context, string, []string, []string) (bool, error) {
					return false, errors.New("upstream said: 502 from perm.internal")
				}
			},
			call: post("/api/apply", "bob", applyJSON("op-1", "restricted-b")), status: 403, want: []string{"Access denied"}},
		{name: "a permission service timeout is 403", opts: options{permissionTimeout: 100 * time.Millisecond},
			prep: func(h *harness) {
				h.perms.CheckFn = func(ctx context.Context, _ string, _, _ []string) (bool, error) { <-ctx.Done(); return true, ctx.Err() }
			},
			call: post("/api/apply", "bob", applyJSON("op-1", "restricted-b")), status: 403},
		{name: "access mode CLOSED is 403 APPLY_CLOSED", opts: options{config: map[string]string{"apply.mode": "CLOSED"}},
			call: post("/api/apply", "alice", applyJSON("op-1", "public-a")), status: 403, want: []string{`"code":"APPLY_CLOSED"`}, check: none},
		{name: "an access-mode typo closes", opts: options{config: map[string]string{"apply.mode": "OPNE"}},
			call: post("/api/apply", "alice", applyJSON("op-1", "public-a")), status: 403, want: []string{`"code":"APPLY_CLOSED"`}},
		{name: "TEST_WINDOW outside its window is closed", opts: options{config: map[string]string{"apply.mode": "TEST_WINDOW", "apply.window": "Sat-Sun 10:00-18:00"}},
			call: post("/api/apply", "alice", applyJSON("op-1", "public-a")), status: 403, want: []string{`"code":"APPLY_CLOSED"`}},
		{name: "TEST_WINDOW inside its window, read in Asia/Shanghai, is open", opts: options{config: map[string]string{"apply.mode": "TEST_WINDOW", "apply.window": "Mon 11:00-13:00"}},
			call: post("/api/apply", "alice", applyJSON("op-1", "public-a")), status: 202},
		{name: "an API body over 64 KiB is 413", call: post("/api/apply", "alice", `{"operationId":"op-1","targetKey":"public-a","reason":"`+strings.Repeat("x", 70<<10)+`"}`), status: 413,
			want: []string{`"code":"BODY_TOO_LARGE"`}, check: none},
		{name: "a body that is not JSON by type is 415", call: call{method: "POST", path: "/api/apply", user: "alice", body: "operationId=op-1", ct: "application/x-www-form-urlencoded"}, status: 415,
			want: []string{`"code":"UNSUPPORTED_MEDIA_TYPE"`}, check: none},
		{name: "a workflow whose dependency is down is 503 UNAVAILABLE",
			prep: func(h *harness) {
				h.wf.ApplyFn = func(context.Context, workflow.ApplyInput) (api.ApplyResult, error) {
					return api.ApplyResult{}, apperr.New(apperr.Unavailable, "The approval system is not answering; please retry later.")
				}
			},
			call: post("/api/apply", "alice", applyJSON("op-1", "public-a")), status: 503, want: []string{`"code":"UNAVAILABLE"`}},
		{name: "an unexpected workflow error is a generic 500 with the details only in the log",
			prep: func(h *harness) {
				h.wf.ApplyFn = func(context.Context, workflow.ApplyInput) (api.ApplyResult, error) {
					return api.ApplyResult{}, leaky
				}
			},
			call: post("/api/apply", "alice", applyJSON("op-1", "public-a")), status: 500,
			want: []string{`"code":"INTERNAL"`, apperr.GenericMessage, `"requestId":"r0"`},
			check: func(t *testing.T, h *harness) {
				if !strings.Contains(h.logs.String(), "Error 1062") || !strings.Contains(h.logs.String(), "requestId=r0") {
					t.Errorf("the cause is not in the log with the request id:\n%s", h.logs.String())
				}
				if st := h.dbState(); st != "" {
					t.Errorf("a failed application kept its key:\n%s", st)
				}
			}},
		{name: "a panic in the workflow is a generic 500",
			prep: func(h *harness) {
				h.wf.ApplyFn = func(context.Context, workflow.ApplyInput) (api.ApplyResult, error) {
					panic("nil map at /home/dev/wf.go:12")
				}
			},
			call: post("/api/apply", "alice", applyJSON("op-1", "public-a")), status: 500, want: []string{`"code":"INTERNAL"`},
			check: func(t *testing.T, h *harness) {
				if st := h.dbState(); st != "" {
					t.Errorf("a panicking application kept its key (a retry would wait for the lease):\n%s", st)
				}
			}},
		{name: "a dependency down is 503 with a safe message",
			prep: func(h *harness) {
				h.wf.ApplyFn = func(context.Context, workflow.ApplyInput) (api.ApplyResult, error) {
					return api.ApplyResult{}, apperr.Wrap(errors.New("dial tcp gitlab.internal:443: i/o timeout"), apperr.Unavailable, "GitLab is not reachable; please retry later.")
				}
			},
			call: post("/api/apply", "alice", applyJSON("op-1", "public-a")), status: 503, want: []string{"GitLab is not reachable"}},

		// ---- requests ----
		{name: "the owner sees the request with its next action in plain words", prep: validated, call: get("/api/requests/op-v", "alice"), status: 200,
			want: []string{`"operationId":"op-v"`, `"nextAction":"NONE"`, `"nextActionText":"Done: the binding is in effect."`}},
		{name: "a request in a car reads its car, the cars ahead and the estimate of its merge",
			prep: func(h *harness) {
				at := t0.Add(14 * time.Minute)
				h.wf.put(api.RequestView{OperationID: "op-car", Subject: "alice@example.com", TargetKey: "public-a", Status: state.StatusMRCreating,
					Waiting: &api.Waiting{Stage: "ci", WaitingFor: "the pipeline of merge request !8 to pass", Since: t0, BatchID: 9,
						Car:      &api.Car{BatchID: 9, Position: 2, Of: 3, Ahead: []api.CarAhead{{BatchID: 8, MR: &api.Link{ID: 7, URL: "https://gitlab.example.com/infra/access-config/-/merge_requests/7"}, Pipeline: "passed"}}},
						Estimate: &api.Estimate{MergeAt: &at, Words: "about 14 min", Basis: "median of the last 8 pipelines of infra/access-config: 9 min"}}})
			},
			call: get("/api/requests/op-car", "alice"), status: 200,
			want: []string{`"car":{"batchId":9,"position":2,"of":3,"ahead":[{"batchId":8,"mr":{`, `"pipeline":"passed"}]}`,
				`"estimate":{"mergeAt":"<time>","words":"about 14 min","basis":"median of the last 8 pipelines of infra/access-config: 9 min"}`}},
		{name: "a request without an estimate says so, with no time", prep: func(h *harness) {
			h.wf.put(api.RequestView{OperationID: "op-wait", Subject: "alice@example.com", TargetKey: "public-a", Status: state.StatusMRCreating,
				Waiting: &api.Waiting{Stage: "batch", WaitingFor: "the queue of infra/access-config to be resumed — paused by ops@example.com: release freeze until 18:00 (0 ahead in the queue)",
					Since: t0, Position: 1, NextBy: "ops@example.com", Estimate: &api.Estimate{Words: "no estimate yet", Basis: "the queue of infra/access-config is paused: nothing merges until an operator resumes it"}}})
		},
			call: get("/api/requests/op-wait", "alice"), status: 200, want: []string{`"nextBy":"ops@example.com"`, `"estimate":{"words":"no estimate yet","basis":"the queue of`},
			notWant: []string{"mergeAt", `"car"`}},
		{name: "a stopped retryable step tells the owner that operators were alerted", prep: bobs, call: get("/api/requests/op-bob", "bob"), status: 200,
			want: []string{`"nextAction":"WAIT_MANUAL"`, "Operators have been alerted and can run it again"}},
		{name: "another user's request is 404 like an unknown one", prep: bobs, call: get("/api/requests/op-bob", "alice"), status: 404, want: []string{`"message":"No such request."`}},
		{name: "an operator sees anyone's request", prep: bobs, call: get("/api/requests/op-bob", "ops"), status: 200},
		{name: "someone else's request while the permission service does not answer is 503, not 404", opts: options{permissionTimeout: 100 * time.Millisecond},
			prep: func(h *harness) {
				bobs(h)
				h.perms.CheckFn = func(ctx context.Context, _ string, _, _ []string) (bool, error) { <-ctx.Done(); return true, ctx.Err() }
			},
			call: get("/api/requests/op-bob", "ops"), status: 503, want: []string{`"code":"UNAVAILABLE"`, "permission check did not answer"}, notWant: []string{"op-bob", "No such request"}},
		{name: "an unknown request is 404", call: get("/api/requests/op-none", "alice"), status: 404, want: []string{`"code":"NOT_FOUND"`}},
		{name: "a malformed operationId in the path is 400", call: get("/api/requests/%3Cscript%3E", "alice"), status: 400, want: []string{`"field":"operationId"`}},
		{name: "my requests are listed", prep: func(h *harness) { validated(h); bobs(h) }, call: get("/api/my/requests?limit=5", "alice"), status: 200,
			want: []string{`"items":[{"operationId":"op-v"`}, notWant: []string{"op-bob"}},
		{name: "a page size out of range is 400 limit", call: get("/api/my/requests?limit=1000", "alice"), status: 400, want: []string{`"field":"limit"`}},

		// ---- revoke ----
		{name: "the owner revokes a validated request", prep: validated, call: post("/api/requests/op-v/revoke", "alice", `{"operationId":"rv-1","reason":"done"}`), status: 202,
			want: []string{`"step":{"code":10201`},
			check: func(t *testing.T, h *harness) {
				if st := h.dbState(); !strings.Contains(st, "audit revoke:rv-1 alice@example.com revoke") {
					t.Errorf("revocation not audited:\n%s", st)
				}
			}},
		{name: "a repeated revocation replays its answer", prep: validated, before: []call{post("/api/requests/op-v/revoke", "alice", `{"operationId":"rv-1"}`)},
			call: post("/api/requests/op-v/revoke", "alice", `{"operationId":"rv-1"}`), status: 202,
			check: func(t *testing.T, h *harness) {
				if n := h.wf.count("Revoke"); n != 1 {
					t.Errorf("Revoke ran %d times", n)
				}
			}},
		{name: "revoking a request that is not in effect is 409", prep: bobs, call: post("/api/requests/op-bob/revoke", "bob", `{"operationId":"rv-2"}`), status: 409,
			want: []string{`"code":"CONFLICT"`, "MERGING"}},
		{name: "revoking someone else's request is 404 like an unknown one", prep: validated, call: post("/api/requests/op-v/revoke", "bob", `{"operationId":"rv-3"}`), status: 404, want: []string{`"message":"No such request."`}},
		{name: "revocations are rate limited", prep: validated,
			before: []call{post("/api/requests/op-v/revoke", "alice", `{"operationId":"rv-1"}`), post("/api/requests/op-v/revoke", "alice", `{"operationId":"rv-2"}`)},
			call:   post("/api/requests/op-v/revoke", "alice", `{"operationId":"rv-3"}`), status: 429},

		// ---- withdraw ----
		{name: "the owner withdraws a failed request, audited", prep: failed, call: post("/api/requests/op-f/withdraw", "alice", `{"operationId":"wd-1","reason":"I will fix it"}`), status: 202,
			want: []string{`"status":"CLOSED"`, `"step":{"code":10205`},
			check: func(t *testing.T, h *harness) {
				if c := strings.Join(h.wf.Calls(), " "); !strings.Contains(c, "Withdraw(op-f,alice@example.com)") {
					t.Errorf("calls %v", c)
				}
				if st := h.dbState(); !strings.Contains(st, "audit withdraw:wd-1 alice@example.com withdraw") || !strings.Contains(st, "I will fix it") {
					t.Errorf("withdrawal not audited:\n%s", st)
				}
			}},
		{name: "an operator withdraws someone's failed request", prep: failed, call: post("/api/requests/op-f/withdraw", "ops", `{"operationId":"wd-ops"}`), status: 202,
			check: func(t *testing.T, h *harness) {
				if c := strings.Join(h.wf.Calls(), " "); !strings.Contains(c, "Withdraw(op-f,ops@example.com)") {
					t.Errorf("calls %v", c)
				}
			}},
		{name: "a repeated withdrawal replays its answer", prep: failed, before: []call{post("/api/requests/op-f/withdraw", "alice", `{"operationId":"wd-1"}`)},
			call: post("/api/requests/op-f/withdraw", "alice", `{"operationId":"wd-1"}`), status: 202,
			check: func(t *testing.T, h *harness) {
				if n := h.wf.count("Withdraw"); n != 1 {
					t.Errorf("Withdraw ran %d times", n)
				}
			}},
		{name: "the same withdrawal id with another payload is 422", prep: failed, before: []call{post("/api/requests/op-f/withdraw", "alice", `{"operationId":"wd-1"}`)},
			call: post("/api/requests/op-f/withdraw", "alice", `{"operationId":"wd-1","reason":"other"}`), status: 422},
		{name: "withdrawing a request that did not fail is 409, not audited", prep: validated, call: post("/api/requests/op-v/withdraw", "alice", `{"operationId":"wd-2"}`), status: 409,
			want: []string{`"code":"CONFLICT"`, "VALIDATED"},
			check: func(t *testing.T, h *harness) {
				if n := h.wf.count("Withdraw"); n != 0 {
					t.Errorf("Withdraw ran %d times", n)
				}
				if st := h.dbState(); strings.Contains(st, "audit withdraw") {
					t.Errorf("a refused withdrawal was audited:\n%s", st)
				}
			}},
		{name: "withdrawing someone else's request is 404 like an unknown one", prep: failed, call: post("/api/requests/op-f/withdraw", "bob", `{"operationId":"wd-3"}`), status: 404, want: []string{`"message":"No such request."`}},
		{name: "a withdrawal without its operationId is 400", prep: failed, call: post("/api/requests/op-f/withdraw", "alice", `{}`), status: 400, want: []string{`"field":"operationId"`}},

		// ---- catalog, preview, me ----
		{name: "the catalog lists targets with their rule codes and ttl", call: get("/api/targets", "alice"), status: 200,
			want: []string{`{"key":"public-a","title":"Public A","project":"infra/access-config","ruleCodes":[],"ttl":"720h","mayApply":true}`, `"ruleCodes":["b-owners"],"ttl":"","mayApply":false}`}},
		{name: "the catalog says which target the caller has in effect, with the request", prep: validated, call: get("/api/targets", "alice"), status: 200,
			want: []string{`"key":"public-a"`, `"mayApply":true,"yours":{"state":"IN_EFFECT","operationId":"op-v","status":"VALIDATED"}`}},
		{name: "the catalog says which target the caller has in flight; others' requests are not theirs", prep: bobs, call: get("/api/targets", "bob"), status: 200,
			want: []string{`"yours":{"state":"IN_FLIGHT","operationId":"op-bob","status":"MERGING"}`}},
		{name: "preview renders the caller's file", call: get("/api/preview?target=public-a", "alice"), status: 200,
			want: []string{`"path":"bindings/public-a/alice@example.com.yaml"`}},
		{name: "a failing preview is 200 and empty",
			prep: func(h *harness) {
				h.wf.PreviewFn = func(context.Context, string, string) (api.Preview, error) { return api.Preview{}, leaky }
			},
			call: get("/api/preview?target=public-a", "alice"), status: 200, want: []string{"{}"}},
		{name: "a preview of an unknown target is 200 and empty", call: get("/api/preview?target=nope", "alice"), status: 200, want: []string{"{}"}},
		{name: "me names the caller and the demo users", call: get("/api/me", "E1001"), status: 200,
			want: []string{`{"identity":"alice@example.com","displayName":"alice","ops":false,"demo":true,"demoUsers":["alice","bob","ops"],"signOut":false}`}},
		{name: "me tells an operator the console is theirs", call: get("/api/me", "ops@example.com"), status: 200, want: []string{`"ops":true`}},
		{name: "an unknown demo user is 401", call: get("/api/me", "mallory"), status: 401},
		// The SPA's first page reads the demo users from this sentence (ui/src/main.js, demoUsersOf).
		{name: "no identity in demo mode is 401 naming the demo users", call: get("/api/me", ""), status: 401,
			want: []string{`"message":"Pick a demo user: alice, bob, ops."`}},

		// ---- ops ----
		{name: "ops lists batches", call: get("/api/ops/batches", "ops"), status: 200, want: []string{`"items":[{"id":7`}},
		{name: "a requester cannot list batches", call: get("/api/ops/batches", "alice"), status: 403, want: []string{"Access denied"}, check: none},
		{name: "ops lists the blocked batches", call: lenient(get("/api/ops/batches?status=blocked", "ops")), status: 200, check: func(t *testing.T, h *harness) {
			if c := h.wf.Calls(); len(c) != 1 || !strings.HasSuffix(c[0], ",BLOCKED)") {
				t.Errorf("calls %v", c)
			}
		}},
		{name: "a batch status that does not exist is 400 status", call: get("/api/ops/batches?status=STUCK", "ops"), status: 400, want: []string{`"field":"status"`}},
		{name: "ops runs a round, audited", call: post("/api/ops/batches/run", "ops", `{"operationId":"run-1"}`), status: 200, want: []string{"NOTHING_WAITING"},
			check: func(t *testing.T, h *harness) {
				if st := h.dbState(); !strings.Contains(st, `audit ops.batches.run:run-1 ops@example.com ops.batches.run {"__authenticatedOperator":"ops@example.com","operationId":"run-1"}`) {
					t.Errorf("round not audited:\n%s", st)
				}
			}},
		{name: "the operator parameter is the login identity, never the client's",
			prep: bobs, call: post("/api/ops/requests/op-bob/retry", "ops", `{"operationId":"rt-1","__authenticatedOperator":"mallory@evil.example","note":"x"}`), status: 202,
			notWant: []string{"mallory"},
			check: func(t *testing.T, h *harness) {
				if c := h.wf.Calls(); !strings.Contains(strings.Join(c, " "), "Retry(op-bob,ops@example.com)") {
					t.Errorf("calls %v", c)
				}
				if st := h.dbState(); strings.Contains(st, "mallory") || !strings.Contains(st, `"__authenticatedOperator":"ops@example.com"`) {
					t.Errorf("audit believed the client:\n%s", st)
				}
			}},
		{name: "a retry refused because a step runs right now is 409 with Retry-After",
			prep: func(h *harness) {
				h.wf.RetryFn = func(context.Context, string, string) (api.RequestView, error) {
					return api.RequestView{}, apperr.Busy(nil, "A step of this request is running right now; look again in a moment.")
				}
			},
			call: post("/api/ops/requests/op-bob/retry", "ops", `{"operationId":"rt-busy"}`), status: 409,
			want: []string{"look again in a moment"}, header: map[string]string{"Retry-After": "1"}},
		// ---- the navigation's attention count (docs/operations.md, 'The console at a glance') ----
		{name: "ops counts the stuck requests, the blocked batches and the open drift findings, as the lists show them",
			prep: func(h *harness) {
				h.wf.StuckRequestsFn = func(_ context.Context, f workflow.StuckFilter) (api.Page[api.RequestSummary], error) {
					if f.Status != "" || f.Step != 0 || f.Limit != api.AttentionCap {
						return api.Page[api.RequestSummary]{}, fmt.Errorf("the count read a filtered list: %+v", f)
					}
					return api.Page[api.RequestSummary]{Items: make([]api.RequestSummary, 2)}, nil
				}
				h.wf.BatchesFn = func(_ context.Context, _ string, limit int, status state.BatchStatus) (api.Page[api.BatchView], error) {
					if status != state.BatchBlocked || limit != api.AttentionCap {
						return api.Page[api.BatchView]{}, fmt.Errorf("the count read batches %q up to %d", status, limit)
					}
					return api.Page[api.BatchView]{Items: make([]api.BatchView, 1)}, nil
				}
				h.wf.DriftFn = func(context.Context) (api.DriftList, error) {
					return api.DriftList{Items: []api.DriftFinding{{State: "open"}, {State: "ignored"}, {State: "closed"}}}, nil
				}
			},
			call: get("/api/ops/attention", "ops"), status: 200, want: []string{`{"requests":2,"blockedBatches":1,"drift":1,"reviews":0,"total":4}`}},
		{name: "a blocked batch and its member in the stuck list are one thing to clear",
			prep: func(h *harness) {
				h.wf.StuckRequestsFn = func(context.Context, workflow.StuckFilter) (api.Page[api.RequestSummary], error) {
					return api.Page[api.RequestSummary]{Items: []api.RequestSummary{{OperationID: "held"}, {OperationID: "failed"}}}, nil
				}
				h.wf.BatchesFn = func(context.Context, string, int, state.BatchStatus) (api.Page[api.BatchView], error) {
					return api.Page[api.BatchView]{Items: []api.BatchView{{ID: 7, Status: "BLOCKED", Members: []api.RequestSummary{{OperationID: "held"}}}}}, nil
				}
			},
			call: get("/api/ops/attention", "ops"), status: 200, want: []string{`{"requests":1,"blockedBatches":1,"drift":0,"reviews":0,"total":2}`}},
		{name: "ops lists the drift findings",
			prep: func(h *harness) {
				h.wf.DriftFn = func(context.Context) (api.DriftList, error) {
					return api.DriftList{Items: []api.DriftFinding{{ID: 7, Kind: "missing", State: "open", TargetKey: "db-read", Subject: "alice@example.com",
						Project: "infra/access-config", Path: "bindings/db-read/alice@example.com.yaml", OperationID: "op-1", Commit: "abc1234def", Author: "A. Person", Text: "gone"}}}, nil
				}
			},
			call: get("/api/ops/drift", "ops"), status: 200, want: []string{`"kind":"missing"`, `"commit":"abc1234def"`, `"author":"A. Person"`}},
		{name: "a requester may not list drift findings", call: get("/api/ops/drift", "alice"), status: 403},
		{name: "ops imports the repository's files, a dry run first", call: post("/api/ops/import", "ops", `{"operationId":"im-1","dryRun":true}`),
			status: 200, want: []string{`"dryRun":true`, `"subject":"zed@example.com"`, `"becomes":"a binding in effect"`}},
		{name: "an import's dryRun is a boolean", call: post("/api/ops/import", "ops", `{"operationId":"im-2","dryRun":"yes"}`), status: 400},
		{name: "ignoring a drift finding needs a reason", call: post("/api/ops/drift/3/ignore", "ops", `{"operationId":"ig-1"}`), status: 400},
		{name: "ops ignores a drift finding with a reason", call: post("/api/ops/drift/3/ignore", "ops", `{"operationId":"ig-2","reason":"known"}`),
			status: 200, want: []string{`"state":"ignored"`, `"ignoreReason":"known"`}},
		{name: "the attention count says when a list holds more than it counts",
			prep: func(h *harness) {
				h.wf.StuckRequestsFn = func(context.Context, workflow.StuckFilter) (api.Page[api.RequestSummary], error) {
					return api.Page[api.RequestSummary]{Items: make([]api.RequestSummary, api.AttentionCap), NextCursor: "next"}, nil
				}
			},
			call: get("/api/ops/attention", "ops"), status: 200, want: []string{`"requests":100`, `"more":true`}},
		{name: "a requester cannot read the attention count", call: get("/api/ops/attention", "alice"), status: 403, want: []string{"Access denied"}, check: none},
		// ---- the merge trains (docs/operations.md, 'Merge trains') ----
		{name: "ops lists each project's merge train", call: get("/api/ops/trains", "ops"), status: 200,
			want: []string{`"items":[{"project":"infra/access-config","length":3,"cars":[{"batchId":7,"position":1,"status":"RUNNING"`, `"pipelineState":"running"`}},
		{name: "a requester cannot list the trains", call: get("/api/ops/trains", "alice"), status: 403, want: []string{"Access denied"}, check: none},
		{name: "ops pauses a project's queue with a reason, audited",
			call:   post("/api/ops/trains/pause", "ops", `{"operationId":"pz-1","project":"infra/access-config","reason":"  release freeze until 18:00 "}`),
			status: 200, want: []string{`"paused":{"by":"ops@example.com","reason":"release freeze until 18:00","since":"`},
			check: func(t *testing.T, h *harness) {
				if c := h.wf.Calls(); len(c) != 1 || c[0] != `PauseTrain(infra/access-config,"release freeze until 18:00",ops@example.com)` {
					t.Errorf("calls %v", c)
				}
				if st := h.dbState(); !strings.Contains(st, `audit ops.trains.pause:pz-1 ops@example.com ops.trains.pause {"__authenticatedOperator":"ops@example.com","operationId":"pz-1","project":"infra/access-config","reason":"  release freeze until 18:00 "}`) {
					t.Errorf("pause not audited:\n%s", st)
				}
			}},
		{name: "a pause sent again answers as the first time and pauses once",
			before: []call{post("/api/ops/trains/pause", "ops", `{"operationId":"pz-1","project":"infra/access-config","reason":"freeze"}`)},
			call:   post("/api/ops/trains/pause", "ops", `{"operationId":"pz-1","project":"infra/access-config","reason":"freeze"}`), status: 200,
			want: []string{`"reason":"freeze"`},
			check: func(t *testing.T, h *harness) {
				if n := h.wf.count("PauseTrain"); n != 1 {
					t.Errorf("paused %d times", n)
				}
			}},
		{name: "the same operationId for another pause is 422",
			before: []call{post("/api/ops/trains/pause", "ops", `{"operationId":"pz-1","project":"infra/access-config","reason":"freeze"}`)},
			call:   post("/api/ops/trains/pause", "ops", `{"operationId":"pz-1","project":"infra/access-config","reason":"another freeze"}`), status: 422},
		{name: "a requester cannot pause a queue, and nothing is recorded",
			call: post("/api/ops/trains/pause", "alice", `{"operationId":"pz-2","project":"infra/access-config","reason":"freeze"}`), status: 403, check: none},
		{name: "a pause without a reason is 400 reason, recorded nowhere",
			call: post("/api/ops/trains/pause", "ops", `{"operationId":"pz-3","project":"infra/access-config","reason":" "}`), status: 400,
			want: []string{`"field":"reason"`}, check: none},
		{name: "a pause reason over 512 characters is 400 reason",
			call:   post("/api/ops/trains/pause", "ops", `{"operationId":"pz-4","project":"infra/access-config","reason":"`+strings.Repeat("é", 513)+`"}`),
			status: 400, want: []string{`"field":"reason"`, "at most 512 characters"}, check: none},
		{name: "a project that is not a path is 400 project",
			call: post("/api/ops/trains/pause", "ops", `{"operationId":"pz-5","project":"infra access","reason":"freeze"}`), status: 400,
			want: []string{`"field":"project"`}, check: none},
		{name: "pausing a project bindery knows nothing of is 404",
			call: post("/api/ops/trains/pause", "ops", `{"operationId":"pz-6","project":"infra/unknown","reason":"freeze"}`), status: 404, want: []string{"infra/unknown"}},
		{name: "ops resumes a project's queue, audited",
			call: post("/api/ops/trains/resume", "ops", `{"operationId":"rs-1","project":"infra/access-config"}`), status: 200, notWant: []string{`"paused"`},
			check: func(t *testing.T, h *harness) {
				if st := h.dbState(); !strings.Contains(st, `audit ops.trains.resume:rs-1 ops@example.com ops.trains.resume`) {
					t.Errorf("resume not audited:\n%s", st)
				}
			}},
		{name: "resuming without a project is 400 project", call: post("/api/ops/trains/resume", "ops", `{"operationId":"rs-2"}`), status: 400,
			want: []string{`"field":"project"`}, check: none},
		{name: "ops sends a waiting request into the next car, audited", prep: bobs,
			call: post("/api/ops/requests/op-bob/next", "ops", `{"operationId":"nx-1"}`), status: 200, want: []string{`"operationId":"op-bob"`},
			check: func(t *testing.T, h *harness) {
				if c := h.wf.Calls(); !strings.Contains(strings.Join(c, " "), "MergeNext(op-bob,ops@example.com)") {
					t.Errorf("calls %v", c)
				}
				if st := h.dbState(); !strings.Contains(st, `audit ops.requests.next:nx-1 ops@example.com ops.requests.next {"__authenticatedOperator":"ops@example.com","operationId":"nx-1","request":"op-bob"}`) {
					t.Errorf("merge next not audited:\n%s", st)
				}
			}},
		{name: "a request that is not waiting for a car cannot be sent next: 409",
			prep: func(h *harness) {
				h.wf.MergeNextFn = func(context.Context, string, string) (api.RequestView, error) {
					return api.RequestView{}, apperr.New(apperr.Conflict, "This request is not waiting for a car (it is MERGING): only a request in a project's waiting set can be sent into the next car.")
				}
			},
			call: post("/api/ops/requests/op-bob/next", "ops", `{"operationId":"nx-2"}`), status: 409, want: []string{"not waiting for a car"}},
		{name: "sending an unknown request next is 404", call: post("/api/ops/requests/op-nobody/next", "ops", `{"operationId":"nx-3"}`), status: 404},
		{name: "a requester cannot send a request next", prep: bobs, call: post("/api/ops/requests/op-bob/next", "bob", `{"operationId":"nx-4"}`), status: 403,
			check: func(t *testing.T, h *harness) {
				if n := h.wf.count("MergeNext"); n != 0 {
					t.Errorf("a requester's merge next reached the workflow")
				}
			}},
		{name: "ops settles a batch", call: post("/api/ops/batches/7/settle", "ops", `{"operationId":"st-1"}`), status: 200, want: []string{`"status":"FAILED"`}},
		{name: "settling an unknown batch is 404", call: post("/api/ops/batches/99/settle", "ops", `{"operationId":"st-2"}`), status: 404},
		{name: "a batch id that is not a number is 400 id", call: post("/api/ops/batches/abc/settle", "ops", `{"operationId":"st-3"}`), status: 400, want: []string{`"field":"id"`}},
		{name: "an ops action without its operationId is 400", call: post("/api/ops/reconcile", "ops", `{}`), status: 400, want: []string{`"field":"operationId"`}},
		{name: "ops reconciles", call: post("/api/ops/reconcile", "ops", `{"operationId":"rc-1"}`), status: 200, want: []string{`{"scanned":3,"validated":1,"closed":0}`}},
		{name: "ops lists stuck requests by status and step", call: lenient(get("/api/ops/requests?status=merging&step=10501", "ops")), status: 200, want: []string{`{"items":[]}`},
			check: func(t *testing.T, h *harness) {
				if c := h.wf.Calls(); len(c) != 1 || c[0] != "StuckRequests(MERGING,10501,,20)" {
					t.Errorf("calls %v", c)
				}
			}},
		{name: "an unknown status filter is 400 status", call: get("/api/ops/requests?status=STUCK", "ops"), status: 400, want: []string{`"field":"status"`}},
		{name: "an unknown step filter is 400 step", call: get("/api/ops/requests?step=42", "ops"), status: 400, want: []string{`"field":"step"`}},
		{name: "the effective config redacts secrets", call: get("/api/ops/config", "ops"), status: 200,
			want: []string{`"key":"hooks.approvalSecret","effective":"(redacted)"`, `"pendingRestart":[]`, `"lastError":null`}, notWant: []string{"s3cret", "dtok"}},
		{name: "the audit log pages newest first", before: []call{post("/api/ops/reconcile", "ops", `{"operationId":"rc-1"}`), post("/api/ops/reconcile", "ops", `{"operationId":"rc-2"}`)},
			call: get("/api/ops/audit?limit=1", "ops"), status: 200, want: []string{`"action":"ops.reconcile"`, `"operationId":"rc-2"`, `"nextCursor":"`}},
		{name: "a bad audit cursor is 400", call: get("/api/ops/audit?cursor=abc", "ops"), status: 400, want: []string{`"field":"cursor"`}},

		// ---- webhooks ----
		{name: "a signed approval callback is handed to the workflow", prep: func(h *harness) {
			h.wf.put(api.RequestView{OperationID: "op-1", Subject: "alice@example.com", Status: state.StatusApprovalSent})
		},
			call: call{method: "POST", path: "/hooks/approval", body: cb, header: signed("s3cret", cb)}, status: 200, want: []string{`{"code":"ACCEPTED"}`}},
		{name: "a stale approval callback is 2xx IGNORED_STALE", call: call{method: "POST", path: "/hooks/approval", body: cb, header: signed("s3cret", cb)}, status: 200,
			want: []string{"IGNORED_STALE"}},
		{name: "a forged approval callback is 401 and recorded nowhere", call: call{method: "POST", path: "/hooks/approval", body: cb, header: signed("guess", cb)}, status: 401,
			want: []string{"Callback authentication failed."}, check: none},
		{name: "a replayed approval callback outside the skew is 401",
			call:   call{method: "POST", path: "/hooks/approval", body: cb, header: map[string]string{"X-Bindery-Timestamp": fmt.Sprint(t0.Unix() - 3600), "X-Bindery-Signature": approvalSig("s3cret", t0.Unix()-3600, cb)}},
			status: 401, check: none},
		{name: "without an approval secret every callback is 401", opts: options{config: map[string]string{"hooks.approvalSecret": ""}},
			call: call{method: "POST", path: "/hooks/approval", body: cb, header: signed("", cb)}, status: 401, check: none},
		{name: "an approval callback without its id is 400", call: call{method: "POST", path: "/hooks/approval", body: `{"operationId":"op-1","result":"APPROVED"}`, header: signed("s3cret", `{"operationId":"op-1","result":"APPROVED"}`)},
			status: 400, want: []string{`"field":"requestId"`}},
		{name: "an approval callback with an unknown result is 400", call: call{method: "POST", path: "/hooks/approval", body: `{"requestId":"c","operationId":"op-1","result":"MAYBE"}`, header: signed("s3cret", `{"requestId":"c","operationId":"op-1","result":"MAYBE"}`)},
			status: 400, want: []string{`"field":"result"`}},
		{name: "a webhook body over 1 MiB is 413", call: call{method: "POST", path: "/hooks/deploy", body: `{"project":"` + strings.Repeat("p", 1<<20) + `"}`, header: deploy}, status: 413, check: none},
		{name: "a deploy callback with its token is recorded", call: call{method: "POST", path: "/hooks/deploy", body: `{"project":"infra/access-config","mrIid":12,"operationIds":["op-1"]}`, header: deploy}, status: 200,
			check: func(t *testing.T, h *harness) {
				if c := h.wf.Calls(); len(c) != 1 || c[0] != "DeployCallback(infra/access-config,12,[op-1])" {
					t.Errorf("calls %v", c)
				}
			}},
		{name: "a deploy callback may name only the deployed commit", call: call{method: "POST", path: "/hooks/deploy", body: `{"project":"infra/access-config","sha":"` + strings.Repeat("ab", 20) + `"}`, header: deploy}, status: 200,
			check: func(t *testing.T, h *harness) {
				if c := h.wf.Calls(); len(c) != 1 || c[0] != "DeployCallback(infra/access-config,0@"+strings.Repeat("ab", 20)+",[])" {
					t.Errorf("calls %v", c)
				}
			}},
		{name: "a deploy callback with a short sha is 400", call: call{method: "POST", path: "/hooks/deploy", body: `{"project":"p","mrIid":3,"sha":"abc123"}`, header: deploy}, status: 400, want: []string{`"field":"sha"`}},
		{name: "a deploy callback with a wrong token is 401", call: call{method: "POST", path: "/hooks/deploy", body: `{"project":"p","mrIid":1}`, header: map[string]string{"Authorization": "Bearer nope"}}, status: 401, check: none},
		{name: "a deploy callback without a token is 401", call: call{method: "POST", path: "/hooks/deploy", body: `{"project":"p","mrIid":1}`}, status: 401, check: none},
		{name: "a deploy callback without an MR is 400", call: call{method: "POST", path: "/hooks/deploy", body: `{"project":"p"}`, header: deploy}, status: 400, want: []string{`"field":"mrIid"`}},
		{name: "a GitLab pipeline event shortcuts polling", call: call{method: "POST", path: "/hooks/gitlab", body: pipeline, header: gitlab}, status: 200,
			check: func(t *testing.T, h *harness) {
				if c := h.wf.Calls(); len(c) != 1 || c[0] != "GitLabEvent(pipeline,ev-1,infra/access-config,12,991,success,,refs/merge-requests/12/head)" {
					t.Errorf("calls %v", c)
				}
			}},
		{name: "a branch pipeline's event carries its ref", call: call{method: "POST", path: "/hooks/gitlab", body: branchPipeline, header: gitlab}, status: 200,
			check: func(t *testing.T, h *harness) {
				if c := h.wf.Calls(); len(c) != 1 || c[0] != "GitLabEvent(pipeline,ev-1,infra/access-config,0,992,failed,,bindery/batch-7)" {
					t.Errorf("calls %v", c)
				}
			}},
		{name: "another GitLab event kind is 200 IGNORED", call: call{method: "POST", path: "/hooks/gitlab", body: `{"object_kind":"push"}`, header: gitlab}, status: 200,
			want: []string{`{"code":"IGNORED"}`}, check: func(t *testing.T, h *harness) {
				if len(h.wf.Calls()) != 0 {
					t.Error("an ignored event reached the workflow")
				}
			}},
		{name: "a GitLab event with a wrong token is 401", call: call{method: "POST", path: "/hooks/gitlab", body: pipeline, header: map[string]string{"X-Gitlab-Token": "gto"}}, status: 401, check: none},
		{name: "a signed callback that is not JSON by type is 415",
			call: call{method: "POST", path: "/hooks/approval", body: cb, ct: "text/plain", header: signed("s3cret", cb)}, status: 415, check: none},

		// ---- infra and fallbacks ----
		{name: "healthz", call: get("/healthz", ""), status: 200},
		{name: "readyz checks the database", call: get("/readyz", ""), status: 200, want: []string{`"status":"ready"`}},
		{name: "the OpenAPI document is served", call: get("/api/openapi.json", ""), status: 200, want: []string{`"openapi": "3.0.3"`}},
		{name: "an unknown API path is 404 JSON", call: get("/api/nope", "alice"), status: 404, want: []string{`"code":"NOT_FOUND"`}},
		{name: "a wrong method is 405 JSON", call: call{method: "DELETE", path: "/api/apply", user: "alice"}, status: 405,
			want: []string{`"code":"METHOD_NOT_ALLOWED"`}, header: map[string]string{"Allow": "OPTIONS, POST"}},

		// ---- serve mode: the login proxy ----
		{name: "the login header from a trusted proxy resolves an employee id", opts: options{serve: true},
			call: call{method: "GET", path: "/api/me", peer: "10.1.2.3:5000", header: map[string]string{"X-Forwarded-User": "77001"}}, status: 200,
			want: []string{`"identity":"carol@corp.example"`, `"demo":false`}, notWant: []string{"demoUsers"}},
		{name: "the login header from anyone else is not believed", opts: options{serve: true},
			call: call{method: "GET", path: "/api/me", header: map[string]string{"X-Forwarded-User": "carol@corp.example"}}, status: 401, want: []string{"Sign-in required."}},
		{name: "the demo header outside demo mode is not believed", opts: options{serve: true}, call: get("/api/me", "ops"), status: 401},
		{name: "a caller without an identity is told where to sign in when server.loginURL is set", opts: options{serve: true, config: map[string]string{"server.loginURL": "https://login.corp.example/sso"}},
			call: get("/api/me", ""), status: 401, want: []string{`"loginUrl":"https://login.corp.example/sso"`, "sign in at https://login.corp.example/sso"}},
		{name: "a login URL that is not an absolute http(s) URL is no link", opts: options{serve: true, config: map[string]string{"server.loginURL": "login.corp.example"}},
			call: get("/api/me", ""), status: 401, want: []string{"Sign-in required."}, notWant: []string{"loginUrl", "login.corp.example"}},
		{name: "a webhook refused is never sent to a login page", opts: options{serve: true, config: map[string]string{"server.loginURL": "https://login.corp.example/sso"}},
			call: call{method: "POST", path: "/hooks/gitlab", body: `{"object_kind":"push"}`, header: map[string]string{"X-Gitlab-Token": "wrong"}}, status: 401, notWant: []string{"loginUrl"}},
		{name: "an employee id nobody maps is 401", opts: options{serve: true},
			call: call{method: "GET", path: "/api/me", peer: "10.1.2.3:5000", header: map[string]string{"X-Forwarded-User": "99999"}}, status: 401},
	}
}

func approvalSig(secret string, unix int64, body string) string {
	return approval.Sign([]byte(secret), time.Unix(unix, 0), []byte(body))
}

// result is what a row produced, in a form two runs can be compared by.
type result struct {
	answers []string // status, Retry-After, Content-Type and normalised body of each request
	db      string
	calls   []string
	last    http.Header // the checked request's response headers
}

func runRow(t *testing.T, r row, o options) (*harness, result) {
	t.Helper()
	h := setup(t, o)
	if r.prep != nil {
		r.prep(h)
	}
	var res result
	send := func(i int, c call) string {
		if c.header == nil {
			c.header = map[string]string{}
		}
		hdr := map[string]string{"X-Request-Id": fmt.Sprintf("r%d", i)}
		for k, v := range c.header {
			hdr[k] = v
		}
		c.header = hdr
		rec := h.do(c)
		res.last = rec.Header()
		res.answers = append(res.answers, fmt.Sprintf("%d|%s|%s|%s", rec.Code, rec.Header().Get("Retry-After"), rec.Header().Get("Content-Type"), normalized(rec.Body.String())))
		return rec.Body.String()
	}
	for i, c := range r.before {
		send(i+1, c)
	}
	if r.mid != nil {
		r.mid(h)
	}
	send(0, r.call)
	res.db, res.calls = h.dbState(), h.wf.Calls()
	return h, res
}

func TestEveryStatusCodeOfTheAPI(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[int]bool{}
	// Runs once every row, parallel ones too, has ended.
	t.Cleanup(func() {
		for _, code := range []int{200, 202, 400, 401, 403, 404, 405, 409, 413, 415, 422, 429, 500, 503} {
			if !seen[code] {
				t.Errorf("no row answers %d", code)
			}
		}
	})
	for _, r := range rows() {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel() // each row has a server and a database of its own
			o := r.opts
			h, res := runRow(t, r, o)
			last := res.answers[len(res.answers)-1]
			var status int
			fmt.Sscanf(last, "%d|", &status)
			body := strings.SplitN(last, "|", 4)[3] // status|Retry-After|Content-Type|body (the body may hold "|")
			if status != r.status {
				t.Fatalf("status %d, want %d; body %s", status, r.status, body)
			}
			mu.Lock()
			seen[status] = true
			mu.Unlock()
			for _, w := range r.want {
				if !strings.Contains(body, w) {
					t.Errorf("body lacks %s: %s", w, body)
				}
			}
			for _, w := range r.notWant {
				if strings.Contains(body, w) {
					t.Errorf("body has %s: %s", w, body)
				}
			}
			if status >= 400 {
				var e api.ErrorBody
				if err := json.Unmarshal([]byte(body), &e); err != nil || e.Code == "" || e.Message == "" || e.RequestID != "r0" {
					t.Errorf("error body %s is not {code, message, requestId}", body)
				}
			}
			for k, v := range r.header {
				if got := res.last.Get(k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
			if r.check != nil {
				r.check(t, h)
			}
		})
	}
}
