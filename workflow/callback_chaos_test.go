package workflow_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"bindery/api"
	"bindery/internal/remote/approval"
	"bindery/internal/sim"
	"bindery/internal/testkit"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// Callback chaos at scale (issue 8, point 2; docs/workflow.md, 'Approval decisions'; docs/api.md,
// 'Callbacks'): hundreds of requests await approval; then many goroutines deliver, through the real
// HTTP server and its HMAC check, the real decisions duplicated, reordered and racing, early ones
// for operations not applied yet, stale ones for an application replaced by a re-application,
// forged ones (wrong secret, stale or future timestamp, body changed after signing, no signature),
// decisions of the wrong ticket for a real operation, and deploy and GitLab webhooks with
// duplicated, unknown or forged contents. Afterwards SQL says: each request is in the state its
// first genuine decision implies, its version and timeline moved exactly once per real change,
// forged callbacks left no trace but their refusal counter.

// chaosClass is what happens to one request of the chaos test.
type chaosClass int

const (
	chaosDuplicated    chaosClass = iota // the approval, delivered 5 times at once → approved once
	chaosRejectApprove                   // rejection first, then the approval → rejected
	chaosApproveReject                   // approval first, then the rejection → approved
	chaosRacing                          // approval, rejection and withdrawal at once → the one accepted decides
	chaosStale                           // rejected and re-applied; the old application's callbacks → the new one waits on
	chaosForged                          // only forged callbacks → still awaiting approval, untouched
	chaosWrongTicket                     // a signed decision of another ticket (a legacy MR) → nothing; then the real one
	chaosEarly                           // a decision before the application exists → nothing; then the real one
	chaosClasses
)

type chaosReq struct {
	user, target string
	class        chaosClass
	op, oldOp    string
	version      int64 // binding version once the ticket was sent
	steps        int   // timeline entries then
	oldSteps     int   // and the replaced application's
	accepted     []string
}

// answer is one delivery's HTTP status and answer code; retried says an earlier attempt was
// answered 503 (its transaction may have committed before its answer was lost).
type answer struct {
	status  int
	code    string
	retried bool
}

func (a answer) is(status int, code string) bool { return a.status == status && a.code == code }

