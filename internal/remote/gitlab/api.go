// Package gitlab is bindery's seam to GitLab: API, the interface of every call the workflow
// makes, and Client, its implementation with gitlab.com/gitlab-org/api/client-go/v2 (the
// library's own retries off: the workflow owns retries), a dedicated HTTP client, a deadline
// per call (gitlab.timeout), a circuit breaker per base URL and metrics per endpoint and status
// class. Approving lives in one component (approve.go): two implementations chosen per call by
// approval.checklistMode, and the per-reviewer retry loop described there.
//
// Every failure is an *outbound.Error carrying the HTTP status and a classified reason (the
// sentinels below work with errors.Is); its text never contains the upstream body, and for an
// HTTP answer it unwraps to the library's *gitlab.ErrorResponse with the real status.
package gitlab

import (
	"context"
	"time"

	"bindery/internal/remote/outbound"
)

// API is every GitLab call the workflow makes. The bot account creates branches, commits and
// merge requests, and merges; the reviewer accounts approve. project is a path such as
// "infra/access-config".
type API interface {
	// CreateBranch creates branch at ref (a branch name or commit id).
	// ErrBranchExists when it exists.
	CreateBranch(ctx context.Context, project, branch, ref string) (Branch, error)
	// GetBranch reads a branch; ErrNotFound when it does not exist.
	GetBranch(ctx context.Context, project, branch string) (Branch, error)
	// DeleteBranch deletes a branch; ErrNotFound when it does not exist.
	DeleteBranch(ctx context.Context, project, branch string) error
	// CreateCommit makes one commit holding every action, all or nothing.
	CreateCommit(ctx context.Context, project string, c CommitRequest) (Commit, error)
	// CreateMergeRequest opens an MR. When an open MR for the same branches exists (for
	// instance, a first attempt whose answer was lost) it fails with ErrMergeRequestExists and
	// ExistingMergeRequest(err) gives that MR's iid.
	CreateMergeRequest(ctx context.Context, project string, r MergeRequestRequest) (MergeRequest, error)
	// MergeRequestsBySource lists the project's MRs from branch, in any state, newest first: how
	// an MR whose creation was never recorded (a crash, a lost answer) is found again.
	MergeRequestsBySource(ctx context.Context, project, branch string) ([]MergeRequest, error)
	// GetMergeRequest reads an MR, including whether a rebase is in progress.
	GetMergeRequest(ctx context.Context, project string, iid int64) (MergeRequest, error)
	// CloseMergeRequest closes an open MR. On a merged or closed MR it changes nothing and
	// returns the MR as it is (check State: merge wins over close).
	CloseMergeRequest(ctx context.Context, project string, iid int64) (MergeRequest, error)
	// MergeRequestPipelines lists an MR's pipelines, newest first (every page).
	MergeRequestPipelines(ctx context.Context, project string, iid int64) ([]Pipeline, error)
	// CreateMergeRequestPipeline starts a new pipeline for the MR's head. ErrNoMRPipelines when
	// the project runs branch pipelines only (its CI has no merge request jobs).
	CreateMergeRequestPipeline(ctx context.Context, project string, iid int64) (Pipeline, error)
	// CreatePipeline starts a pipeline on a branch's head (source api).
	CreatePipeline(ctx context.Context, project, ref string) (Pipeline, error)
	// RetryPipeline runs the failed jobs of a pipeline again; the pipeline keeps its id.
	RetryPipeline(ctx context.Context, project string, id int64) (Pipeline, error)
	// GetPipeline reads one pipeline.
	GetPipeline(ctx context.Context, project string, id int64) (Pipeline, error)
	// FailedJobs lists a pipeline's failed jobs (retried runs left out), oldest first, at most
	// a page of 100: what the request page links when the pipeline failed for good.
	FailedJobs(ctx context.Context, project string, pipeline int64) ([]Job, error)
	// GetCommit reads a commit (its parents tell a merged-results pipeline's head).
	GetCommit(ctx context.Context, project, sha string) (Commit, error)
	// MergeBase reads the best common ancestor of refs (branch names or commit ids, at least two;
	// of the first against the others, as git merge-base). Commit A is in the history of B exactly
	// when MergeBase(A, B) is A: how a branch built on another tells whether its base is still in
	// the target's history. ErrNotFound when they share no history; ErrInvalidRef (400) when a
	// ref is unknown.
	MergeBase(ctx context.Context, project string, refs ...string) (Commit, error)
	// Approvals reads who approved an MR.
	Approvals(ctx context.Context, project string, iid int64) (Approvals, error)
	// Approve has every reviewer account approve the MR at head sha, each with its own retry
	// loop (see approve.go). It returns nil when every reviewer's approval is in place.
	Approve(ctx context.Context, project string, iid int64, sha string) error
	// Merge merges the MR. ErrNotMergeable (405): not mergeable now (pipeline, approvals, a
	// blocker; on GitLab 16 also what git cannot merge); ErrMergeFailed (406 before GitLab 16,
	// 422 from 17: git cannot merge it — it needs a rebase or conflicts; or the merge failed);
	// ErrSHAMismatch (409): the head is not the sha given.
	Merge(ctx context.Context, project string, iid int64, o MergeOptions) (MergeRequest, error)
	// Rebase asks for an asynchronous rebase; poll GetMergeRequest until RebaseInProgress is
	// false, then MergeError says whether it failed.
	Rebase(ctx context.Context, project string, iid int64) error
	// ChecklistItems reads the approval checklist the project requires (empty: none).
	ChecklistItems(ctx context.Context, project string) ([]ChecklistItem, error)
	// Tree lists every file under dir at ref, every page or an error (repo.go).
	Tree(ctx context.Context, project, ref, dir string) ([]TreeEntry, error)
	// LastChangeOf reads the newest commit on ref that changed path (repo.go).
	LastChangeOf(ctx context.Context, project, ref, path string) (PathCommit, error)
	// RawFile reads a file's content at ref (repo.go).
	RawFile(ctx context.Context, project, ref, path string) ([]byte, error)
}

