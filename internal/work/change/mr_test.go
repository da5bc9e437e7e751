package change_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"bindery/internal/platform/config"
	"bindery/internal/remote/gitlab"
	"bindery/internal/sim"
	"bindery/internal/work/change"
)

// These tests run the change runner with bindery's real GitLab client against the simulated
// GitLab over real HTTP.

const project = "infra/access-config"

const simConfig = `
gitlab:
  botToken: bot-token
  reviewerTokens: [rev1-token, rev2-token]
  timeout: 5s
approval:
  maxRetries: 1
  backoff: 1ms
sim:
  gitlab:
    pipelineDuration: 0s
    rebaseDuration: 0s
    approvalsRequired: 2
targets:
  - key: t1
    project: infra/access-config
    path: "bindings/t1/{subject}.yaml"
`

var ctx = context.Background()

type bundle struct {
	gl     *sim.GitLab
	runner *change.Runner
}

func setup(t *testing.T) *bundle {
	t.Helper()
	src := config.NewStatic(config.MustParse(simConfig))
	sims := sim.New(sim.Options{Config: src})
	srv := httptest.NewServer(sims.Handler())
	cctx, cancel := context.WithCancel(context.Background())
	sims.Start(cctx)
	t.Cleanup(func() { cancel(); sims.Stop(context.Background()); srv.Close() })
	client, err := gitlab.New(src, gitlab.Options{Metrics: metrics.NewSet(), DefaultBaseURL: srv.URL + "/sim/gitlab"})
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{gl: sims.GitLab, runner: &change.Runner{GitLab: client, Log: slog.New(slog.DiscardHandler)}}
}

func spec(branch string, actions ...change.FileAction) change.Spec {
	return change.Spec{Project: project, TargetBranch: "main", SourceBranch: branch, Title: "bindery: " + branch, Actions: actions}
}

func create(path, content string) change.FileAction {
	return change.FileAction{Action: "create", Path: path, Content: content, OperationID: path}
}

