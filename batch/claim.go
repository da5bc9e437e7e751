package batch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"bindery/internal/vocab/state"
	"bindery/store"
)

// errNothingToClaim rolls the claim transaction back when the reads found nothing, so that no
// empty batch keeps the place it took.
var errNothingToClaim = errors.New("nothing to claim")

// Claim runs one batch round for a partition (docs/invariants.md, 'The claim'). Concurrent rounds
// — cron on every instance, a manual trigger — are safe: at most in.Train active batches ("cars")
// per partition in its train and in.Beside beside it, each behind the last one (I1), a request in
// at most one batch (I2), and enqueues never wait for a claim (I3). The store offers the
// statements; what to take and where it goes is decided here.
//
// The statements, in order: a lock-free pre-check outside the transaction (nothing waiting → end
// the round without touching the train); the end of the train read with a lock on it (claims of
// one partition go one after another; store.Tx.LastCar) and the active cars' slots (a full train →
// SLOT_OCCUPIED); the batch insert behind the last car, in a free slot, whose unique keys are the
// mutual exclusion (taken → SLOT_OCCUPIED); plain reads of the requests an operator sent in the
// next car, else of one suspect group (the half of a bisected batch, see suspects) — found, the
// batch takes only its rows and records the bisection it continues — and of up to Max waiting
// rows created before the database's now, in (created_at, id) order; nothing read → roll back,
// releasing the place; the guarded update by primary key, which must change exactly the rows
// read; the member history as multi-row inserts; with in.Members, the members' transition.
// Statements per round: 8 + 2 per 500 members (+ 4 per 500 with in.Members, + 1 continuing a
// bisection), whatever the waiting set.
func Claim(ctx context.Context, db *store.DB, in store.ClaimInput) (store.BatchClaim, error) {
	if in.Max <= 0 || in.Partition == "" {
		return store.BatchClaim{}, fmt.Errorf("claim %q: max %d: want a partition and a positive maximum", in.Partition, in.Max)
	}
	if in.Members != nil {
		if err := in.Members.Check(); err != nil {
			return store.BatchClaim{}, err
		}
	}
	waits, err := db.AnyWaiting(ctx, in.Partition)
	if err != nil {
		return store.BatchClaim{}, err
	}
	if !waits {
		return store.BatchClaim{Outcome: state.RoundNothingWaiting}, nil
	}
	var out store.BatchClaim
	err = db.InTx(ctx, func(tx *store.Tx) error {
		var err error
		out, err = claim(ctx, tx, in)
		return err
	})
	switch {
	case errors.Is(err, store.ErrSlotOccupied), errors.Is(err, store.ErrRetry):
		// A deadlock victim among claimers of one partition: another claim is making the car
		// (nothing was written; the next round looks again).
		return store.BatchClaim{Outcome: state.RoundSlotOccupied}, nil
	case errors.Is(err, errNothingToClaim):
		return store.BatchClaim{Outcome: state.RoundNothingWaiting}, nil
	case err != nil:
		return store.BatchClaim{}, fmt.Errorf("claim %s: %w", in.Partition, err)
	}
	return out, nil
}

// claim is the claim's transaction: the place, the car, what it takes, the guarded update.
func claim(ctx context.Context, tx *store.Tx, in store.ClaimInput) (store.BatchClaim, error) {
	p, beside, err := trainPlace(ctx, tx, in)
	if err != nil {
		return store.BatchClaim{}, err
	}
	car, err := tx.InsertCar(ctx, in.Partition, in.Project, p)
	if err != nil {
		return store.BatchClaim{}, err
	}
	members, group, err := take(ctx, tx, in, car.ID, beside)
	if err != nil {
		return store.BatchClaim{}, err
	}
	if len(members) == 0 {
		return store.BatchClaim{}, errNothingToClaim
	}
	if group.Of != 0 {
		// The batch goes on with the bisection its members come from: it counts its rounds on.
		if err := tx.RecordBisection(ctx, car.ID, group.Of, group.Round); err != nil {
			return store.BatchClaim{}, err
		}
		car.BisectOf, car.Bisections = group.Of, group.Round
	}
	if err := tx.ClaimRows(ctx, car.ID, members); err != nil {
		return store.BatchClaim{}, err
	}
	if in.Members != nil {
		if err := tx.TransitionClaimed(ctx, car.ID, members, *in.Members); err != nil {
			return store.BatchClaim{}, err
		}
	}
	if in.Task != nil {
		t := *in.Task
		t.Ref = strconv.FormatInt(car.ID, 10)
		if err := tx.InsertTask(ctx, t); err != nil {
			return store.BatchClaim{}, err
		}
	}
	return store.BatchClaim{Outcome: state.RoundClaimed, Batch: car, Members: members}, nil
}

