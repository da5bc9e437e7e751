package store

import (
	"bindery/internal/vocab/state"
	"context"
	"errors"
	"fmt"
)

// The batch runner's writes: each step of a running batch is one transaction whose first
// statement is the guarded batch write (I6 on the batch's version), so a runner whose batch was
// taken over, resumed elsewhere or settled fails at once and changes no member.

// MemberMove is one bulk transition of some of a batch's members: those the batch holds,
// narrowed to Action when set and to OperationIDs when not nil, whose status is one of
// Change.From (the others are left alone).
type MemberMove struct {
	Action       state.Action
	OperationIDs []string
	Change       MemberChange
}

func checkMoves(moves []MemberMove) error {
	for _, m := range moves {
		if err := m.Change.Check(); err != nil {
			return err
		}
	}
	return nil
}

// moveMembers applies moves to the members held (read in this transaction), one transitionMany
// per move: statements per 500 members, never per member.
func (tx *Tx) moveMembers(ctx context.Context, held []Member, moves []MemberMove, batchID int64) ([]Operation, error) {
	var out []Operation
	for _, m := range moves {
		named := setOf(m.OperationIDs)
		var ids []string
		for _, h := range held {
			if (m.Action == "" || h.Action == m.Action) && (m.OperationIDs == nil || named[h.OperationID]) {
				ids = append(ids, h.OperationID)
			}
		}
		if len(ids) == 0 {
			continue
		}
		flipped, err := tx.transitionMany(ctx, ids, m.Change, batchID, "")
		if err != nil {
			return nil, err
		}
		out = append(out, flipped...)
	}
	return out, nil
}

func setOf(xs []string) map[string]bool {
	out := make(map[string]bool, len(xs))
	for _, x := range xs {
		out[x] = true
	}
	return out
}

// BatchStep is one progress write of a batch runner, atomic: the batch's own change, members
// leaving the batch, and member transitions.
type BatchStep struct {
	Batch  Batch // as read: its version is the guard
	Change BatchChange
	// Requeue returns these members to the waiting set: their rows lose the batch and keep their
	// created_at (and a suspect group they came from), so they keep their place in line.
	Requeue []string
	// Bisect makes the Requeue rows the half a bisection returns (docs/workflow.md, 'Bisection'):
	// the batch counts one more bisection and the rows become one suspect group, which the claim
	// takes alone before any other waiting row of the partition (Claim).
	Bisect bool
	// Drop removes these members from the waiting set: they failed on their own (their file
	// could not be rendered) and the batch goes on without them.
	Drop  []string
	Moves []MemberMove
}

// AdvanceBatch is DB.AdvanceBatch inside the transaction (after the fenced write of the batch's
// task, when a step of the engine writes it).
func (tx *Tx) advanceBatch(ctx context.Context, s BatchStep) (Batch, []Operation, error) {
	db := tx.db
	if s.Bisect && len(s.Requeue) == 0 {
		return Batch{}, nil, fmt.Errorf("bisect batch %d: no member returned", s.Batch.ID)
	}
	q, args, err := db.batchUpdate(s.Batch, s.Change, s.Bisect)
	if err != nil {
		return Batch{}, nil, err
	}
	if err := checkMoves(s.Moves); err != nil {
		return Batch{}, nil, err
	}
	id := s.Batch.ID
	res, err := tx.tx.ExecContext(ctx, q, args...)
	if err := requireOne(res, err, "advance batch %d", id); err != nil {
		return Batch{}, nil, err
	}
	if s.Change.ToEnd {
		if err := tx.toEnd(ctx, s.Batch.Partition, id, s.Change.Behind); err != nil {
			return Batch{}, nil, err
		}
	}
	if s.Change.Beside > 0 && s.Batch.SlotNo >= 0 && s.Bisect {
		if err := tx.toBeside(ctx, s.Batch.Partition, id, s.Change.Beside); err != nil {
			return Batch{}, nil, fmt.Errorf("move batch %d beside its train: %w", id, err)
		}
	}
	var moved []Operation
	var held []Member
	if len(s.Requeue)+len(s.Drop)+len(s.Moves) > 0 || opens(s.Batch, s.Change) {
		if held, err = holding(ctx, tx.tx, id); err != nil {
			return Batch{}, nil, err
		}
	}
	if len(s.Requeue)+len(s.Drop)+len(s.Moves) > 0 {
		requeue, args := "UPDATE "+db.hinted("merge_batch_request", "PRIMARY")+" SET batch_id = NULL", []any(nil)
		if s.Bisect {
			// The group: the bisection's first batch and this round of it (the batch as read
			// counted the rounds before this one; the guarded write above made this one count).
			requeue += ", suspect_of = ?, suspect_round = ?"
			args = []any{s.Batch.BisectionRoot(), s.Batch.Bisections + 1}
		}
		back, err := tx.detach(ctx, id, held, s.Requeue, requeue, args...)
		if err != nil {
			return Batch{}, nil, fmt.Errorf("requeue members of batch %d: %w", id, err)
		}
		if err := tx.dropMootFileWrites(ctx, back); err != nil {
			return Batch{}, nil, err
		}
		if _, err := tx.detach(ctx, id, held, s.Drop, db.deleteFrom("merge_batch_request", "PRIMARY")); err != nil {
			return Batch{}, nil, fmt.Errorf("drop members of batch %d: %w", id, err)
		}
		if moved, err = tx.moveMembers(ctx, held, s.Moves, id); err != nil {
			return Batch{}, nil, err
		}
	}
	b, err := tx.Batch(ctx, id)
	if err != nil {
		return Batch{}, nil, err
	}
	left := setOf(append(append([]string{}, s.Requeue...), s.Drop...))
	var kept []Member
	for _, m := range held {
		if !left[m.OperationID] {
			kept = append(kept, m)
		}
	}
	evs, err := tx.batchEvents(ctx, s.Batch, b, s.Change, kept)
	if err == nil {
		_, err = tx.insertEvents(ctx, evs, true)
	}
	return b, moved, err
}

