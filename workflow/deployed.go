package workflow

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"bindery/internal/vocab/explain"
	"bindery/internal/vocab/state"
	"bindery/internal/vocab/text"
	"bindery/store"
)

// What a deploy proves (docs/architecture.md, "Reconciliation"). The store reads and writes the
// rows; the rules of what a deploy callback stands for, which requests it puts in effect and what
// merge order means live here. Both functions take the database alone, so the deploy rules are
// tested on a bare database beside the statements they use.

// Deployed is what recording a deploy callback did.
type Deployed struct {
	Fresh     bool              // false: this (project, MR) was already recorded
	Validated []store.Operation // the requests flipped MERGED → VALIDATED by this call
	Closed    []store.Operation // the removals it closed (VALIDATED at CLOSE_MERGED → CLOSED)
	// Refused are the listed operationIds that are not requests of that MR: never validated by
	// it, and not recorded with it.
	Refused []string
	// Restored counts the drift findings whose restore the MR carried, closed by this deploy
	// (docs/drift.md, 'Repairs').
	Restored int
}

// ErrUnknownMR: a deploy callback names an MR bindery never opened in that project. Nothing is
// recorded (reconciliation infers nothing from it) and nothing is validated.
var ErrUnknownMR = errors.New("bindery opened no such merge request in this project")

// ErrUnknownCommit: a deploy callback names only a commit, and no merge bindery recorded in that
// project landed it. Nothing is recorded.
var ErrUnknownCommit = errors.New("no merge bindery recorded in this project landed that commit")

// RecordDeploy verifies the callback against what bindery knows — the MR must be one bindery
// opened in that project (a batch's or a legacy request's; merged or about to be: a deploy may
// call back before the merge is recorded), else ErrUnknownMR; listed OperationIDs must be
// requests whose current action (the grant, or the removal once a revocation or expiry opened
// one) that MR carries, the others are Refused — then records it (duplicate (project, mrIid) =
// already recorded) and, in the same transaction, acts on its requests: exactly the verified
// OperationIDs when ids were given, else the MERGED operations of that MR and the removals it
// merged. A grant is validated, a removal waiting for its deploy closed. Validated and Closed
// list only real flips, for the metric after commit. A deploy that carried only removals is
// recorded like any other: it proves deployed what merged before it (reconciliation). A
// duplicate still validates: it is idempotent. A callback naming only a commit (SHA) stands for
// the MR whose recorded merge landed it, else ErrUnknownCommit. The commit is kept:
// reconciliation places the deploy by it as well.
func RecordDeploy(ctx context.Context, db *store.DB, d store.Deploy) (Deployed, error) {
	if d.Project == "" || d.MRIID < 0 || (d.MRIID == 0 && d.SHA == "") {
		return Deployed{}, fmt.Errorf("deploy callback: project %q, mrIid %d, sha %q", d.Project, d.MRIID, d.SHA)
	}
	var out Deployed
	err := db.InTx(ctx, func(tx *store.Tx) error {
		var err error
		out, err = recordDeploy(ctx, tx, d)
		return err
	})
	return out, err
}

// recordDeploy is RecordDeploy inside its transaction: verify, record, then act.
func recordDeploy(ctx context.Context, tx *store.Tx, d store.Deploy) (out Deployed, err error) {
	d, out.Refused, err = verifyDeploy(ctx, tx, d)
	if err != nil {
		return Deployed{}, err
	}
	if len(d.OperationIDs) == 0 && len(out.Refused) > 0 {
		// It names none of this MR's requests: nothing to record or validate, only to tell.
		_, err := tx.Tell(ctx, refusedEvent(d, out.Refused))
		return out, err
	}
	if out.Fresh, err = tx.InsertDeploy(ctx, d); err != nil {
		return Deployed{}, err
	}
	targets, removals := d.OperationIDs, d.OperationIDs
	if len(targets) == 0 {
		if targets, err = tx.MergedOfMR(ctx, d.Project, d.MRIID, state.StatusMerged); err != nil {
			return Deployed{}, err
		}
		if removals, err = tx.RemovalsOfMR(ctx, d.Project, d.MRIID); err != nil {
			return Deployed{}, err
		}
	}
	if out.Validated, err = tx.TransitionMany(ctx, targets, inEffectNow(""), d.Project); err != nil {
		return Deployed{}, err
	}
	if out.Closed, err = tx.TransitionMany(ctx, removals, removedNow(explain.DeployIncludesRemoval(d.MRIID)), d.Project); err != nil {
		return Deployed{}, err
	}
	if out.Restored, err = tx.CloseRestored(ctx, d.Project, d.MRIID); err != nil {
		return Deployed{}, err
	}
	if len(out.Refused) > 0 {
		_, err = tx.Tell(ctx, refusedEvent(d, out.Refused))
	}
	return out, err
}

