//go:build e2e || chaos

package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"bindery/internal/sim"
	"bindery/internal/testkit"
	"bindery/internal/testkit/leakcheck"
)

// checker re-checks the run over the whole history, in SQL and against the simulators.
type checker struct {
	t           *testing.T
	db          *sql.DB
	simURL      string
	counterLine string
	files       int // bindings whose file on main was checked
}

// rowsOf runs q and returns each row as its columns joined by " ", for messages.
func (c *checker) rowsOf(q string, args ...any) []string {
	c.t.Helper()
	rows, err := c.db.Query(q, args...)
	if err != nil {
		c.t.Fatalf("%s: %v", oneLine(q), err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out []string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			c.t.Fatal(err)
		}
		parts := make([]string, len(cols))
		for i, v := range vals {
			parts[i] = cols[i] + "=" + v.String
			if !v.Valid {
				parts[i] = cols[i] + "=NULL"
			}
		}
		out = append(out, strings.Join(parts, " "))
	}
	if err := rows.Err(); err != nil {
		c.t.Fatal(err)
	}
	return out
}

// none fails when q returns rows, naming up to 20 of them.
func (c *checker) none(what, q string, args ...any) {
	c.t.Helper()
	rows := c.rowsOf(q, args...)
	if len(rows) == 0 {
		return
	}
	shown := rows
	if len(shown) > 20 {
		shown = shown[:20]
	}
	c.t.Errorf("%s: %d violation(s):\n  %s", what, len(rows), strings.Join(shown, "\n  "))
}

