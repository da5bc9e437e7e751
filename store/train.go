package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"bindery/internal/vocab/state"
	"bindery/internal/vocab/text"
)

// A partition's merge train: its active batches ("cars") in order (docs/architecture.md, "The
// merge train"), the operators' pause of it, and what an estimate of a car's merge reads.

// Train returns the active cars of partition in train order (a car claimed before the train
// existed, without a sequence, first): one read on idx_merge_batch_active.
func (db *DB) Train(ctx context.Context, partition string) ([]Batch, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT "+batchColumns+" FROM "+db.hinted("merge_batch", "idx_merge_batch_active")+
		" WHERE active_slot = ? ORDER BY train_seq, id", partition)
	out, err := collect(rows, err, scanBatch)
	if err != nil {
		return nil, fmt.Errorf("the train of %s: %w", partition, err)
	}
	return out, nil
}

// Trains returns the active cars of every partition that has one, in train order per partition.
func (db *DB) Trains(ctx context.Context) (map[string][]Batch, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT "+batchColumns+" FROM merge_batch WHERE status IN "+inActive+" ORDER BY partition_key, train_seq, id",
		anys(state.ActiveBatchStatuses())...)
	cars, err := collect(rows, err, scanBatch)
	if err != nil {
		return nil, fmt.Errorf("the trains: %w", err)
	}
	out := map[string][]Batch{}
	for _, c := range cars {
		out[c.Partition] = append(out[c.Partition], c)
	}
	return out, nil
}

// Ahead is the car directly ahead of b in its train (ok false: b is the first).
func Ahead(train []Batch, b Batch) (Batch, bool) {
	var ahead Batch
	found := false
	for _, c := range train {
		if c.ID == b.ID {
			break
		}
		ahead, found = c, true
	}
	return ahead, found
}

// WakeBehind makes the tasks of the cars behind b due now when they wait for news (a pipeline,
// their turn to merge): b's branch, place or end changed what they were built on or wait for.
func (db *DB) WakeBehind(ctx context.Context, b Batch) (int, error) {
	train, err := db.Train(ctx, b.Partition)
	if err != nil {
		return 0, err
	}
	var refs []TaskRef
	for _, c := range train {
		if c.ID != b.ID && (c.TrainSeq > b.TrainSeq || b.TrainSeq == 0) {
			refs = append(refs, TaskRef{Kind: state.TaskBatch, Ref: strconv.FormatInt(c.ID, 10)})
		}
	}
	if len(refs) == 0 {
		return 0, nil
	}
	return db.WakeTasks(ctx, refs)
}

// LandedSHA is the commit batch b's MR put on its target branch when it merged ("" : not
// recorded, or GitLab gave none).
func (db *DB) LandedSHA(ctx context.Context, b Batch) (string, error) {
	if b.MRIID == 0 {
		return "", nil
	}
	var sha string
	err := translate(db.ro.QueryRowContext(ctx, "SELECT sha FROM mr_merge WHERE project = ? AND mr_iid = ?", b.Project, b.MRIID).Scan(&sha))
	if errors.Is(err, ErrNotFound) {
		return "", nil
	}
	return sha, err
}

// PipelineDurations returns how long the last n pipelines of partition's cars took to pass
// (newest first): what an estimate of a car's merge reads.
func (db *DB) PipelineDurations(ctx context.Context, partition string, n int) ([]time.Duration, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT "+db.elapsedBetween("ci_started_at", "ci_passed_at")+" FROM "+db.hinted("merge_batch", "idx_merge_batch_ci")+
		" WHERE partition_key = ? AND ci_passed_at IS NOT NULL AND ci_started_at IS NOT NULL ORDER BY ci_passed_at DESC LIMIT ?", partition, n)
	return collect(rows, err, func(s scanner) (time.Duration, error) {
		var us int64
		err := s.Scan(&us)
		return time.Duration(us) * time.Microsecond, err
	})
}

// elapsedBetween is the microseconds from one DATETIME expression to another.
func (db *DB) elapsedBetween(from, to string) string {
	if db.dialect == MySQL {
		return "TIMESTAMPDIFF(MICROSECOND, " + from + ", " + to + ")"
	}
	return "CAST((julianday(" + to + ") - julianday(" + from + ")) * 86400000000.0 AS INTEGER)"
}

// Pause is an operator's pause of a partition's train: no new car is claimed and no car merges
// until it is resumed.
type Pause struct {
	Partition string
	By        string
	Reason    string
	At        time.Time
}

// maxPauseReason bounds a pause's reason in characters (train_pause.reason is VARCHAR(512), which
// MySQL counts in characters: a reason in another script than Latin must not lose its half).
const maxPauseReason = 512

