package batch

import (
	"context"
	"fmt"

	"bindery/internal/vocab/state"
	"bindery/internal/work/change"
	"bindery/internal/work/engine"
	"bindery/store"
)

// The merge train (docs/architecture.md, "The merge train"): up to batch.train batches ("cars")
// of a partition in CI at once. A car's branch is built on the head of the car ahead of it (the
// first car's on the target branch), so its pipeline tests exactly what the target holds once it
// merges; cars merge in order, each at the head its pipeline passed, and only when the target is
// what the car was built on — never an untested combination. What a car's steps ask of the train
// is here: what to build on, whether what it was built on still stands, whether a failure is its
// own, and whether it is its turn to merge.

// train is a car's view of its partition's train, as read at one step: the cars in it, without
// the cars tested beside it (store.Batch.Beside) but the car itself. A car beside the train is
// built on the car ahead of it like any car, but no car is built on it and none waits for it:
// a bisection's car is likely to fail again, and its
// failure then costs no car a rebuild. When it passes, whichever of it and the cars behind it
// merges second finds the target moved and is rebased and tested again before its merge.
type train struct {
	cars   []store.Batch // the cars in the train, in order (and the car, if it is beside it)
	ahead  *store.Batch  // the car directly ahead (nil: the car is first)
	beside bool          // the car is tested beside the train
}

func (r *run) train(ctx context.Context) (train, error) {
	all, err := r.s.db.Train(ctx, r.batch.Partition)
	if err != nil {
		return train{}, err
	}
	t := train{beside: r.batch.Beside()}
	for _, c := range all {
		if c.ID == r.batch.ID || !c.Beside() {
			t.cars = append(t.cars, c)
		}
	}
	if a, ok := store.Ahead(t.cars, r.batch); ok {
		t.ahead = &a
	}
	return t, nil
}

// behind reports whether a car follows b in the train (none is built on a car beside it).
func (t train) behind(b store.Batch) bool {
	if b.Beside() {
		return false
	}
	for i, c := range t.cars {
		if c.ID == b.ID {
			return i+1 < len(t.cars)
		}
	}
	return false
}

// atEnd is the train as it would be with b, a car beside it, at its end: behind the train's last
// car, or first in an empty train.
func (t train) atEnd(b store.Batch) train {
	out := train{}
	for i, c := range t.cars {
		if c.ID != b.ID {
			out.cars = append(out.cars, c)
			out.ahead = &t.cars[i]
		}
	}
	out.cars = append(out.cars, b)
	return out
}

// rejoin puts a car of a bisection whose pipeline passed beside the train into the train, at its
// end: a car beside the train merges by the train's rule — in the order the database gives the
// cars (its place at the end, taken under the lock on the end of the train), and only when the
// target is what its pipeline tested. Two cars beside the train never merge one over the other,
// and none merges beside the train and moves the target under the cars in CI behind it. When the
// car stands on what is at the end of the train now (the last car, or in an empty train the
// target it was built on), its passed pipeline counts there and it goes on to its approvals; the
// move is guarded on that last car, so a car that joined the end meanwhile makes it read the train
// again. Otherwise it is rebuilt at the end and tested there (its members' one more pipeline).
func (r *run) rejoin(ctx context.Context, t train, o change.Outcome, pipeline int64) error {
	b := r.batch
	at := t.atEnd(b)
	why, err := r.stale(ctx, at)
	if err != nil {
		return engine.Unavailable(err)
	}
	if why != "" {
		behind := "the target branch"
		if at.ahead != nil {
			behind = fmt.Sprintf("batch %d", at.ahead.ID)
		}
		note := fmt.Sprintf("%s beside the merge train; batch %d goes into the train at its end, behind %s, and is rebuilt and tested there before it merges (%s)", o.Note, b.ID, behind, why)
		return r.reopen(ctx, note, store.BatchChange{ToEnd: true, Rejoin: true})
	}
	end := int64(0)
	if at.ahead != nil {
		end = at.ahead.ID
	}
	note := fmt.Sprintf("%s beside the merge train; batch %d goes into the train at its end, on what it was tested on, and merges in the train's order", o.Note, b.ID)
	return r.passed(ctx, o, pipeline, store.BatchChange{Note: note, ToEnd: true, Rejoin: true, Behind: &end})
}

// aheadPassed reports whether every car ahead of b passed its pipeline for the head it carries:
// only then is a failure of b's pipeline b's own (its branch carries theirs).
func (t train) aheadPassed(b store.Batch) bool {
	for _, c := range t.cars {
		if c.ID == b.ID {
			return true
		}
		if !c.Passed() {
			return false
		}
	}
	return true
}

