package workflow_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"bindery/api"
	"bindery/internal/sim"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// The operators' train actions and what the requesters read of the train, through the HTTP API,
// with package batch's real Service and pipelines that end when the test moves the simulator's
// clock: a project's queue paused and resumed, a request sent into the next car, the car a
// request rides in and the estimate of its merge.

// trainSims: one request per car (batch.maxRequests 1), up to three cars in CI, pipelines of ten
// minutes of the simulator's clock, merge commits. poll.long is long, so that a car waiting for
// its turn looks again only when woken (the pipeline looks stay in their short stage).
const trainSims = `
batch:
  flakyRetries: 0
  maxRequests: 1
  train: %d
poll:
  short: 5ms
  shortCount: 100000
  long: 1m
  timeout: 10h
sim:
  gitlab:
    pipelineDuration: 10m
    rebaseDuration: 0s
    approvalsRequired: 2
    mergeMethod: merge
  deploy:
    delay: 0s
`

func trainSetup(t *testing.T, db *store.DB, length int) (*harness, *sim.ManualClock) {
	clock := sim.NewManualClock(time.Now())
	h := setup(t, db, options{approvalFirst: true, realBatch: true, clock: clock, extra: fmt.Sprintf(trainSims, length)})
	return h, clock
}

// car applies for db-read as user, approves it and runs a round: the request's car is claimed and
// has written its branch (its pipeline runs).
func (h *harness) car(user string) (op string, batchID int64) {
	h.t.Helper()
	op = h.approved(user, "db-read")[0]
	h.round()
	h.waitFor("the car of "+op+" in CI", func() bool {
		v := h.view(op)
		return v.BatchID != 0 && v.MR != nil && v.Waiting != nil && v.Waiting.Car != nil
	})
	return op, h.view(op).BatchID
}

// opsCall calls an operator's route as ops and decodes the answer.
func (h *harness) opsCall(method, path, body string, out any) int {
	h.t.Helper()
	return h.api(method, path, "ops", body, out)
}

func (h *harness) trains() api.Train {
	h.t.Helper()
	var page api.Page[api.Train]
	if code := h.opsCall("GET", "/api/ops/trains", "", &page); code != 200 {
		h.t.Fatalf("trains: %d", code)
	}
	for _, t := range page.Items {
		if t.Project == project {
			return t
		}
	}
	h.t.Fatalf("no train of %s in %+v", project, page.Items)
	return api.Train{}
}

func (h *harness) audited(action string) []string {
	h.t.Helper()
	var page api.Page[store.AuditEntry]
	if code := h.opsCall("GET", "/api/ops/audit?limit=100", "", &page); code != 200 {
		h.t.Fatalf("audit: %d", code)
	}
	var out []string
	for _, e := range page.Items {
		if e.Action == action {
			out = append(out, e.Actor+" "+string(e.Params))
		}
	}
	return out
}

func merged(v api.RequestView) bool {
	return v.Status == state.StatusMerged || v.Status == state.StatusValidated
}

// A paused project claims nothing and merges nothing: its cars finish their pipelines and wait at
// their turn, the round answers PAUSED, and every requester waiting for it — in the waiting set
// or in a car — reads who paused it and why, never "nothing to do". Resumed, the cars merge at
// once (woken, not at their next look a minute later) and the next round claims again.
func TestAPausedProjectClaimsAndMergesNothingAndResumedItsCarsMergeAtOnce(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h, clock := trainSetup(t, db, 3)
		a, _ := h.car("alice")
		b, _ := h.car("bob")

		const reason = "release freeze until 18:00"
		var paused api.Train
		if code := h.opsCall("POST", "/api/ops/trains/pause", fmt.Sprintf(`{"operationId":"pause-1","project":%q,"reason":%q}`, project, reason), &paused); code != 200 {
			t.Fatalf("pause: %d %+v", code, paused)
		}
		if paused.Paused == nil || paused.Paused.By != "ops@example.com" || paused.Paused.Reason != reason || len(paused.Cars) != 2 {
			t.Fatalf("the pause's answer: %+v", paused)
		}
		c := h.approved("carol@example.com", "db-read")[0]
		res := h.round()
		if len(res.Partitions) != 1 || res.Partitions[0].Outcome != string(state.RoundPaused) {
			t.Fatalf("a paused project's round: %+v", res)
		}

		clock.Advance(11 * time.Minute) // both pipelines pass; the cars approve and wait at their turn
		h.waitFor("the first car to wait for the resume", func() bool {
			return strings.Contains(h.trains().Cars[0].WaitingFor, "is paused by ops@example.com: "+reason)
		})
		for _, op := range []string{a, b, c} {
			v := h.view(op)
			if merged(v) {
				t.Fatalf("%s merged while its queue was paused", op)
			}
			words := "paused by ops@example.com: " + reason
			if v.Waiting == nil || !strings.Contains(v.Waiting.WaitingFor, words) || !strings.Contains(v.NextActionText, words) || strings.Contains(strings.ToLower(v.NextActionText), "nothing to do") {
				t.Fatalf("%s does not say its queue is paused: %+v / %q", op, v.Waiting, v.NextActionText)
			}
			if v.Waiting.Estimate == nil || v.Waiting.Estimate.MergeAt != nil || v.Waiting.Estimate.Words != "no estimate yet" {
				t.Fatalf("%s has an estimate while its queue is paused: %+v", op, v.Waiting.Estimate)
			}
		}
		if v := h.view(c); v.BatchID != 0 || v.Waiting.Car != nil || !strings.HasPrefix(v.Waiting.WaitingFor, "the queue of "+project+" to be resumed") {
			t.Fatalf("the request admitted during the pause: %+v", v.Waiting)
		}
		if n := h.sims.GitLab.Calls("merge"); n != 0 {
			t.Fatalf("%d merges while paused", n)
		}

		var resumed api.Train
		start := time.Now()
		if code := h.opsCall("POST", "/api/ops/trains/resume", fmt.Sprintf(`{"operationId":"resume-1","project":%q}`, project), &resumed); code != 200 || resumed.Paused != nil {
			t.Fatalf("resume: %d %+v", code, resumed)
		}
		h.waitFor("both cars merged", func() bool { return merged(h.view(a)) && merged(h.view(b)) })
		if took := time.Since(start); took > 30*time.Second {
			t.Fatalf("the cars merged %v after the resume: not woken", took)
		}
		h.round()
		h.waitFor("the request admitted during the pause in a car", func() bool { return h.view(c).BatchID != 0 })
		if got := h.audited("ops.trains.pause"); len(got) != 1 || !strings.Contains(got[0], reason) || !strings.HasPrefix(got[0], "ops@example.com") {
			t.Fatalf("pause audit: %v", got)
		}
		if got := h.audited("ops.trains.resume"); len(got) != 1 {
			t.Fatalf("resume audit: %v", got)
		}
	})
}

