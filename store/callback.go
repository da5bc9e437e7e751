package store

import (
	"bindery/internal/vocab/state"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// RecordApprovalCallback is DB.RecordApprovalCallback inside the transaction.
func (tx *Tx) recordApprovalCallback(ctx context.Context, callbackID, operationID, result string) (bool, error) {
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
// the pipeline sends them, name exactly the requests it carried; SHA, when it sends it, is the
// commit it deployed (a callback may name only the commit: the MR is the one whose merge landed it).
type Deploy struct {
	Project      string
	MRIID        int64
	SHA          string
	OperationIDs []string
}

// MRLanding returns the MR whose recorded merge in project landed commit sha (the earliest, by
// the merge sequence), ErrNotFound when bindery recorded no such merge.
func (tx *Tx) MRLanding(ctx context.Context, project, sha string) (int64, error) {
	var iid int64
	err := tx.tx.QueryRowContext(ctx, "SELECT mr_iid FROM mr_merge WHERE project = ? AND sha = ? ORDER BY seq LIMIT 1", project, sha).Scan(&iid)
	if err != nil {
		return 0, fmt.Errorf("merge of %s@%s: %w", project, sha, translate(err))
	}
	return iid, nil
}

// InsertDeploy records the deploy callback d (its OperationIDs as given: the caller has kept only
// the MR's own) once per (project, mrIid). fresh is false when one was recorded already; that
// record then keeps the commit d names when it had none.
func (tx *Tx) InsertDeploy(ctx context.Context, d Deploy) (fresh bool, err error) {
	var ids, sha any
	if len(d.OperationIDs) > 0 {
		raw, err := json.Marshal(d.OperationIDs)
		if err != nil {
			return false, err
		}
		ids = string(raw)
	}
	if d.SHA != "" {
		sha = d.SHA
	}
	_, err = tx.tx.ExecContext(ctx, "INSERT INTO deploy_callback (project, mr_iid, operation_ids, sha) VALUES (?, ?, ?, ?)", d.Project, d.MRIID, ids, sha)
	switch err = translate(err); {
	case err == nil:
		return true, nil
	case !errors.Is(err, ErrDuplicate):
		return false, fmt.Errorf("record deploy %s!%d: %w", d.Project, d.MRIID, err)
	case d.SHA != "":
		if _, err := tx.tx.ExecContext(ctx, "UPDATE deploy_callback SET sha = ? WHERE project = ? AND mr_iid = ? AND sha IS NULL", d.SHA, d.Project, d.MRIID); err != nil {
			return false, fmt.Errorf("record deploy %s!%d: %w", d.Project, d.MRIID, translate(err))
		}
	}
	return false, nil
}

// MergedOfMR lists the requests of MR project!iid at status (their grant merged with it and
// waits for its deploy, when the caller passes MERGED).
func (tx *Tx) MergedOfMR(ctx context.Context, project string, iid int64, status state.BindingStatus) ([]string, error) {
	rows, err := tx.tx.QueryContext(ctx, "SELECT operation_id FROM operation WHERE project = ? AND mr_iid = ? AND status = ?", project, iid, status)
	return collect(rows, err, func(s scanner) (string, error) { var id string; return id, s.Scan(&id) })
}

// RemovalsOfMR lists the removals MR project!iid merged that wait for their deploy.
func (tx *Tx) RemovalsOfMR(ctx context.Context, project string, iid int64) ([]string, error) {
	rows, err := tx.tx.QueryContext(ctx, "SELECT operation_id FROM removal_merged WHERE project = ? AND mr_iid = ?", project, iid)
	return collect(rows, err, func(s scanner) (string, error) { var id string; return id, s.Scan(&id) })
}

// RefuseCallback records a callback bindery cannot believe: the audit entry ev (once per its
// key) and, with it in the same transaction, the news for operators (callback.refused with
// facts). recorded is false when ev was recorded already: nothing more is told.
func (db *DB) RefuseCallback(ctx context.Context, ev AuditEvent, facts EventFacts) (recorded bool, err error) {
	if ev.Key == "" {
		return false, fmt.Errorf("audit %s: empty event key", ev.Action)
	}
	err = db.InTx(ctx, func(tx *Tx) error {
		if recorded, err = recordAudit(ctx, tx.tx, ev); err != nil || !recorded {
			return err
		}
		_, err = tx.Tell(ctx, Event{Type: state.EventCallbackRefused, Key: clipText("callback.refused:"+ev.Key, 191), Facts: facts})
		return err
	})
	return recorded, err
}

// MRMembers reports whether bindery opened MR project!iid (a batch's MR, or a request's: legacy,
// or a batch member's, recorded when the MR opened) and which of ids are requests of that MR:
// an operation names the MR of its current action (a removal's MR replaces its grant's when it
// opens), so a removal's deploy is checked against the removal's MR.
func (tx *Tx) MRMembers(ctx context.Context, project string, iid int64, ids []string) (known bool, members []string, err error) {
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
// last knew of the project's deploys, for a request whose own callback is overdue. Last by the
// database clock, never by id (ids are no order on a distributed MySQL).
func (db *DB) LastDeploy(ctx context.Context, project string) (mrIID int64, at time.Time, ok bool, err error) {
	var t dbTime
	err = db.ro.QueryRowContext(ctx, "SELECT mr_iid, received_at FROM deploy_callback WHERE project = ? ORDER BY received_at DESC, id DESC LIMIT 1", project).Scan(&mrIID, &t)
	switch err = translate(err); {
	case errors.Is(err, ErrNotFound):
		return 0, time.Time{}, false, nil
	case err != nil:
		return 0, time.Time{}, false, err
	}
	return mrIID, t.T, true, nil
}

// Merged is a MERGED request waiting for its deploy callback, with where its MR landed (Merge
// zero: bindery recorded no merge of it, e.g. merged before merge order was recorded) and whether
// an exact callback decided its MR (it named the MR's requests: inference never overrides it).
type Merged struct {
	OperationID string
	Project     string
	MRIID       int64
	Merge       MergeRecord
	Exact       bool
	// Removal: a removal waiting for its deploy (VALIDATED at CLOSE_MERGED; its deploy closes
	// it), not a grant.
	Removal bool
}

// MergedBetween returns, in one query, the MERGED requests whose last change lies inside
// (now − maxAge, now − minAge) by the database clock, with their MR's merge record: younger ones
// may only have a callback on its way, older ones left the window (bounding one run's work).
// Uses the binding index (status, updated_at). The removals waiting for their deploy come with
// them, from removal_merged by the time they merged: the same window, the same columns.
func (db *DB) MergedBetween(ctx context.Context, minAge, maxAge time.Duration) ([]Merged, error) {
	const exact = "EXISTS (SELECT 1 FROM deploy_callback d WHERE d.project = m.project AND d.mr_iid = m.mr_iid AND d.operation_ids IS NOT NULL)"
	rows, err := db.ro.QueryContext(ctx, "SELECT b.operation_id, o.project, o.mr_iid, m.seq, m.branch, m.merged_at, "+
		strings.ReplaceAll(exact, "m.", "o.")+", 0 "+
		"FROM binding b JOIN operation o ON o.operation_id = b.operation_id "+
		"LEFT JOIN mr_merge m ON m.project = o.project AND m.mr_iid = o.mr_iid "+
		"WHERE b.status = ? AND b.updated_at > "+db.nowPlus()+" AND b.updated_at < "+db.nowPlus()+" AND o.mr_iid IS NOT NULL "+
		"UNION ALL SELECT r.operation_id, r.project, r.mr_iid, m.seq, m.branch, m.merged_at, "+
		strings.ReplaceAll(exact, "m.", "r.")+", 1 "+
		"FROM removal_merged r LEFT JOIN mr_merge m ON m.project = r.project AND m.mr_iid = r.mr_iid "+
		"WHERE r.created_at > "+db.nowPlus()+" AND r.created_at < "+db.nowPlus(),
		state.StatusMerged, -micros(maxAge), -micros(minAge), -micros(maxAge), -micros(minAge))
	return collect(rows, err, func(s scanner) (Merged, error) {
		var m Merged
		var seq nullInt64
		var branch nullString
		var at dbTime
		err := s.Scan(&m.OperationID, &m.Project, &m.MRIID, &seq, &branch, &at, &m.Exact, &m.Removal)
		if seq != 0 {
			m.Merge = MergeRecord{Project: m.Project, MRIID: m.MRIID, Seq: int64(seq), Branch: string(branch), MergedAt: at.T}
		}
		return m, err
	})
}

// DeployedUpTo returns the latest merge on project's branch that a deploy callback proves
// deployed — it named that MR, or the commit that merge landed — by merge order; ok false: none.
// Read backwards on (project, branch, merged_at, seq): the latest merges are the ones called back.
func (db *DB) DeployedUpTo(ctx context.Context, project, branch string) (m MergeRecord, ok bool, err error) {
	m = MergeRecord{Project: project, Branch: branch}
	var at dbTime
	err = db.ro.QueryRowContext(ctx, "SELECT m.mr_iid, m.seq, m.sha, m.merged_at FROM mr_merge m "+
		"WHERE m.project = ? AND m.branch = ? AND m.merged_at IS NOT NULL AND ("+
		"EXISTS (SELECT 1 FROM deploy_callback d WHERE d.project = m.project AND d.mr_iid = m.mr_iid) OR "+
		"(m.sha <> '' AND EXISTS (SELECT 1 FROM deploy_callback d WHERE d.project = m.project AND d.sha = m.sha))) "+
		"ORDER BY m.merged_at DESC, m.seq DESC LIMIT 1", project, branch).Scan(&m.MRIID, &m.Seq, &m.SHA, &at)
	switch err = translate(err); {
	case errors.Is(err, ErrNotFound):
		return MergeRecord{}, false, nil
	case err != nil:
		return MergeRecord{}, false, err
	}
	m.MergedAt = at.T
	return m, true, nil
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
// MERGED requests changed within maxAge (or removals merged within it that wait for their
// deploy) that the callback validates (it names them, or names none): callbacks that arrived before their MR's requests were recorded MERGED (a quick deploy
// pipeline beats the merge's own write). Replaying them through RecordDeploy validates exactly
// what they named, without waiting out reconcile.minAge. A callback that names other requests
// of the MR only is left out: its replay would validate nothing, on every run within maxAge.
func (db *DB) EarlyDeploys(ctx context.Context, maxAge time.Duration) ([]Deploy, error) {
	type early struct {
		id     int64
		deploy Deploy
		merged string // a MERGED request of the callback's MR, or a removal it merged
	}
	rows, err := db.ro.QueryContext(ctx, "SELECT d.id, d.project, d.mr_iid, d.operation_ids, b.operation_id FROM binding b "+
		"JOIN operation o ON o.operation_id = b.operation_id "+
		"JOIN deploy_callback d ON d.project = o.project AND d.mr_iid = o.mr_iid "+
		"WHERE b.status = ? AND b.updated_at > "+db.nowPlus()+
		" UNION ALL SELECT d.id, d.project, d.mr_iid, d.operation_ids, r.operation_id FROM removal_merged r "+
		"JOIN deploy_callback d ON d.project = r.project AND d.mr_iid = r.mr_iid WHERE r.created_at > "+db.nowPlus(),
		state.StatusMerged, -micros(maxAge), -micros(maxAge))
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