// verifyDeploy checks d against what bindery knows: the MR a commit-only callback stands for
// (ErrUnknownCommit), that bindery opened the MR (ErrUnknownMR), and which listed ids are requests
// of it. It returns d naming its MR and only those requests, and the ids it refused.
func verifyDeploy(ctx context.Context, tx *store.Tx, d store.Deploy) (store.Deploy, []string, error) {
	if d.MRIID == 0 {
		iid, err := tx.MRLanding(ctx, d.Project, d.SHA)
		if errors.Is(err, store.ErrNotFound) {
			return d, nil, fmt.Errorf("deploy callback %s@%s: %w", d.Project, d.SHA, ErrUnknownCommit)
		} else if err != nil {
			return d, nil, err
		}
		d.MRIID = iid
	}
	known, members, err := tx.MRMembers(ctx, d.Project, d.MRIID, d.OperationIDs)
	switch {
	case err != nil:
		return d, nil, err
	case !known:
		return d, nil, fmt.Errorf("deploy callback %s!%d: %w", d.Project, d.MRIID, ErrUnknownMR)
	case len(d.OperationIDs) == 0:
		return d, nil, nil
	}
	// A drift restore's binding names the restore's MR too (its own operation names its grant's).
	restores, err := tx.RestoresOfMR(ctx, d.Project, d.MRIID)
	if err != nil {
		return d, nil, err
	}
	var refused []string
	for _, id := range d.OperationIDs {
		if !slices.Contains(members, id) && !slices.Contains(restores, id) {
			refused = append(refused, id)
		}
	}
	d.OperationIDs = members
	return d, refused, nil
}

// refusedEvent tells operators of a deploy callback that listed requests not of its MR (once per
// callback: the same refusal sent again is the same event).
func refusedEvent(d store.Deploy, refused []string) store.Event {
	ids := slices.Sorted(slices.Values(refused))
	sum := sha256.Sum256([]byte(strings.Join(ids, "\x00")))
	return store.Event{Type: state.EventCallbackRefused,
		Key: fmt.Sprintf("callback.refused:%s!%d:%x", text.Clip(d.Project, 100, text.Chars, ""), d.MRIID, sum[:8]),
		Facts: store.EventFacts{Project: d.Project, MRIID: d.MRIID, SHA: d.SHA, Refused: ids,
			Why: explain.CallbackListsOthers}}
}

// Reconciled is what a reconciliation run did.
type Reconciled struct {
	Scanned   int
	Validated []store.Operation // real flips only: emit the metric for these, after return
	Closed    []store.Operation // the removals closed (real flips only)
}

