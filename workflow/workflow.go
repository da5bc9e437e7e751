package workflow

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"

	"bindery/apperr"
	"bindery/approval"
	"bindery/batch"
	"bindery/change"
	"bindery/config"
	"bindery/metric"
	"bindery/store"
)

// The engine is split by phase: apply.go (apply, re-apply, hand-off), approval.go (tickets,
// callbacks), legacy.go (the MR-first flow, one MR per request), validate.go (deploy callback,
// reconciliation), close.go (revoke, expiry), recover.go (leases, sweep, operators' retry and
// settle), views.go (what the API shows), cron.go (the jobs), steps.go (the step wrapper).

// Batches is the batch path of the approval-first flow: package batch's *Service. Rounds claim
// the waiting requests of each partition into one batch and run it; the workflow never drives a
// batch's MR itself.
type Batches interface {
	// Round runs one batch round over every partition with waiting requests.
	Round(ctx context.Context) ([]batch.Outcome, error)
	// Resume re-runs an active batch from the remote state (an operator's retry).
	Resume(ctx context.Context, batchID int64) error
	// Settle settles an active batch now (close, re-read, merged wins).
	Settle(ctx context.Context, batchID int64, actor string) error
	// Sweep takes over and resumes or settles active batches whose lease expired.
	Sweep(ctx context.Context) (int, error)
	// Wake tells a batch waiting on (project, mrIID) to poll now (a GitLab webhook).
	Wake(project string, mrIID int64)
}

// Tickets opens approval tickets: *approval.Client. Idempotent by operationId.
type Tickets interface {
	Open(ctx context.Context, t approval.Ticket) (string, error)
}

// Pool runs long steps: *worker.Pool. Submit never blocks; a refusal is worker.ErrPoolFull or
// worker.ErrPoolStopped and the caller persists what it means.
type Pool interface {
	Submit(name string, fn func(ctx context.Context)) error
}

// Options configure New. Every field but Log and Recorder is required.
type Options struct {
	DB       *store.DB
	Config   *config.Source
	Batches  Batches
	Tickets  Tickets
	Change   *change.Runner // the legacy flow's per-request MR (the batch path has its own)
	Pool     Pool
	Log      *slog.Logger
	Recorder *metric.Recorder // business outcomes and stage durations, after commit
	// Instance names this process as the holder of operation leases.
	Instance string
	// BaseURL is bindery's own URL, used for the approval callback while server.publicURL is
	// blank (the demo's address).
	BaseURL string
	// GitLabURL is GitLab's web base for MR and pipeline links while gitlab.baseURL is blank
	// (the demo's simulator, <BaseURL>/sim/gitlab).
	GitLabURL string
}

// Workflow is the request lifecycle. It implements the HTTP layer's server.Workflow.
type Workflow struct {
	db       *store.DB
	cfg      *config.Source
	batches  Batches
	tickets  Tickets
	change   *change.Runner
	pool     Pool
	log      *slog.Logger
	rec      *metric.Recorder
	instance string
	baseURL  string
	gitlab   string

	// wakers are the legacy steps polling an MR, woken by a GitLab webhook; merging holds the
	// per-project legacy merge locks.
	mu      sync.Mutex
	wakers  map[mrKey]map[chan struct{}]struct{}
	merging map[string]chan struct{}
}

type mrKey struct {
	project string
	iid     int64
}

// New builds the workflow.
func New(o Options) (*Workflow, error) {
	switch {
	case o.DB == nil, o.Config == nil, o.Batches == nil, o.Tickets == nil, o.Change == nil, o.Pool == nil:
		return nil, errors.New("workflow: DB, Config, Batches, Tickets, Change and Pool are required")
	case o.Instance == "":
		return nil, errors.New("workflow: Instance is required (lease owner)")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &Workflow{
		db: o.DB, cfg: o.Config, batches: o.Batches, tickets: o.Tickets, change: o.Change, pool: o.Pool,
		log: o.Log, rec: o.Recorder, instance: o.Instance,
		baseURL: strings.TrimRight(o.BaseURL, "/"), gitlab: strings.TrimRight(o.GitLabURL, "/"),
		wakers: map[mrKey]map[chan struct{}]struct{}{}, merging: map[string]chan struct{}{},
	}, nil
}

// Flows, recorded on the operation at apply.
const (
	FlowApprovalFirst = "approval-first"
	FlowLegacy        = "legacy"
)

// notFound is the API's answer for an unknown request.
func notFound(err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return apperr.Wrap(err, apperr.NotFound, "No such request.")
	}
	return err
}

// callbackURL is where the approval system calls back.
func (w *Workflow) callbackURL() string {
	base := w.cfg.Current().PublicURL()
	if base == "" {
		base = w.baseURL
	}
	return base + "/hooks/approval"
}

// gitlabWeb is GitLab's web base URL for links.
func (w *Workflow) gitlabWeb() string {
	if u := w.cfg.Current().GitLabBaseURL(); u != "" {
		return strings.TrimRight(u, "/")
	}
	return w.gitlab
}