func TestCallbackChaosAtScaleChangesOnlyWhatTheFirstGenuineDecisionSays(t *testing.T) {
	t.Parallel()
	const targets = 80 // × 3 demo users = 240 requests (and 30 re-applications)
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		var cat strings.Builder
		cat.WriteString("targets:\n")
		for i := range targets {
			fmt.Fprintf(&cat, "  - {key: t%02d, title: T%d, project: infra/access-config, path: \"t%02d/{subject}.yaml\"}\n", i, i, i)
		}
		h := setup(t, db, options{approvalFirst: true, workers: 8, extra: fastSims + "ratelimit:\n  apply: ''\n" + cat.String()})
		const secret = "test-approval-secret"
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

		once := func(path string, body []byte, hdr map[string]string) (answer, []byte) {
			req, _ := http.NewRequest("POST", h.url+path, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return answer{}, nil
			}
			defer resp.Body.Close()
			data, _ := io.ReadAll(resp.Body)
			var res struct{ Code string }
			_ = json.Unmarshal(data, &res)
			return answer{status: resp.StatusCode, code: res.Code}, data
		}
		// A sender tries a 503 again, as the approval system and GitLab do: on a loaded machine
		// (the race detector, CI's parallel packages) the database's request deadline answers
		// some of these hundreds of concurrent callbacks "try again shortly".
		post := func(path string, body []byte, hdr map[string]string) answer {
			retried := false
			for wait := 50 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
				a, data := once(path, body, hdr)
				a.retried = retried
				if a.status != http.StatusServiceUnavailable || wait >= 2*time.Second {
					if a.status >= 500 {
						t.Errorf("%s: %d %s", path, a.status, data)
					}
					return a
				}
				retried = true
				time.Sleep(wait) // the sender's backoff
			}
		}
		signedAt := func(cb api.ApprovalCallback, key string, at time.Time) ([]byte, map[string]string) {
			body, _ := json.Marshal(cb)
			return body, map[string]string{approval.TimestampHeader: fmt.Sprint(at.Unix()), approval.SignatureHeader: approval.Sign([]byte(key), at, body)}
		}
		deliver := func(cb api.ApprovalCallback) answer {
			body, hdr := signedAt(cb, secret, time.Now())
			return post("/hooks/approval", body, hdr)
		}

		// The requests, and the applications each class needs before the chaos.
		var reqs []*chaosReq
		for i, user := range []string{"alice", "bob", "ops"} {
			for j := range targets {
				n := i*targets + j
				reqs = append(reqs, &chaosReq{user: user, target: fmt.Sprintf("t%02d", j), class: chaosClass(n % int(chaosClasses)), op: fmt.Sprintf("chaos-%s-%02d", user, j)})
			}
		}
		applyAs := func(r *chaosReq, op string) {
			var res api.ApplyResult
			body := fmt.Sprintf(`{"operationId":%q,"targetKey":%q,"reason":"chaos"}`, op, r.target)
			if code := h.api("POST", "/api/apply", r.user, body, &res); code != 202 {
				t.Fatalf("apply %s: %d %+v", op, code, res)
			}
		}
		parallel(reqs, 16, func(r *chaosReq) {
			if r.class == chaosEarly {
				// No row yet: nothing to decide, and the early decision must not block the later one.
				if a := deliver(api.ApprovalCallback{CallbackID: "early-" + r.op, OperationID: r.op, Result: "APPROVED"}); !a.is(200, api.CallbackIgnoredStale) {
					t.Errorf("early callback for %s: %+v", r.op, a)
				}
			}
			if r.class == chaosStale {
				r.oldOp = r.op + "-old"
				applyAs(r, r.oldOp) // rejected below, then re-applied as r.op
				return
			}
			applyAs(r, r.op)
		})
		for _, r := range reqs {
			if r.class != chaosStale {
				continue
			}
			waitStatus(t, db, r.oldOp, state.StatusApprovalSent)
			if a := deliver(api.ApprovalCallback{CallbackID: "reject-" + r.oldOp, OperationID: r.oldOp, Result: "REJECTED"}); !a.is(200, api.CallbackAccepted) && !(a.retried && a.is(200, api.CallbackDuplicate)) {
				t.Fatalf("rejection of %s: %+v", r.oldOp, a)
			}
			applyAs(r, r.op)
		}
		for _, r := range reqs {
			waitStatus(t, db, r.op, state.StatusApprovalSent)
			r.version, r.steps = bindingVersion(t, db, r.op), stepCount(t, db, r.op)
			if r.oldOp != "" {
				r.oldSteps = stepCount(t, db, r.oldOp)
			}
		}
		auditBefore := count(t, db, "SELECT COUNT(*) FROM audit_log")

		// Phase 1: the first decisions, duplicated and racing, and every forgery, all at once.
		type delivery struct {
			r    *chaosReq
			cb   api.ApprovalCallback
			send func() answer
		}
		var phase1, phase2 []delivery
		genuine := func(r *chaosReq, id, result string, times int) []delivery {
			cb := api.ApprovalCallback{CallbackID: id, OperationID: r.op, Result: result}
			var out []delivery
			for range times {
				out = append(out, delivery{r: r, cb: cb, send: func() answer { return deliver(cb) }})
			}
			return out
		}
		forgedCount := 0
		forged := func(r *chaosReq, kind string) delivery {
			forgedCount++
			cb := api.ApprovalCallback{CallbackID: fmt.Sprintf("forged-%s-%s", kind, r.op), OperationID: r.op, Result: "APPROVED"}
			return delivery{r: r, cb: cb, send: func() answer {
				var body []byte
				var hdr map[string]string
				switch kind {
				case "secret":
					body, hdr = signedAt(cb, "not-the-secret", time.Now())
				case "old":
					body, hdr = signedAt(cb, secret, time.Now().Add(-10*time.Minute))
				case "future":
					body, hdr = signedAt(cb, secret, time.Now().Add(10*time.Minute))
				case "tampered": // a real signature of a rejection, the body turned into an approval
					rej := cb
					rej.Result = "REJECTED"
					_, hdr = signedAt(rej, secret, time.Now())
					body, _ = json.Marshal(cb)
				case "unsigned":
					body, _ = json.Marshal(cb)
					hdr = map[string]string{approval.TimestampHeader: fmt.Sprint(time.Now().Unix())}
				case "garbage":
					body, hdr = signedAt(cb, secret, time.Now())
					hdr[approval.SignatureHeader] = "sha256=zz" + hdr[approval.SignatureHeader][9:]
				}
				return post("/hooks/approval", body, hdr)
			}}
		}
		for _, r := range reqs {
			switch r.class {
			case chaosDuplicated:
				phase1 = append(phase1, genuine(r, "a-"+r.op, "APPROVED", 5)...)
			case chaosRejectApprove:
				phase1 = append(phase1, genuine(r, "r-"+r.op, "REJECTED", 3)...)
				phase2 = append(phase2, genuine(r, "a-"+r.op, "APPROVED", 3)...)
				phase2 = append(phase2, genuine(r, "r-"+r.op, "REJECTED", 1)...)
			case chaosApproveReject:
				phase1 = append(phase1, genuine(r, "a-"+r.op, "APPROVED", 3)...)
				phase2 = append(phase2, genuine(r, "r-"+r.op, "REJECTED", 3)...)
				phase2 = append(phase2, genuine(r, "w-"+r.op, "WITHDRAWN", 1)...)
			case chaosRacing:
				phase1 = append(phase1, genuine(r, "a-"+r.op, "APPROVED", 3)...)
				phase1 = append(phase1, genuine(r, "r-"+r.op, "REJECTED", 3)...)
				phase1 = append(phase1, genuine(r, "w-"+r.op, "WITHDRAWN", 2)...)
			case chaosStale:
				old := *r
				old.op = r.oldOp
				phase1 = append(phase1, genuine(&old, "late-a-"+r.oldOp, "APPROVED", 3)...)
				phase1 = append(phase1, genuine(&old, "reject-"+r.oldOp, "REJECTED", 2)...) // its own, again
			case chaosForged:
				for _, kind := range []string{"secret", "old", "future", "tampered", "unsigned", "garbage"} {
					phase1 = append(phase1, forged(r, kind))
				}
			case chaosWrongTicket:
				cb := api.ApprovalCallback{CallbackID: "wrong-" + r.op, OperationID: r.op, Result: "APPROVED", Ext: map[string]string{"mrId": "999"}}
				phase1 = append(phase1, delivery{r: r, cb: cb, send: func() answer { return deliver(cb) }}, delivery{r: r, cb: cb, send: func() answer { return deliver(cb) }})
				phase2 = append(phase2, genuine(r, "a-"+r.op, "APPROVED", 2)...)
			case chaosEarly:
				phase2 = append(phase2, genuine(r, "a-"+r.op, "APPROVED", 2)...)
			}
			// Unknown operations, signed: answered stale, recorded nowhere near a request.
			phase1 = append(phase1, genuine(&chaosReq{op: "never-" + r.op}, "u-"+r.op, "APPROVED", 1)...)
		}
		var mu sync.Mutex
		answers := map[string][]answer{} // callback id → answers
		run := func(ds []delivery) {
			// Interleave the requests' deliveries rather than sending one request's in a row.
			shuffled := make([]delivery, len(ds))
			for i, j := range rng(len(ds)) {
				shuffled[i] = ds[j]
			}
			parallel(shuffled, 32, func(d delivery) {
				a := d.send()
				mu.Lock()
				answers[d.cb.CallbackID] = append(answers[d.cb.CallbackID], a)
				mu.Unlock()
			})
		}
		run(phase1)
		run(phase2)

		// Webhooks of the deploy pipeline and GitLab: duplicated, unknown MRs, forged senders.
		approvedOps := []string{}
		for _, r := range reqs {
			if r.class == chaosDuplicated {
				approvedOps = append(approvedOps, r.op)
			}
		}
		// A deploy callback of an MR bindery knows (a settled batch's, with none of these requests),
		// resent concurrently: recorded once, nothing validated.
		if _, err := db.Raw().Exec("INSERT INTO merge_batch (partition_key, project, status, mr_iid) VALUES (?, ?, 'SUCCEEDED', 900001)", project, project); err != nil {
			t.Fatal(err)
		}
		deployBody, _ := json.Marshal(api.DeployCallback{Project: project, MRIID: 900001})
		type hook struct {
			genuine bool
			send    func() answer
		}
		var hooks []hook
		for range 5 {
			hooks = append(hooks,
				hook{true, func() answer {
					return post("/hooks/deploy", deployBody, map[string]string{"Authorization": "Bearer test-deploy-token"})
				}},
				hook{false, func() answer {
					return post("/hooks/deploy", deployBody, map[string]string{"Authorization": "Bearer forged"})
				}},
				hook{false, func() answer { return post("/hooks/deploy", deployBody, nil) }},
				hook{false, func() answer {
					return post("/hooks/gitlab", []byte(`{"object_kind":"merge_request","project":{"path_with_namespace":"infra/access-config"},"object_attributes":{"iid":900001,"state":"merged","action":"merge"}}`), map[string]string{"X-Gitlab-Token": "forged"})
				}},
				hook{false, func() answer {
					return post("/hooks/gitlab", []byte(`{"object_kind":"pipeline","project":{"path_with_namespace":"infra/access-config"},"object_attributes":{"id":7,"status":"success"}}`), nil)
				}},
			)
		}
		var deployAnswers []answer
		parallel(hooks, 8, func(hk hook) {
			a := hk.send()
			if !hk.genuine {
				if !a.is(401, "UNAUTHENTICATED") {
					t.Errorf("forged webhook answered %+v, want 401 UNAUTHENTICATED", a)
				}
				return
			}
			mu.Lock()
			defer mu.Unlock()
			deployAnswers = append(deployAnswers, a)
		})
		accepted := 0
		for _, a := range deployAnswers {
			if a.code == api.CallbackAccepted {
				accepted++
			} else if a.code != api.CallbackDuplicate {
				t.Errorf("genuine deploy callback answered %+v", a)
			}
		}
		if accepted != 1 {
			t.Errorf("%d deploy callbacks of one MR answered ACCEPTED, want 1: %+v", accepted, deployAnswers)
		}

		// The answers: each callback id is fresh at most once; forged ones never reach the workflow.
		for id, as := range answers {
			fresh := 0
			for _, a := range as {
				switch {
				case strings.HasPrefix(id, "forged-"):
					if !a.is(401, "UNAUTHENTICATED") {
						t.Errorf("forged %s answered %+v", id, a)
					}
				case a.status != 200:
					t.Errorf("genuine %s answered %+v", id, a)
				case a.code == api.CallbackAccepted || a.code == api.CallbackIgnoredStale:
					fresh++
				case a.code != api.CallbackDuplicate:
					t.Errorf("%s answered %+v", id, a)
				}
			}
			// An attempt answered 503 may have committed before its answer was lost: its retry
			// is then a duplicate, and SQL below says whether it took effect exactly once.
			lost := fresh == 0 && slices.ContainsFunc(as, func(a answer) bool { return a.retried && a.code == api.CallbackDuplicate })
			if !strings.HasPrefix(id, "forged-") && !strings.HasPrefix(id, "reject-") && fresh != 1 && !lost {
				t.Errorf("callback %s was taken as fresh %d times: %+v", id, fresh, as)
			}
		}
		for _, r := range reqs {
			for _, prefix := range []string{"a-", "r-", "w-"} {
				for _, a := range answers[prefix+r.op] {
					if a.code == api.CallbackAccepted {
						r.accepted = append(r.accepted, prefix)
					}
				}
			}
		}

		// What SQL says.
		for _, r := range reqs {
			want, decided := state.StatusApprovalSent, false
			switch r.class {
			case chaosDuplicated, chaosApproveReject, chaosWrongTicket, chaosEarly:
				want, decided = state.StatusMRCreating, true
			case chaosRejectApprove:
				want, decided = state.StatusRejected, true
			case chaosRacing:
				decided = true
				if len(r.accepted) == 1 {
					want = map[string]state.BindingStatus{"a-": state.StatusMRCreating, "r-": state.StatusRejected, "w-": state.StatusRejected}[r.accepted[0]]
				}
			}
			if decided && len(r.accepted) != 1 {
				t.Errorf("%s (class %d): %d decisions accepted %v, want exactly the first", r.op, r.class, len(r.accepted), r.accepted)
			}
			var status, current string
			var version int64
			if err := db.Raw().QueryRow("SELECT status, operation_id, version FROM binding WHERE subject_id = (SELECT subject_id FROM operation WHERE operation_id = ?) AND target_key = ?", r.op, r.target).Scan(&status, &current, &version); err != nil {
				t.Fatalf("%s: %v", r.op, err)
			}
			moves := map[bool]int64{true: 1, false: 0}[decided]
			if state.BindingStatus(status) != want || current != r.op || version != r.version+moves {
				t.Errorf("%s (class %d): binding %s of %s at version %d, want %s of %s at version %d", r.op, r.class, status, current, version, want, r.op, r.version+moves)
			}
			if n := stepCount(t, db, r.op); n != r.steps+int(moves) {
				t.Errorf("%s (class %d): %d timeline entries, want %d", r.op, r.class, n, r.steps+int(moves))
			}
			queued := count(t, db, "SELECT COUNT(*) FROM merge_batch_request WHERE operation_id = ?", r.op)
			if wantQueued := map[bool]int{true: 1}[want == state.StatusMRCreating]; queued != wantQueued {
				t.Errorf("%s (class %d): %d rows in the waiting set, want %d", r.op, r.class, queued, wantQueued)
			}
			if r.oldOp != "" {
				if n := count(t, db, "SELECT COUNT(*) FROM merge_batch_request WHERE operation_id = ?", r.oldOp); n != 0 {
					t.Errorf("the replaced application %s was queued", r.oldOp)
				}
				if n := stepCount(t, db, r.oldOp); n != r.oldSteps {
					t.Errorf("the replaced application %s has %d timeline entries, had %d", r.oldOp, n, r.oldSteps)
				}
			}
		}
		if n := count(t, db, "SELECT COUNT(*) FROM approval_callback WHERE callback_id LIKE 'forged-%'"); n != 0 {
			t.Errorf("%d forged callbacks were recorded", n)
		}
		if n := count(t, db, "SELECT COUNT(*) FROM binding WHERE operation_id LIKE 'never-%'"); n != 0 {
			t.Errorf("callbacks of unknown operations made %d bindings", n)
		}
		if n := count(t, db, "SELECT COUNT(*) FROM deploy_callback"); n != 1 {
			t.Errorf("%d deploy callbacks recorded, want the one genuine MR", n)
		}
		if n := count(t, db, "SELECT COUNT(*) FROM binding WHERE status IN ('MERGING', 'MERGED', 'VALIDATED')"); n != 0 {
			t.Errorf("%d requests moved past the batch without a batch", n)
		}
		if n := count(t, db, "SELECT COUNT(*) FROM audit_log"); n != auditBefore {
			t.Errorf("callbacks wrote %d audit entries; callbacks are not operator actions", n-auditBefore)
		}
		if got, want := h.metric(`bindery_http_refused_total{route="hook.approval",code="UNAUTHENTICATED"}`), fmt.Sprint(forgedCount); got != want {
			t.Errorf("refused approval callbacks counted %q, want %s", got, want)
		}
		if got := h.metric(`bindery_http_refused_total{route="hook.deploy",code="UNAUTHENTICATED"}`); got != "10" {
			t.Errorf("refused deploy callbacks counted %q, want 10", got)
		}
		if got := h.metric(`bindery_http_refused_total{route="hook.gitlab",code="UNAUTHENTICATED"}`); got != "10" {
			t.Errorf("refused GitLab hooks counted %q, want 10", got)
		}
		t.Logf("%d requests, %d approval deliveries (%d forged), 25 webhooks", len(reqs), len(phase1)+len(phase2), forgedCount)
	})
}