// Branch is a repository branch.
type Branch struct {
	Name      string
	CommitSHA string
	WebURL    string
}

// File actions of a commit.
const (
	ActionCreate = "create"
	ActionUpdate = "update"
	ActionDelete = "delete"
	ActionMove   = "move"
)

// FileAction is one file change of a commit.
type FileAction struct {
	Action       string // ActionCreate, ActionUpdate, ActionDelete, ActionMove
	Path         string
	PreviousPath string // for ActionMove
	Content      string // for create, update (and move, optionally)
	LastCommitID string // optional guard for update, delete, move: fail if the file changed since
}

// CommitRequest is one commit. To create the branch with the commit, set StartBranch (or
// StartSHA, a full commit id: a branch built on another branch's commit). Force with a start
// rewrites an existing branch from the start point, which is how a batch is regenerated on top of
// the current target instead of rebased (docs/gitlab.md). Without Force, a start other than
// Branch itself fails with ErrBranchExists when Branch exists.
type CommitRequest struct {
	Branch      string
	Message     string
	StartBranch string
	StartSHA    string
	Force       bool
	AuthorName  string
	AuthorEmail string
	Actions     []FileAction
}

// Commit is a created commit.
type Commit struct {
	ID        string
	ShortID   string
	Title     string
	ParentIDs []string
	WebURL    string
}

// MergeRequestRequest opens an MR.
type MergeRequestRequest struct {
	SourceBranch       string
	TargetBranch       string
	Title              string
	Description        string
	Labels             []string
	RemoveSourceBranch bool
}

// MR states.
const (
	StateOpened = "opened"
	StateClosed = "closed"
	StateMerged = "merged"
	StateLocked = "locked" // briefly, while GitLab merges
)

// MergeRequest is an MR as GitLab reports it.
type MergeRequest struct {
	ID                  int64
	IID                 int64
	ProjectID           int64
	Title               string
	State               string // StateOpened, StateClosed, StateMerged, StateLocked
	SourceBranch        string
	TargetBranch        string
	SHA                 string // head of the source branch: pass it to Approve and Merge
	MergeCommitSHA      string
	SquashCommitSHA     string
	MergedAt            time.Time // zero until merged (and when GitLab does not say)
	DetailedMergeStatus string    // "mergeable", "need_rebase", "conflict", "ci_still_running", "checking", …; "" before GitLab 15.6
	MergeStatus         string    // the older merge_status: "can_be_merged", "cannot_be_merged", "unchecked", "checking", …
	HasConflicts        bool
	Draft               bool
	// BlockingDiscussionsResolved: no unresolved discussion blocks the merge.
	BlockingDiscussionsResolved bool
	MergeError                  string // the last merge or rebase failure ("" if none)
	RebaseInProgress            bool
	AutoMerge                   bool // merge_when_pipeline_succeeds
	WebURL                      string
	HeadPipeline                *Pipeline // nil when the head has no pipeline yet
	CreatedAt                   time.Time
	UpdatedAt                   time.Time
}

// LandedSHA is the commit a merged MR put on its target branch: the merge commit, else the squash
// commit (a fast-forward squash), else its head (a fast-forward merge). "" before the merge.
func (m MergeRequest) LandedSHA() string {
	switch {
	case !m.Merged():
		return ""
	case m.MergeCommitSHA != "":
		return m.MergeCommitSHA
	case m.SquashCommitSHA != "":
		return m.SquashCommitSHA
	}
	return m.SHA
}

// Merged, Closed and Open read State.
func (m MergeRequest) Merged() bool { return m.State == StateMerged }
func (m MergeRequest) Closed() bool { return m.State == StateClosed }
func (m MergeRequest) Open() bool   { return m.State == StateOpened || m.State == StateLocked }

