package notify

import (
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"

	"bindery/internal/testkit"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// statusCode finds a binding status code (MR_CREATING, VALIDATED …) in what a person reads.
var statusCode = regexp.MustCompile(`\b(APPROVAL_SENDING|APPROVAL_SENT|MR_CREATING|MR_CREATED|MERGING|MERGED|VALIDATED|CREATE_FAILED|HANDLE_FAILED|REJECTED|CLOSED)\b`)

// A requester is emailed what they chose — by default in effect, failed, rejected and "needs
// you" — in plain text and HTML, every message about one request in one thread, read back from
// a real SMTP server (mailpit).
func TestARequesterIsEmailedInOneThread(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		mp := startMailpit(t)
		newEnv(t, db, emailConfig(mp.smtp, ", username: bot, password: s3cret")+"targets:\n  - {key: team-a, title: Team A, project: infra/acl, path: \"acl/{subject}.yaml\"}\n")
		apply(t, db, "op-1", "alice@example.com", toInEffect...)
		// A pending step: the requester is told it needs a person.
		applyTo(t, db, "op-2", "alice@example.com", "team-b", store.Change{To: state.StatusApprovalSent, Step: state.StepApprovalSent},
			store.Change{To: state.StatusMRCreating, Step: state.StepQueued}, store.Change{To: state.StatusMRCreating, Step: state.StepCreatePipelinePending})
		ds := settled(t, db)
		msgs := mp.messages(t)
		if len(msgs) != 2 || len(ds) != 2 {
			for _, d := range ds {
				t.Logf("delivery %+v", d)
			}
			t.Fatalf("%d messages, %d deliveries, want the in_effect of op-1 and the needs_attention of op-2", len(msgs), len(ds))
		}
		evs, _ := db.EventsOf(bg, "op-1", 10)
		inEffect := evs[len(evs)-1]
		// The two deliveries ran at once: the order they reached the server is theirs.
		if msgs[0].Headers["In-Reply-To"][0] != "<"+ThreadID("op-1")+">" {
			msgs[0], msgs[1] = msgs[1], msgs[0]
		}
		m := msgs[0]
		if m.MessageID != MessageID(inEffect.ID) || len(m.To) != 1 || m.To[0].Address != "alice@example.com" {
			t.Fatalf("message %+v, want id %s to alice", m, MessageID(inEffect.ID))
		}
		if !strings.Contains(m.Subject, "Team A") || !strings.Contains(m.Subject, "in effect") {
			t.Fatalf("subject %q", m.Subject)
		}
		if got := m.Headers["In-Reply-To"]; len(got) != 1 || got[0] != "<"+ThreadID("op-1")+">" {
			t.Fatalf("In-Reply-To %v", got)
		}
		if got := m.Headers["References"]; len(got) != 1 || got[0] != "<"+ThreadID("op-1")+">" {
			t.Fatalf("References %v", got)
		}
		for _, part := range []string{m.Text, m.HTML} {
			if !strings.Contains(part, "http://bindery.test/requests/op-1") || !strings.Contains(part, "Done: the binding is in effect.") {
				t.Fatalf("part without the request's link or what now:\n%s", part)
			}
		}
		if !strings.Contains(m.HTML, "<a href=\"http://gitlab.test/infra/acl/-/merge_requests/12\">") {
			t.Fatalf("HTML without the MR link:\n%s", m.HTML)
		}
		if !strings.Contains(msgs[1].Subject, "needs a person") || msgs[1].Headers["In-Reply-To"][0] != "<"+ThreadID("op-2")+">" {
			t.Fatalf("second message %q %v", msgs[1].Subject, msgs[1].Headers["In-Reply-To"])
		}
		// The "needs you" subject reads like the others, without the operation id; no body shows
		// a status code; the footer says the defaults sent it (alice chose nothing).
		if got := msgs[1].Subject; !strings.HasPrefix(got, "[bindery] Your request for team-b: needs a person — ") || strings.Contains(got, "op-2") || len(got) > 120 {
			t.Errorf("the needs-you subject %q", got)
		}
		for _, m := range msgs {
			for _, part := range []string{m.Text, m.HTML} {
				if code := statusCode.FindString(part); code != "" {
					t.Errorf("a body shows the status code %s:\n%s", code, part)
				}
				if !strings.Contains(part, "because every requester is emailed about it") || strings.Contains(part, "you chose") {
					t.Errorf("the footer of a default email:\n%s", part)
				}
			}
		}
	})
}

