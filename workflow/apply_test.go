package workflow_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"bindery/api"
	"bindery/internal/platform/config"
	"bindery/store"
	"bindery/store/storetest"
)

// A resend of an application whose first answer was lost, when its idempotency record is gone
// (the instance that ran it was killed after the application's commit and before the answer was
// stored, and the key's lease ran out), is the same request: it is answered DUPLICATE_SUBMIT with
// the request's state, not 409 "already used by another request" (found by the chaos test). The
// same operationId from another user, or for another target, is still refused.
func TestAResentApplicationWithoutItsIdempotencyRecordIsADuplicate(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true})
		op := h.apply("alice", "db-read")
		if _, err := db.Raw().ExecContext(context.Background(), "DELETE FROM idempotency_record WHERE idem_key = ?", op); err != nil {
			t.Fatal(err)
		}
		body := fmt.Sprintf(`{"operationId":%q,"targetKey":"db-read","reason":"for the test"}`, op)
		var res api.ApplyResult
		if code := h.api("POST", "/api/apply", "alice", body, &res); code != 202 || res.Code != api.CodeDuplicateSubmit || res.OperationID != op || res.Status == "" {
			t.Fatalf("resend: %d %+v, want 202 DUPLICATE_SUBMIT of %s with its status", code, res, op)
		}

		for _, c := range []struct{ user, body string }{
			{"bob", body},
			{"alice", fmt.Sprintf(`{"operationId":%q,"targetKey":"grafana","reason":"for the test"}`, op)},
			{"alice", fmt.Sprintf(`{"operationId":%q,"targetKey":"db-read","reason":"another reason"}`, op)},
		} {
			if _, err := db.Raw().ExecContext(context.Background(), "DELETE FROM idempotency_record WHERE idem_key = ?", op); err != nil {
				t.Fatal(err)
			}
			var e struct{ Code string }
			if code := h.api("POST", "/api/apply", c.user, c.body, &e); code != 409 || e.Code != "CONFLICT" {
				t.Errorf("%s sends %s: %d %s, want 409 CONFLICT (another request's operationId)", c.user, c.body, code, e.Code)
			}
		}
	})
}

// An operationId is stored in columns of 64 characters: the longest one is accepted on every
// database, a longer one is refused by name (MariaDB's strict mode refused the row with
// "Data too long", a 500, while SQLite took it).
func TestAnOperationIDLongerThanItsColumnIsRefusedByName(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true})
		longest := strings.Repeat("a", 64)
		var res api.ApplyResult
		if code := h.api("POST", "/api/apply", "alice", fmt.Sprintf(`{"operationId":%q,"targetKey":"db-read","reason":"r"}`, longest), &res); code != 202 || res.OperationID != longest {
			t.Fatalf("64 characters: %d %+v, want 202", code, res)
		}
		var e struct{ Code, Field string }
		if code := h.api("POST", "/api/apply", "bob", fmt.Sprintf(`{"operationId":%q,"targetKey":"db-read","reason":"r"}`, longest+"b"), &e); code != 400 || e.Code != "INVALID_ARGUMENT" || e.Field != "operationId" {
			t.Fatalf("65 characters: %d %+v, want 400 INVALID_ARGUMENT naming operationId", code, e)
		}
	})
}

// The window closes between an application and its resend (its 202 was lost): the resend is the
// same application and gets DUPLICATE_SUBMIT from its stored answer, not 403 APPLY_CLOSED; a new
// application, or the same id from someone else, is still refused as closed.
func TestAResendAfterTheWindowClosedGetsItsOwnAnswer(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true})
		op := h.apply("alice", "db-read")
		h.cfg.Replace(config.MustParse(strings.Replace(configFor(true, ""), "mode: OPEN", "mode: CLOSED", 1)))
		body := func(id string) string {
			return fmt.Sprintf(`{"operationId":%q,"targetKey":"db-read","reason":"for the test"}`, id)
		}
		var res api.ApplyResult
		if code := h.api("POST", "/api/apply", "alice", body(op), &res); code != 202 || res.Code != api.CodeDuplicateSubmit || res.OperationID != op || res.Status == "" {
			t.Fatalf("resend after the window closed: %d %+v", code, res)
		}
		var e struct{ Code string }
		if code := h.api("POST", "/api/apply", "alice", body("op-new-after-close"), &e); code != 403 || e.Code != "APPLY_CLOSED" {
			t.Fatalf("a new application: %d %+v", code, e)
		}
		if code := h.api("POST", "/api/apply", "bob", body(op), &e); code != 403 || e.Code != "APPLY_CLOSED" {
			t.Fatalf("someone else's id: %d %+v", code, e)
		}
	})
}

// Concurrent duplicates of one application through the real server, workflow and store, on
// both databases: exactly one application is written and every answer is 202 for the same
// operationId — one ACCEPTED, the others DUPLICATE_SUBMIT from the winner's record, which its
// own transaction wrote (a duplicate's insert of the key waits for that commit).
func TestConcurrentDuplicatesGetTheWinnersAnswer(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true})
		const n = 8
		body := `{"operationId":"op-dup","targetKey":"db-read","reason":"for the test"}`
		answers := make(chan string, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				var res api.ApplyResult
				code := h.api("POST", "/api/apply", "alice", body, &res)
				answers <- fmt.Sprintf("%d %s %s", code, res.Code, res.OperationID)
			}()
		}
		close(start)
		wg.Wait()
		close(answers)
		got := map[string]int{}
		for a := range answers {
			got[a]++
		}
		if got["202 ACCEPTED op-dup"] != 1 || got["202 DUPLICATE_SUBMIT op-dup"] != n-1 {
			t.Fatalf("answers %v, want one ACCEPTED and %d DUPLICATE_SUBMIT", got, n-1)
		}
		var ops, recs int
		if err := db.Raw().QueryRow("SELECT COUNT(*) FROM operation WHERE operation_id = 'op-dup'").Scan(&ops); err != nil {
			t.Fatal(err)
		}
		if err := db.Raw().QueryRow("SELECT COUNT(*) FROM idempotency_record WHERE idem_key = 'op-dup' AND status = 202").Scan(&recs); err != nil {
			t.Fatal(err)
		}
		if ops != 1 || recs != 1 {
			t.Fatalf("%d operations and %d answered records, want one of each", ops, recs)
		}
	})
}
