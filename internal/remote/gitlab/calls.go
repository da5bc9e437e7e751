package gitlab

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	retryablehttp "github.com/hashicorp/go-retryablehttp"
	gl "gitlab.com/gitlab-org/api/client-go/v2"
)

// The seam's calls, one library call each (MergeRequestPipelines pages, Approve is in
// approve.go). Each names its endpoint for metrics and faults.

func (c *Client) CreateBranch(ctx context.Context, project, branch, ref string) (Branch, error) {
	var out Branch
	err := c.call(ctx, botAccount(c.cfg.Current()), "create_branch", func(l *gl.Client, o gl.RequestOptionFunc) (*gl.Response, error) {
		b, resp, err := l.Branches.CreateBranch(project, &gl.CreateBranchOptions{Branch: &branch, Ref: &ref}, o)
		if err == nil {
			out = toBranch(b)
		}
		return resp, err
	})
	return out, err
}

func (c *Client) GetBranch(ctx context.Context, project, branch string) (Branch, error) {
	var out Branch
	err := c.call(ctx, botAccount(c.cfg.Current()), "get_branch", func(l *gl.Client, o gl.RequestOptionFunc) (*gl.Response, error) {
		b, resp, err := l.Branches.GetBranch(project, branch, o)
		if err == nil {
			out = toBranch(b)
		}
		return resp, err
	})
	return out, err
}

func (c *Client) DeleteBranch(ctx context.Context, project, branch string) error {
	return c.call(ctx, botAccount(c.cfg.Current()), "delete_branch", func(l *gl.Client, o gl.RequestOptionFunc) (*gl.Response, error) {
		return l.Branches.DeleteBranch(project, branch, o)
	})
}

func toBranch(b *gl.Branch) Branch {
	out := Branch{Name: b.Name, WebURL: b.WebURL}
	if b.Commit != nil {
		out.CommitSHA = b.Commit.ID
	}
	return out
}

func (c *Client) CreateCommit(ctx context.Context, project string, r CommitRequest) (Commit, error) {
	opt := &gl.CreateCommitOptions{Branch: &r.Branch, CommitMessage: &r.Message}
	if r.StartBranch != "" {
		opt.StartBranch = &r.StartBranch
	}
	if r.StartSHA != "" {
		opt.StartSHA = &r.StartSHA
	}
	if r.Force {
		opt.Force = gl.Ptr(true)
	}
	if r.AuthorName != "" {
		opt.AuthorName = &r.AuthorName
	}
	if r.AuthorEmail != "" {
		opt.AuthorEmail = &r.AuthorEmail
	}
	for _, a := range r.Actions {
		act := &gl.CommitActionOptions{Action: gl.Ptr(gl.FileActionValue(a.Action)), FilePath: gl.Ptr(a.Path)}
		switch a.Action {
		case ActionCreate, ActionUpdate:
			act.Content = gl.Ptr(a.Content)
		case ActionMove:
			act.PreviousPath = gl.Ptr(a.PreviousPath)
			if a.Content != "" {
				act.Content = gl.Ptr(a.Content)
			}
		}
		if a.LastCommitID != "" {
			act.LastCommitID = gl.Ptr(a.LastCommitID)
		}
		opt.Actions = append(opt.Actions, act)
	}
	var out Commit
	err := c.call(ctx, botAccount(c.cfg.Current()), "create_commit", func(l *gl.Client, o gl.RequestOptionFunc) (*gl.Response, error) {
		cm, resp, err := l.Commits.CreateCommit(project, opt, o)
		if err == nil {
			out = toCommit(cm)
		}
		return resp, err
	})
	return out, err
}

func (c *Client) CreateMergeRequest(ctx context.Context, project string, r MergeRequestRequest) (MergeRequest, error) {
	opt := &gl.CreateMergeRequestOptions{
		Title: &r.Title, SourceBranch: &r.SourceBranch, TargetBranch: &r.TargetBranch,
		RemoveSourceBranch: gl.Ptr(r.RemoveSourceBranch),
	}
	if r.Description != "" {
		opt.Description = &r.Description
	}
	if len(r.Labels) > 0 {
		labels := gl.LabelOptions(r.Labels)
		opt.Labels = &labels
	}
	return c.mrCall(ctx, "create_mr", func(l *gl.Client, o gl.RequestOptionFunc) (*gl.MergeRequest, *gl.Response, error) {
		return l.MergeRequests.CreateMergeRequest(project, opt, o)
	})
}

