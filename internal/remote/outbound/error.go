// Package outbound guards bindery's calls to external systems (GitLab, the approval system, the
// permission service): a deadline on every call, a circuit breaker per base URL, and metrics per
// endpoint and status class. Its Error carries the HTTP status of a failed call and never the
// upstream body in its text, so no upstream message can reach bindery's own clients.
package outbound

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Kind says how a call failed.
type Kind string

const (
	// KindStatus: the system answered with a status outside 2xx (Status holds it).
	KindStatus Kind = "status"
	// KindTimeout: no answer within the configured timeout.
	KindTimeout Kind = "timeout"
	// KindUnavailable: no answer at all (refused, reset, the connection dropped mid-answer).
	KindUnavailable Kind = "unavailable"
	// KindCircuitOpen: the base URL's circuit breaker is open; nothing was sent.
	KindCircuitOpen Kind = "circuit_open"
	// KindNotConfigured: the URL or credential the call needs is not configured; nothing was sent.
	KindNotConfigured Kind = "not_configured"
	// KindCanceled: the caller's own context ended (shutdown); not the system's fault.
	KindCanceled Kind = "canceled"
)

// Error is a failed outbound call. Error() names the system, the endpoint, the status and a
// classified reason, never the upstream text: that is kept for the log only (LogValue).
type Error struct {
	System   string // "gitlab", "approval", "permission"
	Endpoint string // the logical endpoint, e.g. "approve", "open_ticket"
	Kind     Kind
	Status   int    // HTTP status when Kind is KindStatus (also 304 for a bodiless repeat); else 0
	Reason   string // a system-specific classification, e.g. "branch_exists"; may be empty
	// RetryAfter is how long the system asked callers to wait (a Retry-After header on a 429 or
	// 503); 0 when it said nothing. Whoever retries waits at least this long.
	RetryAfter time.Duration

	upstream string // the upstream message, truncated; log only
	cause    error
}

// NewStatusError is a call answered with status. upstream is the upstream message (logged,
// never shown); cause is what Unwrap returns (for GitLab, the client library's error type).
func NewStatusError(system, endpoint string, status int, reason, upstream string, cause error) *Error {
	return &Error{System: system, Endpoint: endpoint, Kind: KindStatus, Status: status, Reason: reason, upstream: truncate(upstream), cause: cause}
}

// NewError is a call that failed without an HTTP answer.
func NewError(system, endpoint string, kind Kind, cause error) *Error {
	return &Error{System: system, Endpoint: endpoint, Kind: kind, cause: cause}
}

func (e *Error) Error() string {
	var what string
	switch e.Kind {
	case KindStatus:
		what = fmt.Sprintf("HTTP %d", e.Status)
	case KindTimeout:
		what = "timed out"
	case KindUnavailable:
		what = "no answer"
	case KindCircuitOpen:
		what = "circuit breaker open"
	case KindNotConfigured:
		what = "not configured"
	case KindCanceled:
		what = "canceled"
	default:
		what = string(e.Kind)
	}
	if e.Reason != "" {
		what += " (" + e.Reason + ")"
	}
	return e.System + " " + e.Endpoint + ": " + what
}

// Unwrap returns the cause: the client library's error for an HTTP answer, the transport error
// otherwise. It lets errors.Is(err, context.DeadlineExceeded) and errors.As to the library's
// type work through an *Error.
func (e *Error) Unwrap() error { return e.cause }

// Is matches a target *Error by its set fields: Reason if set, else Status if set, else Kind.
// It makes sentinels such as &Error{Reason: "branch_exists"} usable with errors.Is.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	switch {
	case t.Reason != "":
		return e.Reason == t.Reason && (t.System == "" || t.System == e.System)
	case t.Status != 0:
		return e.Status == t.Status
	case t.Kind != "":
		return e.Kind == t.Kind
	}
	return false
}

// WithRetryAfter records a Retry-After header value (seconds, or an HTTP date relative to now);
// an absent, unparsable or past value records nothing. A wait longer than maxRetryAfter is cut
// to it: a misbehaving server must not park the work for days.
func (e *Error) WithRetryAfter(header string, now time.Time) *Error {
	header = strings.TrimSpace(header)
	if header == "" {
		return e
	}
	var d time.Duration
	if secs, err := strconv.Atoi(header); err == nil {
		d = time.Duration(secs) * time.Second
	} else if t, err := http.ParseTime(header); err == nil {
		d = t.Sub(now)
	}
	if d > 0 {
		e.RetryAfter = min(d, maxRetryAfter)
	}
	return e
}

// maxRetryAfter caps a Retry-After.
const maxRetryAfter = time.Hour

// RetryAfterOf is the Retry-After an error carries (0: none).
func RetryAfterOf(err error) time.Duration {
	var oe *Error
	if errors.As(err, &oe) {
		return oe.RetryAfter
	}
	return 0
}

// Upstream is the upstream message of an HTTP answer, for the log only.
func (e *Error) Upstream() string { return e.upstream }

// LogValue puts the upstream message in the log, where an operator needs it.
func (e *Error) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("error", e.Error())}
	if e.upstream != "" {
		attrs = append(attrs, slog.String("upstream", e.upstream))
	}
	if e.cause != nil && e.Kind != KindStatus {
		attrs = append(attrs, slog.String("cause", e.cause.Error()))
	}
	return slog.GroupValue(attrs...)
}

// Temporary reports whether trying again later may succeed: no answer, a timeout, an open
// breaker, 429 or a 5xx. A 4xx answer is deterministic.
func (e *Error) Temporary() bool {
	switch e.Kind {
	case KindTimeout, KindUnavailable, KindCircuitOpen:
		return true
	case KindStatus:
		return e.Status == 429 || e.Status >= 500
	}
	return false
}

// StatusOf returns the HTTP status carried by err (0 when there is none).
func StatusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

func truncate(s string) string {
	const max = 300
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