// A person's choice replaces the defaults; an empty choice emails nothing.
func TestEmailFollowsThePersonsChoice(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		mp := startMailpit(t)
		e := newEnv(t, db, emailConfig(mp.smtp, ""))
		if _, err := e.n.SetEmailPrefs(bg, "alice@example.com", []state.EventType{state.EventRequestAccepted, state.EventRequestMerged}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.n.SetEmailPrefs(bg, "bob@example.com", []state.EventType{}); err != nil {
			t.Fatal(err)
		}
		apply(t, db, "op-a", "alice@example.com", toInEffect...)
		apply(t, db, "op-b", "bob@example.com", toInEffect...)
		settled(t, db)
		var subjects []string
		for _, m := range mp.messages(t) {
			subjects = append(subjects, m.Subject)
		}
		slices.Sort(subjects)
		if want := []string{"[bindery] Your request for team-a: accepted", "[bindery] Your request for team-a: merged, waiting for the deploy"}; !slices.Equal(subjects, want) {
			t.Fatalf("messages %q, want %q", subjects, want)
		}
		for _, m := range mp.messages(t) {
			if !strings.Contains(m.Text, "because you chose to be emailed about it") {
				t.Errorf("the footer of a chosen email:\n%s", m.Text)
			}
		}
		got, chose, err := db.EmailPrefs(bg, "bob@example.com")
		if err != nil || !chose || len(got) != 0 {
			t.Fatalf("bob's choice %v %v %v", got, chose, err)
		}
		// An event type nobody chose and no default names emails nobody: in_ci is neither
		// (accepted and merged are alice's choice, in_effect a default).
		if c := count(t, db, "SELECT COUNT(*) FROM notify_event WHERE type = 'request.in_ci'"); c != 2 {
			t.Fatalf("%d in_ci events", c)
		}
		if c := count(t, db, "SELECT COUNT(*) FROM notify_delivery d JOIN notify_event e ON e.event_id = d.event_id WHERE e.type = 'request.in_ci'"); c != 0 {
			t.Fatalf("%d in_ci deliveries", c)
		}
	})
}

// The mail server's faults: down (nothing listens), refusing for now (451: tried again until it
// takes the message), refusing for good (550: failed at once), slow (no greeting within
// notify.timeout), no STARTTLS when it is required; and a person without an address, whose
// delivery is skipped. None of them is a failure of the request.
func TestMailServerFaults(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		mp := startMailpit(t)
		outcome := func(t *testing.T, ds []store.Delivery) (string, []string) {
			t.Helper()
			if len(ds) != 1 {
				t.Fatalf("%d deliveries", len(ds))
			}
			as, _ := db.Attempts(bg, ds[0].ID)
			var classes []string
			for _, a := range as {
				classes = append(classes, a.Class)
			}
			return ds[0].Status, classes
		}
		run := func(t *testing.T, cfg string, op string) (string, []string) {
			t.Helper()
			if _, err := db.Raw().ExecContext(bg, "DELETE FROM notify_delivery"); err != nil {
				t.Fatal(err)
			}
			e := newEnv(t, db, cfg)
			defer e.eng.Kill()
			apply(t, db, op, op+"@example.com", store.Change{To: state.StatusApprovalSent, Step: state.StepApprovalSent}, store.Change{To: state.StatusRejected, Step: state.StepApprovalRejected})
			return outcome(t, settled(t, db))
		}

		closed := testkit.FreeAddr(t) // nothing listens there
		if st, cl := run(t, emailConfig(closed, ""), "down"); st != store.DeliveryFailed || len(cl) != len(fastSchedule) || cl[0] != "connect" {
			t.Fatalf("SMTP down: %s %v", st, cl)
		}

		mp.chaos(t, 550)
		if st, cl := run(t, emailConfig(mp.smtp, ""), "refused"); st != store.DeliveryFailed || len(cl) != 1 || cl[0] != "refused" {
			t.Fatalf("550: %s %v", st, cl)
		}
		mp.chaos(t, 451)
		go func() {
			// The server takes mail again after the first attempts.
			testkit.Eventually(t, "a refused attempt", func() bool {
				return count(t, db, "SELECT COUNT(*) FROM notify_attempt a JOIN notify_delivery d ON d.id = a.delivery_id WHERE d.target = 'later@example.com'") >= 2
			})
			mp.chaos(t, 0)
		}()
		if st, cl := run(t, emailConfig(mp.smtp, ""), "later"); st != store.DeliveryDelivered || cl[0] != "refused" || cl[len(cl)-1] != "ok" {
			t.Fatalf("451 then accepted: %s %v", st, cl)
		}

		silent, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer silent.Close()
		go func() {
			for {
				c, err := silent.Accept()
				if err != nil {
					return
				}
				defer c.Close() // accepted, never greeted
			}
		}()
		slow := strings.Replace(emailConfig(silent.Addr().String(), ""), "timeout: 2s", "timeout: 200ms", 1)
		if st, cl := run(t, slow, "slow"); st != store.DeliveryFailed || cl[0] != "timeout" {
			t.Fatalf("slow server: %s %v", st, cl)
		}

		required := strings.Replace(emailConfig(mp.smtp, ""), "starttls: none", "starttls: required", 1)
		if st, cl := run(t, required, "tls"); st != store.DeliveryFailed || cl[0] != "tls" {
			t.Fatalf("STARTTLS required, not offered: %s %v", st, cl)
		}

		// No address: the subject is neither an address nor in the directory.
		if _, err := db.Raw().ExecContext(bg, "DELETE FROM notify_delivery"); err != nil {
			t.Fatal(err)
		}
		e := newEnv(t, db, emailConfig(mp.smtp, ""))
		defer e.eng.Kill()
		apply(t, db, "noaddr", "E9999", store.Change{To: state.StatusApprovalSent, Step: state.StepApprovalSent}, store.Change{To: state.StatusRejected, Step: state.StepApprovalRejected})
		ds := settled(t, db)
		if len(ds) != 1 || ds[0].Status != store.DeliverySkipped || !strings.Contains(ds[0].LastError, "no email address") {
			t.Fatalf("no address: %+v", ds)
		}
		// Every request above reached its rejection: the faults touched no request's steps.
		if c := count(t, db, "SELECT COUNT(*) FROM binding WHERE status <> 'REJECTED'"); c != 0 {
			t.Fatalf("%d requests not where their steps took them", c)
		}
	})
}
