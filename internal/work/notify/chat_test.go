package notify

import (
	"encoding/json"
	"strings"
	"testing"

	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// A chat (Slack-compatible incoming webhook) gets the operators' events and, when it lists the
// project, the requests of that project: {"text": …} with the link on its own line.
func TestAChatGetsOperatorsEventsAndItsProjectsRequests(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ops := newReceiver(t, nil)
		team := newReceiver(t, nil)
		newEnv(t, db, "notify:\n  timeout: 2s\n  chat:\n    - {name: ops, url: \""+ops.URL+"\"}\n    - {name: team, url: \""+team.URL+"/hooks/abc\", events: [request.in_effect], projects: [infra/acl]}\n")
		apply(t, db, "op-1", "alice@example.com", toInEffect...)
		if _, err := db.Tell(bg, store.Event{Type: state.EventBatchBlocked, BatchID: 4, Facts: store.EventFacts{BatchID: 4, Project: "infra/acl", MRIID: 9, Why: "a thread must be resolved"}}); err != nil {
			t.Fatal(err)
		}
		settled(t, db)
		texts := func(rc *receiver) []string {
			var out []string
			for _, h := range rc.got() {
				var m map[string]string
				if err := json.Unmarshal(h.body, &m); err != nil || len(m) != 1 {
					t.Fatalf("chat body %s: %v", h.body, err)
				}
				out = append(out, m["text"])
			}
			return out
		}
		got := texts(ops)
		if len(got) != 1 || !strings.HasPrefix(got[0], "Batch 4 of infra/acl is BLOCKED: a thread must be resolved") || !strings.Contains(got[0], "\nMerge request: http://gitlab.test/infra/acl/-/merge_requests/9") ||
			!strings.HasSuffix(got[0], "\nhttp://bindery.test/ops") {
			t.Fatalf("ops chat %q", got)
		}
		got = texts(team)
		// The team chat: in_effect (it listed it) and every requester's event of its project.
		if len(got) != 5 || !strings.Contains(strings.Join(got, "|"), "Your request for team-a: in effect") || !strings.HasSuffix(got[0], "\nhttp://bindery.test/requests/op-1") {
			t.Fatalf("team chat %q", got)
		}
	})
}
