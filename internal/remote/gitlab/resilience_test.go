package gitlab_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"bindery/internal/platform/config"
	"bindery/internal/remote/gitlab"
	"bindery/internal/remote/outbound"
	"bindery/internal/sim"
)

// Timeouts, the circuit breaker, configuration mistakes and the simulator's GitLab-side faults,
// seen through bindery's client.

func kindOf(err error) outbound.Kind {
	var oe *outbound.Error
	if errors.As(err, &oe) {
		return oe.Kind
	}
	return ""
}

func TestBreakerOpensAndRecovers(t *testing.T) {
	b := setup(t, "")
	mr := b.openMR(t, "breaker")
	b.sim.SetFaults(sim.GitLabFaults{SimTransport: config.SimTransport{ErrorRate: 1}, ApprovalsRequired: 2})
	before := b.sim.Calls("get_mr")
	for i := range 3 { // breaker.failures: 3
		if _, err := b.client.GetMergeRequest(ctx, project, mr.IID); outbound.StatusOf(err) != 500 {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	calls := b.sim.Calls("get_mr")
	if calls-before != 3 {
		t.Fatalf("3 calls reached GitLab %d times: the library's own retries must be off", calls-before)
	}
	_, err := b.client.GetMergeRequest(ctx, project, mr.IID)
	if kindOf(err) != outbound.KindCircuitOpen || b.client.BreakerState() != "open" {
		t.Fatalf("4th call: %v (breaker %s)", err, b.client.BreakerState())
	}
	if b.sim.Calls("get_mr") != calls {
		t.Fatal("an open breaker let a call through")
	}
	// GitLab recovers; after breaker.cooldown one trial call goes through and closes it.
	b.sim.ResetFaults()
	deadline := time.Now().Add(10 * time.Second)
	for b.client.BreakerState() == "open" && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := b.client.GetMergeRequest(ctx, project, mr.IID); err != nil {
		t.Fatalf("trial call: %v", err)
	}
	if b.client.BreakerState() != "closed" {
		t.Fatalf("breaker %s after a good trial call", b.client.BreakerState())
	}
	for metric, want := range map[string]string{
		`bindery_outbound_requests_total{system="gitlab",endpoint="get_mr",status="5xx"}`:          "3",
		`bindery_outbound_requests_total{system="gitlab",endpoint="get_mr",status="circuit_open"}`: "1",
		`bindery_outbound_breaker_opened_total{system="gitlab"}`:                                   "1",
	} {
		if got := b.metric(metric); got != want {
			t.Errorf("%s = %q, want %s", metric, got, want)
		}
	}
}

func TestRefusalsDoNotOpenTheBreaker(t *testing.T) {
	b := setup(t, "")
	for range 5 {
		if _, err := b.client.GetMergeRequest(ctx, project, 12345); !errors.Is(err, gitlab.ErrNotFound) {
			t.Fatal(err)
		}
	}
	if b.client.BreakerState() != "closed" {
		t.Fatal("404s opened the breaker: GitLab answering no is GitLab working")
	}
}

func TestHangingGitLabReturnsWithinTheConfiguredTimeout(t *testing.T) {
	b := setup(t, strings.Replace(baseConfig, "timeout: 5s", "timeout: 150ms", 1))
	mr := b.openMR(t, "hang")
	b.sim.SetFaults(sim.GitLabFaults{SimTransport: config.SimTransport{Hang: true}, ApprovalsRequired: 2})
	start := time.Now()
	_, err := b.client.GetMergeRequest(ctx, project, mr.IID)
	if kindOf(err) != outbound.KindTimeout || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	// The simulator would hang until stopped; only our deadline ended the call. (A generous
	// bound: it proves the call returned, not how fast.)
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("returned after %s", took)
	}
	// The timeout is read at each call: raising it applies without a restart.
	b.sim.SetFaults(sim.GitLabFaults{SimTransport: config.SimTransport{Latency: 300 * time.Millisecond}, ApprovalsRequired: 2})
	if _, err := b.client.GetMergeRequest(ctx, project, mr.IID); kindOf(err) != outbound.KindTimeout {
		t.Fatalf("300ms latency with a 150ms timeout: %v", err)
	}
	b.reconfigure(t, strings.Replace(baseConfig, "timeout: 5s", "timeout: 5s", 1))
	if _, err := b.client.GetMergeRequest(ctx, project, mr.IID); err != nil {
		t.Fatalf("300ms latency with a 5s timeout: %v", err)
	}
}

func TestCallerCancellationIsNotGitLabsFault(t *testing.T) {
	b := setup(t, "")
	b.sim.SetFaults(sim.GitLabFaults{SimTransport: config.SimTransport{Hang: true}, ApprovalsRequired: 2})
	for range 5 {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		_, err := b.client.GetMergeRequest(cctx, project, 1)
		cancel()
		if kindOf(err) != outbound.KindCanceled {
			t.Fatalf("err = %v", err)
		}
	}
	if b.client.BreakerState() != "closed" {
		t.Fatal("our own cancellations opened the breaker")
	}
}

func TestDroppedAnswerAfterTheEffect(t *testing.T) {
	b := setup(t, "")
	b.sim.SetFaults(sim.GitLabFaults{SimTransport: config.SimTransport{DropRate: 1, Endpoints: []string{"create_branch"}}, ApprovalsRequired: 2})
	_, err := b.client.CreateBranch(ctx, project, "dropped", "main")
	if kindOf(err) != outbound.KindUnavailable {
		t.Fatalf("err = %v", err)
	}
	if b.sim.BranchHead(project, "dropped") == "" {
		t.Fatal("the effect should have happened")
	}
	b.sim.ResetFaults()
	if _, err := b.client.CreateBranch(ctx, project, "dropped", "main"); !errors.Is(err, gitlab.ErrBranchExists) {
		t.Fatalf("retry: %v", err)
	}
}

func TestErrorRateAppliesOnlyToTheNamedEndpoints(t *testing.T) {
	b := setup(t, "")
	mr := b.openMR(t, "scoped")
	b.sim.SetFaults(sim.GitLabFaults{SimTransport: config.SimTransport{ErrorRate: 1, Endpoints: []string{"merge"}}, ApprovalsRequired: 2})
	if _, err := b.client.GetMergeRequest(ctx, project, mr.IID); err != nil {
		t.Fatalf("get_mr is not a faulted endpoint: %v", err)
	}
	if _, err := b.client.Merge(ctx, project, mr.IID, gitlab.MergeOptions{SHA: mr.SHA}); outbound.StatusOf(err) != 500 {
		t.Fatalf("merge: %v", err)
	}
	if b.sim.MergeRequestState(project, mr.IID) != "opened" {
		t.Fatal("a 500 must come before any effect")
	}
}

func TestMergeNeedingRebaseThenRebaseThenMerge(t *testing.T) {
	b := setup(t, "")
	mr := b.openMR(t, "needs-rebase")
	if err := b.client.Approve(ctx, project, mr.IID, mr.SHA); err != nil {
		t.Fatal(err)
	}
	f := b.sim.Faults()
	f.NeedRebaseRate = 1
	b.sim.SetFaults(f)
	if _, err := b.client.Merge(ctx, project, mr.IID, gitlab.MergeOptions{SHA: mr.SHA}); !errors.Is(err, gitlab.ErrMergeFailed) {
		t.Fatalf("merge after the target moved: %v, want 422 (GitLab 17: git cannot merge it)", err)
	}
	b.sim.ResetFaults()
	got, _ := b.client.GetMergeRequest(ctx, project, mr.IID)
	got, _ = b.client.GetMergeRequest(ctx, project, mr.IID)
	if !got.NeedsRebase() {
		t.Fatalf("status %s, want need_rebase", got.DetailedMergeStatus)
	}
	if err := b.client.Rebase(ctx, project, mr.IID); err != nil {
		t.Fatal(err)
	}
	got = pollRebase(t, b, mr.IID)
	if got.MergeError != "" || got.SHA == mr.SHA {
		t.Fatalf("after rebase: %+v", got)
	}
	// The rebase moved the head: the approvals stay (the simulator, like GitLab's default,
	// does not reset them) and the merge uses the new head.
	if _, err := b.client.Merge(ctx, project, mr.IID, gitlab.MergeOptions{SHA: got.SHA}); err != nil {
		t.Fatalf("merge after rebase: %v", err)
	}
}

func TestRebaseConflictSetsMergeError(t *testing.T) {
	b := setup(t, strings.Replace(baseConfig, "rebaseDuration: 0s", "rebaseDuration: 0s\n    rebaseConflictRate: 1", 1))
	mr := b.openMR(t, "conflict")
	if err := b.client.Rebase(ctx, project, mr.IID); err != nil {
		t.Fatal(err)
	}
	if got := pollRebase(t, b, mr.IID); got.MergeError != "Rebase failed. Please rebase locally" {
		t.Fatalf("merge error %q", got.MergeError)
	}
}

func TestRebaseIsAsynchronous(t *testing.T) {
	clock := sim.NewManualClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	b := setup(t, strings.Replace(baseConfig, "rebaseDuration: 0s", "rebaseDuration: 5s", 1), func(o *sim.Options) { o.Clock = clock })
	mr := b.openMR(t, "async")
	if _, err := b.sim.PushToBranch(project, "main", "other.txt", "x"); err != nil {
		t.Fatal(err)
	}
	if err := b.client.Rebase(ctx, project, mr.IID); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.client.GetMergeRequest(ctx, project, mr.IID); !got.RebaseInProgress || got.SHA != mr.SHA {
		t.Fatalf("right after the 202: %+v", got)
	}
	if err := b.client.Rebase(ctx, project, mr.IID); outbound.StatusOf(err) != 409 {
		t.Fatalf("second rebase while one runs: %v", err)
	}
	clock.Advance(6 * time.Second)
	if got, _ := b.client.GetMergeRequest(ctx, project, mr.IID); got.RebaseInProgress || got.SHA == mr.SHA {
		t.Fatalf("after the rebase finished: %+v", got)
	}
}

func pollRebase(t *testing.T, b *bundle, iid int64) gitlab.MergeRequest {
	t.Helper()
	for range 100 {
		got, err := b.client.GetMergeRequest(ctx, project, iid)
		if err != nil {
			t.Fatal(err)
		}
		if !got.RebaseInProgress && got.DetailedMergeStatus != "checking" {
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("rebase never finished")
	return gitlab.MergeRequest{}
}

func TestPipelineFailAndStuckKnobs(t *testing.T) {
	clock := sim.NewManualClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	b := setup(t, strings.Replace(baseConfig, "pipelineDuration: 0s", "pipelineDuration: 10s", 1), func(o *sim.Options) { o.Clock = clock })
	f := b.sim.Faults()
	f.PipelineFailRate = 1
	b.sim.SetFaults(f)
	failing := b.openMR(t, "fails")
	f.PipelineFailRate, f.PipelineStuckRate = 0, 1
	b.sim.SetFaults(f)
	stuck := b.openMR(t, "stuck")
	clock.Advance(time.Hour)
	pl, _ := b.client.MergeRequestPipelines(ctx, project, failing.IID)
	if len(pl) != 1 || pl[0].Outcome() != gitlab.Failed {
		t.Fatalf("failing pipeline = %+v", pl)
	}
	pl, _ = b.client.MergeRequestPipelines(ctx, project, stuck.IID)
	if len(pl) != 1 || pl[0].Outcome() != gitlab.Running {
		t.Fatalf("stuck pipeline after an hour = %+v", pl)
	}
}

func TestEveryPipelinePageIsRead(t *testing.T) {
	b := setup(t, "")
	mr := b.openMR(t, "pages")
	for range 120 {
		if _, err := b.client.CreateMergeRequestPipeline(ctx, project, mr.IID); err != nil {
			t.Fatal(err)
		}
	}
	pls, err := b.client.MergeRequestPipelines(ctx, project, mr.IID)
	if err != nil || len(pls) != 121 || pls[0].ID < pls[120].ID {
		t.Fatalf("%d pipelines, %v", len(pls), err)
	}
	if got := b.sim.Calls("mr_pipelines"); got != 2 {
		t.Fatalf("pages read = %d, want 2 at 100 per page", got)
	}
}

func TestMissingConfigurationIsAClearErrorNotACrash(t *testing.T) {
	for _, tc := range []struct{ cfg, want string }{
		{"gitlab:\n  botToken: b\n  reviewerTokens: [r]\n", "gitlab.baseURL is not set"},
		{"gitlab:\n  baseURL: https://gitlab.example.com\n  reviewerTokens: [r]\n", "gitlab.botToken is not set"},
		{"gitlab:\n  baseURL: https://gitlab.example.com\n  botToken: b\n", "gitlab.reviewerTokens is not set"},
	} {
		_, err := gitlab.New(config.NewStatic(config.MustParse(tc.cfg)), gitlab.Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%q) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	// Demo supplies the simulator's URL as the default.
	if _, err := gitlab.New(config.NewStatic(config.MustParse("gitlab:\n  botToken: b\n  reviewerTokens: [r]\n")),
		gitlab.Options{DefaultBaseURL: "http://127.0.0.1:1/sim/gitlab"}); err != nil {
		t.Fatal(err)
	}
}

func TestTokenRemovedByReloadStopsCallsWithoutSendingThem(t *testing.T) {
	// The simulated GitLab keeps its own accounts while bindery's configuration changes.
	b := setup(t, "", func(o *sim.Options) { o.Config = config.NewStatic(config.MustParse(baseConfig)) })
	b.reconfigure(t, strings.Replace(baseConfig, "botToken: bot-token", "botToken: ''", 1))
	_, err := b.client.CreateBranch(ctx, project, "x", "main")
	if !errors.Is(err, gitlab.ErrNotConfigured) {
		t.Fatalf("err = %v", err)
	}
	if b.sim.Calls("create_branch") != 0 {
		t.Fatal("a call went out without a token")
	}
	// Rotating to a token GitLab does not know gives a clean 401.
	b.reconfigure(t, strings.Replace(baseConfig, "botToken: bot-token", "botToken: rotated", 1))
	if _, err := b.client.CreateBranch(ctx, project, "x", "main"); !errors.Is(err, gitlab.ErrUnauthorized) {
		t.Fatalf("unknown token: %v", err)
	}
}