// GetMergeRequest reads the MR through the library's request and decoder, with merge_status
// besides (the library dropped it; bindery decides from it on GitLab before 15.6).
func (c *Client) GetMergeRequest(ctx context.Context, project string, iid int64) (MergeRequest, error) {
	var out MergeRequest
	err := c.call(ctx, botAccount(c.cfg.Current()), "get_mr", func(l *gl.Client, o gl.RequestOptionFunc) (*gl.Response, error) {
		path := fmt.Sprintf("projects/%s/merge_requests/%d", gl.PathEscape(project), iid)
		req, err := l.NewRequest(http.MethodGet, path, &gl.GetMergeRequestsOptions{IncludeRebaseInProgress: gl.Ptr(true)}, []gl.RequestOptionFunc{o})
		if err != nil {
			return nil, err
		}
		var mr mrWithStatus
		resp, err := l.Do(req, &mr)
		if err == nil {
			out = toMergeRequest(&mr.MergeRequest)
			out.MergeStatus = mr.MergeStatus
		}
		return resp, err
	})
	return out, err
}

// mrWithStatus is an MR answer read twice: as the library's MR, and for merge_status.
type mrWithStatus struct {
	gl.MergeRequest
	MergeStatus string
}

func (m *mrWithStatus) UnmarshalJSON(data []byte) error {
	if err := json.Unmarshal(data, &m.MergeRequest); err != nil {
		return err
	}
	var extra struct {
		MergeStatus string `json:"merge_status"`
	}
	if err := json.Unmarshal(data, &extra); err != nil {
		return err
	}
	m.MergeStatus = extra.MergeStatus
	return nil
}

func (c *Client) MergeRequestsBySource(ctx context.Context, project, branch string) ([]MergeRequest, error) {
	var out []MergeRequest
	err := c.call(ctx, botAccount(c.cfg.Current()), "list_mrs", func(l *gl.Client, o gl.RequestOptionFunc) (*gl.Response, error) {
		list, resp, err := l.MergeRequests.ListProjectMergeRequests(project, &gl.ListProjectMergeRequestsOptions{
			SourceBranch: &branch, State: gl.Ptr("all"), OrderBy: gl.Ptr("created_at"), Sort: gl.Ptr("desc"),
		}, o, perPage(100))
		if err == nil {
			for _, m := range list {
				out = append(out, MergeRequest{ID: m.ID, IID: m.IID, ProjectID: m.ProjectID, Title: m.Title, State: m.State,
					SourceBranch: m.SourceBranch, TargetBranch: m.TargetBranch, SHA: m.SHA, MergeCommitSHA: m.MergeCommitSHA,
					SquashCommitSHA: m.SquashCommitSHA, MergedAt: deref(m.MergedAt), DetailedMergeStatus: m.DetailedMergeStatus, HasConflicts: m.HasConflicts, WebURL: m.WebURL,
					CreatedAt: deref(m.CreatedAt), UpdatedAt: deref(m.UpdatedAt)})
			}
		}
		return resp, err
	})
	return out, err
}

func (c *Client) CloseMergeRequest(ctx context.Context, project string, iid int64) (MergeRequest, error) {
	return c.mrCall(ctx, "update_mr", func(l *gl.Client, o gl.RequestOptionFunc) (*gl.MergeRequest, *gl.Response, error) {
		return l.MergeRequests.UpdateMergeRequest(project, iid, &gl.UpdateMergeRequestOptions{StateEvent: gl.Ptr("close")}, o)
	})
}