// ReconcileDeploys closes the gap left by lost deploy callbacks by merge order: a MERGED request
// whose MR landed at or before a merge that a deploy callback proves deployed, on the same branch,
// is deployed too (a deploy ships the branch at that commit). Only requests no exact callback
// decided are inferred; one whose merge bindery never placed waits for its own callback or an
// operator. Each flip's step says which deploy it was inferred from. One read of the window, one
// per (project, branch) in it, then the flips, chunked; the statement count does not depend on
// rows otherwise.
func ReconcileDeploys(ctx context.Context, db *store.DB, minAge, maxAge time.Duration) (Reconciled, error) {
	merged, err := db.MergedBetween(ctx, minAge, maxAge)
	if err != nil {
		return Reconciled{}, fmt.Errorf("reconcile: %w", err)
	}
	out := Reconciled{Scanned: len(merged)}
	type line struct{ project, branch string }
	frontier := map[line]*store.MergeRecord{}
	due := map[int64][]string{}      // grants, by the deploy inferred from (its MR)
	removals := map[int64][]string{} // removals, likewise
	var from []store.MergeRecord
	for _, m := range merged {
		if m.Exact || m.Merge.MergedAt.IsZero() {
			continue
		}
		l := line{m.Project, m.Merge.Branch}
		f, seen := frontier[l]
		if !seen {
			up, ok, err := db.DeployedUpTo(ctx, l.project, l.branch)
			if err != nil {
				return out, fmt.Errorf("reconcile: %w", err)
			}
			if ok {
				f = &up
				from = append(from, up)
			}
			frontier[l] = f
		}
		if f != nil && landedBefore(m.Merge, *f) {
			if m.Removal {
				removals[f.MRIID] = append(removals[f.MRIID], m.OperationID)
			} else {
				due[f.MRIID] = append(due[f.MRIID], m.OperationID)
			}
		}
	}
	for _, f := range from {
		flipped, err := inChunks(ctx, db, due[f.MRIID], func(tx *store.Tx, ids []string) ([]store.Operation, error) {
			return tx.TransitionMany(ctx, ids, inEffectNow(explain.DeployedInEffect(f.MRIID, f.MergedAt)), f.Project)
		})
		out.Validated = append(out.Validated, flipped...)
		if err != nil {
			return out, fmt.Errorf("reconcile: %w", err)
		}
		flipped, err = inChunks(ctx, db, removals[f.MRIID], func(tx *store.Tx, ids []string) ([]store.Operation, error) {
			return tx.TransitionMany(ctx, ids, removedNow(explain.DeployedRemoved(f.MRIID, f.MergedAt)), f.Project)
		})
		out.Closed = append(out.Closed, flipped...)
		if err != nil {
			return out, fmt.Errorf("reconcile: %w", err)
		}
	}
	return out, nil
}

// landedBefore reports whether a landed at or before b on the same branch of the same project:
// by GitLab's merge times, then (equal times) by the recorded sequence. A merge without GitLab's
// time is never placed, so nothing is inferred from it or for it. MR numbers are no merge order
// (a legacy MR waits for its approval while later batches merge): they are never compared.
func landedBefore(a, b store.MergeRecord) bool {
	switch {
	case a.Project != b.Project || a.Branch != b.Branch || a.MergedAt.IsZero() || b.MergedAt.IsZero():
		return false
	case a.MRIID == b.MRIID:
		return true
	case !a.MergedAt.Equal(b.MergedAt):
		return a.MergedAt.Before(b.MergedAt)
	}
	return a.Seq < b.Seq
}

// flipChunk is how many requests one reconciliation transaction moves: a 100,000-row run never
// holds 100,000 row locks at once, a failure keeps what was committed (each flip is final and
// idempotent), and there are 20 commits instead of 200 (-20% time on MariaDB; the mover itself
// writes 500 rows a statement).
const flipChunk = 5000

// inChunks runs move over ids, sorted, one transaction per flipChunk of them, and returns the
// flips committed, also when it fails later.
func inChunks(ctx context.Context, db *store.DB, ids []string, move func(tx *store.Tx, ids []string) ([]store.Operation, error)) ([]store.Operation, error) {
	slices.Sort(ids)
	var out []store.Operation
	for chunk := range slices.Chunk(ids, flipChunk) {
		var flipped []store.Operation
		err := db.InTx(ctx, func(tx *store.Tx) error {
			var err error
			flipped, err = move(tx, chunk)
			return err
		})
		if err != nil {
			return out, err
		}
		out = append(out, flipped...)
	}
	return out, nil
}
