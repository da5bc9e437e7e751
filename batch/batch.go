// Package batch runs the approval-first flow's batches: rounds per partition (cron on every
// instance and the operators' trigger run the same code), the claim through the store, and the
// batch runner that takes the members' file actions through one MR (package change), records
// progress with bulk member transitions, settles, bisects a deterministically failing batch, and
// sweeps batches whose lease expired.
//
// Every write goes through the store's guarded batch write first (the batch's version is the
// fencing token): a runner whose batch was taken over by another instance, resumed by an
// operator or settled fails its next write and stops, without touching a member. A cancelled
// context (shutdown) writes nothing: the lease expires and the sweep resumes the batch from the
// remote state on any instance.
package batch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"bindery/change"
	"bindery/config"
	"bindery/metric"
	"bindery/store"
	"bindery/worker"
)

// Outcome is what one partition's round did.
type Outcome struct {
	Partition string
	Result    store.RoundOutcome // CLAIMED, SLOT_OCCUPIED, NOTHING_WAITING, NOT_DUE
	BatchID   int64              // set when CLAIMED
	Claimed   int                // members claimed
	Err       error              // the round failed for this partition (others still ran)
}

// Options wire a Service.
type Options struct {
	DB       *store.DB
	Config   *config.Source
	Change   *change.Runner
	Pool     *worker.Pool
	Log      *slog.Logger
	Recorder *metric.Recorder // nil: no metrics
	Instance string           // lease owner: this App instance's id ("" → a random one)
}

// Service runs rounds, batch runners, settlements and sweeps. Safe for concurrent use; every
// instance of the product has one.
type Service struct {
	db       *store.DB
	cfg      *config.Source
	change   *change.Runner
	pool     *worker.Pool
	log      *slog.Logger
	rec      *metric.Recorder
	instance string

	mu      sync.Mutex
	wakes   map[mrKey]chan struct{} // the running batches' MRs, for Wake
	running map[int64]*runningBatch // runners in this process, by batch
}

type mrKey struct {
	project string
	iid     int64
}

type runningBatch struct{ cancel context.CancelFunc }

// Errors of the operator calls (the workflow maps them to API codes).
var (
	// ErrSettled: the batch is SUCCEEDED or FAILED already; there is nothing to resume or settle.
	ErrSettled = errors.New("batch is already settled")
)

// New returns a Service.
func New(o Options) *Service {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Instance == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		o.Instance = "batch-" + hex.EncodeToString(b[:])
	}
	return &Service{
		db: o.DB, cfg: o.Config, change: o.Change, pool: o.Pool, log: o.Log.With("component", "batch"),
		rec: o.Recorder, instance: o.Instance, wakes: map[mrKey]chan struct{}{}, running: map[int64]*runningBatch{},
	}
}

// Wake tells a running batch that GitLab reported news for (project, mrIID) — a pipeline
// finished, the MR was merged or closed — so its poll checks now instead of at its next
// interval. Unknown MRs are ignored: a webhook is only a hint.
func (s *Service) Wake(project string, mrIID int64) {
	s.mu.Lock()
	ch := s.wakes[mrKey{project, mrIID}]
	s.mu.Unlock()
	if ch != nil {
		select {
		case ch <- struct{}{}:
		default: // a wake is already pending
		}
	}
}

func (s *Service) listen(project string, iid int64, ch chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wakes[mrKey{project, iid}] = ch
}

func (s *Service) unlisten(project string, iid int64, ch chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wakes[mrKey{project, iid}] == ch {
		delete(s.wakes, mrKey{project, iid})
	}
}

// claimRunner records this process's runner of batch id, cancelling an older one (an operator
// resumed a batch whose runner was still waiting here: one runner per batch per process).
func (s *Service) claimRunner(id int64, cancel context.CancelFunc) *runningBatch {
	rb := &runningBatch{cancel: cancel}
	s.mu.Lock()
	old := s.running[id]
	s.running[id] = rb
	s.mu.Unlock()
	if old != nil {
		old.cancel()
	}
	return rb
}

