package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// RecordApprovalCallback records an approval callback by its own request id and reports whether
// it is new: false means it was already recorded (the duplicate key is the answer; the stored
// row is never overwritten). Record it in the transaction that acts on it (Tx variant), so a
// crash cannot leave a callback marked as seen but not acted upon.
func (db *DB) RecordApprovalCallback(ctx context.Context, callbackID, operationID, result string) (bool, error) {
	var fresh bool
	err := db.InTx(ctx, func(tx *Tx) error {
		var err error
		fresh, err = tx.RecordApprovalCallback(ctx, callbackID, operationID, result)
		return err
	})
	return fresh, err
}

// RecordApprovalCallback is DB.RecordApprovalCallback inside the transaction.
func (tx *Tx) RecordApprovalCallback(ctx context.Context, callbackID, operationID, result string) (bool, error) {
	_, err := tx.tx.ExecContext(ctx, "INSERT INTO approval_callback (callback_id, operation_id, result) VALUES (?, ?, ?)",
		callbackID, operationID, result)
	if err = translate(err); errors.Is(err, ErrDuplicate) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("record approval callback %s: %w", callbackID, err)
	}
	return true, nil
}

// Deploy is a verified deploy callback: the project's MR mrIID was deployed. OperationIDs, when
// the pipeline sends them, name exactly the requests it carried.
type Deploy struct {
	Project      string
	MRIID        int64
	OperationIDs []string
}

// Deployed is what recording a deploy callback did.
type Deployed struct {
	Fresh     bool        // false: this (project, MR) was already recorded
	Validated []Operation // the requests flipped MERGED → VALIDATED by this call
	// Refused are the listed operationIds that are not requests of that MR: never validated by
	// it, and not recorded with it.
	Refused []string
}

// ErrUnknownMR: a deploy callback names an MR bindery never opened in that project. Nothing is
// recorded (it moves no watermark) and nothing is validated.
var ErrUnknownMR = errors.New("bindery opened no such merge request in this project")

// RecordDeploy verifies the callback against what bindery knows — the MR must be one bindery
// opened in that project (a batch's or a legacy request's; merged or about to be: a deploy may
// call back before the merge is recorded), else ErrUnknownMR; listed OperationIDs must be
// requests of that MR, the others are Refused — then records it (duplicate (project, mrIid) =
// already recorded) and, in the same transaction, validates its requests: exactly the verified
// OperationIDs when ids were given, else the MERGED operations of that MR. Validated lists only
// real flips, for the metric after commit. A duplicate still validates: it is idempotent.
func (db *DB) RecordDeploy(ctx context.Context, d Deploy) (Deployed, error) {
	if d.MRIID <= 0 || d.Project == "" {
		return Deployed{}, fmt.Errorf("deploy callback: project %q, mrIid %d", d.Project, d.MRIID)
	}
	var out Deployed
	err := db.InTx(ctx, func(tx *Tx) error {
		known, members, err := tx.mrMembers(ctx, d.Project, d.MRIID, d.OperationIDs)
		switch {
		case err != nil:
			return err
		case !known:
			return fmt.Errorf("deploy callback %s!%d: %w", d.Project, d.MRIID, ErrUnknownMR)
		}
		var ids any
		if len(d.OperationIDs) > 0 {
			for _, id := range d.OperationIDs {
				if !slices.Contains(members, id) {
					out.Refused = append(out.Refused, id)
				}
			}
			if len(members) == 0 {
				return nil // it names none of this MR's requests: nothing to record or validate
			}
			raw, err := json.Marshal(members)
			if err != nil {
				return err
			}
			ids = string(raw)
			d.OperationIDs = members
		}
		_, err = tx.tx.ExecContext(ctx, "INSERT INTO deploy_callback (project, mr_iid, operation_ids) VALUES (?, ?, ?)", d.Project, d.MRIID, ids)
		switch err = translate(err); {
		case err == nil:
			out.Fresh = true
		case !errors.Is(err, ErrDuplicate):
			return fmt.Errorf("record deploy %s!%d: %w", d.Project, d.MRIID, err)
		}
		targets := d.OperationIDs
		if len(targets) == 0 {
			ops, err := operationsByMR(ctx, tx.tx, d.Project, d.MRIID)
			if err != nil {
				return err
			}
			for _, o := range ops {
				targets = append(targets, o.OperationID)
			}
		}
		out.Validated, err = tx.markValidated(ctx, targets, d.Project)
		return err
	})
	return out, err
}

