package api

import (
	"time"

	"bindery/internal/platform/config"
	"bindery/internal/vocab/apperr"
	"bindery/internal/vocab/state"
)

// The bodies the server reads and writes on its own routes: the write routes' requests, the
// catalog and the caller as the SPA reads them, the ops console's configuration, the part of
// GitLab's hooks bindery reads, and the error body of every route.

// ApplyRequest is POST /api/apply's body: what the requester asks for. The workflow takes it
// as it is, with the caller's identity beside it (workflow.ApplyInput).
type ApplyRequest struct {
	OperationID string `json:"operationId"`
	TargetKey   string `json:"targetKey"`
	Reason      string `json:"reason"`
}

// RevokeRequest is the body of POST /api/requests/{operationId}/revoke and of the operators'
// actions on a request.
type RevokeRequest struct {
	OperationID string `json:"operationId"` // the client's id of this action (idempotency key)
	Reason      string `json:"reason,omitempty"`
}

// Target is one catalog entry as GET /api/targets shows it, for the caller: whether they
// may apply, and their request of it when one is in effect or on its way (the form says so
// before anything is typed).
type Target struct {
	Key       string       `json:"key"`
	Title     string       `json:"title"`
	Project   string       `json:"project"`
	RuleCodes []string     `json:"ruleCodes"`
	TTL       string       `json:"ttl"` // e.g. "720h"; "" = never expires
	MayApply  bool         `json:"mayApply"`
	Yours     *TargetYours `json:"yours,omitempty"`
}

// TargetYours is the caller's current request of a target: IN_EFFECT (VALIDATED) or IN_FLIGHT
// (anything else that is not finished: a new application would be refused as APPLY_IN_PROGRESS).
type TargetYours struct {
	State       string              `json:"state"`
	OperationID string              `json:"operationId"`
	Status      state.BindingStatus `json:"status"`
}

// Me is GET /api/me.
type Me struct {
	Identity    string   `json:"identity"`
	DisplayName string   `json:"displayName"`
	Ops         bool     `json:"ops"`
	Demo        bool     `json:"demo"`
	DemoUsers   []string `json:"demoUsers,omitempty"` // the demo's user switcher (off when people sign in with OpenID Connect)
	SignOut     bool     `json:"signOut"`             // signed in with a session bindery can end (POST /auth/logout)
}

// GitLabHook is the part of a GitLab merge-request or pipeline hook bindery reads.
type GitLabHook struct {
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

// NotificationChoices is POST /api/my/notifications's body.
type NotificationChoices struct {
	Events []state.EventType `json:"events"`
}

// ConfigView is GET /api/ops/config.
type ConfigView struct {
	Generation     int64              `json:"generation"`
	LoadedAt       time.Time          `json:"loadedAt"`
	Keys           []config.KeyReport `json:"keys"`
	Unknown        []string           `json:"unknown"`
	LastError      *config.LoadError  `json:"lastError"`
	PendingRestart []string           `json:"pendingRestart"`
	// RemovedTargets are the targets bindings still use (in flight or in effect) that the
	// catalog in force no longer has: a reload removed them, on purpose or with a file cut short.
	RemovedTargets []TargetUse `json:"removedTargets"`
}

// ErrorBody is the JSON body of every error response.
type ErrorBody struct {
	Code      apperr.Code `json:"code"`
	Message   string      `json:"message"`
	Field     string      `json:"field,omitempty"`
	RequestID string      `json:"requestId"`
	LoginURL  string      `json:"loginUrl,omitempty"` // UNAUTHENTICATED: where to sign in (/auth/login, or server.loginURL)
}