func (s *Service) releaseRunner(id int64, rb *runningBatch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running[id] == rb {
		delete(s.running, id)
	}
}

// stopRunner cancels this process's runner of batch id, if any (before an operator's settle).
func (s *Service) stopRunner(id int64) {
	s.mu.Lock()
	rb := s.running[id]
	s.mu.Unlock()
	if rb != nil {
		rb.cancel()
	}
}

// handOff gives batch id to the worker pool. A rejected hand-off leaves the batch RUNNING —
// visible, its members BATCHED — and cuts its lease short, so the next sweep on any instance
// takes it over instead of waiting out a lease nobody renews. restartStuck: an operator resumed
// the batch, so a head pipeline still running is taken as stuck and replaced (see run.pipeline).
func (s *Service) handOff(ctx context.Context, b store.Batch, restartStuck bool) error {
	var err error
	if s.pool == nil {
		err = errors.New("no worker pool")
	} else {
		err = s.pool.Submit(fmt.Sprintf("batch-%d", b.ID), func(ctx context.Context) { s.run(ctx, b.ID, restartStuck) })
	}
	if err == nil {
		return nil
	}
	s.rec.Inc("bindery_batch_handoffs_rejected_total", "project", b.Project)
	if lerr := s.db.RenewBatchLease(context.WithoutCancel(ctx), b.ID, s.instance, time.Microsecond); lerr != nil {
		s.log.Warn("rejected batch keeps its lease until it expires", "batch", b.ID, "error", lerr)
	}
	return fmt.Errorf("hand batch %d to the workers: %w", b.ID, err)
}

// RenderChange renders what request op changes in the repository: ADD creates the binding's
// file (subject, target, operationId, reason, requested time and — with a ttl — the nominal
// expiry, the request time plus the ttl; the binding's own expiry is set when it is validated),
// DELETE removes it (the close phase). An error wraps change.ErrInvalidChange: the same request
// renders the same way every time.
func RenderChange(t config.Target, op store.Operation, a store.Action) (change.FileAction, error) {
	switch a {
	case store.ActionAdd:
		f := change.BindingFile{Subject: op.SubjectID, OperationID: op.OperationID, Reason: op.Reason, RequestedAt: op.CreatedAt}
		if t.TTL > 0 {
			e := op.CreatedAt.Add(t.TTL)
			f.ExpiresAt = &e
		}
		path, content, err := change.RenderFile(t, f)
		if err != nil {
			return change.FileAction{}, err
		}
		return change.FileAction{Action: "create", Path: path, Content: string(content), OperationID: op.OperationID}, nil
	case store.ActionDelete:
		path, err := change.RenderPath(t, op.SubjectID)
		if err != nil {
			return change.FileAction{}, err
		}
		return change.FileAction{Action: "delete", Path: path, OperationID: op.OperationID}, nil
	}
	return change.FileAction{}, fmt.Errorf("%w: unknown action %q", change.ErrInvalidChange, a)
}

// Admission renders and validates request op's change for its partition's waiting set (SPEC
// §12.3): the workflow calls it when a request is approved (ADD) or its close phase starts
// (DELETE), and on an error — which wraps change.ErrInvalidChange — fails the request with
// CREATE_INVALID instead of admitting it. The admission carries the change as validated, so the
// batch commits exactly that, even if the target leaves the catalog meanwhile (SPEC §4.1).
func Admission(t config.Target, op store.Operation, a store.Action) (store.Admission, error) {
	fa, err := RenderChange(t, op, a)
	if err != nil {
		return store.Admission{}, err
	}
	if err := change.ValidateBatch([]change.FileAction{fa}); err != nil {
		return store.Admission{}, err
	}
	return store.Admission{OperationID: op.OperationID, Action: a, Partition: t.Project,
		Change: store.AdmittedChange{Branch: t.Branch, Path: fa.Path, Content: fa.Content}}, nil
}
