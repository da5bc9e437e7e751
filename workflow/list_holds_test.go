package workflow_test

import (
	"fmt"
	"testing"

	"bindery/api"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// "My requests" tells each held request what its request page tells it, in the same words and
// with the same facts: a merge held for a person (the blocker's story), a request waiting behind
// that blocked batch (which batch, since when, why), and a request in a paused queue (who paused
// it, why, since when) — never "Nothing to do" beside a page that says otherwise.
func TestMyRequestsTellWhatTheRequestPageTellsOfAHeldRequest(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		extra := modeSims("mergeBlocker: discussions_not_resolved") +
			"  - {key: grafana, title: Grafana, project: infra/observability-config, path: \"grafana/{subject}.yaml\"}\n"
		h := setup(t, db, options{approvalFirst: true, realBatch: true, extra: extra})
		blocked := h.approved("alice@example.com", "db-read")[0]
		h.roundUntil("the batch held by the unresolved discussion", func() bool { return h.view(blocked).NextAction == state.NextWaitManual })
		behind := h.approved("bob@example.com", "db-write")[0]
		const other = "infra/observability-config"
		if code := h.opsCall("POST", "/api/ops/trains/pause", fmt.Sprintf(`{"operationId":"pause-list","project":%q,"reason":"release freeze until 18:00"}`, other), nil); code != 200 {
			t.Fatalf("pause: %d", code)
		}
		paused := h.approved("carol@example.com", "grafana")[0]
		h.round()

		for _, c := range []struct{ user, op string }{{"alice@example.com", blocked}, {"bob@example.com", behind}, {"carol@example.com", paused}} {
			var page api.Page[api.RequestSummary]
			if code := h.api("GET", "/api/my/requests", c.user, "", &page); code != 200 || len(page.Items) != 1 {
				t.Fatalf("%s's list: %d %+v", c.user, code, page)
			}
			row := page.Items[0]
			var v api.RequestView
			if code := h.api("GET", "/api/requests/"+c.op, c.user, "", &v); code != 200 {
				t.Fatalf("%s's page: %d", c.user, code)
			}
			if row.Label != v.Label || row.NextAction != v.NextAction || row.NextActionText != v.NextActionText {
				t.Errorf("%s: the list says %q / %s / %q, the page %q / %s / %q", c.op, row.Label, row.NextAction, row.NextActionText, v.Label, v.NextAction, v.NextActionText)
			}
			if v.Waiting == nil || (row.Blocker == nil) != (v.Waiting.Blocker == nil) {
				t.Fatalf("%s: the list's blocker %+v, the page's %+v", c.op, row.Blocker, v.Waiting)
			}
			if b := v.Waiting.Blocker; b != nil && (row.Blocker.Text != b.Text || row.Blocker.Behind != b.Behind || row.Blocker.BatchID != b.BatchID || row.Blocker.Label != b.Label || !row.Blocker.Since.Equal(b.Since)) {
				t.Errorf("%s: the list's blocker %+v, the page's %+v", c.op, row.Blocker, b)
			}
		}
		var page api.Page[api.RequestSummary]
		h.api("GET", "/api/my/requests", "carol@example.com", "", &page)
		if p := page.Items[0].Paused; p == nil || p.By != "ops@example.com" || p.Reason != "release freeze until 18:00" || p.Since.IsZero() {
			t.Fatalf("the paused row: %+v", page.Items[0])
		}
		h.api("GET", "/api/my/requests", "bob@example.com", "", &page)
		if r := page.Items[0]; r.NextAction != state.NextWaitManual || r.Label != "Approved, waiting behind a blocked batch" || r.Blocker == nil || !r.Blocker.Behind {
			t.Fatalf("the row behind the blocked batch: %+v", r)
		}
	})
}
