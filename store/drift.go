package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"bindery/internal/vocab/state"
)

// Drift findings (docs/drift.md): what the drift check found in the config repository that
// differs from the bindings bindery holds, one row per subject–target relation (drift_finding),
// and the branch heads it last read (drift_head).

// Kinds of finding.
const (
	DriftMissing = "missing" // a binding in effect whose file is gone
	DriftChanged = "changed" // the file is not what bindery rendered for the binding
	DriftUnknown = "unknown" // a file under a target's path template that no binding owns
)

// States of a finding.
const (
	DriftOpen    = "open"
	DriftClosed  = "closed"
	DriftIgnored = "ignored"
)

// DriftFinding is one row of drift_finding.
type DriftFinding struct {
	ID           int64
	TargetKey    string
	Subject      string
	Project      string
	Path         string
	Kind         string
	State        string
	OperationID  string // the binding that owns the file ("": none, an unknown file)
	BlobID       string // git's id of the file at the last look ("": absent)
	CommitSHA    string // the commit that removed the file (missing)
	Author       string
	CommittedAt  *time.Time
	SettledOp    string // an operator's decision: the binding it was made for,
	SettledBlob  string // and the file it was made on ("" for a missing file)
	IgnoreReason string
	RestoreBy    string     // who asked bindery to write the file again ("": nobody)
	RestoreAt    *time.Time // when
	Version      int64
	FirstSeen    time.Time
	LastSeen     time.Time
	ClosedAt     *time.Time
}

// DriftObservation is one relation a drift round found drifting.
type DriftObservation struct {
	TargetKey   string
	Subject     string
	Path        string
	Kind        string
	OperationID string
	BlobID      string
	CommitSHA   string
	Author      string
	CommittedAt time.Time
}

// DriftLook is what one drift round read of one project's branch.
type DriftLook struct {
	Project, Branch, Head string
	// Targets are the targets whose files were read: their open and ignored findings that the
	// look did not see again close by themselves.
	Targets []string
	Seen    []DriftObservation
	// Keep are relations in flight (target key → subjects): their findings stay as they are.
	Keep map[string]map[string]bool
	// ReadAgain: the head is not remembered, so that the next round reads the branch again
	// although it did not move (a restore on its way).
	ReadAgain bool
}

const driftColumns = "id, target_key, subject, project, path, kind, state, operation_id, blob_id, commit_sha, author, " +
	"committed_at, settled_op, settled_blob, ignore_reason, restore_by, restore_at, version, first_seen, last_seen, closed_at"

func scanDrift(s scanner) (DriftFinding, error) {
	var f DriftFinding
	var op, sop, sblob sql.NullString
	var committed, restore, first, last, closed dbTime
	err := s.Scan(&f.ID, &f.TargetKey, &f.Subject, &f.Project, &f.Path, &f.Kind, &f.State, &op, &f.BlobID, &f.CommitSHA,
		&f.Author, &committed, &sop, &sblob, &f.IgnoreReason, &f.RestoreBy, &restore, &f.Version, &first, &last, &closed)
	f.OperationID, f.SettledOp, f.SettledBlob = op.String, sop.String, sblob.String
	f.CommittedAt, f.ClosedAt, f.RestoreAt = committed.ptr(), closed.ptr(), restore.ptr()
	f.FirstSeen, f.LastSeen = first.T, last.T
	return f, err
}

// DriftHead is the head of project's branch the last drift round read ("": never read).
func (db *DB) DriftHead(ctx context.Context, project, branch string) (string, error) {
	var head string
	err := db.ro.QueryRowContext(ctx, "SELECT head_sha FROM drift_head WHERE project = ? AND branch = ?", project, branch).Scan(&head)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("drift head of %s %s: %w", project, branch, translate(err))
	}
	return head, nil
}

// DriftFindings lists every finding of targets, in any state.
func (db *DB) DriftFindings(ctx context.Context, targets []string) ([]DriftFinding, error) {
	var out []DriftFinding
	for _, c := range chunks(targets, maxInList) {
		rows, err := db.ro.QueryContext(ctx, "SELECT "+driftColumns+" FROM drift_finding WHERE target_key IN "+inList(len(c)), anys(c)...)
		fs, err := collect(rows, err, scanDrift)
		if err != nil {
			return nil, fmt.Errorf("drift findings: %w", translate(err))
		}
		out = append(out, fs...)
	}
	return out, nil
}

// DriftOfRelation reads the finding of subject's relation to target (ErrNotFound: none).
func (db *DB) DriftOfRelation(ctx context.Context, target, subject string) (DriftFinding, error) {
	f, err := scanDrift(db.ro.QueryRowContext(ctx, "SELECT "+driftColumns+" FROM drift_finding WHERE target_key = ? AND subject = ?", target, subject))
	if err != nil {
		return DriftFinding{}, fmt.Errorf("drift finding of %s %s: %w", target, subject, translate(err))
	}
	return f, nil
}

