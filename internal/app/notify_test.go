package app_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"bindery/api"
	"bindery/internal/sim"
	"bindery/internal/testkit"
)

// The demo tells its own mailbox: a request's journey arrives there as email to the requester
// (in effect, one thread per request) and as Standard Webhooks deliveries that the receiver
// checked with the standard's library; the batch's merge request gets the bot's note; the
// request page lists what was sent.
func TestTheDemoMailboxShowsARequestsJourney(t *testing.T) {
	t.Parallel()
	eachDSN(t, func(t *testing.T, dsn string) {
		_, configPath, fileDSN := demoDir(t)
		if strings.HasPrefix(dsn, "sqlite:") {
			dsn = fileDSN
		}
		d := startDemo(t, configPath, dsn)
		op := apply(t, d, "alice", "payments-db-readonly")
		d.approveInInbox(t, op)
		var v api.RequestView
		testkit.Eventually(t, "VALIDATED", func() bool { v = d.request(t, op); return v.Status == "VALIDATED" })

		type box struct {
			Emails   []sim.Email
			Webhooks []sim.WebhookDelivery
		}
		var mb box
		opOf := func(w sim.WebhookDelivery) string {
			var b struct {
				Data struct {
					OperationID string `json:"operationId"`
				} `json:"data"`
			}
			_ = json.Unmarshal(w.Body, &b)
			return b.Data.OperationID
		}
		// Each event is a delivery of its own, run beside the others, and bindery records an
		// email as delivered only once the mail server has answered, after the mailbox has it:
		// so the wait is for every delivery of the journey to have arrived and been recorded,
		// not for the last event's alone.
		want := []string{"request.accepted", "request.approved", "request.in_ci", "request.in_effect", "request.merged"}
		var types []string
		var sent []api.Sent
		testkit.Eventually(t, "the journey in the mailbox, its email recorded as delivered", func() bool {
			mb = box{}
			d.api(t, "GET", "/sim/mailbox", "", "", &mb)
			types = types[:0]
			for _, w := range mb.Webhooks {
				if opOf(w) == op {
					types = append(types, w.Type)
				}
			}
			sent = nil
			d.api(t, "GET", "/api/requests/"+op+"/sent", "alice", "", &sent)
			for _, w := range want {
				if !slices.Contains(types, w) {
					return false
				}
			}
			return len(mb.Emails) > 0 && len(sent) > 0 && sent[0].Status == "delivered"
		})
		slices.Sort(types)
		if !slices.Equal(types, want) {
			t.Fatalf("webhooks about the request %v, want %v", types, want)
		}
		for _, w := range mb.Webhooks {
			if !w.Verified || w.ID == "" || w.Repeat != 1 {
				t.Fatalf("a webhook the standard's library did not verify, or a redelivery: %+v", w)
			}
		}
		e := mb.Emails[0]
		if len(e.To) != 1 || e.To[0] != "alice@example.com" || !strings.Contains(e.Subject, "in effect") ||
			e.InReplyTo != "<request-"+op+"@bindery>" || !strings.Contains(e.Text, "/requests/"+op) || e.HTML == "" {
			t.Fatalf("email %+v", e)
		}

		if code := d.api(t, "GET", "/api/requests/"+op+"/sent", "alice", "", &sent); code != 200 || len(sent) != 1 ||
			sent[0].Channel != "email" || sent[0].Status != "delivered" || sent[0].Label != "in effect" {
			t.Fatalf("sent %d %+v", code, sent)
		}
		notes := d.Sims().GitLab.Notes("infra/access-config", v.MR.ID)
		if len(notes) != 1 || !strings.Contains(notes[0].Body, "/requests/"+op) {
			t.Fatalf("the batch MR's notes %+v", notes)
		}
		var eps []api.NotifyEndpoint
		if code := d.api(t, "GET", "/api/ops/notify", "ops", "", &eps); code != 200 || len(eps) != 3 {
			t.Fatalf("ops notify %d %+v", code, eps)
		}
	})
}