// "Merge next": an operator sends a waiting request into the next car, ahead of the requests
// admitted before it; its timeline and the audit log say who did. A request that is not in a
// waiting set is refused (409), as is one already sent; a replay answers as the first time.
func TestMergeNextSendsARequestIntoTheNextCarAheadOfThoseAdmittedBeforeIt(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h, clock := trainSetup(t, db, 1)
		first, _ := h.car("alice") // the train is full: the others wait
		var waiting []string
		for _, user := range []string{"bob", "carol@example.com", "dave@example.com"} {
			waiting = append(waiting, h.approved(user, "db-read")[0])
		}
		hotfix := waiting[2]
		if v := h.view(hotfix); v.Waiting == nil || v.Waiting.Position != 3 || !strings.Contains(v.Waiting.WaitingFor, "it is full (1 of 1 cars in CI") {
			t.Fatalf("before: %+v", v.Waiting)
		}

		var v api.RequestView
		if code := h.opsCall("POST", "/api/ops/requests/"+hotfix+"/next", `{"operationId":"next-1"}`, &v); code != 200 {
			t.Fatalf("merge next: %d %+v", code, v)
		}
		note := "sent into the next car of " + project + " by ops@example.com"
		if last := v.Timeline[len(v.Timeline)-1]; last.Note != note || last.Step.Code != int(state.StepQueued) {
			t.Fatalf("the timeline's last step: %+v", last)
		}
		if v.Waiting == nil || v.Waiting.Position != 1 || v.Waiting.Ahead != 0 || v.Waiting.NextBy != "ops@example.com" || !strings.Contains(v.Waiting.WaitingFor, "sent ahead of the queue by ops@example.com") {
			t.Fatalf("after: %+v", v.Waiting)
		}
		if w := h.view(waiting[0]); w.Waiting.Position != 2 {
			t.Fatalf("the request admitted first is at %d, want 2 (behind the one sent next)", w.Waiting.Position)
		}
		var again api.RequestView
		if code := h.opsCall("POST", "/api/ops/requests/"+hotfix+"/next", `{"operationId":"next-1"}`, &again); code != 200 || len(again.Timeline) != len(v.Timeline) {
			t.Fatalf("a replay: %d, %d steps (first answer %d)", code, len(again.Timeline), len(v.Timeline))
		}
		var e struct{ Code, Message string }
		if code := h.opsCall("POST", "/api/ops/requests/"+hotfix+"/next", `{"operationId":"next-2"}`, &e); code != 409 || !strings.Contains(e.Message, "already sent") {
			t.Fatalf("sent twice: %d %+v", code, e)
		}
		if code := h.opsCall("POST", "/api/ops/requests/"+first+"/next", `{"operationId":"next-3"}`, &e); code != 409 || !strings.Contains(e.Message, "not waiting for a car") {
			t.Fatalf("a request in a car: %d %+v", code, e)
		}
		if code := h.opsCall("POST", "/api/ops/requests/op-nobody/next", `{"operationId":"next-4"}`, &e); code != 404 {
			t.Fatalf("an unknown request: %d %+v", code, e)
		}
		if code := h.api("POST", "/api/ops/requests/"+waiting[0]+"/next", "bob", `{"operationId":"next-5"}`, &e); code != 403 {
			t.Fatalf("a requester: %d %+v", code, e)
		}
		if got := h.audited("ops.requests.next"); len(got) != 4 || !strings.Contains(strings.Join(got, " "), `"request":"`+hotfix+`"`) {
			t.Fatalf("audit: %v (every attempt is on record: recorded before it runs)", got)
		}

		clock.Advance(11 * time.Minute)
		h.waitFor("the first car merged", func() bool { return merged(h.view(first)) })
		h.round()
		h.waitFor("the request sent next in a car", func() bool { return h.view(hotfix).BatchID != 0 })
		for _, op := range waiting[:2] {
			if w := h.view(op); w.BatchID != 0 || w.Waiting == nil || w.Waiting.Position == 0 {
				t.Fatalf("%s, admitted before the one sent next, went first: %+v", op, w.Waiting)
			}
		}
		if tr := h.trains(); tr.MergeNext != 0 || tr.Waiting != 2 || len(tr.Cars) != 1 || tr.Cars[0].Members[0].OperationID != hotfix {
			t.Fatalf("the train: %+v", tr)
		}
	})
}

