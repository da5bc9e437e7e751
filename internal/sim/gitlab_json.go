package sim

import (
	"net/url"
	"strings"
	"time"

	"bindery/internal/platform/config"
)

// The JSON entities of the simulated GitLab, with the field names and types of GitLab's API
// (and of client-go's structs that read them). Nullable fields are pointers.

type userJSON struct {
	ID        int64  `json:"id"`
	Username  string `json:"username"`
	Name      string `json:"name"`
	State     string `json:"state"`
	AvatarURL string `json:"avatar_url"`
	WebURL    string `json:"web_url"`
}

func (c *call) userJSON(u User) userJSON {
	return userJSON{ID: u.ID, Username: u.Username, Name: u.Name, State: "active", WebURL: c.base + "/" + u.Username}
}

func (c *call) userRef(id int64) *userJSON {
	if id == 0 {
		return nil
	}
	u := c.userJSON(c.g.userByID(id))
	return &u
}

func (c *call) projectURL() string { return c.base + "/" + c.p.path }

type namespaceJSON struct {
	ID       int64  `json:"id"`
	Name     string `json:"name"`
	Path     string `json:"path"`
	Kind     string `json:"kind"`
	FullPath string `json:"full_path"`
	WebURL   string `json:"web_url"`
}

type projectJSON struct {
	ID                               int64         `json:"id"`
	Description                      *string       `json:"description"`
	Name                             string        `json:"name"`
	NameWithNamespace                string        `json:"name_with_namespace"`
	Path                             string        `json:"path"`
	PathWithNamespace                string        `json:"path_with_namespace"`
	CreatedAt                        time.Time     `json:"created_at"`
	DefaultBranch                    string        `json:"default_branch"`
	WebURL                           string        `json:"web_url"`
	HTTPURLToRepo                    string        `json:"http_url_to_repo"`
	Namespace                        namespaceJSON `json:"namespace"`
	Visibility                       string        `json:"visibility"`
	Archived                         bool          `json:"archived"`
	MergeMethod                      string        `json:"merge_method"`
	OnlyAllowMergeIfPipelineSucceeds bool          `json:"only_allow_merge_if_pipeline_succeeds"`
	MergePipelinesEnabled            bool          `json:"merge_pipelines_enabled"`
	MergeRequestsEnabled             bool          `json:"merge_requests_enabled"`
	JobsEnabled                      bool          `json:"jobs_enabled"`
}

// projectJSON is the project as GET /projects/:id shows it: a namespace from the path, the merge
// method of sim.gitlab.mergeMethod, pipelines required unless sim.gitlab.pipelineMustSucceed is off.
func (c *call) projectJSON() projectJSON {
	p := c.p
	ns, name := "", p.path
	if i := strings.LastIndex(p.path, "/"); i >= 0 {
		ns, name = p.path[:i], p.path[i+1:]
	}
	nsName := ns
	if i := strings.LastIndex(ns, "/"); i >= 0 {
		nsName = ns[i+1:]
	}
	created := time.Time{}
	if len(p.order) > 0 {
		created = p.commits[p.order[0]].at
	}
	return projectJSON{
		ID: p.id, Name: name, NameWithNamespace: strings.ReplaceAll(p.path, "/", " / "), Path: name, PathWithNamespace: p.path,
		CreatedAt: created, DefaultBranch: p.defaultBranch, WebURL: c.projectURL(), HTTPURLToRepo: c.projectURL() + ".git",
		Namespace:  namespaceJSON{ID: p.id, Name: nsName, Path: nsName, Kind: "group", FullPath: ns, WebURL: c.base + "/groups/" + ns},
		Visibility: "private", MergeMethod: c.g.mergeMethod(), OnlyAllowMergeIfPipelineSucceeds: c.g.faults().PipelineMustSucceed,
		MergePipelinesEnabled: c.g.faults().PipelineSource == config.PipelineMergedResult, MergeRequestsEnabled: true, JobsEnabled: true,
	}
}

type commitJSON struct {
	ID             string       `json:"id"`
	ShortID        string       `json:"short_id"`
	Title          string       `json:"title"`
	Message        string       `json:"message"`
	AuthorName     string       `json:"author_name"`
	AuthorEmail    string       `json:"author_email"`
	AuthoredDate   time.Time    `json:"authored_date"`
	CommitterName  string       `json:"committer_name"`
	CommitterEmail string       `json:"committer_email"`
	CommittedDate  time.Time    `json:"committed_date"`
	CreatedAt      time.Time    `json:"created_at"`
	ParentIDs      []string     `json:"parent_ids"`
	Stats          *commitStats `json:"stats,omitempty"`
	ProjectID      int64        `json:"project_id"`
	WebURL         string       `json:"web_url"`
}