// Mergeable: GitLab says the MR can be merged now.
func (m MergeRequest) Mergeable() bool { return m.DetailedMergeStatus == "mergeable" }

// NeedsRebase: the target branch moved and the project merges only on top of it.
func (m MergeRequest) NeedsRebase() bool { return m.DetailedMergeStatus == "need_rebase" }

// Pipeline is a CI pipeline.
type Pipeline struct {
	ID        int64
	IID       int64
	SHA       string
	Ref       string
	Status    string // GitLab's status; read it through Outcome
	Source    string
	WebURL    string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Job is one CI job of a pipeline.
type Job struct {
	ID     int64
	Name   string
	Stage  string
	Status string
	WebURL string
}

// Outcome is what a pipeline status means to a poller.
type Outcome int

const (
	// Running: not finished (created, pending, running, manual, scheduled, … and any status
	// this client does not know yet; GitLab keeps adding some).
	Running Outcome = iota
	// Passed: "success".
	Passed
	// Failed: "failed", "canceled" or "skipped": waiting will not make it pass.
	Failed
)

// Outcome classifies the status leniently.
func (p Pipeline) Outcome() Outcome {
	switch p.Status {
	case "success":
		return Passed
	case "failed", "canceled", "skipped":
		return Failed
	}
	return Running
}

// Approvals is who approved an MR, as the bot account reads it.
type Approvals struct {
	Approved          bool
	ApprovalsRequired int
	ApprovalsLeft     int
	ApprovedBy        []string // usernames
}

// MergeOptions tune a merge.
type MergeOptions struct {
	SHA                string // required head; the merge fails with ErrSHAMismatch if it moved
	RemoveSourceBranch bool
	Squash             bool
	AutoMerge          bool // merge when the pipeline succeeds
	CommitMessage      string
}

// ChecklistItem is one item of a project's required approval checklist.
type ChecklistItem struct {
	ID    string `json:"id"`
	Title string `json:"title"`
}

// Sentinels for errors.Is. They match an *outbound.Error by reason or status.
var (
	ErrNotFound           = &outbound.Error{Status: 404}
	ErrUnauthorized       = &outbound.Error{Status: 401}
	ErrForbidden          = &outbound.Error{Status: 403}
	ErrBranchExists       = &outbound.Error{Reason: ReasonBranchExists}
	ErrFileExists         = &outbound.Error{Reason: ReasonFileExists}
	ErrFileMissing        = &outbound.Error{Reason: ReasonFileMissing}
	ErrFileChanged        = &outbound.Error{Reason: ReasonFileChanged}
	ErrMergeRequestExists = &outbound.Error{Reason: ReasonMRExists}
	ErrSHAMismatch        = &outbound.Error{Reason: ReasonSHAMismatch}
	ErrNotMergeable       = &outbound.Error{Reason: ReasonNotMergeable}
	ErrMergeFailed        = &outbound.Error{Reason: ReasonMergeFailed}
	ErrChecklistMismatch  = &outbound.Error{Reason: ReasonChecklist}
	ErrNotConfigured      = &outbound.Error{Kind: outbound.KindNotConfigured}
	ErrNoMRPipelines      = &outbound.Error{Reason: ReasonNoMRPipelines}
	ErrRebaseBusy         = &outbound.Error{Reason: ReasonRebaseBusy}
	ErrInvalidRef         = &outbound.Error{Reason: ReasonInvalidRef}
)

// Reasons an *outbound.Error of this package may carry.
const (
	ReasonBranchExists  = "branch_exists"
	ReasonInvalidName   = "invalid_name"
	ReasonInvalidRef    = "invalid_ref"
	ReasonFileExists    = "file_exists"
	ReasonFileMissing   = "file_missing"
	ReasonFileChanged   = "file_changed"
	ReasonNoBranch      = "no_branch"
	ReasonMRExists      = "mr_exists"
	ReasonInvalidMR     = "invalid_mr"
	ReasonSHAMismatch   = "sha_mismatch"
	ReasonNotMergeable  = "not_mergeable"
	ReasonMergeFailed   = "merge_failed"
	ReasonChecklist     = "checklist_mismatch"
	ReasonNotModified   = "not_modified" // 304: a repeated approve on newer GitLab
	ReasonRebaseRefused = "rebase_refused"
	ReasonRebaseBusy    = "rebase_busy"
	ReasonNoMRPipelines = "no_mr_pipelines" // 400/405 creating an MR pipeline: branch pipelines only
	ReasonUnauthorized  = "unauthorized"
	ReasonForbidden     = "forbidden"
	ReasonNotFound      = "not_found"
	ReasonRateLimited   = "rate_limited"
	ReasonServerError   = "server_error"
	ReasonMalformed     = "malformed_answer"
)
