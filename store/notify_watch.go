package store

import (
	"bindery/internal/vocab/state"
	"context"
	"fmt"
	"time"
)

// What the notifier's watch reads (docs/notifications.md): the counts operators' alert rules
// look at, and the requests whose news is a matter of time.

// OpsCounts are the numbers the alert rules read (metric gauges), by the database clock.
type OpsCounts struct {
	BatchesBlocked   int
	BlockedLongest   time.Duration // how long the longest-BLOCKED batch has been BLOCKED (0: none)
	NeedingAttention int           // what the ops stuck list shows
	DeploysOverdue   int
	InstancesStale   int // registered, heartbeat older than liveWithin but younger than a day
	EndpointsFailing int // receivers whose deliveries fail, not disabled
	EndpointsOff     int // receivers disabled
	PendingSends     int // deliveries waiting for an attempt
}

// staleHorizon: an instance whose heartbeat is older than this has gone for good (a crash that
// was never restarted under the same id — ids are random per process); it no longer counts as
// an instance without heartbeat.
const staleHorizon = 24 * time.Hour

// OpsCounts reads the counts in one statement: deployOverdue and approvalOverdue as the stuck
// list uses them, liveWithin as the heartbeat does.
func (db *DB) OpsCounts(ctx context.Context, deployOverdue, approvalOverdue, liveWithin time.Duration) (OpsCounts, error) {
	var c OpsCounts
	var longest nullInt64
	// The time a batch became BLOCKED is its batch.blocked event (its own updated_at moves with
	// every note while it waits).
	needs, needsArgs := db.needsOperator(deployOverdue, approvalOverdue)
	q := "SELECT " +
		"(SELECT COUNT(*) FROM merge_batch WHERE status = ?), " +
		"(SELECT MAX(" + db.elapsed("e.at") + ") FROM (SELECT MAX(ev.created_at) AS at FROM merge_batch b JOIN notify_event ev ON ev.batch_id = b.id AND ev.type = ? " +
		"WHERE b.status = ? GROUP BY b.id) e), " +
		"(SELECT COUNT(*) FROM operation WHERE " + needs + "), " +
		"(SELECT COUNT(*) FROM operation WHERE status = ? AND updated_at < " + db.nowPlus() + "), " +
		"(SELECT COUNT(*) FROM instance WHERE heartbeat_at < " + db.nowPlus() + " AND heartbeat_at > " + db.nowPlus() + "), " +
		"(SELECT COUNT(*) FROM notify_endpoint WHERE failing_since IS NOT NULL AND disabled_at IS NULL), " +
		"(SELECT COUNT(*) FROM notify_endpoint WHERE disabled_at IS NOT NULL), " +
		"(SELECT COUNT(*) FROM notify_delivery WHERE status = ?)"
	args := append([]any{state.BatchBlocked, state.EventBatchBlocked, state.BatchBlocked}, needsArgs...)
	args = append(args, state.StatusMerged, -micros(overdueOrNever(deployOverdue)), -micros(liveWithin), -micros(staleHorizon), DeliveryPending)
	err := db.ro.QueryRowContext(ctx, q, args...).Scan(&c.BatchesBlocked, &longest, &c.NeedingAttention, &c.DeploysOverdue, &c.InstancesStale, &c.EndpointsFailing, &c.EndpointsOff, &c.PendingSends)
	if err != nil {
		return OpsCounts{}, fmt.Errorf("ops counts: %w", translate(err))
	}
	c.BlockedLongest = time.Duration(longest) * time.Microsecond
	return c, nil
}

// overdueOrNever is a "longer than" bound: 0 (not configured) is a century.
func overdueOrNever(d time.Duration) time.Duration {
	if d <= 0 {
		return 100 * 365 * 24 * time.Hour
	}
	return d
}

// Overdue lists up to limit requests in status unchanged for longer than after (by the database
// clock), the longest first.
func (db *DB) Overdue(ctx context.Context, status state.BindingStatus, after time.Duration, limit int) ([]Operation, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT "+operationColumns+" FROM operation WHERE status = ? AND updated_at < "+db.nowPlus()+" ORDER BY updated_at, id LIMIT ?",
		status, -micros(overdueOrNever(after)), limit)
	return collect(rows, err, scanOp)
}

// OverdueEvent is the news of a request that has waited too long in its state: keyed by the
// request and its version, so it is told once per stay in that state, however many instances
// find it and however often.
func OverdueEvent(t state.EventType, reason string, o Operation) Event {
	return Event{Type: t, OperationID: o.OperationID, SubjectID: o.SubjectID, BatchID: o.BatchID,
		Key: fmt.Sprintf("%s:%s:%s:%d", t, reason, clipText(o.OperationID, 64), o.Version),
		Facts: EventFacts{OperationID: o.OperationID, Subject: o.SubjectID, TargetKey: o.TargetKey, Project: o.Project, Flow: o.Flow,
			Status: o.Status, Step: o.Step, MRIID: o.MRIID, PipelineID: o.PipelineID, BatchID: o.BatchID, Reason: reason}}
}
