// Package workflow runs the request lifecycle: apply, approval, batching, MR creation, merge,
// validation, close, recovery. It fills the API's views (package api) from what the store
// holds, in the words of package explain.
package workflow

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"bindery/batch"
	"bindery/internal/platform/config"
	"bindery/internal/platform/metric"
	"bindery/internal/remote/approval"
	"bindery/internal/vocab/apperr"
	"bindery/internal/vocab/state"
	"bindery/internal/work/change"
	"bindery/internal/work/engine"
	"bindery/store"
)

// The workflow is split by phase: apply.go (apply, re-apply), approval.go (tickets, callbacks),
// legacy.go (the MR-first flow, one MR per request), validate.go (deploy callback,
// reconciliation), close.go (revoke, expiry), recover.go (repair, operators' retry and settle,
// webhooks), views.go (what the API shows), cron.go (the jobs), steps.go (a request's steps as
// tasks of the engine).

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
	// Wake makes the batch waiting on (project, mrIID) look now (a GitLab webhook); it returns
	// how many tasks it woke.
	Wake(ctx context.Context, project string, mrIID int64) (int, error)
	// Repair is the task an active batch found without one gets (the repair sweep).
	Repair(b store.Batch) store.TaskSpec
	// Waiting is what a batch's members wait for while its task is at step ({mr}: its merge
	// request); "": their own step says it.
	Waiting(step string) string
}

// Tickets opens approval tickets: *approval.Client. Idempotent by operationId.
type Tickets interface {
	Open(ctx context.Context, t approval.Ticket) (string, error)
	// Get reads what became of a ticket (approval.ErrNoTicket: unknown to the system).
	Get(ctx context.Context, ticketID string) (approval.TicketState, error)
}

// Options configure New. Every field but Log and Recorder is required.
type Options struct {
	DB      *store.DB
	Config  *config.Source
	Batches Batches
	Tickets Tickets
	Change  *change.Runner // the legacy flow's per-request MR (the batch path has its own)
	// Engine runs the requests' steps; New registers the request kind on it.
	Engine   *engine.Engine
	Log      *slog.Logger
	Recorder *metric.Recorder // business outcomes and stage durations, after commit
	// BaseURL is bindery's own URL, used for the approval callback while server.publicURL is
	// blank (the demo's address).
	BaseURL string
	// GitLabURL is GitLab's web base for MR and pipeline links while gitlab.baseURL is blank
	// (the demo's simulator, <BaseURL>/sim/gitlab).
	GitLabURL string
	// TicketURL is the approval ticket's web address ({id}: its id) while approval.ticketURL
	// is blank (the demo's simulated approval system, <BaseURL>/sim/approvals/{id}).
	TicketURL string
}

// Workflow is the request lifecycle. It implements the HTTP layer's server.Workflow.
type Workflow struct {
	db      *store.DB
	cfg     *config.Source
	batches Batches
	tickets Tickets
	mr      *change.Lifecycle // the legacy flow's per-request MR
	rows    []stepRow         // the request kind's step table (steps)
	trains  trainCache        // each project's merge train, as the request views read it
	engine  *engine.Engine
	log     *slog.Logger
	rec     *metric.Recorder
	baseURL string
	gitlab  string
	ticket  string
}

// New builds the workflow.
func New(o Options) (*Workflow, error) {
	if o.DB == nil || o.Config == nil || o.Batches == nil || o.Tickets == nil || o.Change == nil || o.Engine == nil {
		return nil, errors.New("workflow: DB, Config, Batches, Tickets, Change and Engine are required")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	w := &Workflow{
		db: o.DB, cfg: o.Config, batches: o.Batches, tickets: o.Tickets, engine: o.Engine,
		mr:  &change.Lifecycle{Runner: o.Change, Config: o.Config},
		log: o.Log, rec: o.Recorder,
		baseURL: strings.TrimRight(o.BaseURL, "/"), gitlab: strings.TrimRight(o.GitLabURL, "/"),
		ticket: o.TicketURL,
	}
	w.rows = w.steps()
	o.Engine.Register(w.def().Kind())
	return w, nil
}

// Flows, recorded on the operation at apply.
const (
	FlowApprovalFirst = state.FlowApprovalFirst
	FlowLegacy        = state.FlowLegacy
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