func (c *call) commitJSON(cm *commit, withStats bool) commitJSON {
	author := cm.author
	if author == "" {
		author = "GitLab"
	}
	email := strings.ReplaceAll(strings.ToLower(author), " ", ".") + "@sim.invalid"
	out := commitJSON{
		ID: cm.id, ShortID: cm.id[:8], Title: cm.title, Message: cm.message,
		AuthorName: author, AuthorEmail: email, AuthoredDate: cm.at, CommitterName: author, CommitterEmail: email,
		CommittedDate: cm.at, CreatedAt: cm.at, ParentIDs: append([]string{}, cm.parents...), ProjectID: c.p.id,
		WebURL: c.projectURL() + "/-/commit/" + cm.id,
	}
	if withStats {
		st := cm.stats
		out.Stats = &st
	}
	return out
}

type branchJSON struct {
	Name               string     `json:"name"`
	Commit             commitJSON `json:"commit"`
	Merged             bool       `json:"merged"`
	Protected          bool       `json:"protected"`
	Default            bool       `json:"default"`
	DevelopersCanPush  bool       `json:"developers_can_push"`
	DevelopersCanMerge bool       `json:"developers_can_merge"`
	CanPush            bool       `json:"can_push"`
	WebURL             string     `json:"web_url"`
}

func (c *call) branchJSON(name string) branchJSON {
	def := name == c.p.defaultBranch
	return branchJSON{
		Name: name, Commit: c.commitJSON(c.p.commits[c.p.branches[name]], false), Protected: def, Default: def,
		DevelopersCanPush: !def, DevelopersCanMerge: true, CanPush: c.user.CanPush,
		WebURL: c.projectURL() + "/-/tree/" + url.PathEscape(name),
	}
}