// DriftFinding reads one finding (ErrNotFound when unknown).
func (db *DB) DriftFinding(ctx context.Context, id int64) (DriftFinding, error) {
	f, err := scanDrift(db.ro.QueryRowContext(ctx, "SELECT "+driftColumns+" FROM drift_finding WHERE id = ?", id))
	if err != nil {
		return DriftFinding{}, fmt.Errorf("drift finding %d: %w", id, translate(err))
	}
	return f, nil
}

// ListDrift lists findings in states (none: every state), newest first seen first, at most limit.
func (db *DB) ListDrift(ctx context.Context, states []string, limit int) ([]DriftFinding, error) {
	q, args := "SELECT "+driftColumns+" FROM drift_finding", []any{}
	if len(states) > 0 {
		q += " WHERE state IN " + inList(len(states))
		args = anys(states)
	}
	rows, err := db.ro.QueryContext(ctx, q+" ORDER BY first_seen DESC, id DESC LIMIT ?", append(args, limit)...)
	out, err := collect(rows, err, scanDrift)
	if err != nil {
		return nil, fmt.Errorf("list drift: %w", translate(err))
	}
	return out, nil
}

// RecordDrift records what a drift round read of one branch, in one transaction: each finding
// seen opens, reopens or stays; the open and ignored findings of the look's targets it did not
// see close (the file is as bindery holds it again); the branch's head is remembered. A finding
// that opens — or whose kind changes — is told (binding.drifted) in the same transaction. Two
// instances recording the same look make one finding and one event: the rows are read locked.
func (db *DB) RecordDrift(ctx context.Context, l DriftLook) (opened []DriftFinding, err error) {
	for attempt := 0; ; attempt++ {
		opened, err = db.recordDrift(ctx, l)
		// Two instances inserting the same new findings may deadlock on the unique index's gaps:
		// the loser reads the winner's rows the next time.
		if !errors.Is(err, ErrRetry) || attempt == 2 {
			return opened, err
		}
	}
}

func (db *DB) recordDrift(ctx context.Context, l DriftLook) (opened []DriftFinding, err error) {
	err = db.InTx(ctx, func(tx *Tx) error {
		opened = nil
		cur := map[[2]string]DriftFinding{}
		for _, c := range chunks(l.Targets, maxInList) {
			rows, err := tx.tx.QueryContext(ctx, "SELECT "+driftColumns+" FROM "+db.hinted("drift_finding", "uk_drift_relation")+
				" WHERE target_key IN "+inList(len(c))+db.forUpdate(), anys(c)...)
			fs, err := collect(rows, err, scanDrift)
			if err != nil {
				return err
			}
			for _, f := range fs {
				cur[[2]string{f.TargetKey, f.Subject}] = f
			}
		}
		seen := map[[2]string]bool{}
		var still, gone []int64 // findings seen as they were (last_seen moves), findings that closed
		for _, o := range l.Seen {
			k := [2]string{o.TargetKey, o.Subject}
			seen[k] = true
			if f := cur[k]; f.ID != 0 && f.stays(o) && f.BlobID == o.BlobID && f.Path == clipText(o.Path, 1024) {
				still = append(still, f.ID)
				continue
			}
			f, told, err := tx.observeDrift(ctx, l.Project, o, cur[k])
			if err != nil {
				return err
			}
			if told {
				opened = append(opened, f)
			}
		}
		for k, f := range cur {
			if !seen[k] && f.State != DriftClosed && !l.Keep[f.TargetKey][f.Subject] {
				gone = append(gone, f.ID)
			}
		}
		// A round over a repository with many findings writes them a chunk per statement.
		for _, c := range chunks(still, maxInList) {
			if _, err := tx.tx.ExecContext(ctx, "UPDATE drift_finding SET last_seen = "+db.now()+" WHERE id IN "+inList(len(c)), anys(c)...); err != nil {
				return translate(err)
			}
		}
		for _, c := range chunks(gone, maxInList) {
			if _, err := tx.tx.ExecContext(ctx, "UPDATE drift_finding SET state = ?, closed_at = "+db.now()+", version = version + 1 WHERE id IN "+inList(len(c)),
				append([]any{DriftClosed}, anys(c)...)...); err != nil {
				return translate(err)
			}
		}
		if l.ReadAgain {
			return nil
		}
		return tx.rememberHead(ctx, l.Project, l.Branch, l.Head)
	})
	if err != nil {
		return nil, fmt.Errorf("record drift of %s %s: %w", l.Project, l.Branch, err)
	}
	return opened, nil
}