func (c *Client) Merge(ctx context.Context, project string, iid int64, m MergeOptions) (MergeRequest, error) {
	opt := &gl.AcceptMergeRequestOptions{ShouldRemoveSourceBranch: gl.Ptr(m.RemoveSourceBranch)}
	if m.SHA != "" {
		opt.SHA = &m.SHA
	}
	if m.Squash {
		opt.Squash = gl.Ptr(true)
	}
	if m.AutoMerge {
		opt.AutoMerge = gl.Ptr(true)
	}
	if m.CommitMessage != "" {
		opt.MergeCommitMessage = &m.CommitMessage
	}
	return c.mrCall(ctx, "merge", func(l *gl.Client, o gl.RequestOptionFunc) (*gl.MergeRequest, *gl.Response, error) {
		return l.MergeRequests.AcceptMergeRequest(project, iid, opt, o)
	})
}

func (c *Client) Rebase(ctx context.Context, project string, iid int64) error {
	return c.call(ctx, botAccount(c.cfg.Current()), "rebase", func(l *gl.Client, o gl.RequestOptionFunc) (*gl.Response, error) {
		return l.MergeRequests.RebaseMergeRequest(project, iid, nil, o)
	})
}

// mrCall runs an MR call as the bot and converts its answer.
func (c *Client) mrCall(ctx context.Context, endpoint string, fn func(*gl.Client, gl.RequestOptionFunc) (*gl.MergeRequest, *gl.Response, error)) (MergeRequest, error) {
	var out MergeRequest
	err := c.call(ctx, botAccount(c.cfg.Current()), endpoint, func(l *gl.Client, o gl.RequestOptionFunc) (*gl.Response, error) {
		mr, resp, err := fn(l, o)
		if err == nil {
			out = toMergeRequest(mr)
		}
		return resp, err
	})
	return out, err
}

