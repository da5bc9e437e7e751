package batch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"bindery/outbound"
	"bindery/store"
)

// Settle settles a batch now (operator): close its MR if open and re-read it — merged wins
// (members MERGED / CLOSED for deletes, batch SUCCEEDED); otherwise FAILED with the members
// moved to their failure states (the decided one of a batch whose settlement failed before)
// and their processing rows removed in the same transaction. A settlement that fails is
// recorded on the batch for the sweep to finish.
// A runner of the batch in this process is stopped first; one on another instance fails its
// next guarded write. Two settlers at once: one wins, the other gets store.ErrPreempted.
// Unknown → store.ErrNotFound; already settled → ErrSettled.
func (s *Service) Settle(ctx context.Context, batchID int64, actor string) error {
	b, err := s.db.Batch(ctx, batchID)
	if err != nil {
		return err
	}
	if !b.Status.Active() {
		return fmt.Errorf("settle batch %d: %w", batchID, ErrSettled)
	}
	s.stopRunner(batchID)
	f := failedCreate.with("settled by " + actor)
	if b.Failing != "" {
		// The failure was decided already (only its settlement failed): the members keep it,
		// with the operator who settles it now (not every operator who tried before).
		f = decodeFailure(b.Failing)
		f.note, _, _ = strings.Cut(f.note, settledBy)
		f.note += settledBy + actor
	}
	return s.settleOrRecord(ctx, b, f)
}

// settledBy joins an operator's settlement to a decided failure's note.
const settledBy = "; settled by "

// settleOrRecord settles batch b with f (settle); a settlement that fails other than by losing
// the batch to another holder is recorded on the batch for the sweep to finish (settlePending).
func (s *Service) settleOrRecord(ctx context.Context, b store.Batch, f failure) error {
	err := s.settle(ctx, b, f)
	if err != nil && !errors.Is(err, store.ErrPreempted) {
		s.settlePending(ctx, b, f, err)
	}
	return err
}

// publicError is what the ops console may show of a settlement's error: the classified cause of
// an outbound failure (never upstream text), or which dependency failed; the rest goes to the log.
func publicError(err error) string {
	var oe *outbound.Error
	switch {
	case errors.As(err, &oe):
		return oe.Error()
	case errors.Is(err, store.ErrRetry):
		return "database conflict (deadlock or busy)"
	case errors.As(err, new(dbError)):
		return "database error (details in the server log)"
	}
	return "unexpected error (details in the server log)"
}

// PendingFailure is what a batch whose settlement failed was decided to fail with (its
// merge_batch.failing, readable), "" when none.
func PendingFailure(b store.Batch) string {
	if b.Failing == "" {
		return ""
	}
	return decodeFailure(b.Failing).note
}

// settleRetryAfter is how long a batch whose settlement failed waits before any instance's
// sweep tries it again: a moment, so the next sweep does.
const settleRetryAfter = time.Millisecond

// errSettlePending is a settlement that failed and was recorded on the batch (settlePending):
// nothing more for the runner to do or log.
type errSettlePending struct{ err error }

func (e errSettlePending) Error() string { return "settlement pending: " + e.err.Error() }
func (e errSettlePending) Unwrap() error { return e.err }

// settlePending records on batch b that its failure f is decided but settling it failed (cause):
// the batch stays active, the ops console shows the failure and the last error, and the sweep of
// any instance settles it with f — it does not run the batch again. Not being able to record it
// either (the database is down) leaves the batch to its lease: the sweep then resumes it from
// the remote state, which decides the failure again.
func (s *Service) settlePending(ctx context.Context, b store.Batch, f failure, cause error) {
	enc, msg := f.encode(), publicError(cause)
	note := fmt.Sprintf("failed (%s), but settling it did not go through: %s; the sweep retries", f.note, msg)
	s.rec.Inc("bindery_batch_settle_failures_total", "project", b.Project)
	_, _, err := s.db.AdvanceBatch(context.WithoutCancel(ctx), store.BatchStep{Batch: b, Change: store.BatchChange{
		Failing: &enc, LastError: &msg, Note: note, Lease: settleRetryAfter,
	}})
	switch {
	case err == nil:
		s.log.Warn("batch settlement failed; recorded on the batch, the sweep retries it", "batch", b.ID, "failure", f.note, "error", cause)
	case errors.Is(err, store.ErrPreempted):
		s.log.Info("batch moved on elsewhere while its settlement failed", "batch", b.ID, "error", cause)
	default:
		s.log.Error("batch settlement failed and could not be recorded; the sweep resumes the batch after its lease", "batch", b.ID, "error", cause, "record", err)
	}
}

// settle ends batch b (SPEC §4 settlement): if its MR is still open, close it, then read it
// again — merged means the batch succeeded (the merge wins the race with the close); closed or
// no MR → FAILED with f, the members' processing rows removed in the same transaction.
func (s *Service) settle(ctx context.Context, b store.Batch, f failure) error {
	wasMerged, err := s.closeMR(ctx, b)
	if err != nil {
		return fmt.Errorf("settle batch %d: %w", b.ID, err)
	}
	if wasMerged {
		note := fmt.Sprintf("MR !%d turned out merged: the merge wins over the close", b.MRIID)
		return s.settleAs(ctx, b, store.BatchSucceeded, note, merged(b.MRIID, note))
	}
	return s.settleAs(ctx, b, store.BatchFailed, f.note, f.moves(nil))
}

