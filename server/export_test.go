package server

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"bindery/api"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// The audit export answers an auditor's question without SQL: every application and audited
// action of a range, with who approved the request, as CSV a spreadsheet opens correctly (quotes,
// commas, line breaks kept; a cell that would run as a formula shown as text) or as NDJSON.
// Only operators may read it; a range that is not two RFC 3339 times in order is refused.
func TestTheAuditExportOpensCorrectlyInASpreadsheet(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, options{db: db})
		ctx := context.Background()
		if _, err := db.Apply(ctx, store.Application{OperationID: "op-1", SubjectID: "=cmd|' /C calc'!A0", TargetKey: "db-read", Project: "infra/acl",
			Flow: state.FlowApprovalFirst, Reason: "r", Status: state.StatusApprovalSending, Step: state.StepApprovalSending}); err != nil {
			t.Fatal(err)
		}
		cur, _ := db.Request(ctx, "op-1")
		cur, _ = db.Transition(ctx, cur, store.Change{To: state.StatusApprovalSent, Step: state.StepApprovalSent})
		if _, err := db.Transition(ctx, cur, store.Change{To: state.StatusMRCreating, Step: state.StepQueued, DecidedBy: "dave, the \"approver\""}); err != nil {
			t.Fatal(err)
		}
		if _, err := db.RecordAudit(ctx, store.AuditEvent{Key: "revoke:rv-1", Actor: "ops@example.com", Action: "revoke",
			Params: map[string]any{"request": "op-1", "reason": "+1 line\nand another"}}); err != nil {
			t.Fatal(err)
		}
		now, _ := db.Now(ctx)
		q := url.Values{"from": {now.Add(-time.Hour).Format(time.RFC3339)}, "to": {now.Add(time.Hour).Format(time.RFC3339)}}
		rec := h.do(call{method: "GET", path: "/api/ops/audit/export?" + q.Encode(), user: "ops"})
		if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/csv") {
			t.Fatalf("export: %d %s", rec.Code, rec.Body)
		}
		rows, err := csv.NewReader(strings.NewReader(rec.Body.String())).ReadAll()
		if err != nil || len(rows) != 3 {
			t.Fatalf("CSV %v: %q", err, rec.Body)
		}
		head, app, act := rows[0], rows[1], rows[2]
		col := func(row []string, name string) string {
			for i, c := range head {
				if c == name {
					return row[i]
				}
			}
			t.Fatalf("no column %s", name)
			return ""
		}
		if col(app, "kind") != "application" || col(app, "actor") != "'=cmd|' /C calc'!A0" || col(app, "approver") != `dave, the "approver"` {
			t.Fatalf("the application's row %q", app)
		}
		if col(act, "action") != "revoke" || col(act, "request") != "op-1" || col(act, "approver") != `dave, the "approver"` || !strings.Contains(col(act, "params"), `+1 line\nand another`) {
			t.Fatalf("the action's row %q", act)
		}
		q.Set("format", "ndjson")
		rec = h.do(call{method: "GET", path: "/api/ops/audit/export?" + q.Encode(), user: "ops"})
		var recs []api.AuditRecord
		sc := bufio.NewScanner(rec.Body)
		for sc.Scan() {
			var r api.AuditRecord
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatalf("line %q: %v", sc.Text(), err)
			}
			recs = append(recs, r)
		}
		if len(recs) != 2 || recs[0].Actor != "=cmd|' /C calc'!A0" || recs[1].Approver != `dave, the "approver"` {
			t.Fatalf("NDJSON %+v", recs)
		}
		for _, bad := range []string{"from=yesterday&to=2026-01-01T00:00:00Z", "from=2026-02-01T00:00:00Z&to=2026-01-01T00:00:00Z", "from=2026-01-01T00:00:00Z&to=2026-02-01T00:00:00Z&format=xlsx"} {
			if rec := h.do(call{method: "GET", path: "/api/ops/audit/export?" + bad, user: "ops"}); rec.Code != 400 {
				t.Fatalf("%s: %d", bad, rec.Code)
			}
		}
		if rec := h.do(call{method: "GET", path: "/api/ops/audit/export?" + q.Encode(), user: "alice"}); rec.Code != 403 {
			t.Fatalf("a requester: %d", rec.Code)
		}
	})
}
