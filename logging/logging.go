// Package logging builds bindery's slog logger and carries request-scoped attributes (the
// request id, an operation id) in the context so that every line logged with a context shows them.
package logging

import (
	"context"
	"io"
	"log/slog"
)

type ctxKey struct{}

// With returns a context whose log lines carry attrs in addition to those already carried.
func With(ctx context.Context, attrs ...slog.Attr) context.Context {
	prev, _ := ctx.Value(ctxKey{}).([]slog.Attr)
	merged := make([]slog.Attr, 0, len(prev)+len(attrs))
	merged = append(merged, prev...)
	merged = append(merged, attrs...)
	return context.WithValue(ctx, ctxKey{}, merged)
}

// WithRequestID is With for the request id, the attribute every request's log lines carry.
func WithRequestID(ctx context.Context, id string) context.Context {
	return With(ctx, slog.String("requestId", id))
}

// RequestID returns the request id carried by ctx, or "".
func RequestID(ctx context.Context) string {
	attrs, _ := ctx.Value(ctxKey{}).([]slog.Attr)
	for _, a := range attrs {
		if a.Key == "requestId" {
			return a.Value.String()
		}
	}
	return ""
}

// New returns a logger writing JSON (serve) or text (demo) at the level held by level, which
// may be changed later (the log level is a dynamic config key).
func New(w io.Writer, format string, level *slog.LevelVar) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	if format == "json" {
		h = slog.NewJSONHandler(w, opts)
	} else {
		h = slog.NewTextHandler(w, opts)
	}
	return slog.New(contextHandler{h})
}

// contextHandler adds the context's attributes to each record.
type contextHandler struct{ slog.Handler }

func (h contextHandler) Handle(ctx context.Context, r slog.Record) error {
	if attrs, ok := ctx.Value(ctxKey{}).([]slog.Attr); ok {
		r.AddAttrs(attrs...)
	}
	return h.Handler.Handle(ctx, r)
}

func (h contextHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return contextHandler{h.Handler.WithAttrs(attrs)}
}

func (h contextHandler) WithGroup(name string) slog.Handler {
	return contextHandler{h.Handler.WithGroup(name)}
}

// Discard is a logger that drops everything, for tests that do not read logs.
func Discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