// take reads what the new car takes, by plain reads (I3): the requests an operator sent in the
// next car first, then — when none — a suspect group alone, then newcomers in the order they came
// up to in.Max. A place beside the train is a suspect group's only. group is the bisection the
// members come from (zero: none).
func take(ctx context.Context, tx *store.Tx, in store.ClaimInput, batchID int64, beside bool) (members []store.Member, group store.Suspect, err error) {
	if !beside {
		if members, err = tx.ReadWaiting(ctx, in.Partition, batchID, store.SentNext, in.Max); err != nil {
			return nil, group, err
		}
	}
	if len(members) == 0 {
		if members, group, err = suspects(ctx, tx, in, batchID); err != nil {
			return nil, group, err
		}
	}
	if group.Of == 0 && !beside && len(members) < in.Max {
		// Newcomers fill the car; a suspect is never among them.
		more, err := tx.ReadWaiting(ctx, in.Partition, batchID, store.Newcomers, in.Max-len(members))
		if err != nil {
			return nil, group, err
		}
		members = append(members, more...)
	}
	members, moot := onePerOperation(members)
	if len(moot) > 0 {
		if err := tx.DropWaiting(ctx, moot); err != nil {
			return nil, group, err
		}
	}
	return members, group, nil
}

// onePerOperation keeps one row of each operation: a car changes a request's file once, and its
// members are named by operation. A write of a file (a renewal's, a restore's) read beside its
// binding's removal is moot — the removal deletes the file, and merged after it the write would
// put it back: the removal goes, the write leaves the waiting set (moot, its rows). Otherwise the
// first row goes and a second one (a later change of the same file) waits for a later car, so it
// merges after the first.
func onePerOperation(members []store.Member) (kept []store.Member, moot []int64) {
	removing := map[string]bool{}
	for _, m := range members {
		if m.Action == state.ActionDelete {
			removing[m.OperationID] = true
		}
	}
	seen := make(map[string]bool, len(members))
	for _, m := range members {
		switch {
		case m.Action.InEffect() && removing[m.OperationID]:
			moot = append(moot, m.RequestID)
		case !seen[m.OperationID]:
			seen[m.OperationID] = true
			kept = append(kept, m)
		}
	}
	return kept, moot
}

// suspects is one suspect group of the partition (up to in.Max of its rows), none when no suspect
// waits. A group is taken alone — only its members, never a newcomer beside them — so a culprit
// among them fails nothing but its own half. The latest round's group comes first: a group
// returned earlier was followed by a bisection of the half kept with it, which fails only when
// the culprit is there, so the group returned last is where the search goes on (depth first);
// the earlier groups, then most likely innocent, are taken after it.
func suspects(ctx context.Context, tx *store.Tx, in store.ClaimInput, batchID int64) ([]store.Member, store.Suspect, error) {
	read, err := tx.ReadSuspects(ctx, in.Partition, batchID, in.Max) // latest round first
	if err != nil || len(read) == 0 {
		return nil, store.Suspect{}, err
	}
	var out []store.Member
	for _, r := range read {
		if r.Of == read[0].Of && r.Round == read[0].Round {
			out = append(out, r.Member)
		}
	}
	return out, read[0], nil
}

// trainPlace is where a new car of in's partition goes: behind the last car (LastCar locks the
// partition's train, so claims of one partition go one after another), in a free slot;
// store.ErrSlotOccupied when the train already has in.Train active cars. The places beside the
// train are the slots below 0 (-1 … -in.Beside): a waiting suspect group takes one of them when
// one is free (beside), so a bisection never holds a place in the train. The unique keys of the
// insert that follows keep the shape whatever happens: two cars never share a place or a slot.
func trainPlace(ctx context.Context, tx *store.Tx, in store.ClaimInput) (p store.CarPlace, beside bool, err error) {
	p.K = max(in.Train, 1)
	last, err := tx.LastCar(ctx, in.Partition)
	if err != nil {
		return p, false, err
	}
	p.Seq = last + 1
	train, aside, err := tx.Places(ctx, in.Partition)
	if err != nil {
		return p, false, err
	}
	if len(aside) < in.Beside {
		waits, err := tx.SuspectWaits(ctx, in.Partition)
		if err != nil {
			return p, false, err
		}
		if waits {
			p.Slot = store.FreeBeside(aside)
			return p, true, nil
		}
	}
	if len(train) >= p.K {
		return p, false, store.ErrSlotOccupied
	}
	// Fewer than k slots are held, so one below k is free (after batch.train was lowered, a car
	// may hold one past the new length).
	for slices.Contains(train, p.Slot) {
		p.Slot++
	}
	return p, false, nil
}