// mrMembers reports whether bindery opened MR project!iid (a batch's MR, or a request's: legacy,
// or a batch member's, recorded when the MR opened) and which of ids are requests of that MR.
func (tx *Tx) mrMembers(ctx context.Context, project string, iid int64, ids []string) (known bool, members []string, err error) {
	var n int
	err = tx.tx.QueryRowContext(ctx, "SELECT (SELECT COUNT(*) FROM merge_batch WHERE project = ? AND mr_iid = ?) + "+
		"(SELECT COUNT(*) FROM operation WHERE project = ? AND mr_iid = ?)", project, iid, project, iid).Scan(&n)
	if err != nil || n == 0 {
		return false, nil, translate(err)
	}
	for chunk := range slices.Chunk(ids, 500) {
		rows, err := tx.tx.QueryContext(ctx, "SELECT operation_id FROM operation WHERE project = ? AND mr_iid = ? AND operation_id IN "+inList(len(chunk)),
			append([]any{project, iid}, anys(chunk)...)...)
		got, err := collect(rows, err, func(s scanner) (string, error) { var id string; return id, s.Scan(&id) })
		if err != nil {
			return true, nil, err
		}
		members = append(members, got...)
	}
	return true, members, nil
}

// LastDeploy is the deploy callback of project received last (ok false: none yet): what bindery
// last knew of the project's deploys, for a request whose own callback is overdue.
func (db *DB) LastDeploy(ctx context.Context, project string) (mrIID int64, at time.Time, ok bool, err error) {
	var t dbTime
	err = db.ro.QueryRowContext(ctx, "SELECT mr_iid, received_at FROM deploy_callback WHERE project = ? ORDER BY id DESC LIMIT 1", project).Scan(&mrIID, &t)
	switch err = translate(err); {
	case errors.Is(err, ErrNotFound):
		return 0, time.Time{}, false, nil
	case err != nil:
		return 0, time.Time{}, false, err
	}
	return mrIID, t.T, true, nil
}

// Merged is a MERGED request waiting for its deploy callback.
type Merged struct {
	OperationID string
	Project     string
	MRIID       int64
}

// MergedBetween returns, in one query, the MERGED requests whose last change lies inside
// (now − maxAge, now − minAge) by the database clock, with their MR: younger ones may only have a
// callback on its way, older ones left the window (bounding one run's work). Uses the binding
// index (status, updated_at).
func (db *DB) MergedBetween(ctx context.Context, minAge, maxAge time.Duration) ([]Merged, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT b.operation_id, o.project, o.mr_iid FROM binding b "+
		"JOIN operation o ON o.operation_id = b.operation_id "+
		"WHERE b.status = ? AND b.updated_at > "+db.nowPlus()+" AND b.updated_at < "+db.nowPlus()+" AND o.mr_iid IS NOT NULL",
		StatusMerged, -micros(maxAge), -micros(minAge))
	return collect(rows, err, func(s scanner) (Merged, error) {
		var m Merged
		return m, s.Scan(&m.OperationID, &m.Project, &m.MRIID)
	})
}

// DeployWatermarks returns, in one query, the highest MR number called back per project (read
// from the (project, mr_iid) index; MR numbers are integers, never sorted as strings).
func (db *DB) DeployWatermarks(ctx context.Context) (map[string]int64, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT project, MAX(mr_iid) FROM deploy_callback GROUP BY project")
	marks, err := collect(rows, err, func(s scanner) (Merged, error) {
		var m Merged
		return m, s.Scan(&m.Project, &m.MRIID)
	})
	out := map[string]int64{}
	for _, m := range marks {
		out[m.Project] = m.MRIID
	}
	return out, err
}

// Reconciled is what a reconciliation run did.
type Reconciled struct {
	Scanned   int
	Validated []Operation // real flips only: emit the metric for these, after return
}