// opens reports a write that records a new merge request of the batch.
func opens(cur Batch, c BatchChange) bool { return c.MRIID != 0 && c.MRIID != cur.MRIID }

// batchEvents is the news of one write of a batch (cur as read, b as written): it stopped for a
// person (batch.blocked, operators), its merge request opened with the members it holds
// (batch.opened) or a bisection isolated its culprit (batch.culprit) — the last two for the
// merge request's note.
func (tx *Tx) batchEvents(ctx context.Context, cur, b Batch, c BatchChange, held []Member) ([]Event, error) {
	base := EventFacts{Project: b.Project, BatchID: b.ID, MRIID: b.MRIID, PipelineID: b.PipelineID}
	var out []Event
	if b.Status == state.BatchBlocked && cur.Status != state.BatchBlocked {
		f := base
		f.Why = c.Note
		out = append(out, Event{Type: state.EventBatchBlocked, BatchID: b.ID, Facts: f})
	}
	if opens(cur, c) {
		f := base
		for _, m := range held {
			f.Members = append(f.Members, m.OperationID)
		}
		out = append(out, Event{Type: state.EventBatchOpened, BatchID: b.ID, Facts: f})
	}
	if c.Culprit != nil && *c.Culprit != "" && *c.Culprit != cur.Culprit {
		f := base
		f.Culprit, f.RootBatch, f.Bisections, f.Why = *c.Culprit, b.BisectionRoot(), b.Bisections, c.Note
		if f.RootBatch != b.ID {
			root, err := tx.Batch(ctx, f.RootBatch)
			if err != nil && !errors.Is(err, ErrNotFound) {
				return nil, err
			}
			f.RootMRIID = root.MRIID
		} else {
			f.RootMRIID = b.MRIID
		}
		out = append(out, Event{Type: state.EventBatchCulprit, BatchID: b.ID, Facts: f})
	}
	return out, nil
}

// detach runs stmt (an UPDATE … SET or a DELETE FROM of merge_batch_request) on the rows of the
// given members of the batch, by primary key, a chunk per statement; every one must be held.
// args are stmt's own (its SET list's). The rows it ran on. A batch holds one row per operation
// (batch.Claim takes no operation twice).
func (tx *Tx) detach(ctx context.Context, batchID int64, held []Member, operationIDs []string, stmt string, args ...any) ([]int64, error) {
	row := make(map[string]int64, len(held))
	for _, m := range held {
		row[m.OperationID] = m.RequestID
	}
	var rows []int64
	for _, op := range operationIDs {
		id, ok := row[op]
		if !ok {
			return nil, fmt.Errorf("%s is not held by the batch: %w", op, ErrPreempted)
		}
		rows = append(rows, id)
	}
	for _, chunk := range chunks(rows, maxInList) {
		all := append(append(append([]any{}, args...), batchID), anys(chunk)...)
		res, err := tx.tx.ExecContext(ctx, stmt+" WHERE batch_id = ? AND id IN "+inList(len(chunk)), all...)
		if err := requireN(res, err, len(chunk), "%d rows", len(chunk)); err != nil {
			return nil, err
		}
	}
	return rows, nil
}
