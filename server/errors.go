package server

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"bindery/internal/platform/logging"
	"bindery/internal/remote/outbound"
	"bindery/internal/vocab/apperr"
	"bindery/store"
)

// statusOf is the one table from error code to HTTP status (docs/api.md, 'Status codes'). An error
// that is not an *apperr.Error is a 500 with the generic message.
var statusOf = map[apperr.Code]int{
	apperr.InvalidArgument:      http.StatusBadRequest,
	apperr.Unauthenticated:      http.StatusUnauthorized,
	apperr.AccessDenied:         http.StatusForbidden,
	apperr.ApplyClosed:          http.StatusForbidden,
	apperr.NotFound:             http.StatusNotFound,
	apperr.MethodNotAllowed:     http.StatusMethodNotAllowed,
	apperr.Conflict:             http.StatusConflict,
	apperr.ApplyInProgress:      http.StatusConflict,
	apperr.BodyTooLarge:         http.StatusRequestEntityTooLarge,
	apperr.UnsupportedMedia:     http.StatusUnsupportedMediaType,
	apperr.IdempotencyKeyReused: http.StatusUnprocessableEntity,
	apperr.CallbackRefused:      http.StatusUnprocessableEntity,
	apperr.RateLimited:          http.StatusTooManyRequests,
	apperr.Internal:             http.StatusInternalServerError,
	apperr.Unavailable:          http.StatusServiceUnavailable,
}

// ErrorBody is the JSON body of every error response.
type ErrorBody struct {
	Code      apperr.Code `json:"code"`
	Message   string      `json:"message"`
	Field     string      `json:"field,omitempty"`
	RequestID string      `json:"requestId"`
	LoginURL  string      `json:"loginUrl,omitempty"` // UNAUTHENTICATED: where to sign in (server.loginURL)
}

// writeError is the only way a handler or interceptor answers with an error. The client gets
// the code and a message safe to show; causes, stacks and upstream text go to the log with
// the request id.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	ctx := r.Context()
	body := ErrorBody{Code: apperr.Internal, Message: apperr.GenericMessage, RequestID: logging.RequestID(ctx)}
	status := http.StatusInternalServerError
	if apperr.As(err) == nil {
		err = unavailable(err)
	}
	if e := apperr.As(err); e != nil {
		if s, ok := statusOf[e.Code]; ok && e.Code != apperr.Internal {
			body.Code, body.Message, body.Field, body.LoginURL, status = e.Code, e.Message, e.Field, e.LoginURL, s
		}
		switch {
		case e.RetryAfter > 0:
			w.Header().Set("Retry-After", strconv.Itoa(int((e.RetryAfter+time.Second-1)/time.Second)))
		case e.Code == apperr.Unavailable:
			w.Header().Set("Retry-After", "1") // unavailable is always "try again shortly"
		}
	}
	switch {
	case status >= 500:
		log.ErrorContext(ctx, "request failed", "status", status, "code", body.Code, "err", err)
	case errors.Unwrap(err) != nil:
		log.WarnContext(ctx, "request refused", "status", status, "code", body.Code, "err", err)
	}
	writeJSON(w, status, body)
}

// unavailable classifies an error no layer named: a dependency that did not answer — an outbound
// call (its own classification says so; it unwraps to its transport error, so it is looked at
// first), a database conflict, then the database — is 503, try again; anything else stays an
// internal error.
func unavailable(err error) error {
	var oe *outbound.Error
	switch {
	case errors.As(err, &oe) && oe.Temporary():
		return apperr.Wrap(err, apperr.Unavailable, "A service bindery depends on did not answer; try again shortly.")
	case errors.As(err, &oe):
		return err
	case errors.Is(err, store.ErrRetry):
		// A deadlock or a lock wait that outlasted its retries: the database answered, it refused
		// this change because of another one at the same moment.
		return apperr.Wrap(err, apperr.Unavailable, "A conflicting change in the database at the same moment kept bindery from handling this; try again shortly.")
	case store.Unavailable(err):
		return apperr.Wrap(err, apperr.Unavailable, "The database did not answer in time; try again shortly.")
	}
	return err
}

// writeJSON writes v as the response. API answers are never cached.
func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