// Reconcile closes the gap left by lost deploy callbacks (SPEC §4): MergedBetween and
// DeployWatermarks (two reads), then MarkValidated for every row whose MR number is at or below
// its project's watermark — MR numbers grow per project and the deploy pipeline runs in merge
// order, so a later MR's callback proves this one deployed. Writes are chunked by 500; the
// statement count does not depend on rows otherwise.
func (db *DB) Reconcile(ctx context.Context, minAge, maxAge time.Duration) (Reconciled, error) {
	merged, err := db.MergedBetween(ctx, minAge, maxAge)
	if err != nil {
		return Reconciled{}, fmt.Errorf("reconcile: %w", err)
	}
	if len(merged) == 0 {
		return Reconciled{}, nil
	}
	marks, err := db.DeployWatermarks(ctx)
	if err != nil {
		return Reconciled{}, fmt.Errorf("reconcile: %w", err)
	}
	var due []string
	for _, m := range merged {
		if mark, ok := marks[m.Project]; ok && m.MRIID <= mark {
			due = append(due, m.OperationID)
		}
	}
	out := Reconciled{Scanned: len(merged)}
	if len(due) == 0 {
		return out, nil
	}
	slices.Sort(due)
	// One transaction per 5,000 rows (ten statement chunks): a 100,000-row run never holds
	// 100,000 row locks at once, a failure keeps what was committed (each flip is final and
	// idempotent), and there are 20 commits instead of 200 (-20% time on MariaDB).
	for _, chunk := range chunks(due, 10*maxInList) {
		flipped, err := db.MarkValidated(ctx, chunk...)
		if err != nil {
			return out, fmt.Errorf("reconcile: %w", err)
		}
		out.Validated = append(out.Validated, flipped...)
	}
	return out, nil
}

// RecordedDeploy returns the deploy callback recorded for (project, mrIID), ErrNotFound when
// there is none. A callback can arrive before its MR's requests are recorded MERGED (the deploy
// pipeline is quick, the merge's own write is not): whoever writes MERGED looks here and, when it
// finds one, replays it through RecordDeploy, which validates exactly what the callback named.
func (db *DB) RecordedDeploy(ctx context.Context, project string, mrIID int64) (Deploy, error) {
	var ids nullString
	err := db.ro.QueryRowContext(ctx, "SELECT operation_ids FROM deploy_callback WHERE project = ? AND mr_iid = ?", project, mrIID).Scan(&ids)
	if err != nil {
		return Deploy{}, fmt.Errorf("deploy callback %s!%d: %w", project, mrIID, translate(err))
	}
	d := Deploy{Project: project, MRIID: mrIID}
	if err := d.setOperationIDs(ids); err != nil {
		return Deploy{}, err
	}
	return d, nil
}

// setOperationIDs decodes the operation_ids column of a recorded deploy callback (NULL: the
// pipeline named none).
func (d *Deploy) setOperationIDs(ids nullString) error {
	if ids == "" {
		return nil
	}
	if err := json.Unmarshal([]byte(ids), &d.OperationIDs); err != nil {
		return fmt.Errorf("deploy callback %s!%d: operation ids: %w", d.Project, d.MRIID, err)
	}
	return nil
}

// EarlyDeploys returns, in one query, the recorded deploy callbacks whose MR still carries
// MERGED requests changed within maxAge that the callback validates (it names them, or names
// none): callbacks that arrived before their MR's requests were recorded MERGED (a quick deploy
// pipeline beats the merge's own write). Replaying them through RecordDeploy validates exactly
// what they named, without waiting out reconcile.minAge. A callback that names other requests
// of the MR only is left out: its replay would validate nothing, on every run within maxAge.
func (db *DB) EarlyDeploys(ctx context.Context, maxAge time.Duration) ([]Deploy, error) {
	type early struct {
		id     int64
		deploy Deploy
		merged string // a MERGED request of the callback's MR
	}
	rows, err := db.ro.QueryContext(ctx, "SELECT d.id, d.project, d.mr_iid, d.operation_ids, b.operation_id FROM binding b "+
		"JOIN operation o ON o.operation_id = b.operation_id "+
		"JOIN deploy_callback d ON d.project = o.project AND d.mr_iid = o.mr_iid "+
		"WHERE b.status = ? AND b.updated_at > "+db.nowPlus(), StatusMerged, -micros(maxAge))
	found, err := collect(rows, err, func(s scanner) (early, error) {
		var e early
		var ids nullString
		if err := s.Scan(&e.id, &e.deploy.Project, &e.deploy.MRIID, &ids, &e.merged); err != nil {
			return e, err
		}
		return e, e.deploy.setOperationIDs(ids)
	})
	var out []Deploy
	kept := map[int64]bool{}
	for _, e := range found {
		names := e.deploy.OperationIDs
		if !kept[e.id] && (len(names) == 0 || slices.Contains(names, e.merged)) {
			kept[e.id] = true
			out = append(out, e.deploy)
		}
	}
	return out, err
}
