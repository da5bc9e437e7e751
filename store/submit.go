package store

import (
	"context"
	"errors"
	"math/bits"
	"sync"
	"time"
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

// applyQueue gathers the applications waiting for a group. A submission that finds a free
// writer slot writes its group at once; the others wait, and each finished group hands its
// slot to the first of them, which writes the next group — its own and those behind it.
type applyQueue struct {
	mu      sync.Mutex
	waiting []*submission
	writers int // groups being written now, at most max
	max     int
}

// submission is one application waiting for its group's outcome.
type submission struct {
	ctx  context.Context
	a    Application
	turn chan struct{} // closed when the submission is to write the next group
	done chan struct{} // closed when its outcome is known
	err  error
	// alone: its group was rolled back; the submission runs Apply on its own.
	alone bool
}

// Submit records application a as Apply does — the same checks, the same answers
// (ErrKeyTaken, ErrDuplicate, *ErrApplyInProgress, ErrPreempted), one commit that holds the
// whole application or nothing of it — in a transaction it may share with applications
// submitted at the same moment (group commit, above). It returns no row ids: read the request
// when they are needed.
func (db *DB) Submit(ctx context.Context, a Application) error {
	if !CanTransition("", a.Status) {
		return &ErrIllegalTransition{From: "", To: a.Status}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	q := db.applies
	s := &submission{ctx: ctx, a: a, turn: make(chan struct{}), done: make(chan struct{})}
	q.mu.Lock()
	lead := q.writers < q.max
	if lead {
		q.writers++
	} else {
		q.waiting = append(q.waiting, s)
	}
	q.mu.Unlock()
	if !lead {
		// No giving up here when ctx ends: the submission may already be in a group being
		// written, and its caller must learn whether it was. A group's writer leaves out
		// members whose context ended before it began.
		select {
		case <-s.done:
		case <-s.turn:
			lead = true
		}
	}
	if lead {
		db.writeNextGroup(s)
	}
	<-s.done
	if s.alone {
		_, err := db.Apply(ctx, a)
		return err
	}
	return s.err
}

// writeNextGroup writes the group led by s — s and as many waiting submissions as make a power
// of two (so that the statements' texts are few and stay prepared), at most maxGroup — then
// hands the writer slot to the first submission still waiting, or frees it.
func (db *DB) writeNextGroup(s *submission) {
	q := db.applies
	db.hook("submit.write")
	q.mu.Lock()
	n := groupSize(1 + len(q.waiting))
	group := append([]*submission{s}, q.waiting[:n-1]...)
	q.waiting = append(q.waiting[:0:0], q.waiting[n-1:]...)
	q.mu.Unlock()

	db.writeGroup(group)

	q.mu.Lock()
	if len(q.waiting) > 0 {
		next := q.waiting[0]
		q.waiting = q.waiting[1:]
		close(next.turn)
	} else {
		q.writers--
	}
	q.mu.Unlock()
}

// groupSize is the largest power of two not above n, at most maxGroup.
func groupSize(n int) int {
	return min(maxGroup, 1<<(bits.Len(uint(n))-1))
}

// writeGroup writes the group's applications in one transaction and tells each member its
// outcome. Members whose context ended before it began are left out (their callers are gone or
// out of time: nothing is written for them). A group of one is Apply with the member's context.
func (db *DB) writeGroup(group []*submission) {
	live := group[:0:0]
	for _, s := range group {
		if err := s.ctx.Err(); err != nil {
			s.err = err
			close(s.done)
			continue
		}
		live = append(live, s)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		s := live[0]
		_, s.err = db.Apply(s.ctx, s.a)
		close(s.done)
		return
	}
	apps := make([]Application, len(live))
	for i, s := range live {
		apps[i] = s.a
	}
	ctx, cancel := groupContext(live)
	err := db.InTx(ctx, func(tx *Tx) error { return tx.applyGroup(ctx, apps) })
	cancel()
	for _, s := range live {
		s.alone = err != nil
		close(s.done)
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
	tx.db.hook("apply.group")
	return tx.insertFirstSteps(ctx, apps)
}

// groupContext is the context a group is written in: the first member's values, none of the
// members' cancellations (one caller leaving must not fail the others), and the latest of
// their deadlines — none when one of them has none.
func groupContext(members []*submission) (context.Context, context.CancelFunc) {
	ctx := context.WithoutCancel(members[0].ctx)
	var latest time.Time
	for _, s := range members {
		d, ok := s.ctx.Deadline()
		if !ok {
			return context.WithCancel(ctx)
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(ctx, latest)
}
