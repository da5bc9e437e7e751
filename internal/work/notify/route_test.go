package notify

import (
	"testing"

	"bindery/internal/platform/config"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// The routing filter: with email on, a requester's event gets a routing task when it is a
// default or some person chose it; a webhook's or chat's subscription routes its types; the
// batch's own events route only to merge request notes.
func TestTheRoutingFilterFollowsTheChoicesAndTheConfiguration(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		src := config.NewStatic(config.MustParse(emailConfig("127.0.0.1:1", "") + "  mrNotes: false\n  chat:\n    - {name: ops, url: \"http://127.0.0.1:1/x\"}\n"))
		e := startEnv(t, db, src, "i-1")
		e.eng.Kill() // only the filter is looked at: nothing runs
		routed := func(typ state.EventType) bool {
			before := count(t, db, "SELECT COUNT(*) FROM task WHERE kind = 'notify'")
			if _, err := db.Tell(bg, store.Event{Type: typ}); err != nil {
				t.Fatal(err)
			}
			return count(t, db, "SELECT COUNT(*) FROM task WHERE kind = 'notify'") > before
		}
		for typ, want := range map[state.EventType]bool{
			state.EventRequestInEffect: true,  // a default
			state.EventRequestAccepted: false, // nobody chose it yet
			state.EventBatchBlocked:    true,  // the ops chat
			state.EventBatchOpened:     false, // no notes
		} {
			if got := routed(typ); got != want {
				t.Errorf("%s routed %v, want %v", typ, got, want)
			}
		}
		if _, err := e.n.SetEmailPrefs(bg, "carol@example.com", []state.EventType{state.EventRequestAccepted}); err != nil {
			t.Fatal(err)
		}
		if !routed(state.EventRequestAccepted) {
			t.Error("request.accepted not routed once somebody chose it")
		}
	})
}