// PauseTrain pauses partition's train (a pause already there is replaced: the latest reason
// stands). It reports whether the partition was running before.
func (tx *Tx) PauseTrain(ctx context.Context, partition, by, reason string) (bool, error) {
	reason = text.Clip(reason, maxPauseReason, text.Chars, "") // the server refuses a longer one: this only keeps the column whole
	res, err := tx.tx.ExecContext(ctx, "UPDATE train_pause SET paused_by = ?, reason = ?, paused_at = "+tx.db.now()+" WHERE partition_key = ?",
		by, reason, partition)
	n, err := affectedOr(res, err)
	if err != nil || n > 0 {
		return false, err
	}
	_, err = tx.tx.ExecContext(ctx, "INSERT INTO train_pause (partition_key, paused_by, reason) VALUES (?, ?, ?)", partition, by, reason)
	if err = translate(err); errors.Is(err, ErrDuplicate) {
		return false, ErrRetry // paused by someone else at this moment: read again
	}
	return err == nil, err
}

// ResumeTrain ends partition's pause and reports whether it was paused.
func (tx *Tx) ResumeTrain(ctx context.Context, partition string) (bool, error) {
	res, err := tx.tx.ExecContext(ctx, "DELETE FROM train_pause WHERE partition_key = ?", partition)
	n, err := affectedOr(res, err)
	return n > 0, err
}

// Paused returns partition's pause (ok false: it runs).
func (db *DB) Paused(ctx context.Context, partition string) (Pause, bool, error) {
	var p Pause
	var at dbTime
	err := translate(db.ro.QueryRowContext(ctx, "SELECT partition_key, paused_by, reason, paused_at FROM train_pause WHERE partition_key = ?", partition).
		Scan(&p.Partition, &p.By, &p.Reason, &at))
	switch {
	case errors.Is(err, ErrNotFound):
		return Pause{}, false, nil
	case err != nil:
		return Pause{}, false, fmt.Errorf("pause of %s: %w", partition, err)
	}
	p.At = at.T
	return p, true, nil
}

// Pauses returns every paused partition.
func (db *DB) Pauses(ctx context.Context) ([]Pause, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT partition_key, paused_by, reason, paused_at FROM train_pause ORDER BY partition_key")
	return collect(rows, err, scanPause)
}

// SendNext marks operationID's waiting row for the next car of its partition, ahead of the
// waiting set (by: the operator). false: the request is not waiting (claimed, or never admitted).
func (tx *Tx) SendNext(ctx context.Context, operationID, by string) (bool, error) {
	res, err := tx.tx.ExecContext(ctx, "UPDATE merge_batch_request SET next_by = ? WHERE operation_id = ? AND batch_id IS NULL", by, operationID)
	n, err := affectedOr(res, err)
	return n > 0, err
}

func affectedOr(res interface{ RowsAffected() (int64, error) }, err error) (int64, error) {
	if err != nil {
		return 0, translate(err)
	}
	n, err := res.RowsAffected()
	return n, translate(err)
}

// TrainLoad is what a round of a merge train's partition weighs before it claims a car.
type TrainLoad struct {
	Cars int // active cars in the train's places (the cars beside it left out)
	// SinceNewest is how long the newest car's pipeline has run (0 while a car is not built
	// yet), by the database clock.
	SinceNewest time.Duration
	Waiting     int // requests in the waiting set, counted up to the cap asked for
	// OldestWait is how long the oldest waiting request has waited; Priority: a suspect group
	// (a bisection's half) or a request sent next waits.
	OldestWait time.Duration
	Priority   bool
}

// TrainLoad reads partition's active cars and waiting requests (the oldest waitingCap of them):
// two bounded reads on the train's and the claim's indexes.
func (db *DB) TrainLoad(ctx context.Context, partition string, waitingCap int) (TrainLoad, error) {
	var l TrainLoad
	var since nullInt64
	var unbuilt int
	// The cars beside the train (slots below 0) hold none of its places and space nothing.
	err := db.ro.QueryRowContext(ctx, "SELECT COUNT(*), COUNT(*) - COUNT(ci_started_at), MIN("+db.elapsed("ci_started_at")+") FROM "+
		db.hinted("merge_batch", "idx_merge_batch_active")+" WHERE active_slot = ? AND slot_no >= 0", partition).Scan(&l.Cars, &unbuilt, &since)
	if err != nil {
		return TrainLoad{}, fmt.Errorf("the train of %s: %w", partition, translate(err))
	}
	if unbuilt == 0 && since > 0 {
		l.SinceNewest = time.Duration(since) * time.Microsecond
	}
	var oldest nullInt64
	var priority int
	err = db.ro.QueryRowContext(ctx, "SELECT COUNT(*), MAX("+db.elapsed("created_at")+"), COUNT(suspect_round) + COUNT(next_by) FROM (SELECT created_at, suspect_round, next_by FROM "+
		"merge_batch_request WHERE partition_key = ? AND batch_id IS NULL ORDER BY created_at LIMIT ?) w",
		partition, waitingCap).Scan(&l.Waiting, &oldest, &priority)
	if err != nil {
		return TrainLoad{}, fmt.Errorf("the waiting set of %s: %w", partition, translate(err))
	}
	l.OldestWait, l.Priority = time.Duration(oldest)*time.Microsecond, priority > 0
	return l, nil
}

