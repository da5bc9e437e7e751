// Package permission answers "may this identity do what these rule codes guard?". With
// permission.url set it asks the permission service (POST <url>/check with
// {"identity","ruleCodes"} → {"allowed","matched"}, every code in one round trip, under
// permission.timeout and a circuit breaker); with it blank the static rules of
// permission.rules decide (demo). The switch is read at each call.
//
// Authorization fails closed: an error, a timeout, an open breaker, a malformed answer or a
// rule code nobody configured all mean "no".
package permission

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/VictoriaMetrics/metrics"

	"bindery/internal/platform/config"
	"bindery/internal/remote/outbound"
)

// Options configure New.
type Options struct {
	Metrics    *metrics.Set // per-endpoint metrics (nil: a private set)
	Log        *slog.Logger // breaker changes (nil: discarded)
	HTTPClient *http.Client // nil: outbound.NewHTTPClient()
}

// Checker checks permissions against the service or the static rules.
type Checker struct {
	cfg   *config.Source
	guard *outbound.Guard
	hc    *http.Client
}

const system = "permission"

// New returns a Checker. It needs nothing configured: a blank permission.url means static
// rules, and no rules means nobody is granted anything.
func New(src *config.Source, o Options) *Checker {
	if o.HTTPClient == nil {
		o.HTTPClient = outbound.NewHTTPClient()
	}
	return &Checker{cfg: src, guard: outbound.NewGuard(system, o.Metrics, o.Log), hc: o.HTTPClient}
}

// Check reports whether identity holds at least one of ruleCodes ("ops admin OR target
// owner"), in one round trip. It returns false with the error when the answer could not be had
// (the caller answers 403 either way and logs the error). No identity or no rule code → false.
func (c *Checker) Check(ctx context.Context, identity string, ruleCodes []string) (bool, error) {
	identity = strings.TrimSpace(identity)
	if identity == "" || len(ruleCodes) == 0 {
		return false, nil
	}
	snap := c.cfg.Current()
	base := snap.PermissionURL()
	if base == "" {
		return len(snap.PermissionMatches(identity, ruleCodes)) > 0, nil
	}
	limits := outbound.Limits{Timeout: snap.PermissionTimeout(), Failures: snap.BreakerFailures(), Cooldown: snap.BreakerCooldown()}
	var answer struct {
		Allowed *bool    `json:"allowed"`
		Matched []string `json:"matched"`
	}
	err := c.guard.Call(ctx, base, "check", limits, func(ctx context.Context) (int, error) {
		status, data, err := outbound.DoJSON(ctx, c.hc, outbound.Request{
			System: system, Endpoint: "check", Method: http.MethodPost, URL: base + "/check",
			Body: map[string]any{"identity": identity, "ruleCodes": ruleCodes},
		}, &answer)
		if err == nil && answer.Allowed == nil {
			return status, outbound.NewStatusError(system, "check", status, "malformed_answer", string(data), nil)
		}
		return status, err
	})
	if err != nil {
		return false, err
	}
	if !*answer.Allowed {
		return false, nil
	}
	// Believe a "yes" only when it names one of the codes asked about: a service that grants
	// something else (or nothing in particular) has not granted this.
	for _, m := range answer.Matched {
		if slices.Contains(ruleCodes, m) {
			return true, nil
		}
	}
	return false, errors.New("permission service allowed without naming a rule code that was asked")
}
