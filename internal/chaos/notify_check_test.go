//go:build e2e || chaos

package chaos

import (
	"bindery/internal/testkit"
	"encoding/json"
	"fmt"
	"net/http"
)

// chaosWebhookSecret signs the deliveries to the sim's receiver (whsec_ and 32 bytes).
const chaosWebhookSecret = "whsec_Y2hhb3Mtd2ViaG9vay1zZWNyZXQtb2YtMzItYnl0ZXM="

// notifyFigures are the delivery counts of a run: per endpoint (one, "chaos"), every committed
// event the endpoint subscribes to, and how often the receiver got it by webhook-id.
type notifyFigures struct {
	events, once, more, lost, strangers, undelivered int
	maxRepeat                                        int
}

func (f notifyFigures) String() string {
	return fmt.Sprintf("webhook endpoint chaos: %d committed events, delivered once %d, more than once %d (at most %d times: the at-least-once window), lost %d, deliveries of no committed event %d, deliveries not ended delivered %d",
		f.events, f.once, f.more, f.maxRepeat, f.lost, f.strangers, f.undelivered)
}

// deliveredOnce checks that each committed event reached the webhook endpoint despite the kills:
// the receiver (the sim) counts deliveries by webhook-id; none may be missing, none may be of an
// event that was never committed, and a redelivery is the documented at-least-once window (an
// instance killed after the receiver took it, before its outcome committed).
func (c *checker) deliveredOnce() notifyFigures {
	c.t.Helper()
	var f notifyFigures
	// What the endpoint is still to get: events not routed yet, webhook deliveries not ended. (A
	// merge request's note that GitLab's injected 5xx put on the retry schedule may wait half an
	// hour for its next attempt: it is not the endpoint's.)
	pending := "SELECT %s FROM task t LEFT JOIN notify_delivery d ON t.ref = CONCAT('delivery:', d.id) " +
		"WHERE t.kind = 'notify' AND (t.step = 'route' OR d.channel = 'webhook')"
	if testkit.Poll(testkit.Timeout()*3/2, func() bool { return c.count(fmt.Sprintf(pending, "COUNT(*)")) == 0 }) != nil {
		c.none("routings and webhook deliveries still due after the drain", fmt.Sprintf(pending, "t.ref, t.step, t.note")+" LIMIT 20")
	}
	resp, err := http.Get(c.simURL + "/sim/webhooks")
	if err != nil {
		c.t.Errorf("read the receiver's counts: %v", err)
		return f
	}
	defer resp.Body.Close()
	received := map[string]int{}
	if err := json.NewDecoder(resp.Body).Decode(&received); err != nil {
		c.t.Errorf("read the receiver's counts: %v", err)
		return f
	}
	ids, err := column[string](c.db, "SELECT event_id FROM notify_event WHERE type NOT IN ('batch.opened', 'batch.culprit')")
	if err != nil {
		c.t.Errorf("read the events: %v", err)
		return f
	}
	committed := make(map[string]bool, len(ids))
	for _, id := range ids {
		committed[id] = true
		f.events++
		switch n := received[id]; {
		case n == 0:
			f.lost++
			if f.lost <= 20 {
				c.t.Errorf("event %s was committed but never delivered to the webhook endpoint", id)
			}
		case n == 1:
			f.once++
		default:
			f.more++
			f.maxRepeat = max(f.maxRepeat, n)
		}
	}
	for id := range received {
		if !committed[id] {
			f.strangers++
			c.t.Errorf("the receiver got %s, an event that was never committed", id)
		}
	}
	f.undelivered = c.count("SELECT COUNT(*) FROM notify_delivery WHERE channel = 'webhook' AND status <> 'delivered'")
	if f.undelivered > 0 {
		c.none("webhook deliveries that did not end delivered", "SELECT id, event_id, status, attempts, last_error FROM notify_delivery WHERE channel = 'webhook' AND status <> 'delivered' LIMIT 20")
	}
	return f
}
