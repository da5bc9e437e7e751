package store

import (
	"bindery/internal/vocab/state"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Batch is one merge batch (table merge_batch): the requests one claim took from a partition,
// carried by one MR.
type Batch struct {
	ID         int64
	Partition  string
	Project    string
	Status     state.BatchStatus
	Version    int64 // grows on every write; every write is guarded on it (I6)
	MRIID      int64 // 0: no MR yet
	PipelineID int64
	Note       string
	CreatedAt  time.Time
	UpdatedAt  time.Time
	SettledAt  *time.Time
	// BranchDigest names the member set the MR branch was last written with ("": not written
	// yet, or the members changed since), so a resumed runner knows whether to regenerate it.
	BranchDigest string
	// Failing is the failure decided for the batch while its settlement has not gone through
	// ("": none): written before the MR is closed (write-ahead), so whoever settles the batch —
	// after a crash too — settles it with this cause. LastError says why the last settlement
	// attempt failed. A settlement clears both.
	Failing   string
	LastError string
	// Bisection (docs/workflow.md, 'Bisection'): BisectOf is the batch whose failure started the
	// bisection this batch's members come from (0: none, or this batch started it), Bisections how
	// many bisections of it ran up to and in this batch, Culprit the member this batch failed alone
	// with at the end of one ("": none).
	BisectOf   int64
	Bisections int
	Culprit    string
	// The merge train (docs/architecture.md, "The merge train"): TrainSeq orders the cars of a
	// partition (0: a batch claimed before the train existed, first in line); SlotNo is its
	// place among the active cars, TrainK the train's length when it was claimed. BaseBatch is
	// the car its branch was built on (0: the target branch) and BaseSHA that commit; HeadSHA
	// the commit its branch carries and TestedSHA the head whose pipeline passed ("": none yet).
	// CIStartedAt and CIPassedAt bound its current pipeline wait (the database clock).
	TrainSeq    int64
	TrainK      int
	SlotNo      int
	BaseBatch   int64
	BaseSHA     string
	HeadSHA     string
	TestedSHA   string
	CIStartedAt *time.Time
	CIPassedAt  *time.Time
	// Side: the car is tested beside the train rather than in it (Beside). Earlier versions set it
	// on a car retrying at the end of the train a failure that failed the cars behind it; such a
	// failure is now decided at once, so only a car of those versions still carries it.
	Side bool
	// Rejoined: a bisection's car whose pipeline passed beside the train went into the train at
	// its end (BatchChange.Rejoin), to merge in the train's order: it is a car of the train now,
	// not one beside it.
	Rejoined bool
	// MergedOn is the target head the car's merge went onto, as bindery read it right before the
	// merge call ("": not known). The car behind trusts the target after the merge only when the
	// merge commit stands on it (batch.builtOn).
	MergedOn string
}

// Beside reports a car tested beside its train rather than in it — a bisection's car (its
// set's failure is being searched; or Side): likely to fail again, so no car is built on it and
// none waits for it to merge.
func (b Batch) Beside() bool { return !b.Rejoined && (b.Side || b.Bisections > 0 || b.BisectOf != 0) }

// Passed reports whether the car's pipeline passed for the head its branch carries now.
func (b Batch) Passed() bool { return b.HeadSHA != "" && b.TestedSHA == b.HeadSHA }

// BisectionRoot is the batch whose failure started the bisection this batch takes part in
// (the batch itself when it was not claimed from a suspect group).
func (b Batch) BisectionRoot() int64 {
	if b.BisectOf != 0 {
		return b.BisectOf
	}
	return b.ID
}

const batchColumns = "id, partition_key, project, status, version, mr_iid, pipeline_id, note, created_at, updated_at, settled_at, branch_digest, failing, last_error, bisect_of, bisections, culprit, " +
	"train_seq, train_k, slot_no, base_batch, base_sha, head_sha, tested_sha, ci_started_at, ci_passed_at, side, rejoined, merged_on"

// batchBriefColumns are the columns of a batch the request view needs (scanBatchBrief).
const batchBriefColumns = "id, partition_key, project, status, version, mr_iid, pipeline_id, note, failing, last_error, updated_at"

// scanBatchBrief scans batchBriefColumns; the other fields stay zero.
func scanBatchBrief(s scanner) (Batch, error) {
	var b Batch
	var mr, pipeline nullInt64
	var updated dbTime
	if err := s.Scan(&b.ID, &b.Partition, &b.Project, &b.Status, &b.Version, &mr, &pipeline, &b.Note, &b.Failing, &b.LastError, &updated); err != nil {
		return Batch{}, translate(err)
	}
	b.MRIID, b.PipelineID, b.UpdatedAt = int64(mr), int64(pipeline), updated.T
	return b, nil
}

func scanBatch(s scanner) (Batch, error) {
	var b Batch
	var mr, pipeline, of, seq, base nullInt64
	var created, updated, settled, ciStarted, ciPassed dbTime
	if err := s.Scan(&b.ID, &b.Partition, &b.Project, &b.Status, &b.Version, &mr, &pipeline, &b.Note,
		&created, &updated, &settled, &b.BranchDigest, &b.Failing, &b.LastError, &of, &b.Bisections, &b.Culprit,
		&seq, &b.TrainK, &b.SlotNo, &base, &b.BaseSHA, &b.HeadSHA, &b.TestedSHA, &ciStarted, &ciPassed, &b.Side, &b.Rejoined, &b.MergedOn); err != nil {
		return Batch{}, translate(err)
	}
	b.MRIID, b.PipelineID, b.BisectOf, b.TrainSeq, b.BaseBatch = int64(mr), int64(pipeline), int64(of), int64(seq), int64(base)
	b.CreatedAt, b.UpdatedAt, b.SettledAt = created.T, updated.T, settled.ptr()
	b.CIStartedAt, b.CIPassedAt = ciStarted.ptr(), ciPassed.ptr()
	return b, nil
}

func batchByID(ctx context.Context, q queryer, id int64) (Batch, error) {
	b, err := scanBatch(q.QueryRowContext(ctx, "SELECT "+batchColumns+" FROM merge_batch WHERE id = ?", id))
	if err != nil {
		return Batch{}, fmt.Errorf("batch %d: %w", id, err)
	}
	return b, nil
}

// Member is one request a batch claimed (a row of the append-only member history).
type Member struct {
	RequestID   int64 // the waiting-set row
	BatchID     int64
	OperationID string
	Action      state.Action
	QueuedAt    time.Time
}

// ClaimInput is one claim round for one partition.
type ClaimInput struct {
	Partition string
	Project   string
	Max       int // batch.maxRequests
	// Train is how many cars of the partition may be active at once (batch.train; ≤ 1: one).
	Train int
	// Beside is how many more cars of the partition may be tested beside the train at once
	// (batch.isolationCars; 0: none — a bisection's cars take places in the train): a waiting
	// suspect group is claimed into a free place beside it before anything takes a place in it.
	Beside int
	// Members, when set, moves the claimed requests in the claim's transaction (the batch
	// runner's BATCHED step), so no claimed request is ever seen still "queued".
	Members *MemberChange
	// Task, when set, is the new batch's task (its Kind is given, its Ref is the batch id),
	// inserted in the claim's transaction: a claimed batch is work from its first commit on.
	Task *TaskSpec
}

// BatchClaim is the result of a claim round.
type BatchClaim struct {
	Outcome state.RoundOutcome
	Batch   Batch // set when CLAIMED; its times are not read back
	Members []Member
}

// ErrSlotOccupied: the place a car was to take in its train (its sequence or its slot) is taken
// already — another claim took it first, or the train is full — or the insert lost a deadlock on
// it. Nothing was written; the claim rolls back (docs/invariants.md, I1).
var ErrSlotOccupied = errors.New("slot occupied")

// AnyWaiting reports whether a waiting row of partition was admitted before the database's now:
// a claim's pre-check, on the read pool — no transaction, no lock, no slot churn when idle.
func (db *DB) AnyWaiting(ctx context.Context, partition string) (bool, error) {
	if db.skipClaimPrecheck {
		return true, nil
	}
	var probe int64
	err := db.ro.QueryRowContext(ctx, "SELECT id FROM merge_batch_request WHERE partition_key = ? AND batch_id IS NULL AND created_at < "+
		db.now()+" LIMIT 1", partition).Scan(&probe)
	if err = translate(err); errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("claim %s: pre-check: %w", partition, err)
	}
	return true, nil
}

