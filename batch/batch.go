// Package batch runs the approval-first flow's batches: rounds per partition (cron on every
// instance and the operators' trigger run the same code), the claim through the store, and the
// batch's steps as tasks of the engine (package engine): the members' file actions through one
// MR (package change), progress recorded with bulk member transitions, settlement (write-ahead),
// bisection of a deterministically failing batch.
//
// Every write of a step is fenced twice: by the task's epoch (the engine), then by the batch's own
// guarded write (its version): a step whose batch was resumed, settled or taken over elsewhere
// fails its write and changes no member. No step waits for GitLab inside a worker: a pipeline or
// a rebase is looked at once per run, and the task is due again for the next look.
package batch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"bindery/internal/platform/config"
	"bindery/internal/platform/metric"
	"bindery/internal/vocab/state"
	"bindery/internal/work/change"
	"bindery/internal/work/engine"
	"bindery/store"
)

// Outcome is what one partition's round did.
type Outcome struct {
	Partition string
	Result    state.RoundOutcome // CLAIMED, SLOT_OCCUPIED, NOTHING_WAITING, NOT_DUE
	BatchID   int64              // set when CLAIMED
	Claimed   int                // members claimed
	Err       error              // the round failed for this partition (others still ran)
}

// Options wire a Service.
type Options struct {
	DB       *store.DB
	Config   *config.Source
	Change   *change.Runner
	Engine   *engine.Engine // runs the batches' tasks; New registers the batch kind on it
	Log      *slog.Logger
	Recorder *metric.Recorder // nil: no metrics
}

// Service runs rounds, the batches' steps and the operators' actions on batches. Safe for
// concurrent use; every instance of the product has one.
type Service struct {
	db     *store.DB
	cfg    *config.Source
	mr     *change.Lifecycle
	engine *engine.Engine
	log    *slog.Logger
	rec    *metric.Recorder
	rows   []stepRow // the step table (steps)
	// afterMerge runs after the commit of a batch's merge (AfterMerge; nil: nothing).
	afterMerge func(ctx context.Context, project string, mrIID int64)
}

// AfterMerge sets what runs after the commit that records a batch's merge: the workflow replays
// a deploy callback that arrived before it (a quick deploy pipeline beats the merge's own write;
// the callback's own look may have read before this commit). Set before the engine starts.
func (s *Service) AfterMerge(f func(ctx context.Context, project string, mrIID int64)) {
	s.afterMerge = f
}

// Errors of the operator calls (the workflow maps them to API codes).
var (
	// ErrSettled: the batch is SUCCEEDED or FAILED already; there is nothing to resume or settle.
	ErrSettled = errors.New("batch is already settled")
	// ErrBusy: a step of the batch is running right now (an action of a few seconds at most);
	// an operator's action would race it. Try again in a moment.
	ErrBusy = errors.New("a step of the batch is running right now")
)

// New returns a Service and registers the batch kind on o.Engine.
func New(o Options) *Service {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	s := &Service{db: o.DB, cfg: o.Config, mr: &change.Lifecycle{Runner: o.Change, Config: o.Config}, engine: o.Engine,
		log: o.Log.With("component", "batch"), rec: o.Recorder}
	s.rows = s.steps()
	o.Engine.Register(s.def().Kind())
	return s
}

// Wake tells the batch whose MR is (project, mrIID) that GitLab reported news — a pipeline
// finished, the MR was merged or closed — so its next look happens now, on whichever instance
// claims it. Unknown MRs are ignored: a webhook is only a hint.
func (s *Service) Wake(ctx context.Context, project string, mrIID int64) (int, error) {
	id, err := s.db.ActiveBatchByMR(ctx, project, mrIID)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n, err := s.db.WakeTasks(ctx, []store.TaskRef{{Kind: state.TaskBatch, Ref: ref(id)}})
	if n > 0 {
		s.engine.Nudge(engine.LaneBackground)
	}
	return n, err
}

func ref(id int64) string { return strconv.FormatInt(id, 10) }

// short is poll.short, the pause between two actions that need a moment (GitLab merging).
func (s *Service) short() time.Duration {
	short, _, _, _ := s.cfg.Current().PollStages()
	return short
}

// task is a batch's task at step, due now.
func (s *Service) task(id int64, step Step, m memo) store.TaskSpec {
	return s.def().Spec(ref(id), step, 0, m)
}