// land runs the whole path of a change and returns the merged MR.
func (b *bundle) land(t *testing.T, s change.Spec) gitlab.MergeRequest {
	t.Helper()
	mr, err := b.runner.Open(ctx, s, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := b.waitPipeline(mr.IID, 1000); err != nil || res.Outcome != change.PipelinePassed {
		t.Fatalf("pipeline: %v %v", res.Outcome, err)
	}
	if _, err := b.runner.Approve(ctx, project, mr.IID); err != nil {
		t.Fatal(err)
	}
	merged, _, err := b.merge(s, mr.IID)
	if err != nil || !merged.Merged() {
		t.Fatalf("merge: %+v %v", merged, err)
	}
	return merged
}

// waitPipeline looks at the MR's pipeline until it decides, at most looks times, as the
// engine's task would (one look per run).
func (b *bundle) waitPipeline(iid int64, looks int) (change.PipelineResult, error) {
	var res change.PipelineResult
	var err error
	for range looks {
		if res, err = b.runner.CheckPipeline(ctx, project, iid); err != nil || res.Outcome != change.PipelinePending {
			return res, err
		}
		time.Sleep(time.Millisecond) // the poll's pace: one look a millisecond, as the engine's schedule spaces them
	}
	return res, err
}

// merge runs merge actions until the MR is merged or one fails, as the engine's task would,
// and returns the progress events on the way.
func (b *bundle) merge(s change.Spec, iid int64) (gitlab.MergeRequest, []change.Event, error) {
	st := change.MergeState{Phase: change.MergeAttempt}
	var events []change.Event
	for range 2000 {
		res, err := b.runner.MergeStep(ctx, s, iid, st)
		if res.Event != "" {
			events = append(events, res.Event)
		}
		if err != nil || res.Merged {
			return res.MR, events, err
		}
		st = res.State
		if res.Wait || res.Pause {
			time.Sleep(time.Millisecond) // the poll's pace, as the engine would space the next look
		}
	}
	return gitlab.MergeRequest{}, events, errors.New("merge undecided after 2000 actions")
}

func TestAChangeLandsOnTheTargetBranchThroughOneMR(t *testing.T) {
	b := setup(t)
	s := spec("bindery/batch-1", create("bindings/t1/a.yaml", "a\n"), create("bindings/t1/b.yaml", "b\n"))
	b.land(t, s)
	for _, p := range []string{"bindings/t1/a.yaml", "bindings/t1/b.yaml"} {
		if got, ok := b.gl.File(project, "main", p); !ok || got == "" {
			t.Errorf("%s not on main", p)
		}
	}
	if n := b.gl.Calls("create_commit"); n != 1 {
		t.Errorf("%d commits for one batch, want 1", n)
	}
}

func TestOpenAgainFindsTheSameMR(t *testing.T) {
	b := setup(t)
	s := spec("bindery/batch-2", create("bindings/t1/c.yaml", "c\n"))
	first, err := b.runner.Open(ctx, s, 0)
	if err != nil {
		t.Fatal(err)
	}
	again, err := b.runner.Open(ctx, s, first.IID) // a recorded MR is read, not recreated
	if err != nil || again.IID != first.IID {
		t.Fatalf("with known iid: %d %v", again.IID, err)
	}
	lost, err := b.runner.Open(ctx, s, 0) // the MR id was lost: the 409 names it
	if err != nil || lost.IID != first.IID {
		t.Fatalf("after a lost answer: %d %v", lost.IID, err)
	}
}

func TestAFailedPipelineIsReportedAndCanBeRetried(t *testing.T) {
	b := setup(t)
	f := b.gl.Faults()
	f.PipelineFailRate = 1
	b.gl.SetFaults(f)
	mr, err := b.runner.Open(ctx, spec("bindery/batch-3", create("bindings/t1/d.yaml", "d\n")), 0)
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.waitPipeline(mr.IID, 1000)
	if err != nil || res.Outcome != change.PipelineFailed || res.Pipeline == nil || res.Pipeline.WebURL == "" {
		t.Fatalf("want a failed pipeline with a link: %+v %v", res, err)
	}
	b.gl.ResetFaults()
	// With a retry left, a look at the failed pipeline starts a new one on the same commit.
	look, err := b.runner.LookAtPipeline(ctx, project, mr.IID, 1)
	if err != nil || !look.Retried || look.Outcome != change.PipelinePending {
		t.Fatalf("look with a retry left: %+v %v", look, err)
	}
	if res, err = b.waitPipeline(mr.IID, 1000); err != nil || res.Outcome != change.PipelinePassed {
		t.Fatalf("after retry: %v %v", res.Outcome, err)
	}
	if look, err := b.runner.LookAtPipeline(ctx, project, mr.IID, 0); err != nil || look.Retried || look.Outcome != change.PipelinePassed {
		t.Fatalf("look at the passed pipeline: %+v %v", look, err)
	}
}

// A stuck pipeline stays pending on every look (the caller's wait decides when it is too long),
// and an operator's restart replaces it with a new pipeline on the same commit.
func TestAStuckPipelineStaysPendingAndIsRestarted(t *testing.T) {
	b := setup(t)
	f := b.gl.Faults()
	f.PipelineStuckRate = 1
	b.gl.SetFaults(f)
	mr, err := b.runner.Open(ctx, spec("bindery/batch-4", create("bindings/t1/e.yaml", "e\n")), 0)
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.waitPipeline(mr.IID, 20)
	if err != nil || res.Outcome != change.PipelinePending {
		t.Fatalf("got %v %v, want still pending", res.Outcome, err)
	}
	b.gl.ResetFaults()
	before := b.gl.Calls("create_mr_pipeline")
	if restarted, err := b.runner.RestartStuckPipeline(ctx, project, mr.IID); err != nil || !restarted {
		t.Fatalf("restart: %v %v", restarted, err)
	}
	if n := b.gl.Calls("create_mr_pipeline") - before; n != 1 {
		t.Fatalf("%d new pipelines", n)
	}
	if res, err = b.waitPipeline(mr.IID, 1000); err != nil || res.Outcome != change.PipelinePassed {
		t.Fatalf("after the restart: %v %v", res.Outcome, err)
	}
	if restarted, err := b.runner.RestartStuckPipeline(ctx, project, mr.IID); err != nil || restarted {
		t.Fatalf("a finished pipeline was restarted: %v %v", restarted, err)
	}
}

func TestMergeRebasesWhenTheTargetMoved(t *testing.T) {
	b := setup(t)
	s := spec("bindery/batch-5", create("bindings/t1/f.yaml", "f\n"))
	mr, _ := b.runner.Open(ctx, s, 0)
	b.waitPipeline(mr.IID, 1000)
	b.runner.Approve(ctx, project, mr.IID)
	if _, err := b.gl.PushToBranch(project, "main", "elsewhere/other.yaml", "other\n"); err != nil {
		t.Fatal(err)
	}
	merged, events, err := b.merge(s, mr.IID)
	if err != nil || !merged.Merged() {
		t.Fatalf("merge after the target moved: %v", err)
	}
	if len(events) == 0 || events[0] != change.EventRebasing {
		t.Fatalf("events %v, want a rebase first", events)
	}
}

func TestAConflictIsResolvedByRegeneratingTheBranch(t *testing.T) {
	b := setup(t)
	s := spec("bindery/batch-6", create("bindings/t1/g.yaml", "ours\n"))
	mr, _ := b.runner.Open(ctx, s, 0)
	b.waitPipeline(mr.IID, 1000)
	b.runner.Approve(ctx, project, mr.IID)
	// Someone else wrote the same file on main: a rebase would conflict.
	if _, err := b.gl.PushToBranch(project, "main", "bindings/t1/h.yaml", "theirs\n"); err != nil {
		t.Fatal(err)
	}
	f := b.gl.Faults()
	f.RebaseConflictRate = 1
	b.gl.SetFaults(f)
	merged, events, err := b.merge(s, mr.IID)
	if err != nil || !merged.Merged() {
		t.Fatalf("merge after a conflict: %v (events %v)", err, events)
	}
	if !contains(events, change.EventRegenerating) {
		t.Fatalf("events %v, want a regeneration", events)
	}
	if got, _ := b.gl.File(project, "main", "bindings/t1/g.yaml"); got != "ours\n" {
		t.Fatalf("main has %q", got)
	}
}

func TestAConflictThatSurvivesRegenerationIsReported(t *testing.T) {
	b := setup(t)
	s := spec("bindery/batch-7", create("bindings/t1/i.yaml", "i\n"))
	mr, _ := b.runner.Open(ctx, s, 0)
	b.waitPipeline(mr.IID, 1000)
	b.runner.Approve(ctx, project, mr.IID)
	f := b.gl.Faults()
	f.NeedRebaseRate, f.RebaseConflictRate = 1, 1
	b.gl.SetFaults(f)
	_, _, err := b.merge(s, mr.IID)
	if !errors.Is(err, change.ErrConflict) {
		t.Fatalf("got %v, want ErrConflict", err)
	}
}

func TestCloseReportsMergedWhenTheMergeWonTheRace(t *testing.T) {
	b := setup(t)
	s := spec("bindery/batch-8", create("bindings/t1/j.yaml", "j\n"))
	merged := b.land(t, s)
	if won, err := b.runner.Close(ctx, project, merged.IID); err != nil || !won {
		t.Fatalf("close of a merged MR: merged=%v %v, want merged", won, err)
	}
	s2 := spec("bindery/batch-9", create("bindings/t1/k.yaml", "k\n"))
	open, _ := b.runner.Open(ctx, s2, 0)
	if won, err := b.runner.Close(ctx, project, open.IID); err != nil || won {
		t.Fatalf("close of an open MR: merged=%v %v", won, err)
	}
	if st := b.gl.MergeRequestState(project, open.IID); st != "closed" {
		t.Fatalf("MR is %s", st)
	}
	if _, _, err := b.merge(s2, open.IID); !errors.Is(err, change.ErrMRClosed) {
		t.Fatalf("merging a closed MR: %v", err)
	}
	if won, err := b.runner.Close(ctx, project, 0); err != nil || won {
		t.Fatalf("no MR: %v %v", won, err)
	}
}

func TestSingleMemberFileStateIsReconciled(t *testing.T) {
	b := setup(t)
	b.gl.PushToBranch(project, "main", "bindings/t1/l.yaml", "stale\n")
	s := spec("bindery/op-l", create("bindings/t1/l.yaml", "fresh\n"))
	b.land(t, s) // create of an existing file becomes an update
	if got, _ := b.gl.File(project, "main", "bindings/t1/l.yaml"); got != "fresh\n" {
		t.Fatalf("main has %q", got)
	}
	del := spec("bindery/op-m", change.FileAction{Action: "delete", Path: "bindings/t1/missing.yaml", OperationID: "m"})
	if _, err := b.runner.Open(ctx, del, 0); !errors.Is(err, change.ErrNothingToChange) {
		t.Fatalf("delete of a missing file: %v", err)
	}
	bad := spec("bindery/op-n", create("../escape", "x"))
	if _, err := b.runner.Open(ctx, bad, 0); !errors.Is(err, change.ErrInvalidChange) || strings.Contains(err.Error(), "gitlab") {
		t.Fatalf("escaping path: %v", err)
	}
}

func contains(events []change.Event, e change.Event) bool {
	for _, x := range events {
		if x == e {
			return true
		}
	}
	return false
}

// An MR closed outside bindery ends the pipeline wait at the next look with ErrMRClosed, not at
// the timeout: a closed MR is an answer, not a read that failed.
func TestAClosedMREndsThePipelineWaitAtOnce(t *testing.T) {
	b := setup(t)
	f := b.gl.Faults()
	f.PipelineStuckRate = 1
	b.gl.SetFaults(f)
	mr, err := b.runner.Open(ctx, spec("bindery/batch-9", create("bindings/t1/z.yaml", "z\n")), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.runner.GitLab.CloseMergeRequest(ctx, project, mr.IID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.runner.CheckPipeline(ctx, project, mr.IID); !errors.Is(err, change.ErrMRClosed) {
		t.Fatalf("closed MR: %v", err)
	}
}

// While GitLab carries a merge out the MR is "locked": neither merged nor refused. A merge action
// then pauses and looks again; a close is undecided (ErrLocked) — it must never be read as "not
// merged" — and once the merge is done the close reports it merged.
func TestALockedMRIsUndecidedUntilGitLabFinishesTheMerge(t *testing.T) {
	b := setup(t)
	f := b.gl.Faults()
	f.MergeDuration = 200 * time.Millisecond
	b.gl.SetFaults(f)
	s := spec("bindery/batch-locked", create("bindings/t1/locked.yaml", "x\n"))
	mr, err := b.runner.Open(ctx, s, 0)
	if err != nil {
		t.Fatal(err)
	}
	b.waitPipeline(mr.IID, 1000)
	b.runner.Approve(ctx, project, mr.IID)
	res, err := b.runner.MergeStep(ctx, s, mr.IID, change.MergeState{Phase: change.MergeAttempt, Tested: mr.SHA})
	if err != nil || res.Merged || !res.Pause || res.MR.State != gitlab.StateLocked {
		t.Fatalf("the merge call: %+v %v", res, err)
	}
	if _, err := b.runner.Close(ctx, project, mr.IID); !errors.Is(err, change.ErrLocked) {
		t.Fatalf("close of a locked MR: %v", err)
	}
	merged, _, err := b.merge(s, mr.IID)
	if err != nil || !merged.Merged() {
		t.Fatalf("after the lock: %+v %v", merged, err)
	}
	if won, err := b.runner.Close(ctx, project, mr.IID); err != nil || !won {
		t.Fatalf("close after the merge: %v %v", won, err)
	}
}
