package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

const (
	day   = 24 * time.Hour
	lease = 30 * time.Second
)

func claim(t *testing.T, db *store.DB, key, hash string) store.Claim {
	t.Helper()
	c, err := db.ClaimIdempotency(context.Background(), "apply", key, hash, day, lease)
	if err != nil {
		t.Fatalf("claim %s: %v", key, err)
	}
	return c
}

func TestIdempotencyReplaysTheAnswerAndRefusesAnotherPayload(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		if c := claim(t, db, "op-1", "h1"); c.Outcome != store.ClaimFresh {
			t.Fatalf("first claim: %v", c.Outcome)
		}
		if c := claim(t, db, "op-1", "h1"); c.Outcome != store.ClaimPending {
			t.Fatalf("while running: %v, want pending", c.Outcome)
		}
		if c := claim(t, db, "op-1", "h2"); c.Outcome != store.ClaimMismatch {
			t.Fatalf("other payload while running: %v, want mismatch", c.Outcome)
		}
		if err := db.CompleteIdempotency(ctx, "apply", "op-1", 202, []byte(`{"code":"ACCEPTED"}`)); err != nil {
			t.Fatal(err)
		}
		c := claim(t, db, "op-1", "h1")
		if c.Outcome != store.ClaimReplay || c.Record.Status != 202 || string(c.Record.Answer) != `{"code":"ACCEPTED"}` {
			t.Fatalf("replay: %+v", c)
		}
		if c.Record.ExpiresAt.Sub(c.Record.CreatedAt) < day-time.Second {
			t.Fatalf("expiry %v after creation, want the ttl", c.Record.ExpiresAt.Sub(c.Record.CreatedAt))
		}
		if c := claim(t, db, "op-1", "h2"); c.Outcome != store.ClaimMismatch {
			t.Fatalf("other payload after the answer: %v", c.Outcome)
		}
		// The same key in another scope is another request.
		if c, _ := db.ClaimIdempotency(ctx, "revoke", "op-1", "h9", day, lease); c.Outcome != store.ClaimFresh {
			t.Fatalf("other scope: %v", c.Outcome)
		}
	})
}

func TestAFailedRequestReleasesItsKeyForARetry(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		claim(t, db, "op-2", "h")
		if err := db.ReleaseIdempotency(ctx, "apply", "op-2"); err != nil {
			t.Fatal(err)
		}
		if c := claim(t, db, "op-2", "h"); c.Outcome != store.ClaimFresh {
			t.Fatalf("after release: %v", c.Outcome)
		}
		db.ReleaseIdempotency(ctx, "apply", "op-2")
		if err := db.CompleteIdempotency(ctx, "apply", "op-2", 202, nil); !errors.Is(err, store.ErrPreempted) {
			t.Fatalf("completing a released key: %v, want ErrPreempted", err)
		}
		// A finished answer is never released.
		claim(t, db, "op-3", "h")
		db.CompleteIdempotency(ctx, "apply", "op-3", 202, []byte("{}"))
		db.ReleaseIdempotency(ctx, "apply", "op-3")
		if c := claim(t, db, "op-3", "h"); c.Outcome != store.ClaimReplay {
			t.Fatalf("release removed a finished answer: %v", c.Outcome)
		}
	})
}

func TestConcurrentDuplicatesLetExactlyOneProceed(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		const n = 16
		var wg sync.WaitGroup
		outcomes := make(chan store.ClaimOutcome, n)
		start := make(chan struct{})
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				c, err := db.ClaimIdempotency(context.Background(), "apply", "op-race", "h", day, lease)
				if err != nil {
					t.Error(err)
					return
				}
				outcomes <- c.Outcome
			}()
		}
		close(start)
		wg.Wait()
		close(outcomes)
		fresh := 0
		for o := range outcomes {
			switch o {
			case store.ClaimFresh:
				fresh++
			case store.ClaimPending:
			default:
				t.Errorf("outcome %v", o)
			}
		}
		if fresh != 1 {
			t.Fatalf("%d claims proceeded, want exactly 1", fresh)
		}
	})
}

func TestWinnerGoneMeansRetryLater(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		// The insert lost to a concurrent winner which released the key before the re-read.
		c, err := store.IdempotencyWinner(db, context.Background(), "apply", "op-gone", "h")
		if err != nil || c.Outcome != store.ClaimRetryLater {
			t.Fatalf("%+v, %v", c, err)
		}
	})
}

