package server

import (
	"net/http"
	"strings"
	"unicode/utf8"

	"bindery/api"
	"bindery/internal/vocab/apperr"
	"bindery/workflow"
)

// Webhook receivers. Each runs after its sender was authenticated (withAuth); an unauthenticated
// call got 401 there and reached nothing. Bodies are read leniently: senders add fields.

// approvalHook is POST /hooks/approval. Stale and duplicate callbacks are 2xx (IGNORED_STALE,
// DUPLICATE) so that the approval system stops retrying.
func (s *Server) approvalHook(w http.ResponseWriter, r *http.Request) (int, any, error) {
	var cb api.ApprovalCallback
	if err := bindJSON(r, &cb, false); err != nil {
		return 0, nil, err
	}
	cb.Result = strings.ToUpper(strings.TrimSpace(cb.Result))
	switch {
	// Lengths count characters, as the columns do (VARCHAR counts characters) and as the
	// OpenAPI document's maxLength does.
	case cb.CallbackID == "" || utf8.RuneCountInString(cb.CallbackID) > 128:
		return 0, nil, apperr.Invalid("requestId", "is required (the callback's own id, at most 128 characters)")
	case checkOperationID("operationId", cb.OperationID) != nil:
		return 0, nil, checkOperationID("operationId", cb.OperationID)
	case cb.Result != api.ApprovalApproved && cb.Result != api.ApprovalRejected && cb.Result != api.ApprovalWithdrawn:
		return 0, nil, apperr.Invalid("result", "must be APPROVED, REJECTED or WITHDRAWN")
	}
	res, err := s.deps.Workflow.ApprovalCallback(r.Context(), cb)
	return http.StatusOK, res, err
}

// deployHook is POST /hooks/deploy: {project, mrIid and/or sha, operationIds?}.
func (s *Server) deployHook(w http.ResponseWriter, r *http.Request) (int, any, error) {
	var cb api.DeployCallback
	if err := bindJSON(r, &cb, false); err != nil {
		return 0, nil, err
	}
	cb.Project = strings.TrimSpace(cb.Project)
	switch {
	case cb.Project == "":
		return 0, nil, apperr.Invalid("project", "is required (the GitLab project path)")
	case utf8.RuneCountInString(cb.Project) > 255:
		return 0, nil, apperr.Invalid("project", "must be at most 255 characters")
	case cb.MRIID < 0 || (cb.MRIID == 0 && cb.SHA == ""):
		return 0, nil, apperr.Invalid("mrIid", "must be a positive MR number (or give the deployed commit as sha)")
	case cb.SHA != "" && !commitSHA(cb.SHA):
		return 0, nil, apperr.Invalid("sha", "must be a full commit SHA (40 or 64 hexadecimal digits)")
	case len(cb.OperationIDs) > 1000:
		return 0, nil, apperr.Invalid("operationIds", "must list at most 1000 ids")
	}
	for _, id := range cb.OperationIDs {
		if err := checkOperationID("operationIds", id); err != nil {
			return 0, nil, err
		}
	}
	res, err := s.deps.Workflow.DeployCallback(r.Context(), cb)
	return http.StatusOK, res, err
}

// gitlabHookBody is the part of a GitLab merge-request or pipeline hook bindery reads.
type gitlabHookBody struct {
	ObjectKind string `json:"object_kind"`
	Project    struct {
		PathWithNamespace string `json:"path_with_namespace"`
	} `json:"project"`
	ObjectAttributes struct {
		ID     int64  `json:"id"`
		IID    int64  `json:"iid"`
		State  string `json:"state"`
		Action string `json:"action"`
		Status string `json:"status"`
		Ref    string `json:"ref"`
	} `json:"object_attributes"`
	MergeRequest *struct {
		IID int64 `json:"iid"`
	} `json:"merge_request"`
}

// gitlabHook is POST /hooks/gitlab: merge-request and pipeline events shortcut polling. Other
// kinds are answered 200 IGNORED (a 4xx could get the hook disabled).
func (s *Server) gitlabHook(w http.ResponseWriter, r *http.Request) (int, any, error) {
	var b gitlabHookBody
	if err := bindJSON(r, &b, false); err != nil {
		return 0, nil, err
	}
	ev := workflow.GitLabEvent{Kind: b.ObjectKind, Project: b.Project.PathWithNamespace, EventID: r.Header.Get("Idempotency-Key")}
	if ev.EventID == "" {
		ev.EventID = r.Header.Get("X-Gitlab-Event-UUID")
	}
	switch b.ObjectKind {
	case workflow.GitLabMergeRequest:
		ev.MRIID, ev.Status, ev.Action = b.ObjectAttributes.IID, b.ObjectAttributes.State, b.ObjectAttributes.Action
		if ev.MRIID <= 0 {
			return 0, nil, apperr.Invalid("object_attributes.iid", "must be a positive MR number")
		}
	case workflow.GitLabPipeline:
		ev.PipelineID, ev.Status, ev.Ref = b.ObjectAttributes.ID, b.ObjectAttributes.Status, b.ObjectAttributes.Ref
		if b.MergeRequest != nil {
			ev.MRIID = b.MergeRequest.IID
		}
		if ev.PipelineID <= 0 {
			return 0, nil, apperr.Invalid("object_attributes.id", "must be a positive pipeline id")
		}
	default:
		return http.StatusOK, api.CallbackResult{Code: api.CallbackIgnored}, nil
	}
	if ev.Project == "" {
		return 0, nil, apperr.Invalid("project.path_with_namespace", "is required")
	}
	res, err := s.deps.Workflow.GitLabEvent(r.Context(), ev)
	return http.StatusOK, res, err
}

// commitSHA: a full SHA-1 or SHA-256 object name, as GitLab writes it (a short one could name
// several commits).
func commitSHA(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}