// The ops console's view of the trains (GET /api/ops/trains) reads the cars' members, the
// waiting sets and whether a project is known, below.

// CarMembers returns the requests each of the given cars holds now (see Holding), with their
// applications, in claim order: one read for the whole train.
func (db *DB) CarMembers(ctx context.Context, ids []int64) (map[int64][]Operation, error) {
	out := make(map[int64][]Operation, len(ids))
	for _, chunk := range chunks(ids, maxInList) {
		rows, err := db.ro.QueryContext(ctx, "SELECT m.batch_id, "+prefixed("o.", operationColumns)+" FROM merge_batch_request m "+
			"JOIN operation o ON o.operation_id = m.operation_id WHERE m.batch_id IN "+inList(len(chunk))+" ORDER BY m.batch_id, m.created_at, m.id", anys(chunk)...)
		type member struct {
			batch int64
			op    Operation
		}
		ms, err := collect(rows, err, func(s scanner) (member, error) {
			var m member
			var err error
			m.op, err = scanOperation(s, &m.batch)
			return m, err
		})
		if err != nil {
			return nil, fmt.Errorf("members of the cars: %w", err)
		}
		for _, m := range ms {
			out[m.batch] = append(out[m.batch], m.op)
		}
	}
	return out, nil
}

// WaitingCount is a partition's waiting set at a glance: how many requests wait, and how many of
// them an operator sent into the next car.
type WaitingCount struct {
	Waiting int
	Next    int
}

// WaitingCounts counts the waiting set of every partition that has one (one grouped read on
// idx_merge_batch_request_waiting, which holds only the waiting rows' partitions).
func (db *DB) WaitingCounts(ctx context.Context) (map[string]WaitingCount, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT partition_key, COUNT(*), COUNT(next_by) FROM merge_batch_request WHERE batch_id IS NULL GROUP BY partition_key")
	type counted struct {
		partition string
		n         WaitingCount
	}
	cs, err := collect(rows, err, func(s scanner) (counted, error) {
		var c counted
		return c, s.Scan(&c.partition, &c.n.Waiting, &c.n.Next)
	})
	if err != nil {
		return nil, fmt.Errorf("the waiting sets: %w", err)
	}
	out := make(map[string]WaitingCount, len(cs))
	for _, c := range cs {
		out[c.partition] = c.n
	}
	return out, nil
}

// Queued is a request in a partition's waiting set: its application, when it was admitted, and
// the operator who sent it into the next car ("": none).
type Queued struct {
	Operation Operation
	Since     time.Time
	NextBy    string
}

// WaitingQueue returns up to limit requests of partition's waiting set in the order a claim takes
// them (see Claim): the ones an operator sent into the next car, the suspect groups of a
// bisection (latest round first), then the others as they came.
func (db *DB) WaitingQueue(ctx context.Context, partition string, limit int) ([]Queued, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT r.created_at, r.next_by, "+prefixed("o.", operationColumns)+" FROM merge_batch_request r "+
		"JOIN operation o ON o.operation_id = r.operation_id WHERE r.partition_key = ? AND r.batch_id IS NULL "+
		"ORDER BY CASE WHEN r.next_by IS NOT NULL THEN 0 WHEN r.suspect_round IS NOT NULL THEN 1 ELSE 2 END, "+
		"CASE WHEN r.next_by IS NULL THEN r.suspect_round END DESC, CASE WHEN r.next_by IS NULL THEN r.suspect_of END, r.created_at, r.id LIMIT ?", partition, limit)
	out, err := collect(rows, err, func(s scanner) (Queued, error) {
		var q Queued
		var since dbTime
		var next nullString
		var err error
		q.Operation, err = scanOperation(s, &since, &next)
		q.Since, q.NextBy = since.T, string(next)
		return q, err
	})
	if err != nil {
		return nil, fmt.Errorf("the waiting set of %s: %w", partition, err)
	}
	return out, nil
}