// waitForDBClock waits until the database clock is past t (records expire by the database's
// clock, never the application's).
func waitForDBClock(t *testing.T, db *store.DB, past time.Time) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		now, err := db.Now(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if now.After(past) {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatal("database clock did not pass the deadline")
}

func TestExpiredRecordsCountAsAbsentAndArePurged(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		for _, k := range []string{"old-1", "old-2", "old-3", "old-4", "old-5"} {
			if _, err := db.ClaimIdempotency(ctx, "apply", k, "h", time.Millisecond, lease); err != nil {
				t.Fatal(err)
			}
		}
		db.CompleteIdempotency(ctx, "apply", "old-1", 202, []byte("{}"))
		claim(t, db, "young", "h")
		rec, err := db.IdempotencyRecord(ctx, "apply", "old-5")
		if err != nil {
			t.Fatal(err)
		}
		waitForDBClock(t, db, rec.ExpiresAt)
		if c, _ := db.ClaimIdempotency(ctx, "apply", "old-1", "other", day, lease); c.Outcome != store.ClaimFresh {
			t.Fatalf("an expired record still answered: %v", c.Outcome)
		}
		n, err := db.PurgeExpiredIdempotency(ctx, 2) // chunks of 2: 3 statements
		if err != nil || n != 4 {
			t.Fatalf("purged %d, %v; want the 4 expired", n, err)
		}
		var left int
		db.Raw().QueryRow("SELECT COUNT(*) FROM idempotency_record").Scan(&left)
		if left != 2 {
			t.Fatalf("%d records left, want the 2 unexpired", left)
		}
	})
}

func TestACrashedHolderIsTakenOverAfterItsLease(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		if _, err := db.ClaimIdempotency(ctx, "apply", "op-crash", "h", day, time.Millisecond); err != nil {
			t.Fatal(err)
		}
		now, _ := db.Now(ctx)
		waitForDBClock(t, db, now.Add(5*time.Millisecond))
		if c := claim(t, db, "op-crash", "other"); c.Outcome != store.ClaimMismatch {
			t.Fatalf("another payload took over: %v", c.Outcome)
		}
		if c := claim(t, db, "op-crash", "h"); c.Outcome != store.ClaimFresh {
			t.Fatalf("retry after the lease: %v, want fresh", c.Outcome)
		}
		if c := claim(t, db, "op-crash", "h"); c.Outcome != store.ClaimPending {
			t.Fatalf("second retry: %v, want pending (the first retry holds it now)", c.Outcome)
		}
	})
}

func TestPurgeUsesTheExpiryIndexOnMySQL(t *testing.T) {
	db := storetest.MySQL(t)
	rows, err := db.Raw().Query("EXPLAIN SELECT scope FROM idempotency_record WHERE expires_at <= CURRENT_TIMESTAMP(6) ORDER BY expires_at LIMIT 1000")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		rows.Scan(ptrs...)
		for i, c := range cols {
			if c == "possible_keys" {
				if s, _ := vals[i].([]byte); !strings.Contains(string(s), "idx_idempotency_expires") {
					t.Fatalf("purge cannot use the expiry index: possible_keys=%q", s)
				}
				return
			}
		}
	}
	t.Fatal("no EXPLAIN row")
}

// answered is an application that records its idempotency answer in its own transaction.
func answered(opID, subject, target, hash string) store.Application {
	a := application(opID, subject, target)
	a.Task = &store.TaskSpec{Kind: state.TaskRequest, Lane: "first", Step: "ticket"}
	a.Answer = &store.Answer{Scope: "apply", Key: opID, PayloadHash: hash, TTL: day, Status: 202, Body: []byte(`{"operationId":"` + opID + `"}`)}
	return a
}

// One commit per application (issue: three commits on the request path before): the
// idempotency record with its answer, the operation, the binding, the first step, its news
// (request.accepted) and the tasks of both are written in one transaction — one BEGIN, one COMMIT, no write outside it, and no read at
// all for a first application. Counted by the driver wrapper on both databases.
func TestAnApplicationIsOneCommitWithItsAnswer(t *testing.T) {
	eachCounting(t, func(t *testing.T, db *store.DB, st *statements) {
		db.SetEventRoutes(store.RouteAll)
		_, verbs, all := st.during(t, func() { mustApply(t, db, answered("op-1", "alice", "t", "h1")) })
		txs, seq := st.boundaries()
		if txs["BEGIN"] != 1 || txs["COMMIT"] != 1 || txs["ROLLBACK"] != 0 {
			t.Fatalf("transaction boundaries %v, want one BEGIN and one COMMIT: %q", txs, seq)
		}
		if seq[0] != "BEGIN" || seq[len(seq)-1] != "COMMIT" {
			t.Fatalf("a statement ran outside the application's transaction: %q", seq)
		}
		// The idempotency record, operation, binding, step history, event and tasks (the first
		// step's and the event's routing, one statement), and nothing read: a first application's
		// relation has no row to read (the insert tells).
		if verbs["INSERT"] != 6 || len(all) != 6 {
			t.Fatalf("statements %v: %q", verbs, seq)
		}
		if !strings.Contains(all[0].Query, "idempotency_record") {
			t.Fatalf("first statement %q, want the idempotency record (a duplicate waits on its key holding nothing)", all[0].Query)
		}
		rec, err := db.IdempotencyRecord(bg, "apply", "op-1")
		if err != nil || rec.Status != 202 || string(rec.Answer) != `{"operationId":"op-1"}` || rec.PayloadHash != "h1" {
			t.Fatalf("record %+v, %v", rec, err)
		}
	})
}

