//go:build e2e

package ui_test

import (
	"fmt"

	"go.yaml.in/yaml/v3"

	"bindery/api"
	"bindery/internal/platform/config"
	"bindery/internal/vocab/state"
)

// The states the browser tests show, each reached the real way on a site (site_test.go): through
// the API, the approval simulator's inbox, batch rounds run as an operator, and the simulators'
// faults. Each helper returns once bindery is in the state, with the request's view.

// breaksCI is a text that, in a change, makes the simulated GitLab's pipelines fail as a bad
// change fails real CI (sim.gitlab.pipelineFailOn): a request whose reason carries it is a
// culprit.
const breaksCI = "BREAKS-CI"

// culpritSettings are the settings under which a change with breaksCI fails its pipelines.
var culpritSettings = []setting{set("sim.gitlab.pipelineFailOn", []string{breaksCI})}

// queued applies and approves: the request waits in its project's waiting set for a batch round.
func (s *site) queued(user, target, reason string) string {
	s.t.Helper()
	op := s.apply(user, target, reason)
	s.approve(op)
	s.waitRequest(op, op+" in the waiting set", func(v api.RequestView) bool { return v.Step.Code == int(state.StepQueued) })
	return op
}

// inCI is a request whose batch's pipeline runs and does not finish (a hung runner): the
// request waits for it, in the CI stage.
func (s *site) inCI(user, target, reason string) string {
	s.t.Helper()
	op := s.queued(user, target, reason)
	s.sims().GitLab.StickNextPipelines(1)
	s.roundTaking(op)
	s.waitRequest(op, op+" in CI", func(v api.RequestView) bool { return v.Stage == "ci" && v.Pipeline != nil })
	return op
}

// validated takes a request the whole way: applied, approved, batched, merged, deployed.
func (s *site) validated(user, target, reason string) string {
	s.t.Helper()
	op := s.queued(user, target, reason)
	s.roundTaking(op)
	s.waitRequest(op, op+" in effect", func(v api.RequestView) bool { return v.Status == state.StatusValidated })
	return op
}

// failedInCI is a request whose change fails its pipeline (the site runs with culpritSettings):
// batched with another person's good change for the same project (otherTarget's), the batch's pipeline fails,
// bisection isolates this one, whose own pipeline then fails for good (CREATE_FAILED); the good
// change goes on. Returns the culprit's and the good request's operationIds.
func (s *site) failedInCI(user, target, other, otherTarget string) (culprit, good string) {
	s.t.Helper()
	// One car at a time while it happens: a train spreads what waits over its free cars, and the
	// two must share one batch for its failure to be bisected.
	s.configure(set("batch.train", 1))
	defer s.configure(set("batch.train", 3))
	culprit = s.queued(user, target, "on-call rotation "+breaksCI)
	good = s.queued(other, otherTarget, "on-call rotation")
	if v := s.roundTaking(culprit); v.BatchID != s.request(good).BatchID {
		s.t.Fatalf("the culprit and the good change are not in one batch: %+v", v)
	}
	// Its failed job is recorded after the failure (the request page links it).
	s.roundsUntil(culprit, culprit+" failed in CI", func(v api.RequestView) bool { return v.Status == state.StatusCreateFailed && v.FailedJob != nil })
	return culprit, good
}

// readwriteTarget is a fourth target of the sample's infra/access-config, for a test that needs
// one person with four requests at once.
var readwriteTarget = map[string]any{"key": "payments-db-readwrite", "title": "Payments DB (read-write)", "project": "infra/access-config",
	"branch": "main", "path": "bindings/payments-db-readwrite/{subject}.yaml", "ruleCodes": []string{}, "ttl": "30d"}

// withTargets is the sample's catalog with extra targets.
func withTargets(extra ...map[string]any) setting {
	var sample struct {
		Targets []map[string]any `yaml:"targets"`
	}
	if err := yaml.Unmarshal(config.Sample, &sample); err != nil {
		panic(err)
	}
	return set("targets", append(sample.Targets, extra...))
}

// merged is a request merged whose deploy callback is lost (sim.deploy.dropRate 1 until it
// merged): it waits for the deploy in the deploy stage.
func (s *site) merged(user, target, reason string) string {
	s.t.Helper()
	s.configure(set("sim.deploy.dropRate", 1))
	defer s.configure(set("sim.deploy.dropRate", 0))
	op := s.queued(user, target, reason)
	s.roundTaking(op)
	s.waitRequest(op, op+" merged", func(v api.RequestView) bool { return v.Status == state.StatusMerged })
	return op
}

// revoke revokes op, in effect, as user (its owner or an operator).
func (s *site) revoke(op, user string) {
	s.t.Helper()
	s.call("POST", "/api/requests/"+op+"/revoke", user, `{"operationId":"`+s.opID()+`"}`, 202, nil)
}

