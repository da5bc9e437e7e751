package outbound

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/sony/gobreaker/v2"

	"bindery/internal/platform/metric"
)

// Limits bound one call. They come from the configuration snapshot in force at the call, so a
// reload applies to the next call.
type Limits struct {
	Timeout  time.Duration // deadline of the call
	Failures int           // consecutive failures that open the breaker
	Cooldown time.Duration // how long an open breaker refuses calls before a trial call
}

// Guard runs the calls of one external system. It keeps one circuit breaker per base URL, so a
// dead GitLab does not stop calls to another one, and records every call in the metric set.
type Guard struct {
	system string
	set    *metrics.Set
	log    *slog.Logger

	mu       sync.Mutex
	breakers map[breakerKey]*gobreaker.CircuitBreaker[struct{}]
}

type breakerKey struct {
	target   string
	failures int
	cooldown time.Duration
}

// NewGuard returns the guard of system ("gitlab", "approval", "permission"). set receives the
// metrics (nil: a private set); log receives breaker state changes (nil: discarded).
func NewGuard(system string, set *metrics.Set, log *slog.Logger) *Guard {
	if set == nil {
		set = metrics.NewSet()
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Guard{system: system, set: set, log: log, breakers: map[breakerKey]*gobreaker.CircuitBreaker[struct{}]{}}
}

// Call runs fn with a deadline of l.Timeout under the breaker of target (a base URL) and
// records its outcome as endpoint. fn returns the HTTP status it got (0 if none) and an error;
// an HTTP answer outside 2xx must be returned as an *Error made with NewStatusError. Any other
// error is classified here: our deadline → KindTimeout, the caller's context ended →
// KindCanceled, anything else → KindUnavailable. An open breaker returns KindCircuitOpen
// without calling fn.
//
// The breaker counts no answer, timeouts, 5xx and 429 as failures. Other 4xx answers are the
// system working as designed (a conflict, a missing MR) and count as successes; a canceled
// caller counts as nothing.
func (g *Guard) Call(ctx context.Context, target, endpoint string, l Limits, fn func(ctx context.Context) (int, error)) error {
	cb := g.breaker(target, l)
	start := time.Now()
	var status int
	_, err := cb.Execute(func() (struct{}, error) {
		cctx, cancel := context.WithTimeout(ctx, l.Timeout)
		defer cancel()
		var err error
		status, err = fn(cctx)
		if err == nil {
			return struct{}{}, nil
		}
		var oe *Error
		if errors.As(err, &oe) {
			return struct{}{}, err
		}
		switch {
		case ctx.Err() != nil:
			return struct{}{}, NewError(g.system, endpoint, KindCanceled, err)
		case cctx.Err() != nil || isTimeout(err):
			return struct{}{}, NewError(g.system, endpoint, KindTimeout, err)
		}
		return struct{}{}, NewError(g.system, endpoint, KindUnavailable, err)
	})
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		err = NewError(g.system, endpoint, KindCircuitOpen, err)
	}
	g.record(endpoint, status, err, time.Since(start))
	return err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

func (g *Guard) breaker(target string, l Limits) *gobreaker.CircuitBreaker[struct{}] {
	if l.Failures < 1 {
		l.Failures = 1
	}
	key := breakerKey{target, l.Failures, l.Cooldown}
	g.mu.Lock()
	defer g.mu.Unlock()
	if cb, ok := g.breakers[key]; ok {
		return cb
	}
	// Settings changed (or first call): a fresh breaker. Old ones for the same target are
	// dropped so a reload does not grow the map.
	for k := range g.breakers {
		if k.target == target {
			delete(g.breakers, k)
		}
	}
	failures := uint32(l.Failures)
	opened := g.set.GetOrCreateCounter(fmt.Sprintf(`bindery_outbound_breaker_opened_total{system=%q}`, g.system))
	cb := gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        g.system + " " + target,
		MaxRequests: 1,
		Timeout:     l.Cooldown,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		IsSuccessful: func(err error) bool {
			var oe *Error
			return err == nil || (errors.As(err, &oe) && !oe.Temporary())
		},
		IsExcluded: func(err error) bool {
			var oe *Error
			return errors.As(err, &oe) && oe.Kind == KindCanceled
		},
		OnStateChange: func(name string, from, to gobreaker.State) {
			if to == gobreaker.StateOpen {
				opened.Inc()
			}
			g.log.Warn("circuit breaker state changed", "breaker", name, "from", from.String(), "to", to.String())
		},
	})
	g.breakers[key] = cb
	return cb
}

// BreakerState is the state ("closed", "half-open", "open") of target's breaker under l.
func (g *Guard) BreakerState(target string, l Limits) string {
	return g.breaker(target, l).State().String()
}

func (g *Guard) record(endpoint string, status int, err error, took time.Duration) {
	class := statusClass(status, err)
	g.set.GetOrCreateCounter(fmt.Sprintf(`bindery_outbound_requests_total{system=%q,endpoint=%q,status=%q}`, g.system, endpoint, class)).Inc()
	metric.Histogram(g.set, fmt.Sprintf(`bindery_outbound_request_duration_seconds{system=%q,endpoint=%q}`, g.system, endpoint)).Update(took.Seconds())
}

func statusClass(status int, err error) string {
	var oe *Error
	if err != nil && errors.As(err, &oe) && oe.Kind != KindStatus {
		return string(oe.Kind)
	}
	if status == 0 {
		if err != nil {
			return string(KindUnavailable)
		}
		return "2xx"
	}
	return strconv.Itoa(status/100) + "xx"
}

// NewHTTPClient is a dedicated HTTP client for one system. It has connection-level timeouts; the
// whole-call deadline comes from the configuration at each call (Guard.Call), so it can change
// without a restart. Redirects are not followed: an API that redirects is misconfigured, and a
// redirect would carry our credentials elsewhere.
func NewHTTPClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   5 * time.Second,
			ExpectContinueTimeout: time.Second,
			MaxIdleConns:          64,
			MaxIdleConnsPerHost:   16,
			IdleConnTimeout:       90 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
