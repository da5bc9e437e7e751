package notify

import (
	"strings"
	"testing"
	"time"

	"bindery/internal/platform/config"
	"bindery/store"
	"bindery/store/storetest"
)

// A binding whose expiry nears is told to its holder once per reminder, by email unless they
// chose otherwise, with when it expires and a link to renew it — however many instances look
// and however often. A binding whose expiry is further than the longest reminder is not told,
// and neither is one whose target's ttl is shorter than the reminder (it would be told "expires
// in 2 days" the moment it is granted).
func TestAnExpiringBindingIsRemindedOnceAcrossInstances(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		mp := startMailpit(t)
		yaml := emailConfig(mp.smtp, "") + "targets:\n" +
			"  - {key: team-a, title: Team A, project: infra/acl, path: \"acl/{subject}.yaml\", ttl: 30d}\n" +
			"  - {key: team-b, title: Team B, project: infra/acl, path: \"b/{subject}.yaml\", ttl: 3d}\n"
		src := config.NewStatic(config.MustParse(yaml))
		a := startEnv(t, db, src, "i-1")
		b := startEnv(t, db, src, "i-2")
		apply(t, db, "op-soon", "alice@example.com", toInEffect...)
		apply(t, db, "op-later", "bob@example.com", toInEffect...)
		applyTo(t, db, "op-short", "carol@example.com", "team-b", toInEffect...)
		for _, f := range []struct {
			target, op string
			left       time.Duration
		}{{"team-a", "op-soon", 6 * 24 * time.Hour}, {"team-a", "op-later", 12 * 24 * time.Hour}, {"team-b", "op-short", 2 * 24 * time.Hour}} {
			if _, err := db.FillExpiry(bg, f.target, f.left, f.op); err != nil {
				t.Fatal(err)
			}
		}
		settled(t, db)
		before := len(mp.messages(t)) // the three "in effect" messages
		wa, wb := a.n.NewWatch(15*time.Second, nil), b.n.NewWatch(15*time.Second, nil)
		for range 3 {
			for _, w := range []*Watch{wa, wb} {
				if _, err := w.RunOnce(bg); err != nil {
					t.Fatal(err)
				}
			}
		}
		settled(t, db)
		if n := count(t, db, "SELECT COUNT(*) FROM notify_event WHERE type = 'binding.expiring'"); n != 1 {
			t.Fatalf("%d reminders recorded, want 1 (op-soon's)", n)
		}
		msgs := mp.messages(t)[before:]
		if len(msgs) != 1 {
			t.Fatalf("%d reminders emailed, want 1", len(msgs))
		}
		m := msgs[0]
		if m.To[0].Address != "alice@example.com" || !strings.Contains(m.Subject, "Your access to Team A expires in 6 days") {
			t.Fatalf("reminder to %v: %q", m.To, m.Subject)
		}
		for _, part := range []string{m.Text, m.HTML} {
			if !strings.Contains(part, "http://bindery.test/requests/op-soon") || !strings.Contains(part, "renew it on your request") {
				t.Fatalf("a part without when and how to renew:\n%s", part)
			}
		}
	})
}

// The reminder due is the smallest one the time left is within, and only when the target's ttl
// is longer than it.
func TestTheReminderDueIsTheSmallestOneWithin(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	snap := config.MustParse("targets:\n  - {key: t30, project: p/q, path: \"a/{subject}.yaml\", ttl: 30d}\n  - {key: t3, project: p/q, path: \"b/{subject}.yaml\", ttl: 3d}\n  - {key: never, project: p/q, path: \"c/{subject}.yaml\"}\n")
	offsets := []time.Duration{7 * day, day}
	for _, c := range []struct {
		target string
		left   time.Duration
		want   time.Duration
		due    bool
	}{
		{"t30", 8 * day, 0, false},
		{"t30", 6 * day, 7 * day, true},
		{"t30", 12 * time.Hour, day, true}, // a look after a long pause: the one due, not both
		{"t3", 2 * day, 0, false},
		{"t3", 20 * time.Hour, day, true},
		{"never", 3 * day, 7 * day, true}, // no ttl in the catalog (an expiry set otherwise)
	} {
		got, due := reminderDue(offsets, store.Expiring{Operation: store.Operation{TargetKey: c.target}, Left: c.left}, snap)
		if got != c.want || due != c.due {
			t.Errorf("%s with %s left: %s %v, want %s %v", c.target, c.left, got, due, c.want, c.due)
		}
	}
}
