package batch

import (
	"context"
	"errors"
	"fmt"

	"bindery/store"
)

// Settle settles a batch now (operator): close its MR if open and re-read it — merged wins
// (members MERGED / CLOSED for deletes, batch SUCCEEDED); otherwise FAILED with the members
// moved to their failure states and their processing rows removed in the same transaction.
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
	return s.settle(ctx, b, failedCreate.with("settled by "+actor))
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
// starts from the remote state — a pipeline that finished meanwhile counts. A rejected hand-off
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
	b, _, err = s.db.AdvanceBatch(ctx, store.BatchStep{Batch: b,
		Change: store.BatchChange{Status: store.BatchRunning, Owner: s.instance, Lease: s.cfg.Current().BatchLeaseTTL(), Note: note},
		Moves:  moves,
	})
	if err != nil {
		return fmt.Errorf("resume batch %d: %w", batchID, err)
	}
	return s.handOff(ctx, b)
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
		case taken.Status == store.BatchBlocked:
			err = s.settle(ctx, taken, failedCreate.with(fmt.Sprintf("BLOCKED for longer than batch.blockedTimeout (%s); settled by the sweep", snap.BatchBlockedTimeout())))
		case now.Sub(taken.CreatedAt) > snap.BatchBlockedTimeout():
			err = s.settle(ctx, taken, failedCreate.with(fmt.Sprintf("still not finished after batch.blockedTimeout (%s); settled by the sweep", snap.BatchBlockedTimeout())))
		default:
			s.log.InfoContext(ctx, "batch taken over after its lease expired; resuming", "batch", b.ID, "previous", b.LeaseOwner)
			err = s.handOff(ctx, taken)
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
