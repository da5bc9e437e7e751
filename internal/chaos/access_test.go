//go:build e2e || chaos

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"
)

// Access over time under the faults (docs/workflow.md, 'Expiry, reminders and renewal' and
// 'Access reviews'): holders renew bindings in effect, and the operator reviews targets —
// keeping some bindings, removing others — while applications, revocations and kills go on. The
// checks afterwards: every removal a review started took effect once, nothing was removed twice,
// a binding that left effect on its own was skipped, and every renewal was decided and moved
// the expiry of a binding still in effect.

// renewer renews some bindings in effect as their owners (the read targets have a ttl).
func (l *load) renewer(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		sleep(ctx, time.Duration(400+rand.IntN(800))*time.Millisecond)
		a, ok := l.anyAccepted()
		if !ok {
			continue
		}
		status, data := l.c.call(ctx, "GET", "/api/requests/"+a.id, a.user, "")
		var v struct {
			Renewable bool `json:"renewable"`
		}
		if status != http.StatusOK || json.Unmarshal(data, &v) != nil || !v.Renewable {
			continue
		}
		body := fmt.Sprintf(`{"operationId":"rn-%s-%d"}`, a.id, i)
		l.send(ctx, "renew", "POST", "/api/requests/"+a.id+"/renew", a.user, body)
	}
}

// reviewer reviews a random target as the operator now and then: each item is removed one time
// in three, kept otherwise, and the review completed at the next pass — meanwhile the revoker
// and the users may revoke, so that completing finds bindings that left effect on their own.
func (l *load) reviewer(ctx context.Context) {
	targets := targetKeys(l.p.projects)
	var open []int64 // decided at the last pass, completed at this one
	for i := 0; ctx.Err() == nil; i++ {
		sleep(ctx, time.Duration(2000+rand.IntN(2000))*time.Millisecond)
		for _, id := range open {
			l.send(ctx, "review.complete", "POST", fmt.Sprintf("/api/reviews/%d/complete", id), opsIdentity,
				fmt.Sprintf(`{"operationId":"rc-%s-%d"}`, l.runID, id))
		}
		open = open[:0]
		due := time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339)
		target := targets[rand.IntN(len(targets))]
		status, data := l.send(ctx, "review.start", "POST", "/api/reviews", opsIdentity,
			fmt.Sprintf(`{"operationId":"rs-%s-%d","targetKey":%q,"due":%q}`, l.runID, i, target, due))
		if status != http.StatusCreated {
			continue
		}
		var started struct{ ID int64 }
		if json.Unmarshal(data, &started) != nil {
			continue
		}
		status, data = l.c.call(ctx, "GET", fmt.Sprintf("/api/reviews/%d", started.ID), opsIdentity, "")
		var v struct {
			Items []struct {
				ID          int64  `json:"id"`
				OperationID string `json:"operationId"`
			} `json:"items"`
		}
		if status != http.StatusOK || json.Unmarshal(data, &v) != nil {
			continue
		}
		for _, it := range v.Items {
			decision := "keep"
			if rand.IntN(3) == 0 {
				decision = "remove"
			}
			l.send(ctx, "review.decide", "POST", fmt.Sprintf("/api/reviews/%d/items/%d/decide", started.ID, it.ID), opsIdentity,
				fmt.Sprintf(`{"operationId":"rd-%s-%d","decision":%q,"comment":"chaos review"}`, l.runID, it.ID, decision))
			if decision == "remove" && rand.IntN(2) == 0 {
				// Revoked before the review completes: its item leaves effect on its own, and
				// completing must skip it.
				l.send(ctx, "review.revoke", "POST", "/api/requests/"+it.OperationID+"/revoke", opsIdentity,
					fmt.Sprintf(`{"operationId":"rr-%s-%d","reason":"chaos: revoked under review"}`, l.runID, it.ID))
			}
		}
		open = append(open, started.ID)
	}
}

// anyAccepted is a random accepted application (false: none yet).
func (l *load) anyAccepted() (accepted, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.accepted) == 0 {
		return accepted{}, false
	}
	return l.accepted[rand.IntN(len(l.accepted))], true
}

