//go:build e2e || chaos

package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// The SQL meaning of "finished": rejected or closed, or validated with no close in progress
// (close steps 10201..10300 keep the status VALIDATED while the removal is batched).
const terminalSQL = `(status IN ('REJECTED', 'CLOSED') OR (status = 'VALIDATED' AND NOT (step >= 10201 AND step < 10301)))`

// operator is the person at the ops console during the drain: she retries what the console's
// stuck list shows (failure states and pending steps) and settles BLOCKED batches, each action
// through the ops API with its own idempotency key.
type operator struct {
	c          *client
	db         *sql.DB
	runID      string
	maxRetries int
	tries      map[string]int
	lateAt     map[string]time.Time // last late application per project
	n          int
	tally      tally
}

// snapshot is what remains to do.
type snapshot struct {
	unfinished, active, waiting int
}

func (s snapshot) String() string {
	return fmt.Sprintf("%d unfinished requests, %d active batches, %d waiting to be batched", s.unfinished, s.active, s.waiting)
}

func (s snapshot) done() bool { return s.unfinished == 0 && s.active == 0 && s.waiting == 0 }

func (o *operator) snapshot() (snapshot, error) {
	var s snapshot
	err := o.db.QueryRow(`SELECT
		(SELECT COUNT(*) FROM operation WHERE NOT `+terminalSQL+`),
		(SELECT COUNT(*) FROM merge_batch WHERE status IN ('RUNNING', 'BLOCKED')),
		(SELECT COUNT(*) FROM merge_batch_request WHERE batch_id IS NULL)`).Scan(&s.unfinished, &s.active, &s.waiting)
	return s, err
}

// drain waits until nothing is left to do (twice in a row, a second apart) or bound passes;
// every few seconds the operator acts.
func (o *operator) drain(ctx context.Context, t *testing.T, bound time.Duration) (bool, string) {
	deadline := time.Now().Add(bound)
	lastAct := time.Now() // the sweeps get a head start before the operator steps in
	quietOnce := false
	var s snapshot
	for {
		var err error
		if s, err = o.snapshot(); err != nil {
			t.Logf("drain: %v", err)
		} else if s.done() {
			if quietOnce {
				return true, s.String()
			}
			quietOnce = true
		} else {
			quietOnce = false
		}
		if time.Now().After(deadline) {
			return false, s.String()
		}
		if time.Since(lastAct) > 5*time.Second {
			o.act(ctx, t)
			lastAct = time.Now()
		}
		sleep(ctx, time.Second)
	}
}

func (o *operator) key(kind string) string {
	o.n++
	return fmt.Sprintf("%s-%s-%d", kind, o.runID, o.n)
}

// lateTraffic applies once more in every project whose MERGED requests (or merged removals,
// CLOSE_MERGED) wait for a deploy callback the simulator dropped. Reconciliation validates a MERGED request only up to the
// highest MR of its project that was called back (deploys run in merge order: docs/workflow.md,
// 'Deploys and reconciliation'), so the last MR of a project whose callback was lost waits for
// the next MR there — in production the next day's traffic; here one application per project,
// as a user would send after the faults are gone. They are counted in the summary.
func (o *operator) lateTraffic(ctx context.Context, t *testing.T) {
	projects, err := column[string](o.db, `SELECT DISTINCT project FROM operation WHERE (status = 'MERGED' OR (status = 'VALIDATED' AND step = 10204)) AND updated_at < NOW(6) - INTERVAL 10 SECOND`)
	if err != nil {
		t.Logf("late traffic: %v", err)
		return
	}
	for _, p := range projects {
		if time.Since(o.lateAt[p]) < 20*time.Second {
			continue
		}
		o.lateAt[p] = time.Now()
		id := o.key("late")
		body := fmt.Sprintf(`{"operationId":%q,"targetKey":%q,"reason":"late traffic"}`, id, strings.TrimPrefix(p, "chaos/")+"-read")
		status, data := o.c.call(ctx, "POST", "/api/apply", id+"@chaos.example", body)
		o.tally.add(fmt.Sprintf("late_application.%d", status), 1)
		if status != http.StatusAccepted {
			t.Logf("late traffic in %s: %d %s", p, status, data)
		}
	}
}

func (o *operator) act(ctx context.Context, t *testing.T) {
	o.lateTraffic(ctx, t)
	// Batches stopped at BLOCKED (a pipeline that never answered, nor did its replacement)
	// hold their partition until batch.blockedTimeout. Their members are in the stuck list: the
	// retry below resumes the batch (a new pipeline on the same commit). One still BLOCKED a
	// minute later, the operator settles (the MR is closed, its members fail and are retried).
	ids, err := column[int64](o.db, `SELECT id FROM merge_batch WHERE status = 'BLOCKED' AND updated_at < TIMESTAMPADD(MINUTE, -1, CURRENT_TIMESTAMP(6))`)
	if err != nil {
		t.Logf("operator: blocked batches: %v", err)
	} else {
		for _, id := range ids {
			status, _ := o.c.call(ctx, "POST", fmt.Sprintf("/api/ops/batches/%d/settle", id), opsIdentity, fmt.Sprintf(`{"operationId":%q}`, o.key("settle")))
			o.tally.add(fmt.Sprintf("settle.%d", status), 1)
		}
	}
	cursor := ""
	for page := 0; page < 50; page++ {
		q := "/api/ops/requests?limit=100"
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		status, data := o.c.call(ctx, "GET", q, opsIdentity, "")
		if status != http.StatusOK {
			t.Logf("operator: GET %s: %d %s", q, status, data)
			return
		}
		var p struct {
			Items []struct {
				OperationID string    `json:"operationId"`
				UpdatedAt   time.Time `json:"updatedAt"`
				Status      string    `json:"status"`
				Step        struct {
					Name string `json:"name"`
				} `json:"step"`
			} `json:"items"`
			NextCursor string `json:"nextCursor"`
		}
		if err := json.Unmarshal(data, &p); err != nil {
			t.Logf("operator: stuck list: %v", err)
			return
		}
		for _, it := range p.Items {
			if time.Since(it.UpdatedAt) < 3*time.Second || o.tries[it.OperationID] >= o.maxRetries {
				continue
			}
			o.tries[it.OperationID]++
			if it.Status == "HANDLE_FAILED" || it.Status == "CREATE_FAILED" {
				// Why the operator had to act: the notes of the request's last steps (a
				// long run's report explains each kind of retry).
				notes, _ := column[string](o.db, `SELECT note FROM operation_step WHERE operation_id = ? ORDER BY seq DESC LIMIT 3`, it.OperationID)
				t.Logf("operator: retry %s at %s (%s): %q", it.OperationID, it.Step.Name, it.Status, notes)
			}
			status, _ := o.c.call(ctx, "POST", "/api/ops/requests/"+it.OperationID+"/retry", opsIdentity, fmt.Sprintf(`{"operationId":%q}`, o.key("retry")))
			o.tally.add(fmt.Sprintf("retry.%s.%d", it.Step.Name, status), 1)
		}
		if cursor = p.NextCursor; cursor == "" {
			return
		}
	}
}
