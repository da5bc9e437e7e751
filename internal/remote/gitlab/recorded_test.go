package gitlab_test

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"bindery/internal/platform/config"
	"bindery/internal/remote/gitlab"
	"bindery/internal/remote/outbound"
	"bindery/internal/work/change"
)

// Response bodies as GitLab sends them (testdata/gitlab, one directory per version; see its
// README for where they come from), decoded through the real client: every field bindery reads,
// and what bindery decides from it.

// recorded serves testdata/gitlab bodies at the API paths bindery calls.
type recorded struct {
	t       *testing.T
	version string
	mr      string // which merge_request_<mr>.json GET answers
	merge   func() (int, string)
	// pipelineError is the body of the 400 creating an MR pipeline ("": no MR jobs).
	pipelineError string
}

func (rc *recorded) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.EscapedPath(), "/api/v4/projects/infra%2Faccess-config")
	status, file := http.StatusOK, ""
	switch {
	case r.Method == "GET" && path == "/merge_requests/12":
		file = filepath.Join(rc.version, "merge_request_"+rc.mr+".json")
	case r.Method == "GET" && path == "/merge_requests/12/pipelines":
		file = "mr_pipelines.json"
	case r.Method == "POST" && path == "/merge_requests/12/pipelines":
		status, file = http.StatusBadRequest, cmp.Or(rc.pipelineError, "error_no_mr_pipeline_jobs.json")
	case r.Method == "GET" && path == "/pipelines/993":
		file = "pipeline.json"
	case r.Method == "GET" && strings.HasPrefix(path, "/repository/commits/"):
		file = "commit_merge_ref.json"
	case r.Method == "GET" && path == "/merge_requests/12/approvals":
		file = "approvals_" + rc.mr + ".json"
	case r.Method == "PUT" && path == "/merge_requests/12/merge":
		status, file = rc.merge()
	case r.Method == "GET" && path == "/merge_requests/13":
		w.Header().Set("Retry-After", "7")
		status, file = http.StatusTooManyRequests, "error_rate_limited.json"
	default:
		rc.t.Errorf("unexpected call %s %s", r.Method, path)
		status, file = http.StatusNotFound, "error_405.json"
	}
	body, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "gitlab", file))
	if err != nil {
		rc.t.Fatal(err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}

func recordedClient(t *testing.T, rc *recorded) *gitlab.Client {
	t.Helper()
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	src := config.NewStatic(config.MustParse(baseConfig))
	c, err := gitlab.New(src, gitlab.Options{Metrics: metrics.NewSet(), DefaultBaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var versions = []string{"17", "16", "15", "15.5"}

func TestRecordedMergeRequestsDecodeIntoWhatBinderyDecidesFrom(t *testing.T) {
	const head = "8f2f4a8d0c6c1b5e7a9d3f2e1c0b9a8d7e6f5a4b"
	for _, v := range versions {
		old := v == "15.5"
		for _, c := range []struct {
			name, decided, oldDecided string // what bindery decides (Mergeability); before 15.6
		}{
			{"mergeable", "mergeable", ""},
			{"need_rebase", "need_rebase", ""}, // 15.5 cannot say: the merge's refusal tells
			{"conflict", "conflict", "conflict"},
			{"discussions", "discussions_not_resolved", "discussions_not_resolved"},
			{"draft", "draft_status", "draft_status"},
			{"checking", "checking", "checking"},
			{"merged_results", "ci_still_running", ""},
		} {
			t.Run(v+"/"+c.name, func(t *testing.T) {
				rc := &recorded{t: t, version: v, mr: c.name}
				mr, err := recordedClient(t, rc).GetMergeRequest(ctx, project, 12)
				if err != nil {
					t.Fatal(err)
				}
				want := c.decided
				if old {
					want = c.oldDecided
				}
				if got := change.Mergeability(mr); got != want {
					t.Errorf("decided %q from %+v, want %q", got, mr, want)
				}
				created := time.Date(2026, 11, 30, 9, 12, 1, 123e6, time.UTC)
				if mr.ID != 4242 || mr.IID != 12 || mr.ProjectID != 7 || mr.State != gitlab.StateOpened || mr.SHA != head ||
					mr.SourceBranch != "bindery/batch-3" || mr.TargetBranch != "main" || !mr.CreatedAt.Equal(created) ||
					mr.WebURL != "https://gitlab.example.com/infra/access-config/-/merge_requests/12" || mr.RebaseInProgress || mr.MergeError != "" {
					t.Errorf("MR fields: %+v", mr)
				}
				if mr.MergeStatus == "" || (old != (mr.DetailedMergeStatus == "")) {
					t.Errorf("merge_status %q, detailed_merge_status %q on %s", mr.MergeStatus, mr.DetailedMergeStatus, v)
				}
				p := mr.HeadPipeline
				if p == nil || p.ID != 991 || p.Status == "" || p.Ref == "" || p.SHA == "" || p.WebURL == "" || p.UpdatedAt.IsZero() {
					t.Errorf("head pipeline: %+v", p)
				}
			})
		}
	}
}

// The MR's pipelines, one pipeline, a merged-results pipeline's merge commit, both approvals
// shapes, and GitLab's refusals, per version.
func TestRecordedPipelinesCommitsApprovalsAndRefusals(t *testing.T) {
	rc := &recorded{t: t, version: "17", mr: "merged_results"}
	c := recordedClient(t, rc)
	list, err := c.MergeRequestPipelines(ctx, project, 12)
	if err != nil || len(list) != 3 || list[0].ID != 993 || list[0].Ref != "refs/merge-requests/12/merge" || list[1].Source != "push" ||
		list[1].Outcome() != gitlab.Failed || list[2].Outcome() != gitlab.Passed || list[0].Outcome() != gitlab.Running {
		t.Fatalf("pipelines = %+v, %v", list, err)
	}
	p, err := c.GetPipeline(ctx, project, 993)
	if err != nil || p.ID != 993 || p.SHA != list[0].SHA || p.Source != "merge_request_event" || p.WebURL == "" {
		t.Fatalf("pipeline = %+v, %v", p, err)
	}
	cm, err := c.GetCommit(ctx, project, p.SHA)
	if err != nil || cm.ID != p.SHA || len(cm.ParentIDs) != 2 || cm.ParentIDs[1] != "8f2f4a8d0c6c1b5e7a9d3f2e1c0b9a8d7e6f5a4b" {
		t.Fatalf("commit = %+v, %v", cm, err)
	}
	for shape, want := range map[string]gitlab.Approvals{
		"ce": {Approved: true, ApprovedBy: []string{"bindery-reviewer-1"}},
		"ee": {Approved: false, ApprovalsRequired: 2, ApprovalsLeft: 1, ApprovedBy: []string{"bindery-reviewer-1"}},
	} {
		rc.mr = shape
		a, err := c.Approvals(ctx, project, 12)
		if err != nil || fmt.Sprint(a) != fmt.Sprint(want) {
			t.Errorf("%s approvals = %+v, %v; want %+v", shape, a, err, want)
		}
	}
	if _, err := c.CreateMergeRequestPipeline(ctx, project, 12); !errors.Is(err, gitlab.ErrNoMRPipelines) {
		t.Errorf("MR pipeline in a branch-pipelines project: %v", err)
	}
	rc.pipelineError = "error_ci_config.json" // a broken CI config is not "branch pipelines only"
	if _, err := c.CreateMergeRequestPipeline(ctx, project, 12); err == nil || errors.Is(err, gitlab.ErrNoMRPipelines) {
		t.Errorf("a 400 for a broken CI config: %v", err)
	}
	_, err = c.GetMergeRequest(ctx, project, 13)
	if outbound.StatusOf(err) != 429 || outbound.RetryAfterOf(err) != 7*time.Second {
		t.Errorf("rate limited: %v, retry after %s", err, outbound.RetryAfterOf(err))
	}
	// What git cannot merge: 422 from 17, 405 on 16, 406 before; a moved head is 409 on all.
	for _, r := range []struct {
		status int
		file   string
		want   error
	}{
		{422, "error_branch_cannot_be_merged.json", gitlab.ErrMergeFailed},
		{405, "error_405.json", gitlab.ErrNotMergeable},
		{406, "error_branch_cannot_be_merged.json", gitlab.ErrMergeFailed},
		{409, "error_sha_mismatch.json", gitlab.ErrSHAMismatch},
	} {
		rc.merge = func() (int, string) { return r.status, r.file }
		_, err := c.Merge(ctx, project, 12, gitlab.MergeOptions{SHA: "8f2f4a8d0c6c1b5e7a9d3f2e1c0b9a8d7e6f5a4b"})
		if !errors.Is(err, r.want) || strings.Contains(err.Error(), "Branch cannot") {
			t.Errorf("merge answered %d: %v, want %v without upstream text", r.status, err, r.want)
		}
	}
}
