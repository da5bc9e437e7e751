package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Idempotency records (docs/api.md, 'Idempotency'; docs/invariants.md, 'Duplicate key is an
// answer'): a write request's client operationId is claimed with check → insert → on conflict
// re-read the winner. The unique key does the work; nothing locks.

// ClaimOutcome is what a claim found.
type ClaimOutcome int

const (
	// ClaimFresh: the caller owns the key. Run the request, then CompleteIdempotency with the
	// answer, or ReleaseIdempotency when it failed, so that a retry may run it again.
	ClaimFresh ClaimOutcome = iota + 1
	// ClaimReplay: the same request (same payload) already finished; replay Record.Answer.
	ClaimReplay
	// ClaimMismatch: the key was used for a different payload (422).
	ClaimMismatch
	// ClaimPending: the same request is running elsewhere and has not answered yet.
	ClaimPending
	// ClaimRetryLater: a concurrent request won the key and gave it up before we could read its
	// answer; the caller should try again.
	ClaimRetryLater
)

// IdempotencyRecord is one stored request.
type IdempotencyRecord struct {
	Scope, Key  string
	PayloadHash string
	Status      int    // the answer's HTTP status; 0 while in progress
	Answer      []byte // the answer's body
	CreatedAt   time.Time
	ExpiresAt   time.Time
}

// Claim is the answer of ClaimIdempotency.
type Claim struct {
	Outcome ClaimOutcome
	Record  IdempotencyRecord
}

// ClaimIdempotency claims (scope, key) for a request whose payload hashes to hash. The record
// expires after ttl; while in progress the claimer holds it for lease, after which a retry of
// the same payload may take over (the claimer crashed). Expired records count as absent.
func (db *DB) ClaimIdempotency(ctx context.Context, scope, key, hash string, ttl, lease time.Duration) (Claim, error) {
	rec, expired, leaseOver, err := db.idempotencyRecord(ctx, scope, key)
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return Claim{}, err
	case expired:
		if _, err := db.rw.ExecContext(ctx, "DELETE FROM idempotency_record WHERE scope = ? AND idem_key = ? AND expires_at <= "+db.now(), scope, key); err != nil {
			return Claim{}, translate(err)
		}
	case rec.PayloadHash == hash && rec.Status == 0 && leaseOver:
		return db.takeOverIdempotency(ctx, rec, lease)
	default:
		return classify(rec, hash), nil
	}
	_, err = db.rw.ExecContext(ctx, "INSERT INTO idempotency_record (scope, idem_key, payload_hash, lease_until, expires_at) VALUES (?, ?, ?, "+db.nowPlus()+", "+db.nowPlus()+")",
		scope, key, hash, micros(lease), micros(ttl))
	if err = translate(err); err == nil {
		return Claim{Outcome: ClaimFresh}, nil
	}
	if !errors.Is(err, ErrDuplicate) {
		return Claim{}, err
	}
	// A concurrent request inserted first: its record is the answer.
	return db.idempotencyWinner(ctx, scope, key, hash)
}

// idempotencyWinner re-reads the record that beat our insert. Gone (the winner released it, or
// it expired in between) → retry later: there is no answer to give and we no longer own the key.
func (db *DB) idempotencyWinner(ctx context.Context, scope, key, hash string) (Claim, error) {
	rec, expired, _, err := db.idempotencyRecord(ctx, scope, key)
	switch {
	case errors.Is(err, ErrNotFound) || (err == nil && expired):
		return Claim{Outcome: ClaimRetryLater}, nil
	case err != nil:
		return Claim{}, err
	}
	return classify(rec, hash), nil
}

