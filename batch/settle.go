package batch

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"bindery/internal/remote/gitlab"
	"bindery/internal/vocab/state"
	"bindery/store"
)

// Settle settles a batch (operator): its failure — "settled by <actor>", or the one decided
// already if its settlement was under way — is recorded on the batch before anything is done
// about it (write-ahead), and its settle step runs at once on any instance: close the MR if open
// and re-read it — merged wins (members MERGED / CLOSED for deletes, batch SUCCEEDED); otherwise
// FAILED with the members moved to their failure states and their processing rows removed in
// the same transaction. Unknown → store.ErrNotFound; already settled → ErrSettled; a step of the
// batch running right now → ErrBusy (try again in a moment); the batch changed between the read
// and the write → store.ErrPreempted.
func (s *Service) Settle(ctx context.Context, batchID int64, actor string) error {
	b, err := s.db.Batch(ctx, batchID)
	if err != nil {
		return err
	}
	if !b.Status.Active() {
		return fmt.Errorf("settle batch %d: %w", batchID, ErrSettled)
	}
	f := abandoned.With("settled by " + actor)
	if b.Failing != "" {
		// The failure was decided already (its settlement is under way): the members keep it,
		// with the operator who settles it now (not every operator who tried before).
		f = decodeFailure(b.Failing)
		f.Note, _, _ = strings.Cut(f.Note, settledBy)
		f.Note += settledBy + actor
	}
	enc := encodeFailure(f)
	return s.outside(ctx, b, stepSettle, memo{}, store.BatchChange{Failing: &enc, Note: "settling: " + f.Note}, nil)
}

// settledBy joins an operator's settlement to a decided failure's note.
const settledBy = "; settled by "

// PendingFailure is what a batch whose settlement is under way was decided to fail with (its
// merge_batch.failing, readable), "" when none.
func PendingFailure(b store.Batch) string {
	if b.Failing == "" {
		return ""
	}
	return decodeFailure(b.Failing).Note
}

// closeMR closes the batch's MR if open and reports whether it is merged, and which MR that is
// (change.Close: merge wins, locked is undecided). A batch without a recorded MR looks on its
// branch: an attempt whose answer was lost (or that crashed before recording it) may have
// created one — it is closed, or adopted when it merged. The branch is deleted either way.
func (s *Service) closeMR(ctx context.Context, b store.Batch) (merged bool, iid int64, err error) {
	iid = b.MRIID
	if iid == 0 {
		mrs, err := s.mr.GitLab.MergeRequestsBySource(ctx, b.Project, branchName(b.ID))
		if err != nil {
			return false, 0, fmt.Errorf("look for an unrecorded MR of batch %d: %w", b.ID, err)
		}
		for _, mr := range mrs {
			if mr.Merged() || mr.Open() {
				iid = mr.IID
				break
			}
		}
		if iid == 0 {
			// Without an MR the branch can never be merged; a leftover only costs storage.
			if err := s.mr.GitLab.DeleteBranch(ctx, b.Project, branchName(b.ID)); err != nil && !errors.Is(err, gitlab.ErrNotFound) {
				s.log.Info("the branch of a batch without MR was not deleted", "batch", b.ID, "error", err)
			}
			return false, 0, nil
		}
		s.log.Warn("found an MR the batch never recorded", "batch", b.ID, "mr", iid)
	}
	merged, err = s.mr.Close(ctx, b.Project, iid)
	return merged, iid, err
}

// Resume runs a RUNNING or BLOCKED batch again from the remote state (an operator's retry): a
// BLOCKED batch's members go back to their in-progress steps, a failure decided but not yet
// carried out is dropped (the batch decides again), and its open step runs at once on any
// instance — a pipeline that finished meanwhile counts, one still running is replaced by a new
// pipeline on the same commit (it may never end). Unknown → store.ErrNotFound; settled →
// ErrSettled; a step of the batch running right now → ErrBusy.
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
	if b.Status == state.BatchBlocked {
		note = "resumed by an operator"
		moves = resumed(note)
	}
	none := ""
	err = s.outside(ctx, b, stepOpen, memo{Restart: true},
		store.BatchChange{Status: state.BatchRunning, Note: note, Failing: &none, LastError: &none, Culprit: &none}, moves)
	if err != nil {
		return fmt.Errorf("resume batch %d: %w", batchID, err)
	}
	return nil
}
