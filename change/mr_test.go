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

	"bindery/change"
	"bindery/config"
	"bindery/gitlab"
	"bindery/sim"
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

var fast = change.Stages{Short: time.Millisecond, ShortCount: 5, Long: 5 * time.Millisecond, Timeout: 2 * time.Second}

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
	t.Cleanup(func() { cancel(); sims.Stop(); srv.Close() })
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
	res, err := b.runner.WaitPipeline(ctx, project, mr.IID, fast, nil)
	if err != nil || res.Outcome != change.Passed {
		t.Fatalf("pipeline: %v %v", res.Outcome, err)
	}
	if _, err := b.runner.Approve(ctx, project, mr.IID); err != nil {
		t.Fatal(err)
	}
	merged, err := b.runner.Merge(ctx, change.MergeInput{Spec: s, IID: mr.IID, Stages: fast})
	if err != nil || !merged.Merged() {
		t.Fatalf("merge: %+v %v", merged, err)
	}
	return merged
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
	res, err := b.runner.WaitPipeline(ctx, project, mr.IID, fast, nil)
	if err != nil || res.Outcome != change.Failed || res.Pipeline == nil || res.Pipeline.WebURL == "" {
		t.Fatalf("want a failed pipeline with a link: %+v %v", res, err)
	}
	b.gl.ResetFaults()
	if err := b.runner.RetryPipeline(ctx, project, mr.IID); err != nil {
		t.Fatal(err)
	}
	if res, err = b.runner.WaitPipeline(ctx, project, mr.IID, fast, nil); err != nil || res.Outcome != change.Passed {
		t.Fatalf("after retry: %v %v", res.Outcome, err)
	}
}

func TestAStuckPipelineTimesOutWithoutFailing(t *testing.T) {
	b := setup(t)
	f := b.gl.Faults()
	f.PipelineStuckRate = 1
	b.gl.SetFaults(f)
	mr, err := b.runner.Open(ctx, spec("bindery/batch-4", create("bindings/t1/e.yaml", "e\n")), 0)
	if err != nil {
		t.Fatal(err)
	}
	short := change.Stages{Short: time.Millisecond, ShortCount: 2, Long: 2 * time.Millisecond, Timeout: 30 * time.Millisecond}
	res, err := b.runner.WaitPipeline(ctx, project, mr.IID, short, nil)
	if err != nil || res.Outcome != change.TimedOut {
		t.Fatalf("got %v %v, want a timeout", res.Outcome, err)
	}
}

func TestMergeRebasesWhenTheTargetMoved(t *testing.T) {
	b := setup(t)
	s := spec("bindery/batch-5", create("bindings/t1/f.yaml", "f\n"))
	mr, _ := b.runner.Open(ctx, s, 0)
	b.runner.WaitPipeline(ctx, project, mr.IID, fast, nil)
	b.runner.Approve(ctx, project, mr.IID)
	if _, err := b.gl.PushToBranch(project, "main", "elsewhere/other.yaml", "other\n"); err != nil {
		t.Fatal(err)
	}
	var events []change.Event
	merged, err := b.runner.Merge(ctx, change.MergeInput{Spec: s, IID: mr.IID, Stages: fast, Progress: func(e change.Event) { events = append(events, e) }})
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
	b.runner.WaitPipeline(ctx, project, mr.IID, fast, nil)
	b.runner.Approve(ctx, project, mr.IID)
	// Someone else wrote the same file on main: a rebase would conflict.
	if _, err := b.gl.PushToBranch(project, "main", "bindings/t1/h.yaml", "theirs\n"); err != nil {
		t.Fatal(err)
	}
	f := b.gl.Faults()
	f.RebaseConflictRate = 1
	b.gl.SetFaults(f)
	var events []change.Event
	merged, err := b.runner.Merge(ctx, change.MergeInput{Spec: s, IID: mr.IID, Stages: fast, Progress: func(e change.Event) { events = append(events, e) }})
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
	b.runner.WaitPipeline(ctx, project, mr.IID, fast, nil)
	b.runner.Approve(ctx, project, mr.IID)
	f := b.gl.Faults()
	f.NeedRebaseRate, f.RebaseConflictRate = 1, 1
	b.gl.SetFaults(f)
	_, err := b.runner.Merge(ctx, change.MergeInput{Spec: s, IID: mr.IID, Stages: fast})
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
	if _, err := b.runner.Merge(ctx, change.MergeInput{Spec: s2, IID: open.IID, Stages: fast}); !errors.Is(err, change.ErrMRClosed) {
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

// An MR closed outside bindery ends the pipeline wait at the next check with ErrMRClosed, not
// at the timeout: a closed MR is an answer, not a read that failed.
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
	long := change.Stages{Short: time.Millisecond, ShortCount: 2, Long: 2 * time.Millisecond, Timeout: time.Hour}
	res, err := b.runner.WaitPipeline(ctx, project, mr.IID, long, nil)
	if !errors.Is(err, change.ErrMRClosed) || res.Outcome != change.Failed {
		t.Fatalf("closed MR: %v %v", res.Outcome, err)
	}
}