// stays says that observation o leaves finding f as it is (open with the same kind, or ignored
// with the file and binding it was ignored for): only when it was last seen moves.
func (f DriftFinding) stays(o DriftObservation) bool {
	return f.State == DriftOpen && f.Kind == o.Kind ||
		f.State == DriftIgnored && f.Kind == o.Kind && f.SettledBlob == o.BlobID && f.SettledOp == o.OperationID
}

// observeDrift applies one observation to the relation's row (f, zero: none yet) and tells it
// when it opens or changes kind.
func (tx *Tx) observeDrift(ctx context.Context, project string, o DriftObservation, f DriftFinding) (DriftFinding, bool, error) {
	db := tx.db
	var committed any
	if !o.CommittedAt.IsZero() {
		committed = db.timeArg(o.CommittedAt)
	}
	if f.ID == 0 {
		res, err := tx.tx.ExecContext(ctx, "INSERT INTO drift_finding (target_key, subject, project, path, kind, state, operation_id, blob_id, commit_sha, author, committed_at) "+
			"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
			o.TargetKey, o.Subject, project, clipText(o.Path, 1024), o.Kind, DriftOpen, nullText(o.OperationID), o.BlobID, o.CommitSHA, clipText(o.Author, 255), committed)
		if err != nil {
			return DriftFinding{}, false, translate(err)
		}
		id, _ := res.LastInsertId()
		f, err := tx.driftByID(ctx, id)
		if err != nil {
			return DriftFinding{}, false, err
		}
		return f, true, tx.tellDrift(ctx, f)
	}
	if f.stays(o) {
		_, err := tx.tx.ExecContext(ctx, "UPDATE drift_finding SET last_seen = "+db.now()+", blob_id = ?, path = ? WHERE id = ?", o.BlobID, clipText(o.Path, 1024), f.ID)
		return f, false, translate(err)
	}
	// It opens again (closed, or ignored and the file changed since), or it is another kind now.
	firstSeen := "first_seen"
	if f.State != DriftOpen {
		firstSeen = db.now()
	}
	if _, err := tx.tx.ExecContext(ctx, "UPDATE drift_finding SET kind = ?, state = ?, operation_id = ?, blob_id = ?, path = ?, commit_sha = ?, author = ?, committed_at = ?, "+
		"ignore_reason = '', restore_by = '', restore_at = NULL, closed_at = NULL, first_seen = "+firstSeen+", last_seen = "+db.now()+", version = version + 1 WHERE id = ?",
		o.Kind, DriftOpen, nullText(o.OperationID), o.BlobID, clipText(o.Path, 1024), o.CommitSHA, clipText(o.Author, 255), committed, f.ID); err != nil {
		return DriftFinding{}, false, translate(err)
	}
	f, err := tx.driftByID(ctx, f.ID)
	if err != nil {
		return DriftFinding{}, false, err
	}
	return f, true, tx.tellDrift(ctx, f)
}

func (tx *Tx) driftByID(ctx context.Context, id int64) (DriftFinding, error) {
	f, err := scanDrift(tx.tx.QueryRowContext(ctx, "SELECT "+driftColumns+" FROM drift_finding WHERE id = ?", id))
	return f, translate(err)
}

// tellDrift writes binding.drifted for f: to operators, and — a missing file — to the subject
// whose access went with it.
func (tx *Tx) tellDrift(ctx context.Context, f DriftFinding) error {
	e := Event{Type: state.EventBindingDrifted, OperationID: f.OperationID, Facts: EventFacts{
		OperationID: f.OperationID, Subject: f.Subject, TargetKey: f.TargetKey, Project: f.Project,
		Reason: f.Kind, SHA: f.CommitSHA, Author: f.Author, Path: f.Path, At: f.CommittedAt,
	}}
	if f.Kind == DriftMissing && f.OperationID != "" {
		e.SubjectID = f.Subject
	}
	_, err := tx.tell(ctx, e)
	return err
}

// rememberHead records head as the last read of project's branch.
func (tx *Tx) rememberHead(ctx context.Context, project, branch, head string) error {
	q := "INSERT INTO drift_head (project, branch, head_sha, read_at) VALUES (?, ?, ?, " + tx.db.now() + ") "
	if tx.db.dialect == MySQL {
		q += "ON DUPLICATE KEY UPDATE head_sha = VALUES(head_sha), read_at = VALUES(read_at)"
	} else {
		q += "ON CONFLICT (project, branch) DO UPDATE SET head_sha = excluded.head_sha, read_at = excluded.read_at"
	}
	_, err := tx.tx.ExecContext(ctx, q, project, branch, head)
	return translate(err)
}