// stale says why the car's branch no longer stands on what is ahead of it ("" : it does): the car
// ahead was rebuilt, left the train or moved behind it, or the car it was built on ended without
// merging what the branch carries.
func (r *run) stale(ctx context.Context, t train) (string, error) {
	b := r.batch
	if b.HeadSHA == "" {
		return "", nil // not built yet: the open step builds it on what is ahead
	}
	if a := t.ahead; a != nil {
		if b.BaseBatch != a.ID || b.BaseSHA != a.HeadSHA {
			return fmt.Sprintf("car %d ahead of it changed", a.ID), nil
		}
		return "", nil
	}
	if b.BaseBatch == 0 {
		return "", nil // built on the target: whether the target moved is asked before the merge
	}
	base, err := r.s.db.Batch(ctx, b.BaseBatch)
	if err != nil {
		return "", err
	}
	if base.Status == state.BatchSucceeded {
		if base.TestedSHA == b.BaseSHA {
			return "", nil // the car it was built on merged exactly what it carries
		}
		// Rebased after this car was built on it (a commit from outside the train), then
		// merged: it did merge, only not the head this car stands on.
		return fmt.Sprintf("car %d it was built on merged a newer head than the one it was built on", base.ID), nil
	}
	return fmt.Sprintf("car %d it was built on left the train without merging it", base.ID), nil
}

// rebuild sends the car back to its open step, which builds its branch again on what is ahead of
// it now (a new pipeline); its members say why.
func (r *run) rebuild(ctx context.Context, why string) error {
	return r.reopen(ctx, fmt.Sprintf("rebuilding batch %d: %s", r.batch.ID, why), store.BatchChange{})
}

// reopen sends the car back to its open step with c (its note, a stale branch digest: the open
// step writes the branch again); its members read note.
func (r *run) reopen(ctx context.Context, note string, c store.BatchChange) error {
	stale := ""
	c.Note, c.BranchDigest = note, &stale
	// The flaky retries belong to the member set, not to the branch: a rebuild keeps their count.
	r.r.Memo = memo{Flaky: r.r.Memo.Flaky}
	return r.next(ctx, r.r.To(stepOpen), store.BatchStep{Change: c, Moves: rebuilt(note)})
}

// unsettled reports a car ahead of b whose branch does not stand on what is ahead of it now —
// built on a car that was rebuilt, left the train, or moved behind it (b itself, sent to the end
// after a bisection) — and that will therefore be rebuilt: building on it would carry files of
// requests no longer in front (GitLab refuses such a commit, or the pipeline tests a
// combination that will never merge). The car found.
func (r *run) unsettled(ctx context.Context, t train) (int64, bool, error) {
	var prev *store.Batch
	for i := range t.cars {
		c := t.cars[i]
		if c.ID == r.batch.ID {
			break
		}
		switch {
		case c.HeadSHA == "":
			// not built yet: t.base waits for it
		case prev != nil && (c.BaseBatch != prev.ID || c.BaseSHA != prev.HeadSHA):
			return c.ID, true, nil
		case prev == nil && c.BaseBatch != 0:
			base, err := r.s.db.Batch(ctx, c.BaseBatch)
			if err != nil {
				return 0, false, err
			}
			if base.Status != state.BatchSucceeded || base.TestedSHA != c.BaseSHA {
				return c.ID, true, nil
			}
		}
		prev = &t.cars[i]
	}
	return 0, false, nil
}

// base is what the car's branch is to be built on: the head of the car ahead, or the target
// branch (wait: the car ahead has no branch yet).
func (t train) base() (batch int64, sha string, wait bool) {
	if a := t.ahead; a != nil {
		return a.ID, a.HeadSHA, a.HeadSHA == ""
	}
	return 0, "", false
}

