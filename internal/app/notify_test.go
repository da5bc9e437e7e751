package app_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"bindery/api"
	"bindery/internal/sim"
)

// The demo tells its own mailbox: a request's journey arrives there as email to the requester
// (in effect, one thread per request) and as Standard Webhooks deliveries that the receiver
// checked with the standard's library; the batch's merge request gets the bot's note; the
// request page lists what was sent.
func TestTheDemoMailboxShowsARequestsJourney(t *testing.T) {
	eachDSN(t, func(t *testing.T, dsn string) {
		_, configPath, fileDSN := demoDir(t)
		if strings.HasPrefix(dsn, "sqlite:") {
			dsn = fileDSN
		}
		d := startDemo(t, configPath, dsn)
		op := apply(t, d, "alice", "payments-db-readonly")
		d.approveInInbox(t, op)
		var v api.RequestView
		waitUntil(t, 60*time.Second, "VALIDATED", func() bool { v = d.request(t, op); return v.Status == "VALIDATED" })

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
		var types []string
		waitUntil(t, 30*time.Second, "the journey in the mailbox", func() bool {
			mb = box{}
			d.api(t, "GET", "/sim/mailbox", "", "", &mb)
			types = types[:0]
			for _, w := range mb.Webhooks {
				if opOf(w) == op {
					types = append(types, w.Type)
				}
			}
			return len(mb.Emails) > 0 && slices.Contains(types, "request.in_effect")
		})
		slices.Sort(types)
		if want := []string{"request.accepted", "request.approved", "request.in_ci", "request.in_effect", "request.merged"}; !slices.Equal(types, want) {
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

		var sent []api.Sent
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