// CarPlace is where a new car joins its partition's train.
type CarPlace struct {
	Seq  int64 // behind the last car: the partition's highest sequence plus one
	K    int   // the train's length in force
	Slot int   // its place: [0, K) in the train, below 0 beside it
}

// InsertCar inserts the new active batch of partition at p; its unique keys (the sequence and the
// slot of the partition) are the claim's mutual exclusion: a place taken already is
// ErrSlotOccupied. Its times are not read back.
func (tx *Tx) InsertCar(ctx context.Context, partition, project string, p CarPlace) (Batch, error) {
	res, err := tx.tx.ExecContext(ctx, "INSERT INTO merge_batch (partition_key, project, status, train_seq, train_k, slot_no) VALUES (?, ?, ?, ?, ?, ?)",
		partition, project, state.BatchRunning, p.Seq, p.K, p.Slot)
	if err = translate(err); errors.Is(err, ErrDuplicate) || errors.Is(err, ErrRetry) {
		// Duplicate: another claimer took this place in the train (its sequence or its slot)
		// first. Deadlock (MySQL, when several claimers wait on a place whose holder rolled
		// back): another claimer holds it now. Nothing was written; the caller rolls back.
		return Batch{}, ErrSlotOccupied
	}
	if err != nil {
		return Batch{}, fmt.Errorf("insert batch: %w", err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return Batch{}, translate(err)
	}
	tx.db.hook("claim.slot")
	return Batch{ID: id, Partition: partition, Project: project, Status: state.BatchRunning, Version: 1, TrainSeq: p.Seq, TrainK: p.K, SlotNo: p.Slot}, nil
}

// RecordBisection records on batch id the bisection its members come from (of, and which round
// of it): the batch counts the bisection's rounds on.
func (tx *Tx) RecordBisection(ctx context.Context, id, of int64, round int) error {
	if _, err := tx.tx.ExecContext(ctx, "UPDATE "+tx.db.hinted("merge_batch", "PRIMARY")+" SET bisect_of = ?, bisections = ? WHERE id = ?", of, round, id); err != nil {
		return fmt.Errorf("record the bisection of batch %d: %w", id, translate(err))
	}
	return nil
}

// ClaimRows gives batchID the waiting rows members were read from, and records them in the
// member history. I2: it claims only rows still unclaimed, by primary key (record locks only,
// never the waiting gap), and requires every row read to be claimed — anything else is
// ErrPreempted, and the round rolls back.
func (tx *Tx) ClaimRows(ctx context.Context, batchID int64, members []Member) error {
	db := tx.db
	db.hook("claim.read")
	claimed := int64(0)
	for _, chunk := range chunks(members, maxInList) {
		args := []any{batchID}
		for _, m := range chunk {
			args = append(args, m.RequestID)
		}
		res, err := tx.tx.ExecContext(ctx, "UPDATE "+db.hinted("merge_batch_request", "PRIMARY")+" SET batch_id = ?, next_by = NULL WHERE batch_id IS NULL AND id IN "+inList(len(chunk)), args...)
		if err != nil {
			return fmt.Errorf("claim rows: %w", translate(err))
		}
		n, err := affected(res)
		if err != nil {
			return translate(err)
		}
		claimed += n
	}
	if claimed != int64(len(members)) {
		return fmt.Errorf("claimed %d of %d rows read: %w", claimed, len(members), ErrPreempted)
	}
	for _, chunk := range chunks(members, maxInList) {
		args := make([]any, 0, 5*len(chunk))
		for _, m := range chunk {
			args = append(args, batchID, m.RequestID, m.OperationID, m.Action, db.timeArg(m.QueuedAt))
		}
		if _, err := tx.tx.ExecContext(ctx, "INSERT INTO merge_batch_member (batch_id, request_id, operation_id, action, queued_at) VALUES "+
			rowsOf("(?, ?, ?, ?, ?)", len(chunk)), args...); err != nil {
			return fmt.Errorf("member history: %w", translate(err))
		}
	}
	db.hook("claim.written")
	return nil
}

// TransitionClaimed moves the members batchID claimed with c in the claim's transaction, and
// records the batch on their operations (transitionMany's statements).
func (tx *Tx) TransitionClaimed(ctx context.Context, batchID int64, members []Member, c MemberChange) error {
	_, ops := memberIDs(members)
	if _, err := tx.transitionMany(ctx, ops, c, batchID, ""); err != nil {
		return fmt.Errorf("move claimed members: %w", err)
	}
	return nil
}

// Waiting rows a claim reads (ReadWaiting).
type WaitingRows int

const (
	SentNext  WaitingRows = iota // the requests an operator sent into the next car
	Newcomers                    // the rest, never a suspect
)

// ReadWaiting is a plain read (I3) of up to max waiting rows of partition of the kind which,
// admitted before the database's now, in the order they came: by the database clock, the id only
// ordering rows admitted in the same microsecond (millisecond on SQLite) — never by itself, since
// a distributed MySQL hands ids out in blocks per server. Plain, never FOR UPDATE: a locking range
// read would take next-key locks on the waiting range, exactly the gap new requests insert into,
// and block every enqueue until the claim ends; other claimers are kept out by the slot, and any
// unexpected writer is caught by ClaimRows's guarded update.
func (tx *Tx) ReadWaiting(ctx context.Context, partition string, batchID int64, which WaitingRows, max int) ([]Member, error) {
	db := tx.db
	cond := "next_by IS NOT NULL"
	if which == Newcomers {
		cond = "suspect_round IS NULL AND next_by IS NULL"
	}
	q := "SELECT id, operation_id, action, created_at FROM merge_batch_request WHERE partition_key = ? AND batch_id IS NULL AND " + cond +
		" AND created_at < " + db.now() + " ORDER BY created_at, id LIMIT ?"
	if db.lockingClaimRead {
		q += db.forUpdate()
	}
	rows, err := tx.tx.QueryContext(ctx, q, partition, max)
	members, err := collect(rows, err, func(s scanner) (Member, error) {
		m := Member{BatchID: batchID}
		var queued dbTime
		err := s.Scan(&m.RequestID, &m.OperationID, &m.Action, &queued)
		m.QueuedAt = queued.T
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("read waiting: %w", err)
	}
	return members, nil
}

// Places reads the slots the active cars of partition hold: in the train (0 and up) and beside
// it (below 0).
func (tx *Tx) Places(ctx context.Context, partition string) (train, beside []int, err error) {
	rows, err := tx.tx.QueryContext(ctx, "SELECT slot_no FROM "+tx.db.hinted("merge_batch", "idx_merge_batch_active")+" WHERE active_slot = ?", partition)
	slots, err := collect(rows, err, func(s scanner) (int, error) {
		var n int
		return n, s.Scan(&n)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("the train of %s: %w", partition, err)
	}
	for _, n := range slots {
		if n < 0 {
			beside = append(beside, n)
		} else {
			train = append(train, n)
		}
	}
	return train, beside, nil
}

// FreeBeside is the first place beside the train (-1, -2, …) that no car holds.
func FreeBeside(held []int) int {
	n := -1
	for slices.Contains(held, n) {
		n--
	}
	return n
}

// SuspectWaits reports whether a suspect group of partition waits to be claimed (one plain read
// of idx_merge_batch_request_suspect, which holds only the suspects).
func (tx *Tx) SuspectWaits(ctx context.Context, partition string) (bool, error) {
	var id int64
	err := translate(tx.tx.QueryRowContext(ctx, "SELECT id FROM "+tx.db.hinted("merge_batch_request", "idx_merge_batch_request_suspect")+
		" WHERE partition_key = ? AND batch_id IS NULL AND suspect_round IS NOT NULL LIMIT 1", partition).Scan(&id))
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("the suspects of %s: %w", partition, err)
	}
	return true, nil
}

// toBeside moves car id, tested beside its train from now on, out of its place in the train into
// a free place beside it, when one of beside is free (else it keeps its place). It locks the
// partition's train first (LastCar), as a claim does, so no claim takes the same place at once.
func (tx *Tx) toBeside(ctx context.Context, partition string, id int64, beside int) error {
	if _, err := tx.LastCar(ctx, partition); err != nil {
		return err
	}
	_, held, err := tx.Places(ctx, partition)
	if err != nil || len(held) >= beside {
		return err
	}
	_, err = tx.tx.ExecContext(ctx, "UPDATE "+tx.db.hinted("merge_batch", "PRIMARY")+" SET slot_no = ? WHERE id = ? AND slot_no >= 0", FreeBeside(held), id)
	return translate(err)
}

// LastCar is the highest place taken in partition's train (0: none), read after locking the
// partition's row of train_lock: a claim or a move to the end that runs at the same moment waits
// until this transaction ends and then reads past what it wrote, so no car ever joins ahead of
// one placed behind it. The lock is on that one row, never on the waiting set (I3); the read
// after it sees every claim that committed before (MySQL takes a transaction's snapshot at its
// first plain read). SQLite has one writer: its transactions never overlap.
func (tx *Tx) LastCar(ctx context.Context, partition string) (int64, error) {
	db := tx.db
	lock := "INSERT INTO train_lock (partition_key) VALUES (?) ON CONFLICT (partition_key) DO NOTHING"
	if db.dialect == MySQL {
		lock = "INSERT INTO train_lock (partition_key) VALUES (?) ON DUPLICATE KEY UPDATE partition_key = VALUES(partition_key)"
	}
	if _, err := tx.tx.ExecContext(ctx, lock, partition); err != nil {
		return 0, fmt.Errorf("lock the train of %s: %w", partition, translate(err))
	}
	var last nullInt64
	err := translate(tx.tx.QueryRowContext(ctx, "SELECT MAX(train_seq) FROM merge_batch WHERE partition_key = ?", partition).Scan(&last))
	if err != nil {
		return 0, fmt.Errorf("the end of the train of %s: %w", partition, err)
	}
	return int64(last), nil
}

// Suspect is a waiting row a bisection returned to the waiting set: the batch whose failure
// started the bisection (Of) and which bisection of it returned the row (Round).
type Suspect struct {
	Member
	Of    int64
	Round int
}

// ReadSuspects is a plain read (I3) of up to max waiting suspects of partition, latest round
// first, then by the bisection and in the order they came (one read of
// idx_merge_batch_request_suspect, which holds only the suspects).
func (tx *Tx) ReadSuspects(ctx context.Context, partition string, batchID int64, max int) ([]Suspect, error) {
	db := tx.db
	q := "SELECT id, operation_id, action, created_at, suspect_of, suspect_round FROM " + db.hinted("merge_batch_request", "idx_merge_batch_request_suspect") +
		" WHERE partition_key = ? AND batch_id IS NULL AND suspect_round IS NOT NULL ORDER BY suspect_round DESC, suspect_of, created_at, id LIMIT ?"
	if db.lockingClaimRead {
		q += db.forUpdate()
	}
	rows, err := tx.tx.QueryContext(ctx, q, partition, max)
	return collect(rows, err, func(s scanner) (Suspect, error) {
		r := Suspect{Member: Member{BatchID: batchID}}
		var queued dbTime
		var of nullInt64
		err := s.Scan(&r.RequestID, &r.OperationID, &r.Action, &queued, &of, &r.Round)
		r.QueuedAt, r.Of = queued.T, int64(of)
		return r, err
	})
}

// Members returns the requests batch id claimed, from the append-only history: every request it
// ever claimed, also those bisection later returned to the waiting set. They come in the order
// they were admitted — the waiting rows' (created_at, id), which the history keeps as (queued_at,
// request_id) — as Holding and BatchRequests give them; the history's own ids are no order.
func (db *DB) Members(ctx context.Context, batchID int64) ([]Member, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT request_id, batch_id, operation_id, action, queued_at FROM merge_batch_member WHERE batch_id = ? ORDER BY queued_at, request_id", batchID)
	return collect(rows, err, scanMember)
}

func scanMember(s scanner) (Member, error) {
	var m Member
	var queued dbTime
	err := s.Scan(&m.RequestID, &m.BatchID, &m.OperationID, &m.Action, &queued)
	m.QueuedAt = queued.T
	return m, err
}

// Holding returns the requests batchID holds now, in claim order: its rows in the waiting-set
// table. Unlike the history (Members) it leaves out the requests bisection returned to the
// waiting set and those that failed on their own; every member write of a running batch and
// its settlement act on these, never on the history.
func (db *DB) Holding(ctx context.Context, batchID int64) ([]Member, error) {
	return holding(ctx, db.ro, batchID)
}

func holding(ctx context.Context, q queryer, batchID int64) ([]Member, error) {
	rows, err := q.QueryContext(ctx, "SELECT id, batch_id, operation_id, action, created_at FROM merge_batch_request WHERE batch_id = ? ORDER BY created_at, id", batchID)
	return collect(rows, err, scanMember)
}

// BatchRequest is a member as the worker building the batch's commit needs it: its change and
// its application.
type BatchRequest struct {
	Action    state.Action
	Change    AdmittedChange // as validated at admission; zero when not recorded
	Operation Operation
}

// BatchRequests loads the members batchID holds (see Holding) with their applications in one
// query, in claim order — the hand-off never reads a member at a time.
func (db *DB) BatchRequests(ctx context.Context, batchID int64) ([]BatchRequest, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT m.action, m.change_branch, m.change_path, m.change_content, "+prefixed("o.", operationColumns)+
		" FROM merge_batch_request m JOIN operation o ON o.operation_id = m.operation_id WHERE m.batch_id = ? ORDER BY m.created_at, m.id", batchID)
	return collect(rows, err, func(s scanner) (BatchRequest, error) {
		var r BatchRequest
		var branch, path, content nullString
		var err error
		r.Operation, err = scanOperation(s, &r.Action, &branch, &path, &content)
		r.Change = AdmittedChange{Branch: string(branch), Path: string(path), Content: string(content)}
		return r, err
	})
}

func memberIDs(ms []Member) (requests []int64, operations []string) {
	for _, m := range ms {
		requests = append(requests, m.RequestID)
		operations = append(operations, m.OperationID)
	}
	return requests, operations
}

// TransitionMembers moves the members batchID holds with c (the hand-off: BATCHED, MR_CREATED
// with the MR, MERGING, …) and records the batch on their operations. One read of the members,
// then transitionMany's statements per 500 members. It returns the operations flipped.
func (db *DB) TransitionMembers(ctx context.Context, batchID int64, c MemberChange) ([]Operation, error) {
	var out []Operation
	err := db.InTx(ctx, func(tx *Tx) error {
		ms, err := holding(ctx, tx.tx, batchID)
		if err != nil {
			return err
		}
		_, ops := memberIDs(ms)
		out, err = tx.transitionMany(ctx, ops, c, batchID, "")
		return err
	})
	return out, err
}

// BatchChange is a guarded write to an active batch: its status (RUNNING ↔ BLOCKED; settling
// goes through Settle), its MR and pipeline, a note, a new lease.
type BatchChange struct {
	Status     state.BatchStatus // "" keeps it
	MRIID      int64
	PipelineID int64
	Note       string
	// BranchDigest, when set, records the member set the MR branch now carries ("" : stale).
	BranchDigest *string
	// Failing, when set, records the failure decided for the batch before its settlement runs
	// (write-ahead); LastError why the last settlement attempt failed ("" clears them: an operator
	// resumed the batch instead).
	Failing, LastError *string
	// Culprit, when set, names the member a single-member batch of a bisection fails alone with
	// ("" clears it: an operator resumed the batch instead).
	Culprit *string
	// Built, when set, records the branch the car now carries: the car it was built on (0: the
	// target branch), that commit and its own head; its pipeline wait starts now and nothing of
	// it is tested yet.
	Built *Build
	// Tested, when set, records the head whose pipeline passed (now, on the database clock).
	Tested *string
	// ToEnd moves the car to the end of its partition's train: the partition's highest sequence
	// plus one (ErrRetry when another car took that place at the same moment).
	ToEnd bool
	// Rejoin puts a car tested beside the train back into it (Batch.Rejoined); with ToEnd, at
	// its end.
	Rejoin bool
	// Behind, with ToEnd, is the car the move expects to go behind: the last car of the train,
	// the cars beside it left out (0: an empty train). Another car there — a car that joined the
	// end since the caller read the train — is ErrPreempted and nothing is written: the caller
	// reads the train again (a car keeping the branch it built on that car must not go behind
	// another).
	Behind *int64
	// Beside is how many places beside the train its partition has (batch.isolationCars): a
	// bisection, which makes the car one tested beside the train, moves it out of its place in
	// the train into a free one of them (none free: it keeps its place).
	Beside int
}

func nullIfZero(n int64) any {
	if n == 0 {
		return nil
	}
	return n
}

// toEnd moves car id of partition behind the last car of its train (LastCar holds the end while
// it does); a duplicate key is a claim that took the place first: ErrRetry, the step runs again.
// behind, when set, is the car expected last in the train (see BatchChange.Behind).
func (tx *Tx) toEnd(ctx context.Context, partition string, id int64, behind *int64) error {
	last, err := tx.LastCar(ctx, partition)
	if err != nil {
		return err
	}
	if behind != nil {
		end, err := tx.endOfTrain(ctx, partition, id)
		if err != nil {
			return err
		}
		if end != *behind {
			return fmt.Errorf("move batch %d behind batch %d: batch %d is at the end of the train now: %w", id, *behind, end, ErrPreempted)
		}
	}
	_, err = tx.tx.ExecContext(ctx, "UPDATE "+tx.db.hinted("merge_batch", "PRIMARY")+" SET train_seq = ? WHERE id = ?", last+1, id)
	if err = translate(err); errors.Is(err, ErrDuplicate) {
		return fmt.Errorf("move batch %d to the end of its train: %w", id, ErrRetry)
	}
	return err
}

// endOfTrain is the last active car of partition's train (0: none), the cars beside it (a
// bisection's, not rejoined; Batch.Beside) and car but left out — read under the lock LastCar
// took.
func (tx *Tx) endOfTrain(ctx context.Context, partition string, car int64) (int64, error) {
	var id int64
	err := translate(tx.tx.QueryRowContext(ctx, "SELECT id FROM "+tx.db.hinted("merge_batch", "idx_merge_batch_active")+" WHERE active_slot = ? AND id <> ? "+
		"AND (rejoined = 1 OR (side = 0 AND bisections = 0 AND bisect_of IS NULL)) ORDER BY train_seq DESC, id DESC LIMIT 1", partition, car).Scan(&id))
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("the end of the train of %s: %w", partition, err)
	}
	return id, nil
}