// turn waits for the car's turn to merge: the cars ahead merged (each one's end wakes it), the
// partition is not paused, and the target branch is what the car was built on — the target's head
// when it was built, or what the car it was built on put there. A target that moved otherwise (a
// commit from outside the train) would make the merge an untested combination: the car is rebuilt
// on the new head instead.
func (r *run) turn(ctx context.Context) error {
	t, err := r.train(ctx)
	if err != nil {
		return err
	}
	if why, err := r.stale(ctx, t); err != nil || why != "" {
		if err != nil {
			return err
		}
		return r.rebuild(ctx, why)
	}
	_, _, long, _ := r.s.cfg.Current().PollStages()
	if p, paused, err := r.s.db.Paused(ctx, r.batch.Partition); err != nil {
		return err
	} else if paused {
		return r.r.Next(ctx, store.TaskNext{In: long, Wait: store.WaitStart, Note: fmt.Sprintf("the queue of %s is paused by %s: %s", p.Partition, p.By, p.Reason)}, nil)
	}
	if a := t.ahead; a != nil {
		return r.r.Next(ctx, store.TaskNext{In: long, Wait: store.WaitStart, Note: fmt.Sprintf("waiting for car %d ahead of it to merge", a.ID)}, nil)
	}
	if moved, err := r.load(ctx); moved || err != nil {
		return err
	}
	head, err := r.s.mr.GitLab.GetBranch(ctx, r.batch.Project, r.spec.TargetBranch)
	if err != nil {
		return fmt.Errorf("read the target branch %s: %w", r.spec.TargetBranch, err)
	}
	ok, err := r.builtOn(ctx, head.CommitSHA)
	if err != nil {
		return err
	}
	// The merge reads the target once more right before its call: it must still be this head
	// (or the one a rebase put the branch on).
	r.r.Memo.On = head.CommitSHA
	if !ok {
		// A commit from outside the train: the merge rebases the branch onto the new head and
		// tests it again before merging (GitLab's own rebase, as a project that asks for a
		// linear history would anyway; the cars behind are rebuilt on the new head).
		r.r.Memo.Behind = true
		n := r.r.To(stepMerge)
		n.Note = fmt.Sprintf("the target branch %s moved to %s, which the branch was not built on (a commit from outside the train): rebasing and testing again before the merge",
			r.spec.TargetBranch, short(head.CommitSHA))
		return r.r.Next(ctx, n, nil)
	}
	return r.r.Next(ctx, r.r.To(stepMerge), nil)
}

// builtOn reports whether the car's branch was built on target head: that commit itself, or the
// commit the car it was built on put on the target when it merged — and then only when that
// merge put nothing beside the head it tested: the head itself (a fast-forward), or a merge
// commit standing on the target that car's merge read right before its call (Batch.MergedOn).
// A commit that landed inside that merge call (GitLab's merge method `merge` merges a branch
// whose base is behind) is in the target but in no pipeline of this car: it rebases and tests
// again rather than merge an untested tree on top.
func (r *run) builtOn(ctx context.Context, head string) (bool, error) {
	b := r.batch
	switch {
	case head == "" || b.BaseSHA == "":
		return false, nil
	case head == b.BaseSHA:
		return true, nil
	case b.BaseBatch == 0:
		return false, nil
	}
	base, err := r.s.db.Batch(ctx, b.BaseBatch)
	if err != nil {
		return false, err
	}
	landed, err := r.s.db.LandedSHA(ctx, base)
	switch {
	case err != nil:
		return false, err
	case landed == "" || landed != head || base.TestedSHA != b.BaseSHA:
		return false, nil
	case landed == base.TestedSHA:
		return true, nil // fast-forwarded to the tested head
	case base.MergedOn == "":
		return false, nil // not known what the merge went onto
	}
	parents, err := r.s.mr.ParentsOf(ctx, b.Project, landed)
	if err != nil {
		return false, err
	}
	return len(parents) == 2 && parents[0] == base.MergedOn && parents[1] == base.TestedSHA, nil
}

func short(sha string) string {
	if len(sha) > 8 {
		return sha[:8]
	}
	return sha
}

// wakeBehind makes the cars behind b look again now: what they were built on or wait for changed.
// Best effort: a car not woken looks again at its next scheduled look.
func (s *Service) wakeBehind(ctx context.Context, b store.Batch) {
	if n, err := s.db.WakeBehind(ctx, b); err != nil {
		s.log.Warn("the cars behind a batch were not woken; they look again at their next check", "batch", b.ID, "error", err)
	} else if n > 0 {
		s.engine.NudgeAll()
	}
}

// wakeAhead makes the first car ahead of b that has not passed its pipeline look again now (a
// failure of b's, held, may settle what it decides). Best effort, like wakeBehind.
func (s *Service) wakeAhead(ctx context.Context, t train, b store.Batch) {
	for _, c := range t.cars {
		if c.ID == b.ID {
			return
		}
		if !c.Passed() {
			if _, err := s.db.WakeTasks(ctx, []store.TaskRef{{Kind: state.TaskBatch, Ref: ref(c.ID)}}); err == nil {
				s.engine.NudgeAll()
			}
			return
		}
	}
}