// A request in a car reads its place in the train ("car 3 of 3"), the cars ahead with their
// pipeline state, and an estimate: "no estimate yet" until three pipelines of the project passed,
// then a time from their median. A request waiting for a full train says so. The ops console
// shows the same train.
func TestARequestReadsItsCarTheCarsAheadAndAnEstimateNeverMadeUp(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h, clock := trainSetup(t, db, 3)
		var ops []string
		var cars []int64
		for _, user := range []string{"alice", "bob", "carol@example.com"} {
			op, id := h.car(user)
			ops, cars = append(ops, op), append(cars, id)
		}
		v := h.view(ops[2])
		car := v.Waiting.Car
		if car.BatchID != cars[2] || car.Position != 3 || car.Of != 3 || len(car.Ahead) != 2 || car.Ahead[0].BatchID != cars[0] || car.Ahead[1].BatchID != cars[1] {
			t.Fatalf("car: %+v", car)
		}
		for _, a := range car.Ahead {
			if a.Pipeline != "running" || a.MR == nil {
				t.Fatalf("a car ahead: %+v", a)
			}
		}
		if e := v.Waiting.Estimate; e == nil || e.MergeAt != nil || e.Words != "no estimate yet" ||
			e.Basis != "0 pipelines of "+project+" recorded so far; an estimate needs at least 3" {
			t.Fatalf("estimate without pipelines: %+v", e)
		}
		full := h.approved("dave@example.com", "db-read")[0]
		if w := h.view(full).Waiting; w.Car != nil || !strings.Contains(w.WaitingFor, "a free car in the merge train of "+project+": it is full (3 of 3 cars in CI") {
			t.Fatalf("waiting for a full train: %+v", w)
		}
		tr := h.trains()
		if tr.Length != 3 || len(tr.Cars) != 3 || tr.Waiting != 1 || len(tr.Queue) != 1 || tr.Queue[0].OperationID != full || tr.Cars[2].Position != 3 ||
			tr.Cars[0].PipelineState != "running" || len(tr.Cars[1].Members) != 1 || tr.Cars[1].Members[0].OperationID != ops[1] {
			t.Fatalf("ops train: %+v", tr)
		}

		clock.Advance(11 * time.Minute)
		h.waitFor("three cars merged", func() bool { return merged(h.view(ops[0])) && merged(h.view(ops[1])) && merged(h.view(ops[2])) })
		h.round()
		h.waitFor("the fourth request in a car", func() bool {
			w := h.view(full).Waiting
			return w != nil && w.Car != nil
		})
		w := h.view(full).Waiting
		if w.Car.Position != 1 || w.Car.Of != 1 || len(w.Car.Ahead) != 0 {
			t.Fatalf("alone in the train: %+v", w.Car)
		}
		e := w.Estimate
		if e == nil || e.MergeAt == nil || !strings.HasPrefix(e.Basis, "median of the last 3 pipelines of "+project+": ") || e.Words == "no estimate yet" {
			t.Fatalf("estimate after three pipelines: %+v", e)
		}
	})
}

// Pausing or resuming a project bindery knows nothing of is 404; one of the catalog is paused
// before anything of it was batched (a freeze set ahead).
func TestPausingAProjectBinderyKnowsNothingOfIsNotFound(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h, _ := trainSetup(t, db, 3)
		var e struct{ Code string }
		for _, path := range []string{"/api/ops/trains/pause", "/api/ops/trains/resume"} {
			if code := h.opsCall("POST", path, `{"operationId":"p-`+path[len(path)-5:]+`","project":"infra/nobody","reason":"freeze"}`, &e); code != 404 || e.Code != "NOT_FOUND" {
				t.Fatalf("%s of an unknown project: %d %+v", path, code, e)
			}
		}
		var tr api.Train
		if code := h.opsCall("POST", "/api/ops/trains/pause", `{"operationId":"p-2","project":"infra/observability-config","reason":"freeze"}`, &tr); code != 200 || tr.Paused == nil {
			t.Fatalf("a catalog project without batches: %d %+v", code, tr)
		}
	})
}