// outside runs an operator's write to batch b (read by the caller) with its task put back to
// step in the same transaction, unless a step of the batch runs right now (ErrBusy): the
// reschedule bumps the task's epoch, so a run that started before fails its writes.
func (s *Service) outside(ctx context.Context, b store.Batch, step Step, m memo, c store.BatchChange, moves []store.MemberMove) error {
	err := s.db.InTx(ctx, func(tx *store.Tx) error {
		if err := tx.PutTask(ctx, s.task(b.ID, step, m), true); err != nil {
			return err
		}
		_, _, err := tx.AdvanceBatch(ctx, store.BatchStep{Batch: b, Change: c, Moves: moves})
		return err
	})
	if errors.Is(err, store.ErrTaskBusy) || errors.Is(err, store.ErrRetry) {
		// A deadlock here is the database choosing this write over a step of the batch's
		// running at the same moment: the same answer as a claimed task.
		return fmt.Errorf("batch %d: %w: %w", b.ID, ErrBusy, err)
	}
	if err != nil {
		return err
	}
	s.engine.Nudge(engine.LaneBackground)
	return nil
}

// TargetOf is the target request op was accepted for: the definition recorded with it at its
// application (Operation.TargetDef) — so a target that left the catalog, or changed, since goes on
// unchanged for the requests already accepted (docs/workflow.md, 'Targets and the file change') —
// or, for a request accepted before definitions were recorded (or one whose record does not
// read), the catalog's. false: neither knows it.
func TargetOf(snap *config.Snapshot, op store.Operation) (config.Target, bool) {
	if op.TargetDef != "" {
		var t config.Target
		if err := json.Unmarshal([]byte(op.TargetDef), &t); err == nil && t.Key == op.TargetKey && t.Project != "" {
			return t, true
		}
	}
	return snap.Target(op.TargetKey)
}

// TargetDef is t as an application records it (store.Application.TargetDef; read by TargetOf).
func TargetDef(t config.Target) string {
	b, err := json.Marshal(t)
	if err != nil {
		return "" // a plain struct of strings and a duration: never; the catalog is read then
	}
	return string(b)
}

// RenderChange renders what request op changes in the repository: ADD creates the binding's
// file (subject, target, operationId, reason, requested time and — with a ttl — the nominal
// expiry, the request time plus the ttl, or the latest renewal's once one rewrote the file; the
// binding's own expiry is set when it is validated), DELETE removes it (the close phase); RESTORE,
// REWRITE and RENEW write it again while the binding stays in effect. An error wraps change.ErrInvalidChange: the same request
// renders the same way every time.
func RenderChange(t config.Target, op store.Operation, a state.Action) (change.FileAction, error) {
	switch a {
	case state.ActionRestore, state.ActionRewrite, state.ActionRenew:
		// A drift repair writes the file again as bindery holds it; a renewal rewrites it with its
		// new expiry (op.FileExpiresAt, recorded with the renewal).
		fa, err := RenderChange(t, op, state.ActionAdd)
		if a != state.ActionRestore {
			fa.Action = "update"
		}
		return fa, err
	case state.ActionAdd:
		f := change.BindingFile{Subject: op.SubjectID, OperationID: op.OperationID, Reason: op.Reason, RequestedAt: op.CreatedAt}
		if t.TTL > 0 {
			e := op.CreatedAt.Add(t.TTL)
			if op.FileExpiresAt != nil {
				e = *op.FileExpiresAt
			}
			f.ExpiresAt = &e
		}
		path, content, err := change.RenderFile(t, f)
		if err != nil {
			return change.FileAction{}, err
		}
		return change.FileAction{Action: "create", Path: path, Content: string(content), OperationID: op.OperationID}, nil
	case state.ActionDelete:
		path, err := change.RenderPath(t, op.SubjectID)
		if err != nil {
			return change.FileAction{}, err
		}
		return change.FileAction{Action: "delete", Path: path, OperationID: op.OperationID}, nil
	}
	return change.FileAction{}, fmt.Errorf("%w: unknown action %q", change.ErrInvalidChange, a)
}

// Admission renders and validates request op's change for its partition's waiting set
// (docs/workflow.md, 'Admission'): the workflow calls it when a request is approved (ADD) or its
// close phase starts (DELETE), and on an error — which wraps change.ErrInvalidChange — fails the
// request with CREATE_INVALID instead of admitting it. The admission carries the change as
// validated, so the batch commits exactly that, even if the target leaves the catalog meanwhile
// (docs/workflow.md, 'Targets and the file change').
func Admission(t config.Target, op store.Operation, a state.Action) (store.Admission, error) {
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
