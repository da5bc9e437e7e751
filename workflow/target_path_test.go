package workflow_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// Path traversal in target paths (issue 8, point 3; docs/workflow.md, 'Targets and the file
// change': the path template must resolve inside the repository): a target key that spells a path
// is refused with a clear 4xx before anything is stored or sent, the preview of one answers empty,
// a catalog whose templates leave their directory is refused whole, and after real requests went
// all the way to VALIDATED through batches, every file the GitLab simulator holds lies inside a
// target's directory.
func TestTargetPathsNeverLeaveTheirDirectory(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true, realBatch: true, extra: fastSims + "ratelimit:\n  apply: ''\n"})
		hostile := []string{
			"../../etc/passwd", "..", "../db-read", "/etc/passwd", "db-read/../grafana", "db-read/..", "./db-read",
			"db-read%2f..%2f..", "%2e%2e", "db-read\\..\\..\\x", "db-read\x00", "DB-READ", "db-read\n..",
			"db-read/", "bindings/db-read/alice.yaml", "{subject}", "db-read{subject}", strings.Repeat("../", 2000), "",
		}
		for i, key := range hostile {
			body, _ := json.Marshal(map[string]string{"operationId": fmt.Sprintf("op-%d", i), "targetKey": key, "reason": "r"})
			var e struct{ Code, Message, Field string }
			code := h.api("POST", "/api/apply", "alice", string(body), &e)
			if code < 400 || code >= 500 || e.Code == "" || e.Message == "" {
				t.Errorf("apply targetKey %.60q: %d %+v, want a clear 4xx", key, code, e)
			}
			var preview map[string]any
			if code := h.api("GET", "/api/preview?target="+url.QueryEscape(key), "alice", "", &preview); code != 200 || len(preview) != 0 {
				t.Errorf("preview of %.60q: %d %v, want 200 and nothing", key, code, preview)
			}
		}
		if n := count(t, db, "SELECT COUNT(*) FROM operation"); n != 0 {
			t.Fatalf("%d operations stored for refused target keys", n)
		}
		if n := len(h.sims.Approval.Tickets()); n != 0 {
			t.Fatalf("%d approval tickets opened for refused target keys", n)
		}

		// Real requests, all the way to the repository.
		var ops []string
		for _, user := range []string{"alice", "bob", "ops"} {
			ops = append(ops, h.approved(user, "db-read", "grafana")...)
		}
		h.roundUntil("every request validated", func() bool {
			for _, op := range ops {
				if h.view(op).Status != state.StatusValidated {
					return false
				}
			}
			return true
		})
		dirs := map[string]string{"infra/access-config": "bindings/db-read/", "infra/observability-config": "grafana/"}
		written := 0
		for project, dir := range dirs {
			for _, p := range h.sims.GitLab.Paths(project) {
				if p == "README.md" {
					continue // the simulator's initial commit
				}
				if !strings.HasPrefix(p, dir) || strings.Contains(p, "..") || strings.ContainsAny(p, "\\\x00") || strings.Count(p, "/") != strings.Count(dir, "/") {
					t.Errorf("%s holds %q, outside %s", project, p, dir)
				}
				written++
			}
		}
		if written != len(ops) {
			t.Errorf("%d files in the repositories for %d validated requests", written, len(ops))
		}
	})
}