// Build is what a car's branch was built on and carries.
type Build struct {
	BaseBatch int64
	BaseSHA   string
	HeadSHA   string
}

// UpdateBatch writes c to the batch cur, guarded on cur.Version (0 rows → ErrPreempted) and on the
// batch transition table (illegal → *ErrIllegalBatchTransition, nothing written).
func (db *DB) UpdateBatch(ctx context.Context, cur Batch, c BatchChange) (Batch, error) {
	b, _, err := db.AdvanceBatch(ctx, BatchStep{Batch: cur, Change: c})
	return b, err
}

// batchUpdate builds the guarded write of c to the batch cur (UpdateBatch, AdvanceBatch);
// bisect counts one more bisection.
func (db *DB) batchUpdate(cur Batch, c BatchChange, bisect bool) (string, []any, error) {
	to := c.Status
	if to == "" {
		to = cur.Status
	}
	if !to.Active() || !state.CanTransitionBatch(cur.Status, to) {
		return "", nil, &state.ErrIllegalBatchTransition{From: cur.Status, To: to}
	}
	var a assignments
	a.set("status = ?, version = version + 1, updated_at = "+db.now(), to)
	a.refs(c.MRIID, c.PipelineID)
	if c.Note != "" {
		a.set("note = ?", clipNote(c.Note))
	}
	if c.BranchDigest != nil {
		a.set("branch_digest = ?", *c.BranchDigest)
	}
	if c.Failing != nil {
		a.set("failing = ?", clipNote(*c.Failing))
	}
	if c.LastError != nil {
		a.set("last_error = ?", clipNote(*c.LastError))
	}
	if c.Culprit != nil {
		a.set("culprit = ?", *c.Culprit)
	}
	if bisect {
		a.set("bisections = bisections + 1")
	}
	switch {
	case c.Built != nil && c.Tested != nil:
		// A head tested as it was written (a merge's regeneration whose pipeline passed at the
		// first look): built and passed in one write.
		a.set("base_batch = ?, base_sha = ?, head_sha = ?, tested_sha = ?, ci_started_at = "+db.now()+", ci_passed_at = "+db.now(),
			nullIfZero(c.Built.BaseBatch), c.Built.BaseSHA, c.Built.HeadSHA, *c.Tested)
	case c.Built != nil:
		a.set("base_batch = ?, base_sha = ?, head_sha = ?, tested_sha = '', ci_started_at = "+db.now()+", ci_passed_at = NULL",
			nullIfZero(c.Built.BaseBatch), c.Built.BaseSHA, c.Built.HeadSHA)
	case c.Tested != nil:
		a.set("tested_sha = ?, ci_passed_at = "+db.now(), *c.Tested)
	}
	if c.Rejoin {
		a.set("rejoined = 1")
	}
	return "UPDATE " + db.hinted("merge_batch", "PRIMARY") + " SET " + a.list + " WHERE id = ? AND version = ?", append(a.args, cur.ID, cur.Version), nil
}

