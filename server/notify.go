package server

import (
	"net/http"
	"regexp"
	"strconv"

	"bindery/internal/vocab/apperr"
	"bindery/internal/vocab/state"
)

// The notification routes: a person's choice of emails, what was sent about a request, and the
// operators' view of the receivers with their actions.

// errNoNotifications is the answer of the notification routes until the notifier is wired.
var errNoNotifications = apperr.New(apperr.Unavailable, "Notifications are not available; please retry later.")

// myNotifications is GET /api/my/notifications: the caller's settings page.
func (s *Server) myNotifications(w http.ResponseWriter, r *http.Request) (int, any, error) {
	if s.deps.Notifications == nil {
		return 0, nil, errNoNotifications
	}
	p, err := s.deps.Notifications.EmailPrefs(r.Context(), infoOf(r).caller.ID)
	return http.StatusOK, p, err
}

// prefsBody is POST /api/my/notifications's body.
type prefsBody struct {
	Events []state.EventType `json:"events"`
}

// maxChoices bounds the list (there are fewer event types than this).
const maxChoices = 32

// setMyNotifications is POST /api/my/notifications: the caller's choice (an empty list: no email).
func (s *Server) setMyNotifications(w http.ResponseWriter, r *http.Request) (int, any, error) {
	var b prefsBody
	if err := bindJSON(r, &b, true); err != nil {
		return 0, nil, err
	}
	if b.Events == nil {
		return 0, nil, apperr.Invalid("events", "is required (a list; empty: no email)")
	}
	if len(b.Events) > maxChoices {
		return 0, nil, apperr.Invalid("events", "has more than %d entries", maxChoices)
	}
	if s.deps.Notifications == nil {
		return 0, nil, errNoNotifications
	}
	p, err := s.deps.Notifications.SetEmailPrefs(r.Context(), infoOf(r).caller.ID, b.Events)
	return http.StatusOK, p, err
}

// requestSent is GET /api/requests/:operationId/sent (owner or ops): what was sent about it —
// the requester's emails; an operator sees every delivery.
func (s *Server) requestSent(w http.ResponseWriter, r *http.Request) (int, any, error) {
	if s.deps.Notifications == nil {
		return 0, nil, errNoNotifications
	}
	v := infoOf(r).owned
	c := infoOf(r).caller
	all := v.Subject != c.ID || s.isOperator(r.Context(), c.ID)
	sent, err := s.deps.Notifications.Sent(r.Context(), v.OperationID, all)
	return http.StatusOK, sent, err
}

// opsNotify is GET /api/ops/notify: every receiver with its health and latest deliveries.
func (s *Server) opsNotify(w http.ResponseWriter, r *http.Request) (int, any, error) {
	if s.deps.Notifications == nil {
		return 0, nil, errNoNotifications
	}
	es, err := s.deps.Notifications.Endpoints(r.Context())
	return http.StatusOK, es, err
}

// opsResend is POST /api/ops/notify/deliveries/:id/resend: a failed delivery sent again.
func (s *Server) opsResend(w http.ResponseWriter, r *http.Request) (int, any, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, nil, apperr.Invalid("id", "must be a delivery id (a positive integer)")
	}
	if s.deps.Notifications == nil {
		return 0, nil, errNoNotifications
	}
	return s.opsAction(w, r, "ops.notify.resend", map[string]any{"deliveryId": id}, func(string) (int, any, error) {
		v, err := s.deps.Notifications.Resend(r.Context(), id)
		return http.StatusOK, v, err
	})
}

// endpointName is a receiver's name as the ops console shows it.
var endpointName = regexp.MustCompile(`^(email|mrnote|(webhook|chat):[a-z0-9][a-z0-9-]{0,62})$`)

// opsEnable is POST /api/ops/notify/endpoints/:name/enable: a disabled receiver on again.
func (s *Server) opsEnable(w http.ResponseWriter, r *http.Request) (int, any, error) {
	name := r.PathValue("name")
	if !endpointName.MatchString(name) {
		return 0, nil, apperr.Invalid("name", "must be a receiver's name: email, mrnote, webhook:<name> or chat:<name>")
	}
	if s.deps.Notifications == nil {
		return 0, nil, errNoNotifications
	}
	return s.opsAction(w, r, "ops.notify.enable", map[string]any{"endpoint": name}, func(string) (int, any, error) {
		v, err := s.deps.Notifications.Enable(r.Context(), name)
		return http.StatusOK, v, err
	})
}
