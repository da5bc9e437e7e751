package workflow

import (
	"bindery/api"
	"bindery/explain"
	"bindery/state"
	"bindery/store"
)

// ApplyInput is a validated application: the subject is the caller's canonical identity, never
// a client-supplied value.
type ApplyInput struct {
	OperationID string `json:"operationId"`
	TargetKey   string `json:"targetKey"`
	Reason      string `json:"reason"`
	Subject     string `json:"-"`
	// Idempotency, when set, is the request's idempotency record (its Body is filled here with
	// the ApplyResult as JSON): it is written in the application's own transaction, so the
	// application and its answer are one commit.
	Idempotency *store.Answer `json:"-"`
}

// StepOf is the view of a step.
func StepOf(s state.Step) api.StepView {
	return api.StepView{Code: int(s), Name: s.String(), Label: explain.Label(s)}
}

// StuckFilter narrows GET /api/ops/requests (both optional) and pages it.
type StuckFilter struct {
	Status state.BindingStatus // "" → any
	Step   state.Step          // 0 → any
	Cursor string
	Limit  int
}

// GitLab event kinds bindery reads from POST /hooks/gitlab.
const (
	GitLabMergeRequest = "merge_request"
	GitLabPipeline     = "pipeline"
)

// GitLabEvent is the part of a verified GitLab webhook the workflow may use to shortcut polling.
// It is a hint: the workflow still reads the remote state before acting.
type GitLabEvent struct {
	Kind       string // GitLabMergeRequest or GitLabPipeline
	EventID    string // Idempotency-Key (stable across resends) or X-Gitlab-Event-UUID
	Project    string // path_with_namespace
	MRIID      int64  // the MR (0 when the pipeline is not an MR pipeline)
	Ref        string // pipeline events: the branch or ref it ran for (a branch pipeline's MR is found by it)
	PipelineID int64  // pipeline events
	Status     string // pipeline status (success, failed, …) or MR state (opened, merged, closed)
	Action     string // MR action (open, merge, close, approved, …)
}