// A second application under a taken key writes nothing and is told so (ErrKeyTaken, not the
// ErrDuplicate of a taken operationId); the record then answers it: the same payload replays,
// another is a mismatch. An application refused after its record was written (the relation is
// active) leaves neither the record nor anything else: its transaction is all or nothing.
func TestATakenKeyAnswersFromTheRecordAndARefusalLeavesNothing(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		mustApply(t, db, answered("op-1", "alice", "t", "h1"))
		_, err := db.Apply(bg, answered("op-1", "bob", "u", "h1"))
		if !errors.Is(err, store.ErrKeyTaken) || errors.Is(err, store.ErrDuplicate) {
			t.Fatalf("same key again: %v, want ErrKeyTaken", err)
		}
		if n := count(t, db, "SELECT COUNT(*) FROM binding WHERE subject_id = 'bob'"); n != 0 {
			t.Fatalf("the duplicate wrote %d bindings", n)
		}
		if c, err := db.AnswerOf(bg, "apply", "op-1", "h1"); err != nil || c.Outcome != store.ClaimReplay || string(c.Record.Answer) != `{"operationId":"op-1"}` {
			t.Fatalf("answer of the same payload: %+v, %v", c, err)
		}
		if c, err := db.AnswerOf(bg, "apply", "op-1", "h2"); err != nil || c.Outcome != store.ClaimMismatch {
			t.Fatalf("answer of another payload: %+v, %v", c, err)
		}
		if c, err := db.AnswerOf(bg, "apply", "op-none", "h1"); err != nil || c.Outcome != store.ClaimRetryLater {
			t.Fatalf("answer of a key nobody holds: %+v, %v", c, err)
		}

		_, err = db.Apply(bg, answered("op-2", "alice", "t", "h3"))
		var busy *store.ErrApplyInProgress
		if !errors.As(err, &busy) {
			t.Fatalf("application over an active relation: %v", err)
		}
		for _, q := range []string{"SELECT COUNT(*) FROM idempotency_record WHERE idem_key = 'op-2'", "SELECT COUNT(*) FROM operation WHERE operation_id = 'op-2'",
			"SELECT COUNT(*) FROM operation_step WHERE operation_id = 'op-2'", "SELECT COUNT(*) FROM task WHERE ref = 'op-2'"} {
			if n := count(t, db, q); n != 0 {
				t.Errorf("%s = %d after the refusal, want 0", q, n)
			}
		}
	})
}

// An expired record, or an older build's claim whose lease ran out, does not hold its key: the
// answer read deletes it and says "run again", and the application then takes the key.
func TestAnExpiredRecordOrAStaleClaimGivesItsKeyUp(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		if _, err := db.ClaimIdempotency(bg, "apply", "op-stale", "h1", day, -time.Second); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ClaimIdempotency(bg, "apply", "op-old", "h1", -time.Second, lease); err != nil {
			t.Fatal(err)
		}
		if err := db.CompleteIdempotency(bg, "apply", "op-old", 202, []byte("{}")); err != nil {
			t.Fatal(err)
		}
		for i, key := range []string{"op-stale", "op-old"} {
			a := answered(key, "alice", fmt.Sprintf("t%d", i), "h1")
			if _, err := db.Apply(bg, a); !errors.Is(err, store.ErrKeyTaken) {
				t.Fatalf("%s: %v, want ErrKeyTaken", key, err)
			}
			if c, err := db.AnswerOf(bg, "apply", key, "h1"); err != nil || c.Outcome != store.ClaimRetryLater {
				t.Fatalf("%s: %+v, %v, want retry later", key, c, err)
			}
			mustApply(t, db, a)
		}
	})
}