func toMergeRequest(m *gl.MergeRequest) MergeRequest {
	out := MergeRequest{
		ID: m.ID, IID: m.IID, ProjectID: m.ProjectID, Title: m.Title, State: m.State,
		SourceBranch: m.SourceBranch, TargetBranch: m.TargetBranch, SHA: m.SHA, MergeCommitSHA: m.MergeCommitSHA,
		SquashCommitSHA: m.SquashCommitSHA, MergedAt: deref(m.MergedAt), DetailedMergeStatus: m.DetailedMergeStatus, HasConflicts: m.HasConflicts, MergeError: m.MergeError,
		Draft: m.Draft, BlockingDiscussionsResolved: m.BlockingDiscussionsResolved,
		RebaseInProgress: m.RebaseInProgress, AutoMerge: m.MergeWhenPipelineSucceeds, WebURL: m.WebURL,
		CreatedAt: deref(m.CreatedAt), UpdatedAt: deref(m.UpdatedAt),
	}
	if p := m.HeadPipeline; p != nil {
		out.HeadPipeline = &Pipeline{ID: p.ID, IID: p.IID, SHA: p.SHA, Ref: p.Ref, Status: p.Status, Source: string(p.Source),
			WebURL: p.WebURL, CreatedAt: deref(p.CreatedAt), UpdatedAt: deref(p.UpdatedAt)}
	}
	return out
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// maxPipelinePages bounds MergeRequestPipelines: an MR with more than 2,000 pipelines is not
// one bindery made.
const maxPipelinePages = 20

func (c *Client) MergeRequestPipelines(ctx context.Context, project string, iid int64) ([]Pipeline, error) {
	var out []Pipeline
	_, err := c.pages(ctx, "mr_pipelines", maxPipelinePages, func(l *gl.Client, o, page gl.RequestOptionFunc) (*gl.Response, error) {
		list, resp, err := l.MergeRequests.ListMergeRequestPipelines(project, iid, o, page, perPage(100))
		for _, p := range list {
			out = append(out, toPipelineInfo(p))
		}
		return resp, err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// pages runs one list call per page, as the bot, from page 1 until GitLab says there is no next
// page or max pages were read; more reports that a next page was left unread. The first page
// that fails ends it with that error.
func (c *Client) pages(ctx context.Context, endpoint string, max int64, fn func(l *gl.Client, ctxOpt, page gl.RequestOptionFunc) (*gl.Response, error)) (more bool, err error) {
	for page := int64(1); page > 0; {
		if page > max {
			return true, nil
		}
		next := int64(0)
		err := c.call(ctx, botAccount(c.cfg.Current()), endpoint, func(l *gl.Client, o gl.RequestOptionFunc) (*gl.Response, error) {
			resp, err := fn(l, o, gl.WithOffsetPaginationParameters(page))
			if err == nil {
				next = resp.NextPage
			}
			return resp, err
		})
		if err != nil {
			return false, err
		}
		page = next
	}
	return false, nil
}

func perPage(n int) gl.RequestOptionFunc {
	return func(req *retryablehttp.Request) error {
		q := req.URL.Query()
		q.Set("per_page", strconv.Itoa(n))
		req.URL.RawQuery = q.Encode()
		return nil
	}
}

func (c *Client) CreateMergeRequestPipeline(ctx context.Context, project string, iid int64) (Pipeline, error) {
	var out Pipeline
	err := c.call(ctx, botAccount(c.cfg.Current()), "create_mr_pipeline", func(l *gl.Client, o gl.RequestOptionFunc) (*gl.Response, error) {
		p, resp, err := l.MergeRequests.CreateMergeRequestPipeline(project, iid, o)
		if err == nil {
			out = toPipelineInfo(p)
		}
		return resp, err
	})
	return out, err
}

func (c *Client) CreatePipeline(ctx context.Context, project, ref string) (Pipeline, error) {
	return c.pipelineCall(ctx, "create_pipeline", func(l *gl.Client, o gl.RequestOptionFunc) (*gl.Pipeline, *gl.Response, error) {
		return l.Pipelines.CreatePipeline(project, &gl.CreatePipelineOptions{Ref: &ref}, o)
	})
}

func (c *Client) RetryPipeline(ctx context.Context, project string, id int64) (Pipeline, error) {
	return c.pipelineCall(ctx, "retry_pipeline", func(l *gl.Client, o gl.RequestOptionFunc) (*gl.Pipeline, *gl.Response, error) {
		return l.Pipelines.RetryPipelineBuild(project, id, o)
	})
}

func (c *Client) GetPipeline(ctx context.Context, project string, id int64) (Pipeline, error) {
	return c.pipelineCall(ctx, "get_pipeline", func(l *gl.Client, o gl.RequestOptionFunc) (*gl.Pipeline, *gl.Response, error) {
		return l.Pipelines.GetPipeline(project, id, o)
	})
}

func (c *Client) FailedJobs(ctx context.Context, project string, pipeline int64) ([]Job, error) {
	var out []Job
	opt := &gl.ListJobsOptions{Scope: &[]gl.BuildStateValue{gl.Failed}, ListOptions: gl.ListOptions{PerPage: 100}}
	err := c.call(ctx, botAccount(c.cfg.Current()), "pipeline_jobs", func(l *gl.Client, o gl.RequestOptionFunc) (*gl.Response, error) {
		list, resp, err := l.Jobs.ListPipelineJobs(project, pipeline, opt, o)
		out = out[:0]
		for _, j := range list {
			out = append(out, Job{ID: j.ID, Name: j.Name, Stage: j.Stage, Status: j.Status, WebURL: j.WebURL})
		}
		return resp, err
	})
	if err != nil {
		return nil, err
	}
	// GitLab's order is not part of its contract: the first job that failed comes first.
	slices.SortFunc(out, func(a, b Job) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// pipelineCall runs a call answering one pipeline as the bot and converts its answer.
func (c *Client) pipelineCall(ctx context.Context, endpoint string, fn func(*gl.Client, gl.RequestOptionFunc) (*gl.Pipeline, *gl.Response, error)) (Pipeline, error) {
	var out Pipeline
	err := c.call(ctx, botAccount(c.cfg.Current()), endpoint, func(l *gl.Client, o gl.RequestOptionFunc) (*gl.Response, error) {
		p, resp, err := fn(l, o)
		if err == nil {
			out = Pipeline{ID: p.ID, IID: p.IID, SHA: p.SHA, Ref: p.Ref, Status: p.Status, Source: string(p.Source),
				WebURL: p.WebURL, CreatedAt: deref(p.CreatedAt), UpdatedAt: deref(p.UpdatedAt)}
		}
		return resp, err
	})
	return out, err
}

func (c *Client) GetCommit(ctx context.Context, project, sha string) (Commit, error) {
	var out Commit
	err := c.call(ctx, botAccount(c.cfg.Current()), "get_commit", func(l *gl.Client, o gl.RequestOptionFunc) (*gl.Response, error) {
		cm, resp, err := l.Commits.GetCommit(project, sha, &gl.GetCommitOptions{Stats: gl.Ptr(false)}, o)
		if err == nil {
			out = toCommit(cm)
		}
		return resp, err
	})
	return out, err
}

func (c *Client) MergeBase(ctx context.Context, project string, refs ...string) (Commit, error) {
	var out Commit
	err := c.call(ctx, botAccount(c.cfg.Current()), "merge_base", func(l *gl.Client, o gl.RequestOptionFunc) (*gl.Response, error) {
		cm, resp, err := l.Repositories.MergeBase(project, &gl.MergeBaseOptions{Ref: &refs}, o)
		if err == nil {
			out = toCommit(cm)
		}
		return resp, err
	})
	return out, err
}

func toCommit(cm *gl.Commit) Commit {
	return Commit{ID: cm.ID, ShortID: cm.ShortID, Title: cm.Title, ParentIDs: cm.ParentIDs, WebURL: cm.WebURL}
}

func toPipelineInfo(p *gl.PipelineInfo) Pipeline {
	return Pipeline{ID: p.ID, IID: p.IID, SHA: p.SHA, Ref: p.Ref, Status: p.Status, Source: p.Source, WebURL: p.WebURL,
		CreatedAt: deref(p.CreatedAt), UpdatedAt: deref(p.UpdatedAt)}
}

func (c *Client) Approvals(ctx context.Context, project string, iid int64) (Approvals, error) {
	a, _, err := c.approvalsAs(ctx, botAccount(c.cfg.Current()), project, iid)
	return a, err
}

// approvalsAs reads the approval state as acct; the second result is whether acct itself
// approved (GitLab's user_has_approved is about the caller).
func (c *Client) approvalsAs(ctx context.Context, acct account, project string, iid int64) (Approvals, bool, error) {
	var out Approvals
	var mine bool
	err := c.call(ctx, acct, "get_approvals", func(l *gl.Client, o gl.RequestOptionFunc) (*gl.Response, error) {
		a, resp, err := l.MergeRequestApprovals.GetConfiguration(project, iid, o)
		if err == nil {
			out = Approvals{Approved: a.Approved, ApprovalsRequired: int(a.ApprovalsRequired), ApprovalsLeft: int(a.ApprovalsLeft)}
			for _, u := range a.ApprovedBy {
				if u != nil && u.User != nil {
					out.ApprovedBy = append(out.ApprovedBy, u.User.Username)
				}
			}
			mine = a.UserHasApproved
		}
		return resp, err
	})
	return out, mine, err
}

// CreateNote writes a note on project's MR iid as the bot and returns its id.
func (c *Client) CreateNote(ctx context.Context, project string, iid int64, body string) (int64, error) {
	var id int64
	err := c.call(ctx, botAccount(c.cfg.Current()), "create_note", func(l *gl.Client, o gl.RequestOptionFunc) (*gl.Response, error) {
		n, resp, err := l.Notes.CreateMergeRequestNote(project, iid, &gl.CreateMergeRequestNoteOptions{Body: &body}, o)
		if err == nil {
			id = n.ID
		}
		return resp, err
	})
	return id, err
}

// UpdateNote replaces the text of the bot's note noteID on project's MR iid.
func (c *Client) UpdateNote(ctx context.Context, project string, iid, noteID int64, body string) error {
	return c.call(ctx, botAccount(c.cfg.Current()), "update_note", func(l *gl.Client, o gl.RequestOptionFunc) (*gl.Response, error) {
		_, resp, err := l.Notes.UpdateMergeRequestNote(project, iid, noteID, &gl.UpdateMergeRequestNoteOptions{Body: &body}, o)
		return resp, err
	})
}