// Settlement ends a batch: SUCCEEDED (its MR merged) or FAILED (closed, or no MR).
type Settlement struct {
	BatchID int64
	Version int64 // the version the settler read: the guard
	Status  state.BatchStatus
	Note    string
	// Members, when set, moves the members in the same transaction (e.g. MERGING → MERGED, or
	// → CREATE_FAILED with the failure step).
	Members *MemberChange
	// Moves are further member transitions in the same transaction, e.g. one per action: the
	// create phase's members → MERGED, the close phase's → CLOSED.
	Moves []MemberMove
	// Merge, when the batch's MR landed, is recorded in the same transaction: the project's
	// merge order that deploys are reconciled by.
	Merge *MergeRecord
	// Tested, when set, records the head whose pipeline passed with the settlement: the merge
	// phase tested a head (after a rebase or a regeneration) and merged it in one action.
	Tested string
	// MergedOn, when set, records the target head the merge went onto (Batch.MergedOn).
	MergedOn string
}

// Settled is what a settlement did.
type Settled struct {
	Members []Member    // every member the batch held (see Holding)
	Flipped []Operation // the members moved by Settlement.Members
	Removed int         // processing rows removed (FAILED)
}

// Settle is DB.Settle inside the transaction (after the fenced write of the settling task).
func (tx *Tx) settle(ctx context.Context, s Settlement) (Settled, error) {
	if !slices.Contains(state.SettledBatchStatuses(), s.Status) {
		return Settled{}, &state.ErrIllegalBatchTransition{From: state.BatchRunning, To: s.Status}
	}
	if s.Members != nil {
		if err := s.Members.Check(); err != nil {
			return Settled{}, err
		}
	}
	if err := checkMoves(s.Moves); err != nil {
		return Settled{}, err
	}
	db := tx.db
	var out Settled
	var a assignments
	a.set("status = ?, note = ?, version = version + 1, updated_at = "+db.now()+", settled_at = "+db.now()+", failing = '', last_error = ''", s.Status, clipNote(s.Note))
	if s.Tested != "" {
		a.set("tested_sha = ?, ci_passed_at = "+db.now(), s.Tested)
	}
	if s.MergedOn != "" {
		a.set("merged_on = ?", s.MergedOn)
	}
	res, err := tx.tx.ExecContext(ctx, "UPDATE "+db.hinted("merge_batch", "PRIMARY")+" SET "+a.list+" WHERE id = ? AND version = ? AND status IN "+inActive,
		append(append(a.args, s.BatchID, s.Version), anys(state.ActiveBatchStatuses())...)...)
	if err := requireOne(res, err, "settle batch %d", s.BatchID); err != nil {
		return Settled{}, err
	}
	db.hook("settle.batch")
	if s.Merge != nil {
		if err := tx.RecordMerge(ctx, *s.Merge); err != nil {
			return Settled{}, err
		}
	}
	ms, err := holding(ctx, tx.tx, s.BatchID)
	if err != nil {
		return Settled{}, err
	}
	out.Members = ms
	requests, ops := memberIDs(ms)
	if s.Status == state.BatchFailed {
		for _, chunk := range chunks(requests, maxInList) {
			res, err := tx.tx.ExecContext(ctx, db.deleteFrom("merge_batch_request", "PRIMARY")+" WHERE batch_id = ? AND id IN "+inList(len(chunk)),
				append([]any{s.BatchID}, anys(chunk)...)...)
			if err != nil {
				return Settled{}, fmt.Errorf("remove members of batch %d: %w", s.BatchID, translate(err))
			}
			n, err := affected(res)
			if err != nil {
				return Settled{}, translate(err)
			}
			out.Removed += int(n)
		}
	}
	if s.Members != nil {
		if out.Flipped, err = tx.transitionMany(ctx, ops, *s.Members, s.BatchID, ""); err != nil {
			return Settled{}, err
		}
	}
	moved, err := tx.moveMembers(ctx, ms, s.Moves, s.BatchID)
	out.Flipped = append(out.Flipped, moved...)
	return out, err
}

