// Package logging builds bindery's slog logger and carries request-scoped attributes (the
// request id, an operation id) in the context so that every line logged with a context shows them.
package logging

import (
	"context"
	"io"
	"log/slog"
	"slices"
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

// RequestID returns the request id carried by ctx, or "". The newest one counts, as in the log.
func RequestID(ctx context.Context) string {
	attrs, _ := ctx.Value(ctxKey{}).([]slog.Attr)
	for i := len(attrs) - 1; i >= 0; i-- {
		if attrs[i].Key == "requestId" {
			return attrs[i].Value.String()
		}
	}
	return ""
}

// New returns a logger writing JSON (serve) or text (demo) at the level held by level, which
// may be changed later (the log level is a dynamic config key). Durations are written as text
// ("10s"): the JSON handler would write nanoseconds, which nobody reads at a glance.
func New(w io.Writer, format string, level *slog.LevelVar) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: durationAsText}
	var h slog.Handler
	if format == "json" {
		h = slog.NewJSONHandler(w, opts)
	} else {
		h = slog.NewTextHandler(w, opts)
	}
	return slog.New(contextHandler{inner: h})
}

func durationAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// contextHandler adds the context's attributes to each record and writes every key once, the
// newest value winning: a sub-logger may name its own component (log.With("component", "cron")
// on the workflow's logger), a context may carry an attribute twice, a call may repeat one the
// logger has. The standard handlers would write each occurrence, and a JSON line with a
// repeated key is one most parsers read as its last value, some as its first, and a few refuse.
//
// To see every key at once, the attributes given to WithAttrs are kept here, not handed to the
// inner handler, until a group opens: those of enclosing groups cannot clash with the open
// group's keys, so they go down then.
type contextHandler struct {
	inner slog.Handler
	attrs []slog.Attr // since the innermost open group (or the start), oldest first
}

func (h contextHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h contextHandler) Handle(ctx context.Context, r slog.Record) error {
	fromCtx, _ := ctx.Value(ctxKey{}).([]slog.Attr)
	all := make([]slog.Attr, 0, len(h.attrs)+len(fromCtx)+r.NumAttrs())
	all = append(all, h.attrs...)
	all = append(all, fromCtx...)
	r.Attrs(func(a slog.Attr) bool { all = append(all, a); return true })
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	out.AddAttrs(newestOnce(all)...)
	return h.inner.Handle(ctx, out)
}

func (h contextHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return contextHandler{inner: h.inner, attrs: append(slices.Clip(h.attrs), attrs...)}
}

func (h contextHandler) WithGroup(name string) slog.Handler {
	if name == "" { // slog: an empty group name is no group
		return h
	}
	return contextHandler{inner: h.inner.WithAttrs(newestOnce(h.attrs)).WithGroup(name)}
}

// newestOnce returns attrs with each key once, at the place and with the value of its last
// occurrence. Groups without a key are flattened first (the handlers inline them), and
// attributes without a key are dropped (the handlers ignore them).
func newestOnce(attrs []slog.Attr) []slog.Attr {
	if distinctKeys(attrs) {
		return attrs // every line of a request comes here: no copy, no map
	}
	flat := make([]slog.Attr, 0, len(attrs))
	var flatten func([]slog.Attr)
	flatten = func(as []slog.Attr) {
		for _, a := range as {
			if a.Key != "" {
				flat = append(flat, a)
			} else if v := a.Value.Resolve(); v.Kind() == slog.KindGroup {
				flatten(v.Group())
			}
		}
	}
	flatten(attrs)
	seen := make(map[string]bool, len(flat))
	out := make([]slog.Attr, 0, len(flat))
	for i := len(flat) - 1; i >= 0; i-- {
		if !seen[flat[i].Key] {
			seen[flat[i].Key] = true
			out = append(out, flat[i])
		}
	}
	slices.Reverse(out)
	return out
}

// distinctKeys reports whether attrs are all keyed (nothing to flatten or drop), each key once.
// A line has a dozen attributes at most, so pairs are compared rather than a map built.
func distinctKeys(attrs []slog.Attr) bool {
	if len(attrs) > 16 {
		return false
	}
	for i, a := range attrs {
		if a.Key == "" {
			return false
		}
		for _, b := range attrs[:i] {
			if a.Key == b.Key {
				return false
			}
		}
	}
	return true
}

// Discard is a logger that drops everything, for tests that do not read logs.
func Discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
