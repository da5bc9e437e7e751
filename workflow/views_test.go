package workflow_test

import (
	"strings"
	"testing"

	"bindery/api"
	"bindery/store"
	"bindery/store/storetest"
)

func TestListsPreviewAndUnknownRequests(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true})
		a := h.apply("alice", "db-read")
		b := h.apply("alice", "grafana")
		h.apply("bob", "db-read")
		var page api.Page[api.RequestSummary]
		if code := h.api("GET", "/api/my/requests?limit=1", "alice", "", &page); code != 200 || len(page.Items) != 1 || page.Items[0].OperationID != b || page.NextCursor == "" {
			t.Fatalf("page 1: %d %+v", code, page)
		}
		next := page.NextCursor
		page = api.Page[api.RequestSummary]{}
		if code := h.api("GET", "/api/my/requests?limit=1&cursor="+next, "alice", "", &page); code != 200 || len(page.Items) != 1 || page.Items[0].OperationID != a || page.NextCursor != "" {
			t.Fatalf("page 2: %d %+v", code, page)
		}
		var e struct{ Code string }
		if code := h.api("GET", "/api/my/requests?cursor=garbage", "alice", "", &e); code != 400 {
			t.Fatalf("bad cursor: %d %+v", code, e)
		}
		if code := h.api("GET", "/api/requests/no-such-request", "ops", "", &e); code != 404 || e.Code != "NOT_FOUND" {
			t.Fatalf("unknown request: %d %+v", code, e)
		}
		if code := h.api("GET", "/api/requests/"+a, "bob", "", &e); code != 404 || e.Code != "NOT_FOUND" { // like an unknown id
			t.Fatalf("someone else's request: %d", code)
		}

		var p api.Preview
		if code := h.api("GET", "/api/preview?target=db-read", "alice", "", &p); code != 200 || p.Path != "bindings/db-read/alice@example.com.yaml" ||
			!strings.Contains(p.Content, "subject: alice@example.com") || !strings.Contains(p.Content, "target: db-read") {
			t.Fatalf("preview: %d %+v", code, p)
		}
		p = api.Preview{}
		if code := h.api("GET", "/api/preview?target=unknown", "alice", "", &p); code != 200 || p.Path != "" {
			t.Fatalf("preview of an unknown target: %d %+v", code, p)
		}
	})
}

// A GitLab webhook is a hint: it wakes the pollers of its MR, nothing more.
func TestAGitLabEventWakesThePollersOfItsMR(t *testing.T) {
	t.Parallel()
	h := setup(t, storetest.SQLite(t), options{approvalFirst: true})
	body := `{"object_kind":"pipeline","project":{"path_with_namespace":"infra/access-config"},"object_attributes":{"id":5,"status":"success"},"merge_request":{"iid":3}}`
	code, _ := h.hook("/hooks/gitlab", []byte(body), map[string]string{"X-Gitlab-Token": "test-gitlab-token"})
	h.fake.mu.Lock()
	defer h.fake.mu.Unlock()
	if code != 200 || len(h.fake.woken) != 1 || h.fake.woken[0] != "infra/access-config!3" {
		t.Fatalf("hook %d, woken %v", code, h.fake.woken)
	}
}
