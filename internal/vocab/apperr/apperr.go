// Package apperr is bindery's one application error type. An error is created where its cause
// is known, carries one of the codes below and a message that is safe to show a client, and is
// mapped to an HTTP status in exactly one place (package server). Anything that is not an
// *Error is an internal error: the client sees a generic message, the log sees the cause.
package apperr

import (
	"errors"
	"fmt"
	"time"
)

// Code is a machine-readable error code, UPPER_SNAKE, stable across releases.
type Code string

// The codes (docs/api.md, 'Status codes'). Add a code here and to the status table in package
// server together.
const (
	InvalidArgument      Code = "INVALID_ARGUMENT"
	Unauthenticated      Code = "UNAUTHENTICATED"
	AccessDenied         Code = "ACCESS_DENIED"
	ApplyClosed          Code = "APPLY_CLOSED"
	NotFound             Code = "NOT_FOUND"
	Conflict             Code = "CONFLICT"
	ApplyInProgress      Code = "APPLY_IN_PROGRESS"
	BodyTooLarge         Code = "BODY_TOO_LARGE"
	UnsupportedMedia     Code = "UNSUPPORTED_MEDIA_TYPE"
	IdempotencyKeyReused Code = "IDEMPOTENCY_KEY_REUSED"
	CallbackRefused      Code = "CALLBACK_REFUSED" // a callback about something bindery does not know
	RateLimited          Code = "RATE_LIMITED"
	Unavailable          Code = "UNAVAILABLE"
	Internal             Code = "INTERNAL"
	MethodNotAllowed     Code = "METHOD_NOT_ALLOWED"
)

// GenericMessage is the only text a client ever sees for an internal error.
const GenericMessage = "Internal error; the request id identifies it in our logs."

// AccessDeniedMessage is fixed so that a refused caller learns nothing about which rule failed.
const AccessDeniedMessage = "Access denied"

// Error is an error whose Message may be shown to a client. Field names the offending input
// field for INVALID_ARGUMENT. Cause stays server-side: it is logged, never serialised.
type Error struct {
	Code    Code
	Message string
	Field   string
	Cause   error
	// RetryAfter, when set, is sent as Retry-After: the answer says "try again", and when.
	RetryAfter time.Duration
	// LoginURL, for UNAUTHENTICATED, is where a person signs in: the answer names it.
	LoginURL string
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Cause)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Cause }

// New returns an *Error with a client-safe message.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an *Error with a client-safe message and a server-side cause.
func Wrap(cause error, code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Cause: cause}
}

// Invalid reports a bad input field; the message names the field.
func Invalid(field, format string, args ...any) *Error {
	return &Error{Code: InvalidArgument, Field: field, Message: field + ": " + fmt.Sprintf(format, args...)}
}

// Busy is a CONFLICT that goes away by itself (a step of the same work runs right now): the
// answer carries Retry-After.
func Busy(cause error, format string, args ...any) *Error {
	return &Error{Code: Conflict, Message: fmt.Sprintf(format, args...), Cause: cause, RetryAfter: time.Second}
}

// Denied is the fixed 403.
func Denied(cause error) *Error {
	return &Error{Code: AccessDenied, Message: AccessDeniedMessage, Cause: cause}
}

// As returns the *Error in err's chain, or nil.
func As(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// CodeOf returns the code of err, or Internal for anything that is not an *Error.
func CodeOf(err error) Code {
	if e := As(err); e != nil {
		return e.Code
	}
	return Internal
}