// send posts an idempotent call, resending the same key while the answer is lost or the service
// unavailable, and tallies its answer as name.<status>_<code>.
func (l *load) send(ctx context.Context, name, method, path, who, body string) (int, []byte) {
	for tries := 0; tries < 20 && ctx.Err() == nil; tries++ {
		status, data := l.c.call(ctx, method, path, who, body)
		if status == 0 || status >= 500 || (status == http.StatusConflict && l.codeOf(data) == "CONFLICT" && isStillProcessing(data)) {
			sleep(ctx, 300*time.Millisecond)
			continue
		}
		l.tally.add(fmt.Sprintf("%s.%d_%s", name, status, l.codeOf(data)), 1)
		return status, data
	}
	return 0, nil
}

// isStillProcessing: a 409 that asks to retry shortly (the key's first send is still running, or
// its instance was killed holding it).
func isStillProcessing(data []byte) bool {
	var v struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(data, &v)
	return len(v.Message) > 0 && v.Message == "A request with this operationId is still being processed; retry shortly."
}

// accessAnswers are the answers the renewals and reviews may get under the faults: done, or a
// conflict (not renewable now, no binding in effect, an open review already, decided or completed
// by another call).
var accessAnswers = map[string]bool{
	"renew.202_": true, "renew.409_CONFLICT": true,
	"review.start.201_": true, "review.start.409_CONFLICT": true,
	"review.decide.200_": true, "review.decide.409_CONFLICT": true,
	"review.complete.200_": true, "review.complete.409_CONFLICT": true,
	"review.revoke.202_": true, "review.revoke.409_CONFLICT": true,
}

// access checks what the renewals and reviews left, once the drain is over.
func (c *checker) access() string {
	c.t.Helper()
	c.none("a removal a review started that never took effect",
		`SELECT i.review_id, i.operation_id FROM review_item i WHERE i.removal = 'STARTED'
		  AND NOT EXISTS (SELECT 1 FROM operation_step s WHERE s.operation_id = i.operation_id AND s.step = 10202)`)
	c.none("a binding removed twice (two CLOSE_SUCCEEDED steps of one request)",
		`SELECT operation_id, COUNT(*) FROM operation_step WHERE step = 10202 GROUP BY operation_id HAVING COUNT(*) > 1`)
	c.none("a review that started removing a binding already leaving effect (a skipped item with the review's removal)",
		`SELECT i.review_id, i.operation_id FROM review_item i WHERE i.removal = 'SKIPPED'
		  AND EXISTS (SELECT 1 FROM operation_step s WHERE s.operation_id = i.operation_id AND s.note LIKE CONCAT('Removed by access review ', i.review_id, ',%'))`)
	c.none("a removal started twice by reviews (two review notes on one request)",
		`SELECT operation_id, COUNT(*) FROM operation_step WHERE note LIKE 'Removed by access review %' GROUP BY operation_id HAVING COUNT(*) > 1`)
	c.none("an item kept or undecided whose binding a review removed",
		`SELECT i.review_id, i.operation_id FROM review_item i WHERE i.decision <> 'remove'
		  AND EXISTS (SELECT 1 FROM operation_step s WHERE s.operation_id = i.operation_id AND s.note LIKE CONCAT('Removed by access review ', i.review_id, ',%'))`)
	c.none("a completed review with an item to remove that completing left alone",
		`SELECT i.review_id, i.operation_id FROM review_item i JOIN review r ON r.id = i.review_id WHERE r.status = 'COMPLETED' AND i.decision = 'remove' AND i.removal = ''`)
	c.none("a renewal still waiting for its decision after the drain",
		`SELECT renewal_id, operation_id FROM renewal WHERE status = 'PENDING'`)
	c.none("a binding in effect whose expiry is not its latest renewal's",
		`SELECT b.operation_id, b.expires_at, MAX(r.new_expires_at) FROM binding b JOIN renewal r ON r.operation_id = b.operation_id AND r.status = 'RENEWED'
		  WHERE b.status = 'VALIDATED' GROUP BY b.operation_id, b.expires_at HAVING b.expires_at <> MAX(r.new_expires_at)`)
	var reviews, removed, skipped, renewed int
	_ = c.db.QueryRow(`SELECT COUNT(*) FROM review`).Scan(&reviews)
	_ = c.db.QueryRow(`SELECT COUNT(*) FROM review_item WHERE removal = 'STARTED'`).Scan(&removed)
	_ = c.db.QueryRow(`SELECT COUNT(*) FROM review_item WHERE removal = 'SKIPPED'`).Scan(&skipped)
	_ = c.db.QueryRow(`SELECT COUNT(*) FROM renewal WHERE status = 'RENEWED'`).Scan(&renewed)
	return fmt.Sprintf("reviews=%d removals=%d skipped=%d renewed=%d", reviews, removed, skipped, renewed)
}