// PartitionKnown reports whether bindery ever accepted a request for, batched, queued or paused
// anything of partition (a project): an operator may pause a project that left the catalog while
// its requests finish, and its deploy pipeline's callbacks are heard, but never one bindery knows
// nothing of.
func (db *DB) PartitionKnown(ctx context.Context, partition string) (bool, error) {
	var known bool
	err := db.ro.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM merge_batch WHERE partition_key = ?) "+
		"OR EXISTS (SELECT 1 FROM merge_batch_request WHERE partition_key = ?) OR EXISTS (SELECT 1 FROM train_pause WHERE partition_key = ?) "+
		"OR EXISTS (SELECT 1 FROM operation WHERE project = ?)",
		partition, partition, partition, partition).Scan(&known)
	if err != nil {
		return false, fmt.Errorf("partition %s: %w", partition, translate(err))
	}
	return known, nil
}

// NewestBatch is partition's newest batch by the database clock (ok false: it has none), on
// idx_merge_batch_partition_created: the ops console says when a project's latest batch failed.
func (db *DB) NewestBatch(ctx context.Context, partition string) (Batch, bool, error) {
	b, err := scanBatch(db.ro.QueryRowContext(ctx, "SELECT "+batchColumns+" FROM "+db.hinted("merge_batch", "idx_merge_batch_partition_created")+
		" WHERE partition_key = ? ORDER BY created_at DESC, id DESC LIMIT 1", partition))
	switch err = translate(err); {
	case errors.Is(err, ErrNotFound):
		return Batch{}, false, nil
	case err != nil:
		return Batch{}, false, fmt.Errorf("the newest batch of %s: %w", partition, err)
	}
	return b, true, nil
}

// Holds is what may hold a page of requests in their projects' trains, as a list shows it beside
// each row (docs/workflow.md, 'What the requester is told'): each partition's active cars in
// train order, its pause, and the latest "merge blocked" step of each request held for a person.
type Holds struct {
	Cars    map[string][]Batch    // by partition, in train order
	Pauses  map[string]Pause      // by partition
	Blocked map[string]StepRecord // by operation id: its latest HANDLE_MR_BLOCKED step
}

// HoldsOf reads the holds of a page of requests in a bounded number of reads, whatever the page's
// size: the active cars and the pauses of partitions (on idx_merge_batch_active and the pause
// table's key), and the latest HANDLE_MR_BLOCKED step of each of blocked (on the step table's
// unique key). The list then tells every row what its request page tells, without a read per row.
func (db *DB) HoldsOf(ctx context.Context, partitions, blocked []string) (Holds, error) {
	h := Holds{Cars: map[string][]Batch{}, Pauses: map[string]Pause{}, Blocked: map[string]StepRecord{}}
	for _, chunk := range chunks(partitions, maxInList) {
		rows, err := db.ro.QueryContext(ctx, "SELECT "+batchColumns+" FROM "+db.hinted("merge_batch", "idx_merge_batch_active")+
			" WHERE active_slot IN "+inList(len(chunk))+" ORDER BY active_slot, train_seq, id", anys(chunk)...)
		cars, err := collect(rows, err, scanBatch)
		if err != nil {
			return Holds{}, fmt.Errorf("the trains of a page: %w", err)
		}
		for _, c := range cars {
			h.Cars[c.Partition] = append(h.Cars[c.Partition], c)
		}
		rows, err = db.ro.QueryContext(ctx, "SELECT partition_key, paused_by, reason, paused_at FROM train_pause WHERE partition_key IN "+inList(len(chunk)), anys(chunk)...)
		pauses, err := collect(rows, err, scanPause)
		if err != nil {
			return Holds{}, fmt.Errorf("the pauses of a page: %w", err)
		}
		for _, p := range pauses {
			h.Pauses[p.Partition] = p
		}
	}
	for _, chunk := range chunks(blocked, maxInList) {
		// In each request's own order (seq): the last one read is its latest.
		rows, err := db.ro.QueryContext(ctx, "SELECT id, operation_id, step, status, note, at FROM operation_step WHERE operation_id IN "+inList(len(chunk))+
			" AND step = ? ORDER BY operation_id, seq", append(anys(chunk), state.StepHandleMRBlocked)...)
		steps, err := collect(rows, err, scanStep)
		if err != nil {
			return Holds{}, fmt.Errorf("the blocked steps of a page: %w", err)
		}
		for _, s := range steps {
			h.Blocked[s.OperationID] = s
		}
	}
	return h, nil
}

func scanPause(s scanner) (Pause, error) {
	var p Pause
	var at dbTime
	err := s.Scan(&p.Partition, &p.By, &p.Reason, &at)
	p.At = at.T
	return p, err
}