// scanAll runs q and scans each row into a new T with scan.
func scanAll[T any](db *sql.DB, scan func(*sql.Rows, *T) error, q string, args ...any) ([]T, error) {
	rows, err := db.Query(q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := scan(rows, &v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// column runs q, which selects one column, and returns its values.
func column[T any](db *sql.DB, q string, args ...any) ([]T, error) {
	return scanAll(db, func(r *sql.Rows, v *T) error { return r.Scan(v) }, q, args...)
}

// all is scanAll for the checker: a failing query fails the test.
func all[T any](c *checker, scan func(*sql.Rows, *T) error, q string, args ...any) []T {
	c.t.Helper()
	out, err := scanAll(c.db, scan, q, args...)
	if err != nil {
		c.t.Fatalf("%s: %v", oneLine(q), err)
	}
	return out
}

func (c *checker) count(q string, args ...any) int {
	c.t.Helper()
	var n int
	if err := c.db.QueryRow(q, args...).Scan(&n); err != nil {
		c.t.Fatalf("%s: %v", oneLine(q), err)
	}
	return n
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// timeline is a request's step history, for the message that names it.
func (c *checker) timeline(operationID string) string {
	rows := c.rowsOf(`SELECT step, status, note, at FROM operation_step WHERE operation_id = ? ORDER BY seq`, operationID)
	return "    " + strings.Join(rows, "\n    ")
}

// deployOverdue is the cluster's reconcile.deployOverdue: a MERGED request unchanged for longer is
// in the ops stuck list, and the drain's operator confirms its deploy when the late traffic of
// its project did not get it validated.
const deployOverdue = 30 * time.Second

// leftovers: after the drain every request is finished. A request that is not is named with
// its state, whether the ops console lists it (a visible state an operator resolves) and its
// timeline.
func (c *checker) leftovers(quiet bool) {
	c.t.Helper()
	type left struct {
		id, status, task string
		step             int
		batch            int64
		at               time.Time
	}
	ls := all(c, func(r *sql.Rows, l *left) error { return r.Scan(&l.id, &l.status, &l.step, &l.batch, &l.task, &l.at) },
		`SELECT o.operation_id, o.status, o.step, COALESCE(o.batch_id, 0), COALESCE(CONCAT(t.step, ' owner=', COALESCE(t.owner, '-'), ' due=', t.due_at), ''), o.updated_at
		 FROM (SELECT * FROM operation WHERE NOT `+terminalSQL+`) o LEFT JOIN task t ON t.kind = 'request' AND t.ref = o.operation_id ORDER BY o.id`)
	for i, l := range ls {
		if i == 20 {
			c.t.Errorf("… and %d more unfinished requests", len(ls)-20)
			break
		}
		visible := l.status == "CREATE_FAILED" || l.status == "HANDLE_FAILED" || (l.step >= 10501 && l.step < 10601) ||
			((l.status == "MERGED" || l.status == "VALIDATED" && l.step == 10204) && time.Since(l.at) > deployOverdue)
		c.t.Errorf("request %s unfinished after the drain: status %s step %d batch %d task %q, unchanged since %s; in the ops console's stuck list: %t; timeline:\n%s",
			l.id, l.status, l.step, l.batch, l.task, l.at.Format(time.RFC3339Nano), visible, c.timeline(l.id))
	}
	if !quiet && len(ls) == 0 {
		c.none("batches still active after the drain", `SELECT b.id, b.partition_key, b.status, b.note, COALESCE(t.step, '(no task)'), COALESCE(t.owner, '') FROM merge_batch b
			LEFT JOIN task t ON t.kind = 'batch' AND t.ref = CAST(b.id AS CHAR) WHERE b.status IN ('RUNNING', 'BLOCKED')`)
		c.none("requests still waiting to be batched after the drain", `SELECT id, operation_id, action, partition_key, created_at FROM merge_batch_request WHERE batch_id IS NULL`)
	}
}

// accepted: nothing accepted is lost — every operationId answered ACCEPTED has its row.
func (c *checker) accepted(acc []accepted) {
	c.t.Helper()
	var missing []string
	for chunk := range slices.Chunk(acc, 500) {
		ids := make([]any, len(chunk))
		for i, a := range chunk {
			ids[i] = a.id
		}
		found := map[string]bool{}
		q := `SELECT operation_id FROM operation WHERE operation_id IN (` + placeholders(len(ids)) + `)`
		for _, id := range all(c, func(r *sql.Rows, id *string) error { return r.Scan(id) }, q, ids...) {
			found[id] = true
		}
		for _, a := range chunk {
			if !found[a.id] {
				missing = append(missing, a.id)
			}
		}
	}
	if len(missing) > 0 {
		c.t.Errorf("%d accepted applications have no operation row (lost): %v", len(missing), missing)
	}
}

func placeholders(n int) string { return strings.TrimSuffix(strings.Repeat("?,", n), ",") }

// clockSlack allows for the database clock's own jitter between two statements of different
// connections. NOW(6) is the statement's start: a claim's INSERT that got the slot started
// after the settling UPDATE that freed it (an INSERT that started earlier finds the active row
// and fails with a duplicate key), so without jitter created_at ≥ the previous settled_at.
const clockSlack = "INTERVAL 1 SECOND"

// invariants re-checks I1, I2, I4, I5, I6 and the batch rules over the whole history.
func (c *checker) invariants() {
	c.t.Helper()
	// I1: at most batch.train cars per partition in its train and batch.isolationCars beside
	// it, now and over time.
	c.none("I1: more active batches in one partition now than its train and the places beside it hold",
		`SELECT partition_key, COUNT(*) n FROM merge_batch WHERE status IN ('RUNNING', 'BLOCKED') GROUP BY partition_key HAVING COUNT(*) > ?`, trainCars+besideCars)
	c.none("I1: more cars in one partition's train now than batch.train",
		`SELECT partition_key, COUNT(*) n FROM merge_batch WHERE status IN ('RUNNING', 'BLOCKED') AND slot_no >= 0 GROUP BY partition_key HAVING COUNT(*) > ?`, trainCars)
	c.none("I1: a terminal batch without settled_at, or an active one with it",
		`SELECT id, status, settled_at FROM merge_batch WHERE (status IN ('SUCCEEDED', 'FAILED')) = (settled_at IS NULL)`)
	c.none("I1: a batch created while its partition had batch.train + batch.isolationCars active already",
		`SELECT b.id, b.partition_key, b.created_at, COUNT(*) active FROM merge_batch b JOIN merge_batch a
		   ON a.partition_key = b.partition_key AND a.id <> b.id AND a.created_at <= b.created_at
		  AND (a.settled_at IS NULL OR a.settled_at > b.created_at + `+clockSlack+`)
		 GROUP BY b.id, b.partition_key, b.created_at HAVING COUNT(*) >= ?`, trainCars+besideCars)
	// The slot is never held without members: every batch has member history.
	c.none("a batch without members (it held or holds a slot for nothing)",
		`SELECT b.id, b.status, b.partition_key FROM merge_batch b WHERE NOT EXISTS (SELECT 1 FROM merge_batch_member m WHERE m.batch_id = b.id)`)

	// I2: a request is in at most one batch at a time. The member history may list a request in
	// several batches over time (bisection requeues, a failed batch's members are re-admitted),
	// but a later batch may claim it only after the earlier one released it — settled, or handed
	// it back to the waiting set while it goes on (a bisection's returned half, a member for a
	// later batch: the request's history shows it QUEUED again, or CLOSE_STARTED for a removal,
	// between the two claims; with a merge train the next car claims it while the bisected car
	// is still active; a write of a binding's file — a restore, a renewal's — moves no step, so
	// for it the later batch continuing the earlier one's bisection is the hand-back) — and a
	// queue row is claimed by the batch that lists it.
	c.none("I2: a request claimed by a batch while an earlier batch holding it was active",
		`SELECT m1.operation_id, m1.action, m1.batch_id first_batch, a.settled_at, m2.batch_id second_batch, m2.claimed_at
		   FROM merge_batch_member m1 JOIN merge_batch a ON a.id = m1.batch_id
		   JOIN merge_batch_member m2 ON m2.operation_id = m1.operation_id AND m2.action = m1.action AND m2.batch_id > m1.batch_id
		   JOIN merge_batch b2 ON b2.id = m2.batch_id
		 WHERE (a.settled_at IS NULL OR m2.claimed_at < a.settled_at - `+clockSlack+`)
		   AND NOT EXISTS (SELECT 1 FROM operation_step s WHERE s.operation_id = m1.operation_id AND s.step IN (10010, 10201)
		     AND s.at > m1.claimed_at AND s.at <= m2.claimed_at + `+clockSlack+`)
		   AND NOT (m1.action IN ('RESTORE', 'REWRITE', 'RENEW') AND b2.bisect_of = COALESCE(a.bisect_of, a.id))`)
	c.none("I2: one batch holding two rows of one request (it changes a request's file once)",
		`SELECT batch_id, operation_id, COUNT(*) n FROM merge_batch_member GROUP BY batch_id, operation_id HAVING COUNT(*) > 1`)
	c.none("I2: a request listed twice in one batch's history",
		`SELECT batch_id, operation_id, action, COUNT(*) n FROM merge_batch_member GROUP BY batch_id, operation_id, action HAVING COUNT(*) > 1`)
	c.none("I2: a claimed queue row whose batch's history does not list it",
		`SELECT r.id, r.operation_id, r.batch_id FROM merge_batch_request r WHERE r.batch_id IS NOT NULL
		   AND NOT EXISTS (SELECT 1 FROM merge_batch_member m WHERE m.batch_id = r.batch_id AND m.request_id = r.id)`)
	c.none("I2: a queue row still held by a failed batch (settlement removes them)",
		`SELECT r.id, r.operation_id, r.batch_id FROM merge_batch_request r JOIN merge_batch b ON b.id = r.batch_id WHERE b.status = 'FAILED'`)
	// I4: one queue row per operation and action.
	c.none("I4: two queue rows for one operation",
		`SELECT operation_id, action, COUNT(*) n FROM merge_batch_request GROUP BY operation_id, action HAVING COUNT(*) > 1`)
	c.none("I4: a queue row without its operation",
		`SELECT r.id, r.operation_id FROM merge_batch_request r WHERE NOT EXISTS (SELECT 1 FROM operation o WHERE o.operation_id = r.operation_id)`)

	// I5: one binding row per subject–target, pointing at an operation of that relation.
	c.none("I5: two binding rows for one relation",
		`SELECT subject_id, target_key, COUNT(*) n FROM binding GROUP BY subject_id, target_key HAVING COUNT(*) > 1`)
	c.none("I5: a binding whose operation is missing or of another relation",
		`SELECT b.id, b.subject_id, b.target_key, b.operation_id FROM binding b LEFT JOIN operation o ON o.operation_id = b.operation_id
		  WHERE o.id IS NULL OR o.subject_id <> b.subject_id OR o.target_key <> b.target_key`)
	c.none("I5: a binding's status differs from its current operation's",
		`SELECT b.operation_id, b.status binding_status, o.status operation_status FROM binding b JOIN operation o ON o.operation_id = b.operation_id WHERE b.status <> o.status`)
	c.none("I5: a relation re-applied while its previous operation was unfinished",
		`SELECT o.operation_id, o.status, o.step, b.operation_id current FROM operation o JOIN binding b ON b.subject_id = o.subject_id AND b.target_key = o.target_key
		  WHERE o.operation_id <> b.operation_id AND o.status NOT IN ('REJECTED', 'CLOSED')`)

	// I6: versions are monotonic. What the history shows: every transition bumps the version
	// and writes one step row, so an operation's version is at least its step rows' count, and
	// a binding's version at least its relation's operations' count (a re-application resets
	// the row in place and must not restart the version); step rows never go back in time.
	c.none("I6: an operation whose version is below its number of transitions",
		`SELECT o.operation_id, o.version, COUNT(s.id) steps FROM operation o JOIN operation_step s ON s.operation_id = o.operation_id
		  GROUP BY o.operation_id, o.version HAVING o.version < COUNT(s.id)`)
	c.none("I6: a binding whose version is below its relation's number of applications",
		`SELECT b.subject_id, b.target_key, b.version, COUNT(o.id) applications FROM binding b JOIN operation o ON o.subject_id = b.subject_id AND o.target_key = b.target_key
		  GROUP BY b.id, b.subject_id, b.target_key, b.version HAVING b.version < COUNT(o.id)`)
	c.none("I6: a step row earlier than the one before it",
		`SELECT s2.operation_id, s1.at, s2.at FROM operation_step s1 JOIN operation_step s2 ON s2.operation_id = s1.operation_id AND s2.seq > s1.seq
		  WHERE s2.at < s1.at - INTERVAL 1 SECOND`)
	c.none("I6: a step row numbered past its operation's version (the history's order is the versions')",
		`SELECT s.operation_id, s.seq, o.version FROM operation_step s JOIN operation o ON o.operation_id = s.operation_id WHERE s.seq > o.version OR s.seq < 1`)
	c.none("I6: a batch or binding with a version below 1",
		`SELECT 'batch' kind, id FROM merge_batch WHERE version < 1 UNION ALL SELECT 'binding', id FROM binding WHERE version < 1`)
	// Validated exactly once: the MERGED → VALIDATED flip is written once per operation. A
	// renewal records a step of its own at CALLED_BACK, in effect throughout (its note says
	// "Renewed…", explain.Renewed): not a flip.
	c.none("an operation validated twice",
		`SELECT operation_id, COUNT(*) n FROM operation_step WHERE step = 10301 AND status = 'VALIDATED' AND note NOT LIKE 'Renewed%' GROUP BY operation_id HAVING COUNT(*) > 1`)
}

// mergeRequests: no MR merged twice, no two batches share an MR, and the simulated GitLab
// agrees with each batch's outcome (a SUCCEEDED batch's MR is merged, a FAILED one's is not:
// merge wins over close).
func (c *checker) mergeRequests() {
	c.t.Helper()
	c.none("two batches share an MR",
		`SELECT project, mr_iid, COUNT(*) n FROM merge_batch WHERE mr_iid IS NOT NULL GROUP BY project, mr_iid HAVING COUNT(*) > 1`)
	// But a removal whose file a person had deleted outside bindery (the drifter): nothing to
	// merge, no MR.
	c.none("a SUCCEEDED batch without an MR",
		`SELECT id FROM merge_batch WHERE status = 'SUCCEEDED' AND mr_iid IS NULL AND note <> ?`, absentNote)
	deploys := c.deploys()
	merges := map[string]int{}
	for _, d := range deploys {
		merges[fmt.Sprintf("%s!%d", d.Project, d.MRIID)]++
	}
	for mr, n := range merges {
		if n > 1 {
			c.t.Errorf("MR %s merged %d times (the simulator's deploy log has one entry per merge)", mr, n)
		}
	}
	type b struct {
		id, iid               int64
		project, status, note string
	}
	bs := all(c, func(r *sql.Rows, x *b) error { return r.Scan(&x.id, &x.project, &x.iid, &x.status, &x.note) },
		`SELECT id, project, mr_iid, status, note FROM merge_batch WHERE mr_iid IS NOT NULL ORDER BY id`)
	hc := &http.Client{Timeout: 5 * time.Second}
	byMR := map[string]int64{}
	for _, x := range bs {
		key := fmt.Sprintf("%s!%d", x.project, x.iid)
		byMR[key] = x.id
		req, _ := http.NewRequest("GET", fmt.Sprintf("%s/sim/gitlab/api/v4/projects/%s/merge_requests/%d", c.simURL, url.PathEscape(x.project), x.iid), nil)
		req.Header.Set("Private-Token", botToken)
		resp, err := hc.Do(req)
		if err != nil {
			c.t.Errorf("GitLab: MR %s of batch %d: %v", key, x.id, err)
			continue
		}
		var mr struct {
			State string `json:"state"`
		}
		err = json.NewDecoder(resp.Body).Decode(&mr)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			c.t.Errorf("GitLab: MR %s of batch %d: %d %v", key, x.id, resp.StatusCode, err)
			continue
		}
		// A removal whose file a person deleted outside bindery after its MR opened (the drifter)
		// has nothing left to merge: its batch ends SUCCEEDED, its MR closed (settleAbsent).
		absent := x.status == "SUCCEEDED" && x.note == absentNote && mr.State == "closed" && merges[key] == 0
		switch {
		case absent:
		case x.status == "SUCCEEDED" && mr.State != "merged":
			c.t.Errorf("batch %d SUCCEEDED but its MR %s is %s in GitLab", x.id, key, mr.State)
		case x.status == "FAILED" && mr.State == "merged":
			c.t.Errorf("batch %d FAILED but its MR %s was merged (merge must win over close)", x.id, key)
		case (x.status == "SUCCEEDED") != (merges[key] == 1):
			c.t.Errorf("batch %d is %s, but the deploy log has its MR %s merged %d times", x.id, x.status, key, merges[key])
		}
	}
	for mr := range merges {
		if _, ok := byMR[mr]; !ok {
			c.t.Errorf("MR %s was merged, but no batch records it", mr)
		}
	}
	c.landedOnce(deploys)
	c.validatedAfterItsDeploy(deploys)
}

// absentNote is the note of a batch whose only member deleted a file already gone.
const absentNote = "the file is already absent"

// validatedAfterItsDeploy: no request is VALIDATED before a deploy that includes its merge — a
// deploy of its own MR or of one merged after it in the same project (the simulator logs one
// deploy per merge, in merge order), that had run (been called back or dropped) by then — and
// no removal is CLOSED before a deploy that includes the removal's merge. MR numbers are not
// merge order, so only the log's order counts; a request's merges are found in the log by its
// operationId (its grant's first, its removal's after it), not by the MR its operation names
// now (a removal's MR replaces the grant's).
func (c *checker) validatedAfterItsDeploy(deploys []deployRecord) {
	c.t.Helper()
	type place struct {
		index int
		at    time.Time // when the deploy ran (zero: not yet)
		mr    int64
	}
	byProject := map[string][]place{}
	landed := map[string][]place{}           // operationId → the merges that carried it, in order
	for i := len(deploys) - 1; i >= 0; i-- { // the simulator lists the newest first
		d := deploys[i]
		p := place{index: len(byProject[d.Project]), mr: d.MRIID}
		if d.Status != "PENDING" {
			p.at = d.At
		}
		byProject[d.Project] = append(byProject[d.Project], p)
		for _, id := range d.OperationIDs {
			landed[id] = append(landed[id], p)
		}
	}
	type ended struct {
		id, project string
		step        int
		at          time.Time
	}
	es := all(c, func(r *sql.Rows, e *ended) error { return r.Scan(&e.id, &e.project, &e.step, &e.at) },
		`SELECT o.operation_id, o.project, s.step, MIN(s.at) FROM operation_step s JOIN operation o ON o.operation_id = s.operation_id
		 WHERE (s.step = 10301 AND s.status = 'VALIDATED') OR (s.step = 10202 AND s.status = 'CLOSED') GROUP BY o.operation_id, o.project, s.step`)
	bad, checked := 0, 0
	for _, e := range es {
		merges := landed[e.id]
		what, which := "validated", 0 // the grant's merge
		if e.step == 10202 {
			if len(merges) < 2 {
				continue // its file was already gone: no removal merged, nothing to deploy
			}
			what, which = "closed", len(merges)-1 // the removal's merge
		}
		checked++
		covered := false
		if which < len(merges) {
			for _, p := range byProject[e.project] {
				// The simulator stamps a deploy when its callback was answered: the flip it
				// caused is a moment earlier.
				if p.index >= merges[which].index && !p.at.IsZero() && !p.at.After(e.at.Add(5*time.Second)) {
					covered = true
					break
				}
			}
		}
		if !covered {
			mr := int64(0)
			if which < len(merges) {
				mr = merges[which].mr
			}
			if bad++; bad <= 20 {
				c.t.Errorf("request %s (MR %s!%d) was %s at %s before any deploy that includes its merge; timeline:\n%s", e.id, e.project, mr, what, e.at.Format(time.RFC3339Nano), c.timeline(e.id))
			}
		}
	}
	c.t.Logf("validated or closed after a deploy including its merge: %d requests checked, %d not", checked, bad)
}

// landedOnce: each request's change landed once per action. The simulator lists, for every
// merge, the operationIds of the files it added, changed or deleted; a request appears in at
// most as many merges as it has actions (ADD, and DELETE when it was revoked). The batches'
// member history cannot tell this alone: it keeps the members a bisection sent back to the
// waiting set, which a later batch then merges. And every validated request landed.
func (c *checker) landedOnce(deploys []deployRecord) {
	c.t.Helper()
	landed := map[string][]string{}
	for _, d := range deploys {
		for _, id := range d.OperationIDs {
			landed[id] = append(landed[id], fmt.Sprintf("%s!%d", d.Project, d.MRIID))
		}
	}
	actions := map[string]int{}
	rows, err := c.db.Query(`SELECT operation_id, COUNT(DISTINCT action) FROM merge_batch_member GROUP BY operation_id`)
	if err != nil {
		c.t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			c.t.Fatal(err)
		}
		actions[id] = n
	}
	rows.Close()
	bad := 0
	for _, id := range sortedKeys(landed) {
		if len(landed[id]) > actions[id] {
			if bad++; bad <= 20 {
				c.t.Errorf("request %s landed %d times (MRs %v) for %d action(s); timeline:\n%s", id, len(landed[id]), landed[id], actions[id], c.timeline(id))
			}
		}
	}
	validated, err := c.db.Query(`SELECT DISTINCT operation_id FROM operation_step WHERE step = 10301 AND status = 'VALIDATED'`)
	if err != nil {
		c.t.Fatal(err)
	}
	defer validated.Close()
	for validated.Next() {
		var id string
		if err := validated.Scan(&id); err != nil {
			c.t.Fatal(err)
		}
		if len(landed[id]) == 0 {
			if bad++; bad <= 20 {
				c.t.Errorf("request %s was validated, but no merge carried its file; timeline:\n%s", id, c.timeline(id))
			}
		}
	}
}

type deployRecord struct {
	Project      string    `json:"project"`
	MRIID        int64     `json:"mrIid"`
	OperationIDs []string  `json:"operationIds"`
	Status       string    `json:"status"`
	At           time.Time `json:"at"`
}

func (c *checker) deploys() []deployRecord {
	c.t.Helper()
	resp, err := http.Get(c.simURL + "/sim/deploys")
	if err != nil {
		c.t.Fatalf("GET /sim/deploys: %v", err)
	}
	defer resp.Body.Close()
	var v struct {
		Items []deployRecord `json:"items"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		c.t.Fatalf("GET /sim/deploys: %v", err)
	}
	return v.Items
}

// validatedCounter: bindery_requests_validated_total, summed over every incarnation of every
// instance, equals the MERGED → VALIDATED flips in the database. The counter lives in each
// process and dies with a kill, so the killer read it right before each SIGKILL, and the
// final incarnations are read now. A flip committed between that read and the kill (a "blind
// window", measured on the database clock) may be missing from the sum; such flips are counted
// in SQL and are the only allowed difference. A sum above the flips is always a failure (a
// flip counted twice, or a count without a flip).
func (c *checker) validatedCounter(insts []*instance, l *counterLedger) {
	c.t.Helper()
	sum := l.scraped
	for _, in := range insts {
		v, err := validatedCounter(in.url())
		if err != nil {
			c.t.Errorf("serve%d: %v", in.idx, err)
			return
		}
		sum += v
	}
	// A renewal's step at CALLED_BACK ("Renewed…") is no flip: the metric does not count it.
	flips := c.count(`SELECT COUNT(*) FROM operation_step WHERE step = 10301 AND status = 'VALIDATED' AND note NOT LIKE 'Renewed%'`)
	blind := 0
	for _, w := range l.windows {
		blind += c.count(`SELECT COUNT(*) FROM operation_step WHERE step = 10301 AND status = 'VALIDATED' AND note NOT LIKE 'Renewed%' AND at BETWEEN ? AND ?`, w[0], w[1])
	}
	c.counterLine = fmt.Sprintf("%d flips in SQL; counters summed over %d kills and the %d live instances: %.0f; flips inside the kills' blind windows: %d; failed pre-kill reads: %d",
		flips, len(l.windows), len(insts), sum, blind, l.failed)
	if int(sum) > flips || int(sum) < flips-blind {
		c.t.Errorf("validated counter: %s — want flips-blind ≤ sum ≤ flips", c.counterLine)
	}
}

type summary struct {
	states, batches string
	merged, deploys int
	deployDropped   int
	mostActive      int // the most batches active at one moment, from their history
}

func (c *checker) summary() summary {
	var s summary
	s.states = strings.Join(c.rowsOf(`SELECT status, COUNT(*) n FROM operation GROUP BY status ORDER BY status`), ", ")
	s.batches = strings.Join(c.rowsOf(`SELECT status, COUNT(*) n FROM merge_batch GROUP BY status ORDER BY status`), ", ")
	s.mostActive = c.count(`SELECT COALESCE(MAX(n), 0) FROM (SELECT (SELECT COUNT(*) FROM merge_batch o
		WHERE o.created_at <= b.created_at AND (o.settled_at IS NULL OR o.settled_at > b.created_at)) n FROM merge_batch b) x`)
	for _, d := range c.deploys() {
		s.deploys++
		s.merged++
		if d.Status == "DROPPED" {
			s.deployDropped++
		}
	}
	return s
}

// slotSampler looks, every half second while the run goes on, for an active batch (it holds
// its partition's slot) that holds no queue row: a slot held for nothing; and for in-flight work
// without a task — a request whose state needs bindery to act (its ticket to send, a legacy MR
// step) or an active batch, with no due time anywhere: work nobody would ever run. The product
// writes a state and the task it needs in one transaction, so one statement's snapshot never
// sees the one without the other.
type slotSampler struct {
	db      *sql.DB
	samples int
	seen    []string
	orphans []string
}

// orphanSQL is in-flight work without a task, written here on its own (not the store's query) so
// that the two check each other.
const orphanSQL = `SELECT 'request', o.operation_id, o.status FROM operation o
	WHERE (o.status = 'APPROVAL_SENDING' OR (o.flow = 'legacy' AND (o.status = 'MR_CREATED' OR (o.status = 'MR_CREATING' AND o.step = 10001)
	  OR (o.status = 'MERGING' AND o.step < 10501))))
	AND NOT EXISTS (SELECT 1 FROM task t WHERE t.kind = 'request' AND t.ref = o.operation_id)
	UNION ALL SELECT 'batch', CAST(b.id AS CHAR), b.status FROM merge_batch b WHERE b.status IN ('RUNNING', 'BLOCKED')
	AND NOT EXISTS (SELECT 1 FROM task t WHERE t.kind = 'batch' AND t.ref = CAST(b.id AS CHAR))`

func (s *slotSampler) run(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(500 * time.Millisecond):
		}
		rows, err := s.db.Query(`SELECT b.id, b.status, b.partition_key FROM merge_batch b
			WHERE b.status IN ('RUNNING', 'BLOCKED') AND NOT EXISTS (SELECT 1 FROM merge_batch_request r WHERE r.batch_id = b.id)`)
		if err != nil {
			continue
		}
		s.samples++
		for rows.Next() {
			var id int64
			var status, part string
			if rows.Scan(&id, &status, &part) == nil {
				s.seen = append(s.seen, fmt.Sprintf("batch %d %s in %s at %s", id, status, part, time.Now().Format(time.RFC3339Nano)))
			}
		}
		rows.Close()
		if rows, err = s.db.Query(orphanSQL); err != nil {
			continue
		}
		for rows.Next() {
			var kind, ref, status string
			if rows.Scan(&kind, &ref, &status) == nil {
				s.orphans = append(s.orphans, fmt.Sprintf("%s %s %s at %s", kind, ref, status, time.Now().Format(time.RFC3339Nano)))
			}
		}
		rows.Close()
	}
}

// repository: what the merges left on each target branch is what the bindings say, but for the
// files a person changed outside bindery (c.drift checks those). A binding
// in effect (VALIDATED) has its file, written by its current application; a revoked one
// (CLOSED) has none. Nothing merged is lost and nothing closed lingers.
func (c *checker) repository(touched map[string]bool) {
	c.t.Helper()
	type rel struct{ subject, target, status, op, project string }
	rels := all(c, func(r *sql.Rows, x *rel) error { return r.Scan(&x.subject, &x.target, &x.status, &x.op, &x.project) },
		`SELECT b.subject_id, b.target_key, b.status, b.operation_id, o.project FROM binding b
		JOIN operation o ON o.operation_id = b.operation_id WHERE b.status IN ('VALIDATED', 'CLOSED') ORDER BY b.id`)
	hc := &http.Client{Timeout: 5 * time.Second}
	bad := 0
	for _, r := range rels {
		// The catalog's path template (configYAML): bindings/<target>/{subject}.yaml.
		file := "bindings/" + r.target + "/" + r.subject + ".yaml"
		if touched[r.project+" "+file] {
			continue // a person changed it outside bindery: the drift check's (c.drift)
		}
		req, _ := http.NewRequest("GET", fmt.Sprintf("%s/sim/gitlab/api/v4/projects/%s/repository/files/%s/raw?ref=main",
			c.simURL, url.PathEscape(r.project), url.PathEscape(file)), nil)
		req.Header.Set("Private-Token", botToken)
		resp, err := hc.Do(req)
		if err != nil {
			c.t.Fatalf("GitLab: %s: %v", file, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var problem string
		switch {
		case r.status == "VALIDATED" && resp.StatusCode != http.StatusOK:
			problem = fmt.Sprintf("in effect, but %s is not on main (%d)", file, resp.StatusCode)
		case r.status == "VALIDATED" && !strings.Contains(string(body), "operationId: "+r.op):
			problem = fmt.Sprintf("in effect, but %s on main was written by another application:\n%s", file, body)
		case r.status == "CLOSED" && resp.StatusCode != http.StatusNotFound:
			problem = fmt.Sprintf("closed, but %s is still on main (%d)", file, resp.StatusCode)
		}
		if problem != "" {
			if bad++; bad <= 20 {
				c.t.Errorf("request %s (%s): %s; timeline:\n%s", r.op, r.status, problem, c.timeline(r.op))
			}
		}
	}
	c.files = len(rels)
}

// requesterViews: whatever the run's faults did, no requester reads internals of a failure.
// Every request is read by its owner — the request view, and the owner's list page by page —
// and every string in them is scanned (leakcheck); the links to the GitLab merge requests and
// pipelines are no leak.
func (c *checker) requesterViews(ctx context.Context, cl *client, gitlabWeb string) {
	c.t.Helper()
	type owned struct{ subject, op string }
	rows := all(c, func(r *sql.Rows, o *owned) error { return r.Scan(&o.subject, &o.op) },
		`SELECT subject_id, operation_id FROM operation ORDER BY subject_id, operation_id`)
	scan := leakcheck.New(nil, gitlabWeb)
	var leaks []string
	read := func(what, who, path string) []byte {
		status, data := cl.call(ctx, "GET", path, who, "")
		if status != http.StatusOK {
			c.t.Errorf("%s as %s: %d %s", path, who, status, data)
			return nil
		}
		for _, l := range scan.JSON(data) {
			leaks = append(leaks, what+" "+l)
		}
		return data
	}
	subjects := map[string]bool{}
	for _, o := range rows {
		subjects[o.subject] = true
		read("request "+o.op, o.subject, "/api/requests/"+url.PathEscape(o.op))
	}
	for subject := range subjects {
		for cursor := ""; ; {
			data := read("the list of "+subject, subject, "/api/my/requests?limit=100&cursor="+url.QueryEscape(cursor))
			var page struct {
				NextCursor string `json:"nextCursor"`
			}
			if data == nil || json.Unmarshal(data, &page) != nil || page.NextCursor == "" {
				break
			}
			cursor = page.NextCursor
		}
	}
	for i, l := range leaks {
		if i == 20 {
			c.t.Errorf("… and %d more", len(leaks)-i)
			break
		}
		c.t.Errorf("a requester reads internals: %s", l)
	}
	c.t.Logf("requester views: %d requests of %d owners scanned for internals, %d leaks", len(rows), len(subjects), len(leaks))
}

// mergedAsTested checks every merge bindery's bot made against the simulator's merge history
// (GET /sim/gitlab/merges): the head merged is the one its batch recorded as tested
// (merge_batch.tested_sha), and the target got no tree the head's pipelines did not run on —
// with the merge method `merge`, GitLab merges a head whose base is behind, so each file the
// merge put beside the head is named with the commit that wrote it. Beside a commit of bindery's
// own (a car merged over another untested) or one bindery had read on the target before it
// merged: a violation. Beside a commit that landed after bindery's last look — the simulator's
// fault that moves the target inside the merge call, or a person's push in that moment — is what
// the merge method allows (docs/gitlab.md, 'What a merge guarantees, per merge method'): counted.
func (c *checker) mergedAsTested() string {
	c.t.Helper()
	resp, err := http.Get(c.simURL + "/sim/gitlab/merges")
	if err != nil {
		c.t.Fatalf("the merge history: %v", err)
	}
	defer resp.Body.Close()
	var merges []sim.MergeRecord
	if err := json.NewDecoder(resp.Body).Decode(&merges); err != nil {
		c.t.Fatalf("the merge history: %v", err)
	}
	type car struct {
		id     int64
		tested string
	}
	cars := map[string]car{}
	type row struct {
		project string
		iid, id int64
		tested  string
	}
	for _, r := range all(c, func(r *sql.Rows, x *row) error { return r.Scan(&x.project, &x.iid, &x.id, &x.tested) },
		`SELECT project, mr_iid, id, tested_sha FROM merge_batch WHERE status = 'SUCCEEDED' AND mr_iid IS NOT NULL`) {
		cars[fmt.Sprintf("%s!%d", r.project, r.iid)] = car{r.id, r.tested}
	}
	var bad []string
	byBot, inCall, afterLook := 0, 0, 0
	for _, m := range merges {
		if m.By != sim.BotUsername {
			continue
		}
		byBot++
		b, ok := cars[fmt.Sprintf("%s!%d", m.Project, m.IID)]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("%s!%d merged, but no SUCCEEDED batch has that MR", m.Project, m.IID))
		case b.tested != m.Head:
			bad = append(bad, fmt.Sprintf("batch %d (%s!%d) merged head %s, but recorded %q as tested", b.id, m.Project, m.IID, m.Head, b.tested))
		}
		for _, f := range m.Untested {
			switch {
			case f.Author == botName:
				bad = append(bad, fmt.Sprintf("%s!%d merged beside %s of bindery's own commit %s (%q): one car over another, untested", m.Project, m.IID, f.Path, f.Commit, f.Title))
			case f.Seen:
				bad = append(bad, fmt.Sprintf("%s!%d merged beside %s of %s (%q by %q), which bindery had read on the target before the merge", m.Project, m.IID, f.Path, f.Commit, f.Title, f.Author))
			case f.Commit == "":
				bad = append(bad, fmt.Sprintf("%s!%d merged beside %s, which no commit the history holds explains", m.Project, m.IID, f.Path))
			case f.Author == "":
				inCall++
			default:
				afterLook++
			}
		}
	}
	for i, b := range bad {
		if i == 20 {
			c.t.Errorf("… and %d more", len(bad)-i)
			break
		}
		c.t.Errorf("merged untested: %s", b)
	}
	return fmt.Sprintf("%d merges by the bot, each at its recorded tested head; files merged beside a head by merge method `merge`: %d moved in by the simulator inside the merge call, %d pushed by a person after bindery's last look, %d otherwise",
		byBot, inCall, afterLook, len(bad))
}

// botName is the simulated GitLab's name of gitlab.botToken's account (the author of its commits).
const botName = "bindery bot"

// driftRoundsRead waits until a drift round has read every project's main at its last head
// (drift_head), so that what the drift check found is about the repository as it ends.
func (c *checker) driftRoundsRead(ctx context.Context) {
	c.t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second}
	var behind []string
	err := testkit.Poll(2*time.Minute, func() bool {
		behind = behind[:0]
		projects, err := column[string](c.db, "SELECT DISTINCT project FROM operation")
		if err != nil {
			behind = append(behind, err.Error())
			return false
		}
		for _, p := range projects {
			req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/sim/gitlab/api/v4/projects/%s/repository/branches/main", c.simURL, url.PathEscape(p)), nil)
			req.Header.Set("Private-Token", botToken)
			resp, err := hc.Do(req)
			if err != nil {
				behind = append(behind, p+": "+err.Error())
				continue
			}
			var br struct{ Commit struct{ ID string } }
			_ = json.NewDecoder(resp.Body).Decode(&br)
			resp.Body.Close()
			if c.count("SELECT COUNT(*) FROM drift_head WHERE project = ? AND branch = 'main' AND head_sha = ?", p, br.Commit.ID) == 0 {
				behind = append(behind, p)
			}
		}
		return len(behind) == 0
	})
	if err != nil {
		c.t.Errorf("the drift check did not read the last head of %v", behind)
	}
}

// drift: every file a person deleted or edited outside bindery (the drifter) whose binding is
// still in effect, and is still as the person left it, is an open finding of that kind, told
// once per change at most; no finding names a file nobody outside bindery touched — bindery's
// own merges are never drift. It returns the touched files ("project path").
func (c *checker) drift(drifts []outsideDrift) map[string]bool {
	c.t.Helper()
	touched := map[string]bool{}
	changes := map[string]int{} // operation → outside changes of its file
	for _, d := range drifts {
		touched[d.project+" "+d.path] = true
		changes[d.op]++
	}
	type finding struct{ project, path, kind, state, op string }
	fs := all(c, func(r *sql.Rows, f *finding) error { return r.Scan(&f.project, &f.path, &f.kind, &f.state, &f.op) },
		"SELECT project, path, kind, state, COALESCE(operation_id, '') FROM drift_finding ORDER BY id")
	open := map[string]finding{}
	for _, f := range fs {
		if !touched[f.project+" "+f.path] {
			c.t.Errorf("drift finding %s %s (%s, %s, request %s): nobody outside bindery changed that file; timeline:\n%s", f.project, f.path, f.kind, f.state, f.op, c.timeline(f.op))
		}
		if f.state == "open" {
			open[f.project+" "+f.path] = f
		}
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	found := 0
	for _, d := range drifts {
		var status string
		var step int
		err := c.db.QueryRow("SELECT b.status, o.step FROM binding b JOIN operation o ON o.operation_id = b.operation_id WHERE b.operation_id = ?", d.op).Scan(&status, &step)
		if err != nil || status != "VALIDATED" || step != 10301 {
			continue // removed since (a revocation, an expiry): nothing to find any more
		}
		req, _ := http.NewRequest("GET", fmt.Sprintf("%s/sim/gitlab/api/v4/projects/%s/repository/files/%s/raw?ref=main",
			c.simURL, url.PathEscape(d.project), url.PathEscape(d.path)), nil)
		req.Header.Set("Private-Token", botToken)
		resp, err := hc.Do(req)
		if err != nil {
			c.t.Fatalf("GitLab: %s: %v", d.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := ""
		switch {
		case resp.StatusCode == http.StatusNotFound:
			want = "missing"
		case !strings.Contains(string(body), "operationId: "+d.op):
			want = "changed"
		}
		f, isOpen := open[d.project+" "+d.path]
		switch {
		case want == "" && isOpen:
			c.t.Errorf("%s is as bindery wrote it again, yet its finding is open (%s)", d.path, f.kind)
		case want != "" && (!isOpen || f.kind != want || f.op != d.op):
			c.t.Errorf("%s was changed outside bindery (%s, request %s in effect), but the drift check did not find it: %+v", d.path, want, d.op, f)
		case want != "":
			found++
		}
	}
	for op, n := range changes {
		if told := c.count("SELECT COUNT(*) FROM notify_event WHERE type = 'binding.drifted' AND operation_id = ?", op); told > n {
			c.t.Errorf("request %s: told binding.drifted %d times for %d changes of its file outside bindery", op, told, n)
		}
	}
	c.t.Logf("drift: %d files changed outside bindery, %d found open at the end, %d findings in all", len(drifts), found, len(fs))
	return touched
}
