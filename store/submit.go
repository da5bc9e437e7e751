package store

import (
	"bindery/internal/vocab/state"
	"context"
	"errors"
	"math/bits"
)

// Group commit of applications (docs/architecture.md, "An application is one commit").
//
// An application is five inserts in one transaction, and what that costs the database is mostly
// per statement and per commit, not per row: on these machines a transaction of five multi-row
// inserts of eight applications costs about what two single applications do. So the applications
// that arrive while another group is being written wait for it, and then go together: one
// transaction, one multi-row statement per table, one commit. Alone, an application goes at once
// (a group of one is Apply itself), so waiting only happens when the database is busy anyway.
//
// At most groupWriters groups are written at once, with a power of two of members each.
//
// A group is all or nothing, like each application in it. When anything in it fails — a
// relation that has a row already (a re-application, or one to refuse), a taken idempotency key
// or operationId, a deadlock — the transaction is rolled back and each member runs Apply on its
// own, which gives that member its own answer; the others are written as if no group had been.

const (
	// maxGroup bounds the applications of one shared transaction: 8 × 64 placeholders for the
	// operations, well under both databases' limits.
	maxGroup = 64
	// groupWriters is how many groups are written at once: SQLite has one writer; on MySQL a
	// second keeps the round trips of one group from idling the server and bounds what a group
	// stuck on a row lock (held by another instance's transaction) holds up.
	groupWritersSQLite = 1
	groupWritersMySQL  = 2
)

// submission is one application waiting for its group's outcome.
type submission struct {
	ctx context.Context
	a   Application
	err error
	// alone: its group was rolled back; the submission runs Apply on its own.
	alone bool
}

// newApplyGroups returns the groups of applications of a database with writers writers. A group
// has a power of two of members, at most maxGroup, so that its statements' texts are few and
// stay prepared.
func newApplyGroups(writers int) *groups[*submission] {
	return &groups[*submission]{max: writers, take: func(n int) int { return min(maxGroup, 1<<(bits.Len(uint(n))-1)) },
		left: func(s *submission, err error) { s.err = err }}
}

// Submit records application a as Apply does — the same checks, the same answers
// (ErrKeyTaken, ErrDuplicate, *ErrApplyInProgress, ErrPreempted), one commit that holds the
// whole application or nothing of it — in a transaction it may share with applications
// submitted at the same moment (group commit, above). It returns no row ids: read the request
// when they are needed.
func (db *DB) Submit(ctx context.Context, a Application) error {
	if !state.CanTransition("", a.Status) {
		return &state.ErrIllegalTransition{From: "", To: a.Status}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s := &submission{ctx: ctx, a: a}
	db.applies.join(ctx, s, db.writeGroup)
	if s.alone {
		_, err := db.Apply(ctx, a)
		return err
	}
	return s.err
}

// writeGroup writes the group's applications in one transaction in ctx and tells each member
// its outcome. A group of one is Apply.
func (db *DB) writeGroup(ctx context.Context, group []*submission) {
	if len(group) == 1 {
		s := group[0]
		_, s.err = db.Apply(ctx, s.a)
		return
	}
	apps := make([]Application, len(group))
	for i, s := range group {
		apps[i] = s.a
	}
	err := db.InTx(ctx, func(tx *Tx) error { return tx.applyGroup(ctx, apps) })
	for _, s := range group {
		s.alone = err != nil
	}
}

// errRelationHasRow: a relation of the group has a binding row already; only Apply on its own
// decides between re-applying over it and refusing.
var errRelationHasRow = errors.New("a relation of the group has a row")

// applyGroup writes apps, all first applications of their relations, with one multi-row
// statement per table. Anything else is an error, and the caller rolls the group back.
func (tx *Tx) applyGroup(ctx context.Context, apps []Application) error {
	w, err := tx.insertApplications(ctx, apps)
	if err != nil {
		return err
	}
	if w.bindings != int64(len(apps)) {
		return errRelationHasRow
	}
	return tx.insertFirstSteps(ctx, apps)
}
