// Package sim holds the simulators bindery is demonstrated and tested against: a GitLab that
// speaks the REST subset bindery uses (faithful in paths, status codes, bodies and pagination
// headers; what bindery relies on is in docs/gitlab.md), the external approval system, the deploy
// pipeline and the permission service. They are product code: `bindery demo` mounts them under
// /sim/ and `bindery sim` serves them alone, so several bindery instances can share one.
//
// Every fault knob is read from the configuration at each call (sim.* keys, hot-reloaded in a
// demo) unless a test pinned its own with the Go API (SetFaults, Inject).
package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"bindery/internal/platform/config"
	"bindery/internal/work/service"
)

// Options configure the simulators.
type Options struct {
	// Config supplies the secrets the simulators share with bindery (hooks.*, gitlab tokens),
	// the catalog (its projects exist in the simulated GitLab) and the fault knobs (sim.*).
	Config *config.Source
	// BinderyURL is where bindery listens; GitLab webhooks go to <BinderyURL>/hooks/gitlab and
	// deploy callbacks to <BinderyURL>/hooks/deploy. Empty: none are sent.
	BinderyURL string
	// PublicURL is the simulators' own base URL (ending in /sim), used in web_url fields and
	// webhook headers. Empty: derived from each request's Host.
	PublicURL string
	Log       *slog.Logger
	Clock     Clock // nil: the real clock
	// RunJobs makes a merge's branch pipeline run the jobs of the project's .gitlab-ci.yml on
	// this machine (deploy_job.go) instead of the deploy simulator's own callback: a project
	// without the file gets the simulator's callback as before.
	RunJobs bool
	// StateFile keeps the simulators' state across restarts (see state.go); the demo puts it
	// in its data directory. Empty: in memory only.
	StateFile string
}

// Clock tells simulated time. Pipelines and rebases progress by it.
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// ManualClock is a Clock a test moves by hand, so pipeline and rebase progress is deterministic.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock starts at t.
func NewManualClock(t time.Time) *ManualClock { return &ManualClock{now: t} }

// Now is the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Sims is the set of simulators behind one handler.
type Sims struct {
	GitLab     *GitLab
	Approval   *Approval
	Deploy     *Deploy
	Permission *Permission
	Mailbox    *Mailbox

	opts     Options
	bg       service.Base // webhook delivery, time's progress, timed callbacks, periodic saves
	savedSum [32]byte
	// transport carries every call the simulators make (webhooks, callbacks): theirs alone, so
	// that Stop closes the connections they keep open.
	transport *http.Transport
}

// New builds the simulators. Nothing runs in the background until Start.
func New(o Options) *Sims {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = realClock{}
	}
	if o.Config == nil {
		o.Config = config.NewStatic(config.MustParse(""))
	}
	o.BinderyURL = strings.TrimRight(o.BinderyURL, "/")
	o.PublicURL = strings.TrimRight(o.PublicURL, "/")
	s := &Sims{opts: o}
	s.Deploy = newDeploy(o, &s.bg)
	s.GitLab = newGitLab(o)
	s.GitLab.OnMerge(s.Deploy.merged)
	s.Approval = newApproval(o, &s.bg)
	s.Permission = newPermission(o)
	s.transport = http.DefaultTransport.(*http.Transport).Clone()
	for _, hc := range []*http.Client{s.GitLab.hooks.hc, s.Deploy.hc, s.Approval.hc} {
		hc.Transport = s.transport
	}
	s.Mailbox = newMailbox(o)
	s.load()
	return s
}

// Handler serves every simulator under /sim/: /sim/gitlab/api/v4/…, /sim/approval/tickets,
// /sim/approvals, /sim/approvals/:id/decide, /sim/deploys, /sim/permission/check, the mailbox
// (GET /sim/mailbox, POST /sim/webhooks/:name), and GET /sim/faults (FaultCounts).
func (s *Sims) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.EscapedPath()
		switch {
		case strings.HasPrefix(p, "/sim/gitlab/"):
			s.GitLab.ServeHTTP(w, r)
		case strings.HasPrefix(p, "/sim/approval/") || p == "/sim/approvals" || strings.HasPrefix(p, "/sim/approvals/"):
			s.Approval.ServeHTTP(w, r)
		case p == "/sim/deploys":
			s.Deploy.ServeHTTP(w, r)
		case strings.HasPrefix(p, "/sim/permission/"):
			s.Permission.ServeHTTP(w, r)
		case p == "/sim/mailbox" || p == "/sim/webhooks" || strings.HasPrefix(p, "/sim/webhooks/"):
			s.Mailbox.ServeHTTP(w, r)
		case p == "/sim/faults" && r.Method == http.MethodGet:
			writeJSON(w, http.StatusOK, s.FaultCounts())
		default:
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "404 Not Found"})
		}
	})
}

// FaultCounts are the faults each simulator injected so far, by kind (GET /sim/faults): the
// transport faults of the fault knobs (error_500, answer_dropped, hang) and the simulator's own
// (pipeline_failed, pipeline_stuck, merge_needs_rebase, rebase_conflict, callback_duplicated,
// callbacks_reordered, callback_dropped). Faults pinned by a test with Inject are not counted.
func (s *Sims) FaultCounts() map[string]map[string]int {
	return map[string]map[string]int{
		"gitlab":     s.GitLab.gate.faults.snapshot(),
		"approval":   s.Approval.gate.faults.snapshot(),
		"deploy":     s.Deploy.injected.snapshot(),
		"permission": s.Permission.gate.faults.snapshot(),
	}
}

// Start runs the background work until Stop (or ctx's end): webhook delivery, pipeline and
// rebase progress (also computed on every read), timed callbacks, periodic saves of the state
// (Options.StateFile). Decisions whose callback was never delivered are sent again.
func (s *Sims) Start(ctx context.Context) error {
	if _, ok, err := s.bg.StartInit(ctx); !ok {
		return err
	}
	s.bg.Go(s.GitLab.hooks.run)
	s.bg.Go(func(ctx context.Context) {
		service.Every(ctx, 100*time.Millisecond, func(context.Context) { s.GitLab.Sync() })
	})
	if s.opts.StateFile != "" {
		s.bg.Go(func(ctx context.Context) { service.Every(ctx, 2*time.Second, func(context.Context) { s.save() }) })
	}
	s.Approval.resendUndelivered()
	return nil
}

// Stop ends the background work and the calls left hanging by a fault, waits for them (until
// ctx ends), then saves the state (Options.StateFile). Timed callbacks not yet sent are dropped
// (an undelivered approval decision is sent again by the next Start). Safe before Start and
// more than once.
func (s *Sims) Stop(ctx context.Context) error {
	s.bg.StopInit()
	// Hanging calls are HTTP handlers, not goroutines of the service: they end now, so the
	// server that serves them can shut down.
	s.GitLab.gate.stop()
	s.Permission.gate.stop()
	s.Approval.gate.stop()
	err := s.bg.Wait(ctx)
	// Kept-alive connections to bindery are goroutines of the transport (and of bindery's server).
	s.transport.CloseIdleConnections()
	s.Mailbox.stop()
	s.save()
	if err != nil {
		return fmt.Errorf("simulators: %w", err)
	}
	return nil
}

// scaled divides a simulated duration by sim.timeScale.
func scaled(cfg *config.Source, d time.Duration) time.Duration {
	return time.Duration(float64(d) / cfg.Current().SimTimeScale())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// publicURL is the simulators' base URL as a caller sees it (ending in /sim).
func publicURL(o Options, r *http.Request) string {
	if o.PublicURL != "" || r == nil {
		return o.PublicURL
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + "/sim"
}