// BatchFilter selects the ops console's batch list; empty fields match everything.
type BatchFilter struct {
	Partition string
	Status    state.BatchStatus
	Page
}

// BatchWithMembers is a batch and its members' applications, in the order they were admitted.
// Moved names the members that left the batch with the same action (a bisection's half, a
// failure retried in a later batch): operationId → the batch that took the action last, 0 while
// it waits in the waiting set again. Such a member's status is no longer this batch's doing.
type BatchWithMembers struct {
	Batch   Batch
	Members []Operation
	Moved   map[string]int64
}

// Batches lists batches newest first, each with its members (two queries per page). Newest by
// the database clock (created_at, then id): ids are no order on a distributed MySQL.
func (db *DB) Batches(ctx context.Context, f BatchFilter) ([]BatchWithMembers, string, error) {
	c, after, err := decodeCursor(f.Cursor)
	if err != nil {
		return nil, "", err
	}
	// Through the index of the filter, walked from its newest end until the page is full: on a
	// table of a few dozen batches the optimizers would rather sort it whole, and the page must
	// stay a bounded walk when it holds years of them.
	through := "idx_merge_batch_created"
	switch {
	case f.Partition != "":
		through = "idx_merge_batch_partition_created"
	case f.Status != "":
		through = "idx_merge_batch_status_created"
	}
	q := "SELECT " + batchColumns + " FROM " + db.hinted("merge_batch", through) + " WHERE 1 = 1"
	var args []any
	if f.Partition != "" {
		q += " AND partition_key = ?"
		args = append(args, f.Partition)
	}
	if f.Status != "" {
		q += " AND status = ?"
		args = append(args, f.Status)
	}
	q, args = keyset{at: "created_at", id: "id", desc: true}.page(db, q, args, c, after, f.limit())
	rows, err := db.ro.QueryContext(ctx, q, args...)
	batches, err := collect(rows, err, scanBatch)
	if err != nil {
		return nil, "", err
	}
	batches, next := trimPage(batches, f.limit(), func(b Batch) cursor { return cursor{ID: b.ID, At: b.CreatedAt} })
	out := make([]BatchWithMembers, len(batches))
	index := map[int64]int{}
	ids := make([]any, len(batches))
	for i, b := range batches {
		out[i].Batch = b
		index[b.ID] = i
		ids[i] = b.ID
	}
	if len(ids) == 0 {
		return out, next, nil
	}
	// Where each member's action is now: the batch that claimed it last (membership rows stay
	// when a member leaves), and its row in the waiting set — unclaimed again, or gone once
	// settled.
	mrows, err := db.ro.QueryContext(ctx, "SELECT m.batch_id, "+
		"(SELECT l.batch_id FROM merge_batch_member l WHERE l.operation_id = m.operation_id AND l.action = m.action ORDER BY l.claimed_at DESC, l.id DESC LIMIT 1), "+
		"(SELECT COUNT(*) FROM merge_batch_request r WHERE r.operation_id = m.operation_id AND r.action = m.action AND r.batch_id IS NULL), "+
		prefixed("o.", operationColumns)+" FROM merge_batch_member m "+
		"JOIN operation o ON o.operation_id = m.operation_id WHERE m.batch_id IN "+inList(len(ids))+" ORDER BY m.batch_id, m.queued_at, m.request_id", ids...)
	if err != nil {
		return nil, "", translate(err)
	}
	defer mrows.Close()
	for mrows.Next() {
		var batchID, latest, waiting int64
		o, err := scanOperation(mrows, &batchID, &latest, &waiting)
		if err != nil {
			return nil, "", err
		}
		i := index[batchID]
		out[i].Members = append(out[i].Members, o)
		// An unclaimed row in the waiting set is held by no batch: after this one let it go, it
		// waits again (0) or went through the later batch first.
		if latest != batchID || waiting > 0 {
			to := latest
			if to == batchID {
				to = 0
			}
			if out[i].Moved == nil {
				out[i].Moved = map[string]int64{}
			}
			out[i].Moved[o.OperationID] = to
		}
	}
	return out, next, translate(mrows.Err())
}