// parallel runs fn over items on n goroutines.
func parallel[T any](items []T, n int, fn func(T)) {
	ch := make(chan T)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range ch {
				fn(it)
			}
		}()
	}
	for _, it := range items {
		ch <- it
	}
	close(ch)
	wg.Wait()
}

// rng is a fixed permutation of 0..n-1 (a linear congruential walk), so a failure replays.
func rng(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	x := uint64(42)
	for i := n - 1; i > 0; i-- {
		x = x*6364136223846793005 + 1442695040888963407
		j := int((x >> 33) % uint64(i+1))
		out[i], out[j] = out[j], out[i]
	}
	return out
}

func count(t *testing.T, db *store.DB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Raw().QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func bindingVersion(t *testing.T, db *store.DB, op string) int64 {
	t.Helper()
	var v int64
	if err := db.Raw().QueryRow("SELECT version FROM binding WHERE operation_id = ?", op).Scan(&v); err != nil {
		t.Fatalf("version of %s: %v", op, err)
	}
	return v
}

func stepCount(t *testing.T, db *store.DB, op string) int {
	return count(t, db, "SELECT COUNT(*) FROM operation_step WHERE operation_id = ?", op)
}

// waitStatus polls SQL until op's binding is in status (its ticket step runs on the pool).
func waitStatus(t *testing.T, db *store.DB, op string, status state.BindingStatus) {
	t.Helper()
	testkit.Eventually(t, fmt.Sprintf("%s to reach %s", op, status), func() bool {
		var st string
		err := db.Raw().QueryRow("SELECT status FROM binding WHERE operation_id = ?", op).Scan(&st)
		return err == nil && state.BindingStatus(st) == status
	})
}

// The other direction of a wrong ticket: a legacy request's ticket carries its MR, so a decision
// without one, or naming another MR, is not its ticket's and changes nothing — acting on it would
// batch a request whose own MR is open, or merge an MR that is not its own. Its real decision
// then finishes it in its own flow.
func TestALegacyRequestIgnoresDecisionsOfAnotherTicket(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{})
		op := h.apply("alice", "db-read")
		v := h.waitState(op, state.StatusApprovalSent, state.StepApprovalSent)
		version := bindingVersion(t, db, op)
		for i, ext := range []map[string]string{nil, {"mrId": ""}, {"mrId": fmt.Sprint(v.MR.ID + 1)}} {
			for _, result := range []string{"APPROVED", "REJECTED"} {
				cb := api.ApprovalCallback{CallbackID: fmt.Sprintf("other-%d-%s", i, result), OperationID: op, Result: result, Ext: ext}
				if code, answer := h.callback(cb, "test-approval-secret"); code != 200 || answer != api.CallbackIgnoredStale {
					t.Fatalf("decision with ext %v: %d %s", ext, code, answer)
				}
			}
		}
		if got := bindingVersion(t, db, op); got != version {
			t.Fatalf("decisions of another ticket moved the request (version %d → %d)", version, got)
		}
		if n := count(t, db, "SELECT COUNT(*) FROM merge_batch_request WHERE operation_id = ?", op); n != 0 {
			t.Fatalf("the legacy request was admitted to the waiting set")
		}
		if got := h.sims.GitLab.MergeRequestState(project, v.MR.ID); got != "opened" {
			t.Fatalf("its MR is %s", got)
		}
		h.decide(op, sim.TicketApproved)
		h.waitState(op, state.StatusValidated, 0)
	})
}