// takeOverIdempotency claims an in-progress record whose holder's lease ran out, guarded on the
// lease so that of several retries exactly one takes it.
func (db *DB) takeOverIdempotency(ctx context.Context, rec IdempotencyRecord, lease time.Duration) (Claim, error) {
	res, err := db.rw.ExecContext(ctx, "UPDATE idempotency_record SET lease_until = "+db.nowPlus()+
		" WHERE scope = ? AND idem_key = ? AND payload_hash = ? AND status = 0 AND lease_until <= "+db.now(),
		micros(lease), rec.Scope, rec.Key, rec.PayloadHash)
	if err != nil {
		return Claim{}, translate(err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return Claim{Outcome: ClaimFresh}, nil
	}
	return db.idempotencyWinner(ctx, rec.Scope, rec.Key, rec.PayloadHash)
}

// classify answers a claim from an existing, unexpired record.
func classify(rec IdempotencyRecord, hash string) Claim {
	switch {
	case rec.PayloadHash != hash:
		return Claim{Outcome: ClaimMismatch, Record: rec}
	case rec.Status != 0:
		return Claim{Outcome: ClaimReplay, Record: rec}
	}
	return Claim{Outcome: ClaimPending, Record: rec}
}

// IdempotencyRecord reads a record (expired or not); ErrNotFound when there is none.
func (db *DB) IdempotencyRecord(ctx context.Context, scope, key string) (IdempotencyRecord, error) {
	rec, _, _, err := db.idempotencyRecord(ctx, scope, key)
	return rec, err
}

func (db *DB) idempotencyRecord(ctx context.Context, scope, key string) (rec IdempotencyRecord, expired, leaseOver bool, err error) {
	var created, expires dbTime
	var answer []byte
	err = db.ro.QueryRowContext(ctx, "SELECT payload_hash, status, answer, created_at, expires_at, "+
		"CASE WHEN expires_at <= "+db.now()+" THEN 1 ELSE 0 END, CASE WHEN lease_until <= "+db.now()+" THEN 1 ELSE 0 END "+
		"FROM idempotency_record WHERE scope = ? AND idem_key = ?", scope, key).
		Scan(&rec.PayloadHash, &rec.Status, &answer, &created, &expires, &expired, &leaseOver)
	if err != nil {
		return IdempotencyRecord{}, false, false, translate(err)
	}
	rec.Scope, rec.Key, rec.Answer, rec.CreatedAt, rec.ExpiresAt = scope, key, answer, created.T, expires.T
	return rec, expired, leaseOver, nil
}

// CompleteIdempotency stores the answer of the request that holds (scope, key). ErrPreempted:
// the record is no longer in progress under us (its lease ran out and a retry took it over, or
// it was released).
func (db *DB) CompleteIdempotency(ctx context.Context, scope, key string, status int, answer []byte) error {
	res, err := db.rw.ExecContext(ctx, "UPDATE idempotency_record SET status = ?, answer = ? WHERE scope = ? AND idem_key = ? AND status = 0",
		status, answer, scope, key)
	if err != nil {
		return translate(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return ErrPreempted
	}
	return nil
}

// ReleaseIdempotency gives an in-progress key up (the request failed), so that a retry runs it.
func (db *DB) ReleaseIdempotency(ctx context.Context, scope, key string) error {
	_, err := db.rw.ExecContext(ctx, "DELETE FROM idempotency_record WHERE scope = ? AND idem_key = ? AND status = 0", scope, key)
	return translate(err)
}

// PurgeExpiredIdempotency deletes expired records in chunks of batch rows until none is left
// and returns how many it deleted. It is the body of the cleanup cron; safe on every instance
// at once (each chunk is one statement on an indexed range).
func (db *DB) PurgeExpiredIdempotency(ctx context.Context, batch int) (int64, error) {
	if batch <= 0 {
		batch = 1000
	}
	var total int64
	for {
		res, err := db.rw.ExecContext(ctx, db.deleteExpiredIdempotencySQL(), batch)
		if err != nil {
			return total, translate(err)
		}
		n, _ := res.RowsAffected()
		total += n
		if n < int64(batch) {
			return total, nil
		}
	}
}

// deleteExpiredIdempotencySQL: MySQL deletes with ORDER BY … LIMIT; SQLite (built without
// SQLITE_ENABLE_UPDATE_DELETE_LIMIT) deletes by rowid from a limited select.
func (db *DB) deleteExpiredIdempotencySQL() string {
	if db.dialect == MySQL {
		return "DELETE FROM idempotency_record WHERE expires_at <= " + db.now() + " ORDER BY expires_at LIMIT ?"
	}
	return "DELETE FROM idempotency_record WHERE rowid IN (SELECT rowid FROM idempotency_record WHERE expires_at <= " + db.now() + " ORDER BY expires_at LIMIT ?)"
}

// Answer is an idempotency record written complete, in the transaction of the write it answers
// (an application): the answer is known before that transaction commits, so one commit records
// the work and its answer. A crash leaves both or neither, and nothing is ever "in progress":
// a concurrent duplicate's insert of the same key waits for that commit (MySQL holds the key's
// lock; SQLite has one writer), fails with ErrKeyTaken and reads the answer with AnswerOf.
type Answer struct {
	Scope, Key  string
	PayloadHash string
	TTL         time.Duration
	Status      int    // the HTTP status of the answer, never 0
	Body        []byte // the answer's body
}

// ErrKeyTaken: an Answer's (scope, key) is held by another record — read it with AnswerOf.
// Deliberately not ErrDuplicate, which an application answers for a taken operationId.
var ErrKeyTaken = errors.New("idempotency key taken")

// RecordAnswer inserts a, complete, in the transaction (ErrKeyTaken when the key is held).
func (tx *Tx) RecordAnswer(ctx context.Context, a Answer) error {
	return tx.insertAnswers(ctx, []Answer{a})
}

// insertAnswers is RecordAnswer for several answers in one statement: ErrKeyTaken when any
// key is held, and then none is written.
func (tx *Tx) insertAnswers(ctx context.Context, answers []Answer) error {
	db := tx.db
	args := make([]any, 0, 6*len(answers))
	for _, a := range answers {
		args = append(args, a.Scope, a.Key, a.PayloadHash, a.Status, a.Body, micros(a.TTL))
	}
	_, err := tx.tx.ExecContext(ctx, "INSERT INTO idempotency_record (scope, idem_key, payload_hash, status, answer, lease_until, expires_at) VALUES "+
		rowsOf("(?, ?, ?, ?, ?, "+db.now()+", "+db.nowPlus()+")", len(answers)), args...)
	what := answers[0].Scope + " " + answers[0].Key
	if len(answers) > 1 {
		what = fmt.Sprintf("of %d answers from %s", len(answers), what)
	}
	switch err = translate(err); {
	case errors.Is(err, ErrDuplicate):
		return fmt.Errorf("idempotency %s: %w", what, ErrKeyTaken)
	case err != nil:
		return fmt.Errorf("idempotency %s: %w", what, err)
	}
	return nil
}

// AnswerOf reads the record that holds (scope, key) after an Answer's insert found it taken:
// Replay or Mismatch; Pending while an older build's claim (status 0) still holds it under its
// lease; RetryLater when there is no record to answer from — the winner rolled back, or the
// record had expired or its claim's lease had run out, which AnswerOf deletes — so the caller
// runs its write again.
func (db *DB) AnswerOf(ctx context.Context, scope, key, hash string) (Claim, error) {
	rec, expired, leaseOver, err := db.idempotencyRecord(ctx, scope, key)
	gone := ""
	switch {
	case errors.Is(err, ErrNotFound):
		return Claim{Outcome: ClaimRetryLater}, nil
	case err != nil:
		return Claim{}, err
	case expired:
		gone = "expires_at <= " + db.now()
	case rec.Status == 0 && leaseOver:
		gone = "status = 0 AND lease_until <= " + db.now()
	default:
		return classify(rec, hash), nil
	}
	if _, err := db.rw.ExecContext(ctx, "DELETE FROM idempotency_record WHERE scope = ? AND idem_key = ? AND "+gone, scope, key); err != nil {
		return Claim{}, translate(err)
	}
	return Claim{Outcome: ClaimRetryLater}, nil
}