// closeMR closes the batch's MR if open and reports whether it is merged.
func (s *Service) closeMR(ctx context.Context, b store.Batch) (bool, error) {
	if b.MRIID == 0 {
		// No MR recorded. An attempt that crashed between creating the MR and recording it may
		// have left one; without its branch it can never be merged. Best effort.
		_ = s.change.GitLab.DeleteBranch(ctx, b.Project, branchName(b.ID))
		return false, nil
	}
	return s.change.Close(ctx, b.Project, b.MRIID)
}

// settleAs writes the settlement — the guarded batch write first, so a second settler fails at
// once — and emits the outcome after the commit.
func (s *Service) settleAs(ctx context.Context, b store.Batch, status store.BatchStatus, note string, moves []store.MemberMove) error {
	res, err := s.db.Settle(ctx, store.Settlement{BatchID: b.ID, Version: b.Version, Status: status, Note: note, Moves: moves})
	if err != nil {
		return dbError{fmt.Errorf("settle batch %d: %w", b.ID, err)}
	}
	s.rec.Inc("bindery_batches_settled_total", "project", b.Project, "status", string(status))
	s.log.Info("batch settled", "batch", b.ID, "status", status, "members", len(res.Members), "moved", len(res.Flipped), "note", note)
	return nil
}

// Resume hands a RUNNING or BLOCKED batch to the pool again (operator retry; also after a
// crash): this instance takes the lease whatever its expiry (the version bump fences a previous
// holder out), a BLOCKED batch's members go back to their in-progress steps, and the runner
// starts from the remote state — a pipeline that finished meanwhile counts, and one still
// running is replaced by a new pipeline on the same commit (it may never end). A rejected hand-off
// is returned (wrapping worker.ErrPoolFull / ErrPoolStopped) and leaves the batch to the sweep.
func (s *Service) Resume(ctx context.Context, batchID int64) error {
	b, err := s.db.Batch(ctx, batchID)
	if err != nil {
		return err
	}
	if !b.Status.Active() {
		return fmt.Errorf("resume batch %d: %w", batchID, ErrSettled)
	}
	var moves []store.MemberMove
	note := "resumed"
	if b.Status == store.BatchBlocked {
		note = "resumed by an operator"
		moves = resumed(note)
	}
	// An operator's resume overrides a pending failed settlement: the runner decides again.
	none := ""
	b, _, err = s.db.AdvanceBatch(ctx, store.BatchStep{Batch: b,
		Change: store.BatchChange{Status: store.BatchRunning, Owner: s.instance, Lease: s.cfg.Current().BatchLeaseTTL(), Note: note, Failing: &none, LastError: &none},
		Moves:  moves,
	})
	if err != nil {
		return fmt.Errorf("resume batch %d: %w", batchID, err)
	}
	return s.handOff(ctx, b, true)
}

// sweepLimit bounds the batches one sweep handles (the next sweep takes the rest).
const sweepLimit = 100

// Sweep takes over RUNNING batches whose lease expired (any instance, guarded) and resumes them
// from the remote state, and settles BLOCKED batches older than batch.blockedTimeout (their
// lease is that window). A RUNNING batch created longer than batch.blockedTimeout ago is
// settled instead of resumed: nothing stays in progress forever. Every instance may sweep at
// once: the takeover is guarded on the version read, so each batch goes to one sweeper. It
// returns the number of batches taken over.
func (s *Service) Sweep(ctx context.Context) (int, error) {
	expired, err := s.db.ExpiredBatches(ctx, sweepLimit)
	if err != nil {
		return 0, fmt.Errorf("batch sweep: %w", err)
	}
	if len(expired) == 0 {
		return 0, nil
	}
	now, err := s.db.Now(ctx)
	if err != nil {
		return 0, fmt.Errorf("batch sweep: %w", err)
	}
	snap := s.cfg.Current()
	n := 0
	var errs []error
	for _, b := range expired {
		taken, err := s.db.TakeOverBatch(ctx, b, s.instance, snap.BatchLeaseTTL())
		if errors.Is(err, store.ErrPreempted) {
			continue // another sweeper, or the holder came back
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		n++
		switch {
		case taken.Failing != "":
			// Decided already; only its settlement failed. Settled as decided, not run again.
			err = s.settleOrRecord(ctx, taken, decodeFailure(taken.Failing))
		case taken.Status == store.BatchBlocked:
			err = s.settleOrRecord(ctx, taken, failedCreate.with(fmt.Sprintf("BLOCKED for longer than batch.blockedTimeout (%s); settled by the sweep", snap.BatchBlockedTimeout())))
		case now.Sub(taken.CreatedAt) > snap.BatchBlockedTimeout():
			err = s.settleOrRecord(ctx, taken, failedCreate.with(fmt.Sprintf("still not finished after batch.blockedTimeout (%s); settled by the sweep", snap.BatchBlockedTimeout())))
		default:
			s.log.InfoContext(ctx, "batch taken over after its lease expired; resuming", "batch", b.ID, "previous", b.LeaseOwner)
			err = s.handOff(ctx, taken, false)
		}
		switch {
		case errors.Is(err, store.ErrPreempted):
			// An operator or another instance moved the batch on after this sweep took it over
			// (settled it, resumed it): the batch is in hands, nothing failed.
			s.log.InfoContext(ctx, "swept batch moved on elsewhere; this sweep leaves it", "batch", b.ID, "error", err)
		case err != nil:
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}
