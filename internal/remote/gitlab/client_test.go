package gitlab_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	gl "gitlab.com/gitlab-org/api/client-go/v2"

	"bindery/internal/platform/config"
	"bindery/internal/remote/gitlab"
	"bindery/internal/remote/outbound"
	"bindery/internal/sim"
)

// Every test here runs bindery's real client against the simulated GitLab over real HTTP.

const project = "infra/access-config"

const baseConfig = `
gitlab:
  botToken: bot-token
  reviewerTokens: [rev1-token, rev2-token]
  timeout: 5s
approval:
  maxRetries: 2
  backoff: 1ms
breaker:
  failures: 3
  cooldown: 50ms
sim:
  gitlab:
    pipelineDuration: 0s
    rebaseDuration: 0s
targets:
  - key: t1
    project: infra/access-config
    path: "bindings/t1/{subject}.yaml"
`

type bundle struct {
	src    *config.Source
	sims   *sim.Sims
	sim    *sim.GitLab
	client *gitlab.Client
	set    *metrics.Set
	url    string
}

// setup starts the simulators on a real listener and builds the client from cfg (baseConfig
// when empty). The simulated GitLab starts with its configured knobs, not a test override.
func setup(t testing.TB, cfg string, opts ...func(*sim.Options)) *bundle {
	t.Helper()
	if cfg == "" {
		cfg = baseConfig
	}
	src := config.NewStatic(config.MustParse(cfg))
	o := sim.Options{Config: src}
	for _, f := range opts {
		f(&o)
	}
	sims := sim.New(o)
	srv := httptest.NewServer(sims.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	sims.Start(ctx)
	t.Cleanup(func() { cancel(); sims.Stop(context.Background()); srv.Close() })
	set := metrics.NewSet()
	c, err := gitlab.New(src, gitlab.Options{Metrics: set, DefaultBaseURL: srv.URL + "/sim/gitlab"})
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{src: src, sims: sims, sim: sims.GitLab, client: c, set: set, url: srv.URL}
}

// reconfigure swaps the configuration as a file edit would.
func (b *bundle) reconfigure(t *testing.T, cfg string) {
	t.Helper()
	b.src.Replace(config.MustParse(cfg))
}

func (b *bundle) metric(name string) string {
	var buf bytes.Buffer
	b.set.WritePrometheus(&buf)
	for _, line := range strings.Split(buf.String(), "\n") {
		if strings.HasPrefix(line, name+" ") {
			return strings.TrimPrefix(line, name+" ")
		}
	}
	return ""
}

var ctx = context.Background()

// openMR makes a branch with one commit and an MR for it, as a batch does.
func (b *bundle) openMR(t testing.TB, branch string) gitlab.MergeRequest {
	t.Helper()
	_, err := b.client.CreateCommit(ctx, project, gitlab.CommitRequest{
		Branch: branch, StartBranch: "main", Message: "Add bindings",
		Actions: []gitlab.FileAction{{Action: gitlab.ActionCreate, Path: "bindings/" + branch + ".yaml", Content: "operationId: op-" + branch + "\n"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	mr, err := b.client.CreateMergeRequest(ctx, project, gitlab.MergeRequestRequest{SourceBranch: branch, TargetBranch: "main", Title: "Batch " + branch})
	if err != nil {
		t.Fatal(err)
	}
	return mr
}

func statusOf(err error) int { return outbound.StatusOf(err) }

func TestEverySeamCallWorksAgainstTheSimulator(t *testing.T) {
	b := setup(t, "")
	br, err := b.client.CreateBranch(ctx, project, "batch/1", "main")
	if err != nil || br.Name != "batch/1" || len(br.CommitSHA) != 40 {
		t.Fatalf("CreateBranch = %+v, %v", br, err)
	}
	if got, err := b.client.GetBranch(ctx, project, "batch/1"); err != nil || got.CommitSHA != br.CommitSHA {
		t.Fatalf("GetBranch = %+v, %v", got, err)
	}
	cm, err := b.client.CreateCommit(ctx, project, gitlab.CommitRequest{Branch: "batch/1", Message: "Two bindings\n\nbody", Actions: []gitlab.FileAction{
		{Action: gitlab.ActionCreate, Path: "bindings/a.yaml", Content: "operationId: op-a\n"},
		{Action: gitlab.ActionCreate, Path: "bindings/b.yaml", Content: "operationId: op-b\n"},
	}})
	if err != nil || cm.Title != "Two bindings" || len(cm.ParentIDs) != 1 || cm.ParentIDs[0] != br.CommitSHA {
		t.Fatalf("CreateCommit = %+v, %v", cm, err)
	}
	mr, err := b.client.CreateMergeRequest(ctx, project, gitlab.MergeRequestRequest{SourceBranch: "batch/1", TargetBranch: "main", Title: "Batch 1", Labels: []string{"bindery"}})
	if err != nil || mr.IID != 1 || mr.SHA != cm.ID || !mr.Open() {
		t.Fatalf("CreateMergeRequest = %+v, %v", mr, err)
	}
	// GitLab computes mergeability lazily: the first read may say "checking".
	mr, err = b.client.GetMergeRequest(ctx, project, mr.IID)
	if err != nil || mr.DetailedMergeStatus != "checking" {
		t.Fatalf("first GetMergeRequest = %+v, %v", mr, err)
	}
	mr, err = b.client.GetMergeRequest(ctx, project, mr.IID)
	if err != nil || mr.DetailedMergeStatus != "not_approved" || mr.RebaseInProgress || mr.HeadPipeline == nil || mr.HeadPipeline.Outcome() != gitlab.Passed {
		t.Fatalf("settled GetMergeRequest = %+v (pipeline %+v), %v", mr, mr.HeadPipeline, err)
	}
	pls, err := b.client.MergeRequestPipelines(ctx, project, mr.IID)
	if err != nil || len(pls) != 1 || pls[0].SHA != mr.SHA {
		t.Fatalf("MergeRequestPipelines = %+v, %v", pls, err)
	}
	if pl, err := b.client.GetPipeline(ctx, project, pls[0].ID); err != nil || pl.Status != "success" {
		t.Fatalf("GetPipeline = %+v, %v", pl, err)
	}
	if jobs, err := b.client.FailedJobs(ctx, project, pls[0].ID); err != nil || len(jobs) != 0 {
		t.Fatalf("FailedJobs of a passed pipeline = %+v, %v", jobs, err)
	}
	b.sim.FailNextPipelines(1)
	failed, err := b.client.CreateMergeRequestPipeline(ctx, project, mr.IID)
	if err != nil || failed.ID == pls[0].ID {
		t.Fatalf("CreateMergeRequestPipeline = %+v, %v", failed, err)
	}
	jobs, err := b.client.FailedJobs(ctx, project, failed.ID)
	if err != nil || len(jobs) != 1 || jobs[0].Name != "test" || jobs[0].Status != "failed" ||
		jobs[0].WebURL != fmt.Sprintf("%s/sim/gitlab/%s/-/jobs/%d", b.url, project, jobs[0].ID) {
		t.Fatalf("FailedJobs of a failed pipeline = %+v, %v", jobs, err)
	}
	if _, err := b.client.FailedJobs(ctx, project, 999); !errors.Is(err, gitlab.ErrNotFound) {
		t.Fatalf("FailedJobs of an unknown pipeline: %v", err)
	}
	if pl, err := b.client.CreateMergeRequestPipeline(ctx, project, mr.IID); err != nil || pl.Outcome() != gitlab.Passed {
		t.Fatalf("CreateMergeRequestPipeline after the failed one = %+v, %v", pl, err)
	}
	if items, err := b.client.ChecklistItems(ctx, project); err != nil || len(items) != 0 {
		t.Fatalf("ChecklistItems = %+v, %v", items, err)
	}
	if err := b.client.Rebase(ctx, project, mr.IID); err != nil {
		t.Fatalf("Rebase: %v", err)
	}
	if err := b.client.Approve(ctx, project, mr.IID, mr.SHA); err != nil {
		t.Fatalf("Approve: %v", err)
	}
	ap, err := b.client.Approvals(ctx, project, mr.IID)
	if err != nil || !ap.Approved || strings.Join(ap.ApprovedBy, ",") != "reviewer-1,reviewer-2" {
		t.Fatalf("Approvals = %+v, %v", ap, err)
	}
	merged, err := b.client.Merge(ctx, project, mr.IID, gitlab.MergeOptions{SHA: mr.SHA, RemoveSourceBranch: true})
	if err != nil || !merged.Merged() || merged.MergeCommitSHA == "" {
		t.Fatalf("Merge = %+v, %v", merged, err)
	}
	if content, ok := b.sim.File(project, "main", "bindings/b.yaml"); !ok || content != "operationId: op-b\n" {
		t.Fatalf("merged file = %q %v", content, ok)
	}
	// Closing a merged MR is a silent no-op: the answer shows it merged (merge wins over close).
	if closed, err := b.client.CloseMergeRequest(ctx, project, mr.IID); err != nil || !closed.Merged() {
		t.Fatalf("CloseMergeRequest on merged = %+v, %v", closed, err)
	}
	if _, err := b.client.GetBranch(ctx, project, "batch/1"); !errors.Is(err, gitlab.ErrNotFound) {
		t.Fatalf("source branch should be removed by the merge: %v", err)
	}
	if _, err := b.client.CreateBranch(ctx, project, "tmp", "main"); err != nil {
		t.Fatal(err)
	}
	if err := b.client.DeleteBranch(ctx, project, "tmp"); err != nil {
		t.Fatalf("DeleteBranch: %v", err)
	}
	if err := b.client.DeleteBranch(ctx, project, "tmp"); !errors.Is(err, gitlab.ErrNotFound) {
		t.Fatalf("DeleteBranch twice: %v", err)
	}
	if got := b.metric(`bindery_outbound_requests_total{system="gitlab",endpoint="merge",status="2xx"}`); got != "1" {
		t.Fatalf("merge metric = %q", got)
	}
}

func TestCloseOpenMergeRequestClosesIt(t *testing.T) {
	b := setup(t, "")
	mr := b.openMR(t, "close-me")
	closed, err := b.client.CloseMergeRequest(ctx, project, mr.IID)
	if err != nil || !closed.Closed() {
		t.Fatalf("CloseMergeRequest = %+v, %v", closed, err)
	}
}

func TestMergeRequestIIDsGrowPerProject(t *testing.T) {
	b := setup(t, "")
	b.sim.CreateProject("other/repo", "main")
	for i, want := range []int64{1, 2} {
		mr := b.openMR(t, "grow-"+string(rune('a'+i)))
		if mr.IID != want {
			t.Fatalf("iid %d, want %d", mr.IID, want)
		}
	}
	if _, err := b.client.CreateCommit(ctx, "other/repo", gitlab.CommitRequest{Branch: "x", StartBranch: "main", Message: "m",
		Actions: []gitlab.FileAction{{Action: gitlab.ActionCreate, Path: "f", Content: "c"}}}); err != nil {
		t.Fatal(err)
	}
	mr, err := b.client.CreateMergeRequest(ctx, "other/repo", gitlab.MergeRequestRequest{SourceBranch: "x", TargetBranch: "main", Title: "t"})
	if err != nil || mr.IID != 1 {
		t.Fatalf("other project's first MR = %+v, %v", mr, err)
	}
}

func TestRefusalsAreClassifiedAndCarryNoUpstreamText(t *testing.T) {
	b := setup(t, "")
	mr := b.openMR(t, "c1")
	cases := []struct {
		name     string
		call     func() error
		sentinel error
		status   int
		upstream string
	}{
		{"existing branch", func() error { _, err := b.client.CreateBranch(ctx, project, "c1", "main"); return err },
			gitlab.ErrBranchExists, 400, "Branch already exists"},
		{"file exists", func() error {
			_, err := b.client.CreateCommit(ctx, project, gitlab.CommitRequest{Branch: "c1", Message: "m",
				Actions: []gitlab.FileAction{{Action: gitlab.ActionCreate, Path: "bindings/c1.yaml", Content: "x"}}})
			return err
		}, gitlab.ErrFileExists, 400, "A file with this name already exists"},
		{"file missing", func() error {
			_, err := b.client.CreateCommit(ctx, project, gitlab.CommitRequest{Branch: "c1", Message: "m",
				Actions: []gitlab.FileAction{{Action: gitlab.ActionDelete, Path: "nope.yaml"}}})
			return err
		}, gitlab.ErrFileMissing, 400, "doesn't exist"},
		{"stale last commit id", func() error {
			_, err := b.client.CreateCommit(ctx, project, gitlab.CommitRequest{Branch: "c1", Message: "m",
				Actions: []gitlab.FileAction{{Action: gitlab.ActionUpdate, Path: "bindings/c1.yaml", Content: "y", LastCommitID: strings.Repeat("0", 40)}}})
			return err
		}, gitlab.ErrFileChanged, 400, "has changed since"},
		{"duplicate MR", func() error {
			_, err := b.client.CreateMergeRequest(ctx, project, gitlab.MergeRequestRequest{SourceBranch: "c1", TargetBranch: "main", Title: "again"})
			return err
		}, gitlab.ErrMergeRequestExists, 409, "Another open merge request"},
		{"merge at a stale sha", func() error {
			_ = b.client.Approve(ctx, project, mr.IID, mr.SHA)
			_, err := b.client.Merge(ctx, project, mr.IID, gitlab.MergeOptions{SHA: strings.Repeat("a", 40)})
			return err
		}, gitlab.ErrSHAMismatch, 409, "SHA does not match"},
		{"unknown MR", func() error { _, err := b.client.GetMergeRequest(ctx, project, 999); return err },
			gitlab.ErrNotFound, 404, ""},
		{"unknown project", func() error { _, err := b.client.GetMergeRequest(ctx, "no/such", 1); return err },
			gitlab.ErrNotFound, 404, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, tc.sentinel) || statusOf(err) != tc.status {
				t.Fatalf("err = %v (status %d), want %v", err, statusOf(err), tc.sentinel)
			}
			var er *gl.ErrorResponse
			if !errors.As(err, &er) || er.StatusCode != tc.status || len(er.Body) != 0 {
				t.Fatalf("cause is not the library's error with the status and no body: %#v", er)
			}
			if tc.upstream != "" {
				if strings.Contains(err.Error(), tc.upstream) {
					t.Fatalf("error text carries the upstream message: %q", err.Error())
				}
				var oe *outbound.Error
				if !errors.As(err, &oe) || !strings.Contains(oe.Upstream(), tc.upstream) {
					t.Fatalf("upstream message not kept for the log: %q", oe.Upstream())
				}
			}
		})
	}
	if iid, ok := gitlab.ExistingMergeRequest(cases[4].call()); !ok || iid != mr.IID {
		t.Fatalf("ExistingMergeRequest = %d %v, want %d", iid, ok, mr.IID)
	}
}

func TestLostCreateMergeRequestAnswerIsFoundOnRetry(t *testing.T) {
	b := setup(t, "")
	if _, err := b.client.CreateCommit(ctx, project, gitlab.CommitRequest{Branch: "lost", StartBranch: "main", Message: "m",
		Actions: []gitlab.FileAction{{Action: gitlab.ActionCreate, Path: "lost.yaml", Content: "x"}}}); err != nil {
		t.Fatal(err)
	}
	b.sim.Inject("create_mr", sim.FaultDrop, 1)
	req := gitlab.MergeRequestRequest{SourceBranch: "lost", TargetBranch: "main", Title: "t"}
	_, err := b.client.CreateMergeRequest(ctx, project, req)
	var oe *outbound.Error
	if !errors.As(err, &oe) || oe.Kind != outbound.KindUnavailable {
		t.Fatalf("dropped answer: %v", err)
	}
	_, err = b.client.CreateMergeRequest(ctx, project, req)
	if iid, ok := gitlab.ExistingMergeRequest(err); !ok || iid != 1 {
		t.Fatalf("retry after a lost answer: %v (iid %d)", err, iid)
	}
}

func TestCommitCanRegenerateABranchFromTheTarget(t *testing.T) {
	b := setup(t, "")
	mr := b.openMR(t, "regen")
	if err := b.client.Approve(ctx, project, mr.IID, mr.SHA); err != nil { // approvals outrank the git checks
		t.Fatal(err)
	}
	if _, err := b.sim.PushToBranch(project, "main", "bindings/regen.yaml", "someone else's\n"); err != nil {
		t.Fatal(err)
	}
	b.client.GetMergeRequest(ctx, project, mr.IID) // consume "checking"
	got, _ := b.client.GetMergeRequest(ctx, project, mr.IID)
	if !got.HasConflicts || got.DetailedMergeStatus != "conflict" {
		t.Fatalf("conflicting MR = %+v", got)
	}
	cm, err := b.client.CreateCommit(ctx, project, gitlab.CommitRequest{Branch: "regen", StartBranch: "main", Force: true, Message: "Regenerated",
		Actions: []gitlab.FileAction{{Action: gitlab.ActionUpdate, Path: "bindings/regen.yaml", Content: "operationId: op-regen\n"}}})
	if err != nil {
		t.Fatal(err)
	}
	b.client.GetMergeRequest(ctx, project, mr.IID)
	got, _ = b.client.GetMergeRequest(ctx, project, mr.IID)
	if got.SHA != cm.ID || got.HasConflicts || got.NeedsRebase() {
		t.Fatalf("regenerated MR = %+v", got)
	}
}

func TestMergeWaitsForPipelineAndApprovals(t *testing.T) {
	clock := sim.NewManualClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	b := setup(t, strings.Replace(baseConfig, "pipelineDuration: 0s", "pipelineDuration: 100s", 1), func(o *sim.Options) { o.Clock = clock })
	mr := b.openMR(t, "waits")
	status := func() (string, string) {
		b.sim.Sync()
		got, err := b.client.GetMergeRequest(ctx, project, mr.IID)
		if err != nil {
			t.Fatal(err)
		}
		return got.HeadPipeline.Status, got.DetailedMergeStatus
	}
	status() // "checking"
	// GitLab reports the CI check only when every other check passes: approvals first.
	for _, step := range []struct {
		advance          time.Duration
		approve          bool
		pipeline, merges string
	}{
		{0, false, "created", "not_approved"},
		{15 * time.Second, false, "pending", "not_approved"},
		{0, true, "pending", "ci_still_running"},
		{30 * time.Second, false, "running", "ci_still_running"},
		{60 * time.Second, false, "success", "mergeable"},
	} {
		if step.approve {
			if _, err := b.client.Merge(ctx, project, mr.IID, gitlab.MergeOptions{SHA: mr.SHA}); !errors.Is(err, gitlab.ErrNotMergeable) {
				t.Fatalf("merge before approvals: %v", err)
			}
			if err := b.client.Approve(ctx, project, mr.IID, mr.SHA); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(step.advance)
		if p, m := status(); p != step.pipeline || m != step.merges {
			t.Fatalf("after +%s: pipeline %s / %s, want %s / %s", step.advance, p, m, step.pipeline, step.merges)
		}
	}
}

func TestAutoMergeMergesWhenThePipelinePasses(t *testing.T) {
	clock := sim.NewManualClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	b := setup(t, strings.Replace(baseConfig, "pipelineDuration: 0s", "pipelineDuration: 10s", 1), func(o *sim.Options) { o.Clock = clock })
	mr := b.openMR(t, "auto")
	if err := b.client.Approve(ctx, project, mr.IID, mr.SHA); err != nil {
		t.Fatal(err)
	}
	got, err := b.client.Merge(ctx, project, mr.IID, gitlab.MergeOptions{SHA: mr.SHA, AutoMerge: true})
	if err != nil || got.Merged() || !got.AutoMerge {
		t.Fatalf("auto-merge while CI runs = %+v, %v", got, err)
	}
	clock.Advance(11 * time.Second)
	b.sim.Sync()
	if got, _ := b.client.GetMergeRequest(ctx, project, mr.IID); !got.Merged() {
		t.Fatalf("after the pipeline passed: %+v", got)
	}
}

// A branch built on another branch's commit, remade elsewhere with force; MergeBase tells
// whether a commit is still in a branch's history.
func TestBranchesOnBranchesAndTheirMergeBase(t *testing.T) {
	b := setup(t, "")
	add := func(r gitlab.CommitRequest, path string) (gitlab.Commit, error) {
		r.Message = "add " + path
		r.Actions = []gitlab.FileAction{{Action: gitlab.ActionCreate, Path: path, Content: "operationId: " + path + "\n"}}
		return b.client.CreateCommit(ctx, project, r)
	}
	car1, err := add(gitlab.CommitRequest{Branch: "car/1", StartBranch: "main"}, "bindings/1.yaml")
	if err != nil {
		t.Fatal(err)
	}
	main := car1.ParentIDs[0]
	car2, err := add(gitlab.CommitRequest{Branch: "car/2", StartSHA: car1.ID}, "bindings/2.yaml")
	if err != nil || len(car2.ParentIDs) != 1 || car2.ParentIDs[0] != car1.ID {
		t.Fatalf("car 2 on car 1's commit = %+v, %v", car2, err)
	}
	if _, err := add(gitlab.CommitRequest{Branch: "car/2", StartSHA: main}, "bindings/2.yaml"); !errors.Is(err, gitlab.ErrBranchExists) {
		t.Fatalf("remaking car 2 without force: %v", err)
	}
	if _, err := add(gitlab.CommitRequest{Branch: "car/3", StartSHA: car1.ID[:8]}, "bindings/3.yaml"); !errors.Is(err, gitlab.ErrInvalidRef) || statusOf(err) != 400 {
		t.Fatalf("a short start sha: %v", err)
	}

	for _, tc := range []struct {
		refs []string
		want string
	}{
		{[]string{car1.ID, "car/2"}, car1.ID}, // car 1's head is in car 2's history
		{[]string{"car/2", car1.ID}, car1.ID},
		{[]string{"car/2", "main"}, main},
		{[]string{"main", "car/1", "car/2"}, main},
	} {
		if got, err := b.client.MergeBase(ctx, project, tc.refs...); err != nil || got.ID != tc.want || got.Title == "" {
			t.Fatalf("MergeBase(%v) = %+v, %v; want %s", tc.refs, got, err, tc.want)
		}
	}
	if _, err := b.client.MergeBase(ctx, project, "car/2", "nope"); !errors.Is(err, gitlab.ErrInvalidRef) || statusOf(err) != 400 {
		t.Fatalf("MergeBase with an unknown ref: %v", err)
	}
	if _, err := b.client.MergeBase(ctx, project, "car/2"); statusOf(err) != 400 {
		t.Fatalf("MergeBase of one ref: %v", err)
	}

	// Car 2 remade on main without car 1: car 1's head is no longer in its history.
	car2b, err := add(gitlab.CommitRequest{Branch: "car/2", StartSHA: main, Force: true}, "bindings/2.yaml")
	if err != nil || car2b.ParentIDs[0] != main {
		t.Fatalf("car 2 remade on main = %+v, %v", car2b, err)
	}
	if got, err := b.client.MergeBase(ctx, project, car1.ID, "car/2"); err != nil || got.ID == car1.ID || got.ID != main {
		t.Fatalf("MergeBase(car 1, remade car 2) = %+v, %v; want main %s", got, err, main)
	}
	if got := b.metric(`bindery_outbound_requests_total{system="gitlab",endpoint="merge_base",status="2xx"}`); got != "5" {
		t.Fatalf("merge_base metric = %q", got)
	}
}