// CountOpenDrift counts the open findings, up to limit (the ops console's attention count).
func (db *DB) CountOpenDrift(ctx context.Context, limit int) (int, error) {
	var n int
	err := db.ro.QueryRowContext(ctx, "SELECT COUNT(*) FROM (SELECT id FROM "+db.hinted("drift_finding", "idx_drift_state_seen")+
		" WHERE state = ? LIMIT ?) d", DriftOpen, limit).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count drift: %w", translate(err))
	}
	return n, nil
}

// DriftBindings lists the bindings of targets that are not over (neither REJECTED nor CLOSED),
// each as its current operation (status and step as the binding has them): what the drift check
// compares the repository with.
func (db *DB) DriftBindings(ctx context.Context, targets []string) ([]Operation, error) {
	return db.driftBindings(ctx, targets, state.EndedStatuses())
}

func (db *DB) driftBindings(ctx context.Context, targets []string, except []state.BindingStatus) ([]Operation, error) {
	var out []Operation
	for _, c := range chunks(targets, maxInList) {
		q := "SELECT o.operation_id, o.subject_id, o.target_key, o.project, o.flow, o.reason, b.status, o.step, o.created_at, o.target_def, o.file_expires_at " +
			"FROM " + db.hinted("binding b", "idx_binding_target_status") + " JOIN operation o ON o.operation_id = b.operation_id " +
			"WHERE b.target_key IN " + inList(len(c))
		if len(except) > 0 {
			q += " AND b.status NOT IN " + inList(len(except))
		}
		rows, err := db.ro.QueryContext(ctx, q, append(anys(c), anys(except)...)...)
		ops, err := collect(rows, err, func(s scanner) (Operation, error) {
			var o Operation
			var created, fileExpiry dbTime
			var def sql.NullString
			err := s.Scan(&o.OperationID, &o.SubjectID, &o.TargetKey, &o.Project, &o.Flow, &o.Reason, &o.Status, &o.Step, &created, &def, &fileExpiry)
			o.CreatedAt, o.TargetDef, o.FileExpiresAt = created.T, def.String, fileExpiry.ptr()
			return o, err
		})
		if err != nil {
			return nil, fmt.Errorf("drift bindings: %w", translate(err))
		}
		out = append(out, ops...)
	}
	return out, nil
}

// LockDrift reads finding id for an operator's decision, locked until the transaction ends
// (ErrNotFound when unknown).
func (tx *Tx) LockDrift(ctx context.Context, id int64) (DriftFinding, error) {
	f, err := scanDrift(tx.tx.QueryRowContext(ctx, "SELECT "+driftColumns+" FROM drift_finding WHERE id = ?"+tx.db.forUpdate(), id))
	if err != nil {
		return DriftFinding{}, fmt.Errorf("drift finding %d: %w", id, translate(err))
	}
	return f, nil
}

// DriftDecision is an operator's decision on a finding read with LockDrift: its new state, the
// binding and file it was made on (a later round holds the file against them), and an ignore's
// reason.
type DriftDecision struct {
	State        string
	OperationID  string // the binding that owns the file now ("": keep)
	SettledOp    string
	SettledBlob  string
	IgnoreReason string
}

// DecideDrift writes d on f, guarded on f's version (ErrPreempted: a round or another operator
// changed it since it was read).
func (tx *Tx) DecideDrift(ctx context.Context, f DriftFinding, d DriftDecision) error {
	closed := "NULL"
	if d.State == DriftClosed {
		closed = tx.db.now()
	}
	op := f.OperationID
	if d.OperationID != "" {
		op = d.OperationID
	}
	res, err := tx.tx.ExecContext(ctx, "UPDATE drift_finding SET state = ?, operation_id = ?, settled_op = ?, settled_blob = ?, ignore_reason = ?, closed_at = "+closed+
		", version = version + 1 WHERE id = ? AND version = ?",
		d.State, nullText(op), d.SettledOp, d.SettledBlob, clipText(d.IgnoreReason, 512), f.ID, f.Version)
	if err != nil {
		return fmt.Errorf("decide drift %d: %w", f.ID, translate(err))
	}
	if n, err := affected(res); err != nil || n == 0 {
		return fmt.Errorf("decide drift %d: %w", f.ID, ErrPreempted)
	}
	return nil
}

// DriftBindingsAny lists every binding of targets, in any status, as its current operation: an
// import leaves every relation that has one as it is.
func (db *DB) DriftBindingsAny(ctx context.Context, targets []string) ([]Operation, error) {
	return db.driftBindings(ctx, targets, nil)
}
