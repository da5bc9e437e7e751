package api

import (
	"time"

	"bindery/internal/vocab/state"
)

// WebhookBody is the body of an outgoing webhook (Standard Webhooks v1): the event's type, when
// it happened, and what it reports. Its id is the webhook-id header, the same at every attempt.
type WebhookBody struct {
	Type      state.EventType `json:"type"`
	Timestamp time.Time       `json:"timestamp"`
	Data      any             `json:"data"` // *RequestNews, *BatchNews or *OpsNews by the type's audience
}

// RequestNews is what an event about a request reports: where the request is now, in the words
// its page uses (a failure's fixed sentence with its safe details, never the recorded cause),
// and what to do.
type RequestNews struct {
	OperationID    string              `json:"operationId"`
	Subject        string              `json:"subject"`
	TargetKey      string              `json:"targetKey"`
	TargetTitle    string              `json:"targetTitle,omitempty"`
	Project        string              `json:"project"`
	Status         state.BindingStatus `json:"status"`
	PreviousStatus state.BindingStatus `json:"previousStatus,omitempty"`
	Step           StepView            `json:"step"`
	Note           string              `json:"note,omitempty"`
	NextAction     state.NextAction    `json:"nextAction"`
	NextActionText string              `json:"nextActionText"`
	MR             *Link               `json:"mr,omitempty"`
	Pipeline       *Link               `json:"pipeline,omitempty"`
	BatchID        int64               `json:"batchId,omitempty"`
	// Reason says why a request needs attention: failed, pending, approval (overdue), deploy
	// (its deploy callback overdue).
	Reason string `json:"reason,omitempty"`
	// ExpiresAt is when the binding expires (binding.expiring); nextActionText says how to renew.
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	URL       string     `json:"url"` // the request's page
}

// BatchNews is what an event about a batch reports.
type BatchNews struct {
	BatchID int64    `json:"batchId"`
	Project string   `json:"project"`
	MR      *Link    `json:"mr,omitempty"`
	Why     string   `json:"why,omitempty"`
	Members []string `json:"members,omitempty"`
	Culprit string   `json:"culprit,omitempty"`
	URL     string   `json:"url"` // the ops console
}

// OpsNews is what an operators' event about bindery itself reports: a refused callback or
// configuration, a disabled endpoint.
type OpsNews struct {
	Why      string   `json:"why"`
	Project  string   `json:"project,omitempty"`
	MRIID    int64    `json:"mrIid,omitempty"`
	SHA      string   `json:"sha,omitempty"`
	Refused  []string `json:"refused,omitempty"`
	Endpoint string   `json:"endpoint,omitempty"`
	Keys     []string `json:"keys,omitempty"`
	Instance string   `json:"instance,omitempty"`
	// Targets: targets that left the catalog while bindings use them (config.targets_removed).
	Targets []TargetUse `json:"targets,omitempty"`
	URL     string      `json:"url"` // the ops console
}

// TargetUse is a target bindings still use although the catalog no longer has it: how many are
// on their way (accepted, not yet in effect) and how many are in effect. They finish, and stay
// until revoked or expired, with the target as it was when they were accepted; only new
// applications are refused.
type TargetUse struct {
	Key      string `json:"key"`
	InFlight int    `json:"inFlight"`
	InEffect int    `json:"inEffect"`
}

// Sent is one message bindery sent (or tried to) about a request, as its page shows it.
type Sent struct {
	Event   state.EventType `json:"event"`
	Label   string          `json:"label"`   // the event in plain words: "in effect"
	Channel string          `json:"channel"` // email, webhook, chat
	To      string          `json:"to"`      // the address, or the endpoint's name
	Status  string          `json:"status"`  // pending, delivered, failed, skipped
	At      time.Time       `json:"at"`      // delivered or last tried (created while pending)
	Note    string          `json:"note,omitempty"`
}

// EmailPrefs is GET and POST /api/my/notifications: the events that email the caller.
type EmailPrefs struct {
	Events []state.EventType `json:"events"`
	// The rest is for the settings page (answers only): every event a requester may choose, in
	// plain words, the defaults, and where the email goes.
	Choices  []EventChoice `json:"choices,omitempty"`
	Defaults bool          `json:"defaults,omitempty"` // no choice recorded: the defaults apply
	Address  string        `json:"address,omitempty"`  // "": no address known, nothing is emailed
	EmailOn  bool          `json:"emailOn"`            // notify.email is configured
}

// EventChoice is one event type on the settings page.
type EventChoice struct {
	Event   state.EventType `json:"event"`
	Label   string          `json:"label"`
	Default bool            `json:"default"`
}

// NotifyEndpoint is one receiver in the ops console: its health and its last attempts.
type NotifyEndpoint struct {
	Name           string       `json:"name"`    // webhook:<name>, email, chat:<name>, mrnote
	Channel        string       `json:"channel"` // webhook, email, chat, mrnote
	URL            string       `json:"url,omitempty"`
	Configured     bool         `json:"configured"` // false: only its history remains
	FailingSince   *time.Time   `json:"failingSince,omitempty"`
	LastSuccess    *time.Time   `json:"lastSuccess,omitempty"`
	DisabledAt     *time.Time   `json:"disabledAt,omitempty"`
	DisabledReason string       `json:"disabledReason,omitempty"`
	Deliveries     []DeliveryVw `json:"deliveries"`
}

// DeliveryVw is one delivery in the ops console.
type DeliveryVw struct {
	ID          int64           `json:"id"`
	Event       state.EventType `json:"event"`
	EventID     string          `json:"eventId"`
	OperationID string          `json:"operationId,omitempty"`
	To          string          `json:"to,omitempty"`
	Status      string          `json:"status"`
	Attempts    int             `json:"attempts"`
	LastCode    int             `json:"lastCode,omitempty"`
	LastError   string          `json:"lastError,omitempty"`
	NextAt      *time.Time      `json:"nextAt,omitempty"`
	CreatedAt   time.Time       `json:"createdAt"`
	Tries       []AttemptVw     `json:"tries,omitempty"`
}

// AttemptVw is one attempt of a delivery.
type AttemptVw struct {
	At        time.Time `json:"at"`
	Code      int       `json:"code,omitempty"`
	LatencyMs int64     `json:"latencyMs"`
	Class     string    `json:"class"`
	Error     string    `json:"error,omitempty"`
}
