package notify

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"bindery/api"
	"bindery/internal/platform/config"
	"bindery/internal/vocab/state"
	"bindery/store"
)

// TestDelivery is what one test delivery came to.
type TestDelivery struct {
	Endpoint string // the endpoint's name
	Kind     string // "webhook" or "chat"
	URL      string
	Code     int   // the receiver's HTTP status (0: no answer)
	Err      error // nil: the receiver took it (2xx)
}

// SendTests posts one test delivery (event endpoint.test) to each webhook and chat of snap,
// exactly as a real delivery of that endpoint goes out — the webhook's body signed with its
// secrets, the chat's text — whatever events the endpoint subscribes to, once each within
// notify.timeout, nothing stored and nothing retried: bindery doctor -send-test
// (docs/notifications.md).
func SendTests(ctx context.Context, hc *http.Client, snap *config.Snapshot, why string) []TestDelivery {
	links := (&Notifier{}).links(snap)
	var out []TestDelivery
	for _, w := range snap.Webhooks() {
		e := testEvent(w.Name, why)
		body, err := json.Marshal(api.WebhookBody{Type: e.Type, Timestamp: e.CreatedAt, Data: news(e, snap, links)})
		if err != nil {
			out = append(out, TestDelivery{Endpoint: w.Name, Kind: "webhook", URL: w.URL, Err: err})
			continue
		}
		out = append(out, tested(ctx, snap, w.Name, "webhook", w.URL, func(ctx context.Context) result {
			return webhook{cfg: w, hc: hc}.send(ctx, e, body)
		}))
	}
	for _, c := range snap.Chats() {
		e := testEvent(c.Name, why)
		body, err := json.Marshal(map[string]string{"text": ChatText(e, snap, links)})
		if err != nil {
			out = append(out, TestDelivery{Endpoint: c.Name, Kind: "chat", URL: c.URL, Err: err})
			continue
		}
		out = append(out, tested(ctx, snap, c.Name, "chat", c.URL, func(ctx context.Context) result {
			return postJSON(ctx, hc, c.URL, http.Header{}, body)
		}))
	}
	return out
}

func tested(ctx context.Context, snap *config.Snapshot, name, kind, url string, send func(context.Context) result) TestDelivery {
	ctx, cancel := context.WithTimeout(ctx, snap.NotifyTimeout())
	defer cancel()
	r := send(ctx)
	d := TestDelivery{Endpoint: name, Kind: kind, URL: url, Code: r.code}
	if !r.ok() {
		d.Err = errors.New(r.err)
	}
	return d
}

// testEvent is the event of a test delivery to endpoint; its id starts with "test-" so that a
// receiver that deduplicates by webhook-id never mistakes it for real news.
func testEvent(endpoint, why string) store.Event {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return store.Event{ID: "test-" + hex.EncodeToString(b[:]), Type: state.EventEndpointTest, CreatedAt: time.Now().UTC().Truncate(time.Second),
		Facts: store.EventFacts{Endpoint: endpoint, Why: strings.TrimSpace(why)}}
}