// Where a revocation stands (revoked).
const (
	revokeQueued   = iota // CLOSE_STARTED: waiting for a batch round
	revokeMerged          // CLOSE_MERGED: merged, its deploy callback lost
	revokeDeployed        // CLOSED
)

// revoked is a request that was in effect and whose binding its owner revoked: the revocation
// waiting for a round, its removal merged (the deploy callback lost), or removed and deployed.
func (s *site) revoked(user, target string, stage int) string {
	s.t.Helper()
	op := s.validated(user, target, "on-call rotation")
	if stage == revokeMerged {
		s.configure(set("sim.deploy.dropRate", 1))
		defer s.configure(set("sim.deploy.dropRate", 0))
	}
	s.revoke(op, user)
	switch stage {
	case revokeQueued:
		s.waitRequest(op, op+" revoking", func(v api.RequestView) bool { return v.Step.Code == int(state.StepCloseStarted) })
	case revokeMerged:
		s.roundsUntil(op, op+"'s removal merged", func(v api.RequestView) bool { return v.Step.Code == int(state.StepCloseMerged) })
	default:
		s.roundsUntil(op, op+" closed", func(v api.RequestView) bool { return v.Status == state.StatusClosed })
	}
	return op
}

// stuck is a request whose batch's pipelines give no answer: the first within poll.timeout is
// replaced by a new one on the same commit, which gives none either, and the batch is BLOCKED
// for an operator (a pending step, WAIT_MANUAL). poll.timeout is short while it happens.
func (s *site) stuck(user, target, reason string) string {
	s.t.Helper()
	s.configure(set("poll.timeout", "1s"))
	defer s.configure(set("poll.timeout", "10m"))
	op := s.queued(user, target, reason)
	s.sims().GitLab.StickNextPipelines(2)
	s.roundTaking(op)
	s.waitRequest(op, op+" stuck", func(v api.RequestView) bool { return v.NextAction == state.NextWaitManual })
	return op
}

// batchOf is op's batch as the ops console lists it.
func (s *site) batchOf(op string) api.BatchView {
	s.t.Helper()
	id := s.request(op).BatchID
	var page api.Page[api.BatchView]
	s.call("GET", "/api/ops/batches", "ops", "", 200, &page)
	for _, b := range page.Items {
		if b.ID == id {
			return b
		}
	}
	s.t.Fatalf("no batch %d of %s listed", id, op)
	return api.BatchView{}
}

// blockedMerge is a request whose batch's merge request GitLab will not merge until a person
// acts (sim.gitlab.mergeBlocker, e.g. discussions_not_resolved, left set): the batch is BLOCKED
// and the request waits for that person (HANDLE_MR_BLOCKED).
func (s *site) blockedMerge(user, target, reason, blocker string) string {
	s.t.Helper()
	s.configure(set("sim.gitlab.mergeBlocker", blocker))
	op := s.queued(user, target, reason)
	s.roundTaking(op)
	s.waitRequest(op, op+"'s merge blocked", func(v api.RequestView) bool { return v.Step.Code == int(state.StepHandleMRBlocked) })
	return op
}

// history takes n requests of target the whole way, one after the other: the pipelines their
// batches ran are what a project's estimates stand on (three at least).
func (s *site) history(target string, n int) {
	s.t.Helper()
	for i := range n {
		s.validated(fmt.Sprintf("history-%d@example.com", i), target, "history")
	}
}

// train gives project's train (payments-db-readonly's, infra/access-config) two cars in CI whose
// pipelines run on (carol's request in the first, alice's in the second, which waits for the one
// ahead), and two requests of bob0 and bob1 waiting for a car. The project has a history of
// three pipelines first, so that the cars have estimates.
func (s *site) train() (inCar string, waiting []string) {
	s.t.Helper()
	const target = "payments-db-readonly"
	s.history(target, 3)
	s.sims().GitLab.StickNextPipelines(2)
	for _, who := range []string{"carol@example.com", "alice"} {
		inCar = s.queued(who, target, "on-call rotation")
		s.roundTaking(inCar)
		s.waitRequest(inCar, inCar+" in CI", func(v api.RequestView) bool { return v.Stage == "ci" && v.Pipeline != nil })
	}
	for _, who := range []string{"bob0@example.com", "bob1@example.com"} {
		waiting = append(waiting, s.queued(who, target, "on-call rotation"))
	}
	return inCar, waiting
}

// trainOf is project's train as the ops console reads it.
func (s *site) trainOf(project string) api.Train {
	s.t.Helper()
	var page api.Page[api.Train]
	s.call("GET", "/api/ops/trains", "ops", "", 200, &page)
	for _, t := range page.Items {
		if t.Project == project {
			return t
		}
	}
	s.t.Fatalf("no train of %s", project)
	return api.Train{}
}