type pipelineInfoJSON struct {
	ID        int64     `json:"id"`
	IID       int64     `json:"iid"`
	ProjectID int64     `json:"project_id"`
	SHA       string    `json:"sha"`
	Ref       string    `json:"ref"`
	Status    string    `json:"status"`
	Source    string    `json:"source"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	WebURL    string    `json:"web_url"`
}

func (c *call) pipelineInfo(pl *pipeline) pipelineInfoJSON {
	return pipelineInfoJSON{
		ID: pl.id, IID: pl.iid, ProjectID: c.p.id, SHA: pl.sha, Ref: pl.ref, Status: pl.status(c.now),
		Source: pl.source, CreatedAt: pl.createdAt, UpdatedAt: pl.updatedAt,
		WebURL: c.projectURL() + "/-/pipelines/" + itoa64(pl.id),
	}
}

type detailedStatusJSON struct {
	Icon        string `json:"icon"`
	Text        string `json:"text"`
	Label       string `json:"label"`
	Group       string `json:"group"`
	Tooltip     string `json:"tooltip"`
	HasDetails  bool   `json:"has_details"`
	DetailsPath string `json:"details_path"`
}

type pipelineJSON struct {
	pipelineInfoJSON
	BeforeSHA      string             `json:"before_sha"`
	Tag            bool               `json:"tag"`
	YamlErrors     *string            `json:"yaml_errors"`
	User           *userJSON          `json:"user"`
	StartedAt      *time.Time         `json:"started_at"`
	FinishedAt     *time.Time         `json:"finished_at"`
	CommittedAt    *time.Time         `json:"committed_at"`
	Duration       int64              `json:"duration"`
	QueuedDuration int64              `json:"queued_duration"`
	Coverage       *string            `json:"coverage"`
	DetailedStatus detailedStatusJSON `json:"detailed_status"`
}

func (c *call) pipelineJSON(pl *pipeline) pipelineJSON {
	info := c.pipelineInfo(pl)
	out := pipelineJSON{
		pipelineInfoJSON: info, BeforeSHA: strings.Repeat("0", 40), User: c.userRef(pl.userID),
		FinishedAt: pl.finishedAt(c.now),
		DetailedStatus: detailedStatusJSON{
			Icon: "status_" + info.Status, Text: info.Status, Label: info.Status, Group: info.Status,
			Tooltip: info.Status, HasDetails: true, DetailsPath: "/" + c.p.path + "/-/pipelines/" + itoa64(pl.id),
		},
	}
	if info.Status != pipeCreated && info.Status != pipePending {
		started := pl.createdAt.Add(pl.dur / 4)
		out.StartedAt = &started
	}
	if out.FinishedAt != nil {
		out.Duration = int64((pl.dur - pl.dur/4).Seconds())
		out.QueuedDuration = int64((pl.dur / 4).Seconds())
	}
	return out
}

type diffRefsJSON struct {
	BaseSHA  string `json:"base_sha"`
	HeadSHA  string `json:"head_sha"`
	StartSHA string `json:"start_sha"`
}

type referencesJSON struct {
	Short    string `json:"short"`
	Relative string `json:"relative"`
	Full     string `json:"full"`
}

// mrCoreJSON are the fields the MR and its approval state share.
type mrCoreJSON struct {
	ID          int64     `json:"id"`
	IID         int64     `json:"iid"`
	ProjectID   int64     `json:"project_id"`
	Title       string    `json:"title"`
	Description string    `json:"description"`
	State       string    `json:"state"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

func (c *call) mrCore(mr *mergeRequest) mrCoreJSON {
	return mrCoreJSON{ID: mr.id, IID: mr.iid, ProjectID: c.p.id, Title: mr.title, Description: mr.description,
		State: mr.state, CreatedAt: mr.createdAt, UpdatedAt: mr.updatedAt}
}

type mrJSON struct {
	mrCoreJSON
	MergedBy                    *userJSON         `json:"merged_by"`
	MergeUser                   *userJSON         `json:"merge_user"`
	MergedAt                    *time.Time        `json:"merged_at"`
	ClosedBy                    *userJSON         `json:"closed_by"`
	ClosedAt                    *time.Time        `json:"closed_at"`
	TargetBranch                string            `json:"target_branch"`
	SourceBranch                string            `json:"source_branch"`
	UserNotesCount              int               `json:"user_notes_count"`
	Upvotes                     int               `json:"upvotes"`
	Downvotes                   int               `json:"downvotes"`
	Author                      *userJSON         `json:"author"`
	Assignees                   []userJSON        `json:"assignees"`
	Reviewers                   []userJSON        `json:"reviewers"`
	SourceProjectID             int64             `json:"source_project_id"`
	TargetProjectID             int64             `json:"target_project_id"`
	Labels                      []string          `json:"labels"`
	Draft                       bool              `json:"draft"`
	WorkInProgress              bool              `json:"work_in_progress"`
	Milestone                   *struct{}         `json:"milestone"`
	MergeWhenPipelineSucceeds   bool              `json:"merge_when_pipeline_succeeds"`
	MergeStatus                 string            `json:"merge_status"`
	DetailedMergeStatus         *string           `json:"detailed_merge_status,omitempty"` // absent before GitLab 15.6
	SHA                         string            `json:"sha"`
	MergeCommitSHA              *string           `json:"merge_commit_sha"`
	SquashCommitSHA             *string           `json:"squash_commit_sha"`
	DiscussionLocked            *bool             `json:"discussion_locked"`
	ShouldRemoveSourceBranch    *bool             `json:"should_remove_source_branch"`
	ForceRemoveSourceBranch     bool              `json:"force_remove_source_branch"`
	WebURL                      string            `json:"web_url"`
	References                  referencesJSON    `json:"references"`
	Squash                      bool              `json:"squash"`
	HasConflicts                bool              `json:"has_conflicts"`
	BlockingDiscussionsResolved bool              `json:"blocking_discussions_resolved"`
	Subscribed                  bool              `json:"subscribed"`
	ChangesCount                string            `json:"changes_count"`
	LatestBuildStartedAt        *time.Time        `json:"latest_build_started_at"`
	LatestBuildFinishedAt       *time.Time        `json:"latest_build_finished_at"`
	Pipeline                    *pipelineInfoJSON `json:"pipeline"`
	HeadPipeline                *pipelineJSON     `json:"head_pipeline"`
	DiffRefs                    diffRefsJSON      `json:"diff_refs"`
	MergeError                  *string           `json:"merge_error"`
	RebaseInProgress            *bool             `json:"rebase_in_progress,omitempty"`
	User                        struct {
		CanMerge bool `json:"can_merge"`
	} `json:"user"`
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// mrJSON renders an MR. rebase_in_progress is present only when asked for. A GET (poll)
// settles a pending "checking" for the next read; other answers show it without settling.
func (c *call) mrJSON(mr *mergeRequest, withRebase, poll bool) mrJSON {
	ds := c.g.detailedStatus(mr, c.now, poll)
	conflicts := mr.state == "opened" && ds != "checking" && mr.conflicts()
	p := c.p
	head := mr.head()
	base := ""
	if tgt := p.branches[mr.target]; tgt != "" && head != "" {
		base = p.mergeBase(head, tgt)
	}
	changed := 0
	if src, b := p.commits[head], p.commits[base]; src != nil && b != nil {
		changed = len(changes(b.files, src.files))
	}
	remove := mr.removeSource
	out := mrJSON{
		mrCoreJSON: c.mrCore(mr), MergedBy: c.userRef(mr.mergeUserID), MergeUser: c.userRef(mr.mergeUserID),
		MergedAt: mr.mergedAt, ClosedBy: c.userRef(mr.closedByID), ClosedAt: mr.closedAt,
		TargetBranch: mr.target, SourceBranch: mr.source, Author: c.userRef(mr.authorID),
		Assignees: []userJSON{}, Reviewers: []userJSON{}, SourceProjectID: p.id, TargetProjectID: p.id,
		Labels: append([]string{}, mr.labels...), Draft: mr.draft(), WorkInProgress: mr.draft(),
		MergeWhenPipelineSucceeds: mr.autoMerge != nil, MergeStatus: mergeStatus(ds, conflicts),
		SHA: head, MergeCommitSHA: optString(mr.mergeCommit), ShouldRemoveSourceBranch: &remove,
		WebURL:       c.projectURL() + "/-/merge_requests/" + itoa64(mr.iid),
		References:   referencesJSON{Short: "!" + itoa64(mr.iid), Relative: "!" + itoa64(mr.iid), Full: p.path + "!" + itoa64(mr.iid)},
		HasConflicts: conflicts, BlockingDiscussionsResolved: mr.blocker != "discussions_not_resolved", ChangesCount: itoa64(int64(changed)),
		DiffRefs:   diffRefsJSON{BaseSHA: base, HeadSHA: head, StartSHA: p.branches[mr.target]},
		MergeError: optString(mr.mergeError),
	}
	if c.g.faults().Version != "15.5" {
		out.DetailedMergeStatus = &ds
	}
	out.User.CanMerge = c.user.CanMerge
	if pl := mr.headPipeline(); pl != nil {
		info, full := c.pipelineInfo(pl), c.pipelineJSON(pl)
		out.Pipeline, out.HeadPipeline = &info, &full
		out.LatestBuildStartedAt, out.LatestBuildFinishedAt = full.StartedAt, full.FinishedAt
	}
	if withRebase {
		inProgress := mr.rebase != nil
		out.RebaseInProgress = &inProgress
	}
	return out
}

type approverJSON struct {
	User       userJSON  `json:"user"`
	ApprovedAt time.Time `json:"approved_at"`
}

type approvalsJSON struct {
	mrCoreJSON
	MergeStatus                    string         `json:"merge_status"`
	Approved                       bool           `json:"approved"`
	ApprovalsRequired              int            `json:"approvals_required"`
	ApprovalsLeft                  int            `json:"approvals_left"`
	RequirePasswordToApprove       bool           `json:"require_password_to_approve"`
	ApprovedBy                     []approverJSON `json:"approved_by"`
	SuggestedApprovers             []userJSON     `json:"suggested_approvers"`
	Approvers                      []userJSON     `json:"approvers"`
	ApproverGroups                 []struct{}     `json:"approver_groups"`
	UserHasApproved                bool           `json:"user_has_approved"`
	UserCanApprove                 bool           `json:"user_can_approve"`
	ApprovalRulesLeft              []struct{}     `json:"approval_rules_left"`
	HasApprovalRules               bool           `json:"has_approval_rules"`
	MergeRequestApproversAvailable bool           `json:"merge_request_approvers_available"`
	MultipleApprovalRulesAvailable bool           `json:"multiple_approval_rules_available"`
}

// ceApprovalsJSON is the approval state of GitLab CE: no rules, no counts.
type ceApprovalsJSON struct {
	UserHasApproved bool           `json:"user_has_approved"`
	UserCanApprove  bool           `json:"user_can_approve"`
	Approved        bool           `json:"approved"`
	ApprovedBy      []approverJSON `json:"approved_by"`
}

// approvalsJSON is the approval state as the calling user sees it (user_has_approved and
// user_can_approve are about the caller), in the shape of sim.gitlab.edition.
func (c *call) approvalsJSON(mr *mergeRequest) any {
	ee := c.eeApprovalsJSON(mr)
	if c.g.faults().Edition == "ce" {
		return ceApprovalsJSON{UserHasApproved: ee.UserHasApproved, UserCanApprove: ee.UserCanApprove, Approved: ee.Approved, ApprovedBy: ee.ApprovedBy}
	}
	return ee
}

func (c *call) eeApprovalsJSON(mr *mergeRequest) approvalsJSON {
	required := c.g.faults().ApprovalsRequired
	out := approvalsJSON{
		mrCoreJSON: c.mrCore(mr), MergeStatus: mergeStatus(c.g.detailedStatus(mr, c.now, false), false),
		Approved: len(mr.approvals) >= required, ApprovalsRequired: required, ApprovalsLeft: max(0, required-len(mr.approvals)),
		ApprovedBy: []approverJSON{}, SuggestedApprovers: []userJSON{}, Approvers: []userJSON{},
		ApproverGroups: []struct{}{}, ApprovalRulesLeft: []struct{}{},
		UserHasApproved: mr.approvedBy(c.user.ID),
		UserCanApprove:  mr.state == "opened" && c.user.ID != mr.authorID && !mr.approvedBy(c.user.ID),
	}
	for _, a := range mr.approvals {
		out.ApprovedBy = append(out.ApprovedBy, approverJSON{User: c.userJSON(c.g.userByID(a.userID)), ApprovedAt: a.at})
	}
	return out
}

// jobJSON is GitLab's Entities::Ci::Job, the fields a client reads of a job in a list.
type jobJSON struct {
	ID             int64            `json:"id"`
	Status         string           `json:"status"`
	Stage          string           `json:"stage"`
	Name           string           `json:"name"`
	Ref            string           `json:"ref"`
	Tag            bool             `json:"tag"`
	Coverage       *float64         `json:"coverage"`
	AllowFailure   bool             `json:"allow_failure"`
	CreatedAt      time.Time        `json:"created_at"`
	StartedAt      *time.Time       `json:"started_at"`
	FinishedAt     *time.Time       `json:"finished_at"`
	ErasedAt       *time.Time       `json:"erased_at"`
	Duration       *float64         `json:"duration"`
	QueuedDuration *float64         `json:"queued_duration"`
	User           *userJSON        `json:"user"`
	Pipeline       pipelineInfoJSON `json:"pipeline"`
	FailureReason  string           `json:"failure_reason,omitempty"` // only on a failed job
	WebURL         string           `json:"web_url"`
	Artifacts      []struct{}       `json:"artifacts"`
	TagList        []string         `json:"tag_list"`
	Archived       bool             `json:"archived"`
}

// jobJSON is run i of the pipeline's job: the last run's status is the pipeline's (it is its
// only job), a retried run failed and finished when the next one started.
func (c *call) jobJSON(pl *pipeline, i int) jobJSON {
	j := pl.jobs[i]
	status := pipeFailed
	var started, finished *time.Time
	if i == len(pl.jobs)-1 {
		status = pl.status(c.now)
		if status != pipeCreated && status != pipePending {
			t := pl.createdAt.Add(pl.dur / 4)
			started = &t
		}
		finished = pl.finishedAt(c.now)
	} else {
		started, finished = &j.CreatedAt, &pl.jobs[i+1].CreatedAt
	}
	out := jobJSON{
		ID: j.ID, Status: status, Stage: "test", Name: "test", Ref: pl.ref, CreatedAt: j.CreatedAt,
		StartedAt: started, FinishedAt: finished, User: c.userRef(pl.userID), Pipeline: c.pipelineInfo(pl),
		WebURL: c.projectURL() + "/-/jobs/" + itoa64(j.ID), Artifacts: []struct{}{}, TagList: []string{},
	}
	if started != nil && finished != nil {
		d := finished.Sub(*started).Seconds()
		out.Duration = &d
	}
	if status == pipeFailed {
		out.FailureReason = "script_failure"
	}
	return out
}
