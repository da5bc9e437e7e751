package notify

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"bindery/internal/platform/config"
	"bindery/internal/testkit"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// A request's journey reaches a webhook endpoint as one signed delivery per event, in the
// Standard Webhooks format — checked with the standard's own library, with each of the two
// secrets of a rotation — each with its event's id as webhook-id and the request's news.
func TestARequestsJourneyArrivesAsSignedWebhooks(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		rc := newReceiver(t, nil)
		newEnv(t, db, webhookConfig("ci", rc.URL, `"*"`, secretA, secretB)+"targets:\n  - {key: team-a, title: Team A, project: infra/acl, path: \"acl/{subject}.yaml\"}\n")
		apply(t, db, "op-1", "alice@example.com", toInEffect...)
		ds := settled(t, db)
		hits := rc.got()
		if len(ds) != 5 || len(hits) != 5 {
			t.Fatalf("%d deliveries, %d hits, want 5 (accepted, approved, in_ci, merged, in_effect)", len(ds), len(hits))
		}
		var types []string
		ids := map[string]bool{}
		for _, h := range hits {
			for _, sec := range []string{secretA, secretB} {
				wh, err := standardwebhooks.NewWebhook(sec)
				if err != nil {
					t.Fatal(err)
				}
				if err := wh.Verify(h.body, h.header); err != nil {
					t.Fatalf("the standard's library refuses the signature for %s: %v (%s)", sec[:10], err, h.header.Get(HeaderSignature))
				}
			}
			if n := len(strings.Fields(h.header.Get(HeaderSignature))); n != 2 {
				t.Fatalf("%d signatures, want one per secret", n)
			}
			b := body(t, h)
			types = append(types, b["type"].(string))
			ids[h.header.Get(HeaderID)] = true
			if _, err := time.Parse(time.RFC3339, b["timestamp"].(string)); err != nil {
				t.Fatalf("timestamp %v", b["timestamp"])
			}
		}
		slices.Sort(types)
		want := []string{"request.accepted", "request.approved", "request.in_ci", "request.in_effect", "request.merged"}
		if !slices.Equal(types, want) || len(ids) != 5 {
			t.Fatalf("types %v, ids %d", types, len(ids))
		}
		evs, _ := db.EventsOf(bg, "op-1", 10)
		for _, e := range evs {
			if !ids[e.ID] {
				t.Fatalf("event %s (%s) not delivered under its id", e.ID, e.Type)
			}
		}
		for _, h := range hits {
			b := body(t, h)
			if b["type"] != "request.in_ci" {
				continue
			}
			data := b["data"].(map[string]any)
			mr := data["mr"].(map[string]any)
			if data["operationId"] != "op-1" || data["targetTitle"] != "Team A" || mr["url"] != "http://gitlab.test/infra/acl/-/merge_requests/12" ||
				data["url"] != "http://bindery.test/requests/op-1" || data["nextAction"] != "WAIT" {
				t.Fatalf("in_ci data %v", data)
			}
		}
		for _, d := range ds {
			if d.Status != store.DeliveryDelivered || d.Attempts != 1 || d.Endpoint != "webhook:ci" {
				t.Fatalf("delivery %+v", d)
			}
		}
		if c := count(t, db, "SELECT COUNT(*) FROM notify_attempt WHERE class = 'ok' AND code = 204"); c != 5 {
			t.Fatalf("%d attempts recorded ok", c)
		}
	})
}

// An endpoint gets only the types it subscribed to; the batch's own events never leave.
func TestAnEndpointGetsOnlyItsEvents(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		rc := newReceiver(t, nil)
		newEnv(t, db, webhookConfig("effect", rc.URL, "[request.in_effect, request.failed]"))
		apply(t, db, "op-1", "alice@example.com", toInEffect...)
		if _, err := db.Tell(bg, store.Event{Type: state.EventBatchOpened, BatchID: 3, Facts: store.EventFacts{BatchID: 3, Members: []string{"op-1"}}}); err != nil {
			t.Fatal(err)
		}
		settled(t, db)
		hits := rc.got()
		if len(hits) != 1 || body(t, hits[0])["type"] != "request.in_effect" {
			t.Fatalf("hits %d", len(hits))
		}
		// Events nobody wants are recorded without a routing task at all.
		if c := count(t, db, "SELECT COUNT(*) FROM notify_event"); c != 6 {
			t.Fatalf("%d events", c)
		}
	})
}

// A receiver that fails is tried again by the schedule until it takes the delivery; each
// attempt is recorded with its answer, latency and class.
func TestAFailingReceiverIsTriedAgainByTheSchedule(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		rc := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) {
			if n < 2 {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusOK)
		})
		newEnv(t, db, webhookConfig("ci", rc.URL, "[request.accepted]"))
		apply(t, db, "op-1", "alice@example.com")
		ds := settled(t, db)
		if len(ds) != 1 || ds[0].Status != store.DeliveryDelivered || ds[0].Attempts != 3 {
			t.Fatalf("deliveries %+v", ds)
		}
		as, err := db.Attempts(bg, ds[0].ID)
		if err != nil || len(as) != 3 || as[0].Code != 500 || as[0].Class != "status" || as[2].Class != "ok" {
			t.Fatalf("attempts %+v %v", as, err)
		}
		hits := rc.got()
		if hits[0].header.Get(HeaderID) != hits[2].header.Get(HeaderID) {
			t.Fatal("a retry changed the webhook-id")
		}
		// The waits follow the schedule: 30 ms then 60 ms (±10 %), never less.
		if gap := hits[1].at.Sub(hits[0].at); gap < 27*time.Millisecond {
			t.Fatalf("second attempt after %s", gap)
		}
		if gap := hits[2].at.Sub(hits[1].at); gap < 54*time.Millisecond {
			t.Fatalf("third attempt after %s", gap)
		}
	})
}

// The attempts run out: the delivery fails for good; an operator sends it again from a fresh
// schedule.
func TestAttemptsRunOutAndAnOperatorSendsAgain(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		var mu sync.Mutex
		fail := true
		rc := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			if fail {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			w.WriteHeader(http.StatusAccepted)
		})
		e := newEnv(t, db, webhookConfig("ci", rc.URL, "[request.accepted]"))
		apply(t, db, "op-1", "alice@example.com")
		ds := settled(t, db)
		if ds[0].Status != store.DeliveryFailed || ds[0].Attempts != len(fastSchedule) || ds[0].LastCode != 400 {
			t.Fatalf("after the schedule: %+v", ds[0])
		}
		mu.Lock()
		fail = false
		mu.Unlock()
		if err := db.Resend(bg, ds[0].ID); err != nil {
			t.Fatal(err)
		}
		e.eng.Nudge(state.NotifyLane)
		ds = settled(t, db)
		if ds[0].Status != store.DeliveryDelivered || ds[0].Attempts != 1 {
			t.Fatalf("after sending again: %+v", ds[0])
		}
		if len(rc.got()) != len(fastSchedule)+1 {
			t.Fatalf("%d hits", len(rc.got()))
		}
		// A delivered delivery is not sent again.
		if err := db.Resend(bg, ds[0].ID); err == nil {
			t.Fatal("a delivered delivery was sent again")
		}
	})
}

// 410 Gone disables the endpoint at once, and operators are told; later events are not routed
// to it until an operator enables it again.
func TestGoneDisablesTheEndpoint(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		gone := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusGone) })
		ops := newReceiver(t, nil)
		yaml := "notify:\n  timeout: 2s\n  webhooks:\n" +
			"    - {name: gone, url: \"" + gone.URL + "\", secrets: [" + secretA + "], events: [request.accepted]}\n" +
			"    - {name: ops, url: \"" + ops.URL + "\", secrets: [" + secretA + "], events: [endpoint.disabled]}\n"
		newEnv(t, db, yaml)
		apply(t, db, "op-1", "alice@example.com")
		settled(t, db)
		h, _ := db.EndpointHealth(bg, "webhook:gone")
		if !h.Disabled() || !strings.Contains(h.DisabledReason, "410") {
			t.Fatalf("health %+v", h)
		}
		if len(gone.got()) != 1 {
			t.Fatalf("%d attempts at a gone endpoint", len(gone.got()))
		}
		hits := ops.got()
		if len(hits) != 1 || body(t, hits[0])["type"] != "endpoint.disabled" {
			t.Fatalf("operators told: %d", len(hits))
		}
		data := body(t, hits[0])["data"].(map[string]any)
		if data["endpoint"] != "webhook:gone" {
			t.Fatalf("endpoint.disabled data %v", data)
		}
		apply(t, db, "op-2", "bob@example.com")
		settled(t, db)
		if len(gone.got()) != 1 {
			t.Fatal("a disabled endpoint got a delivery")
		}
		if ok, err := db.EnableEndpoint(bg, "webhook:gone"); !ok || err != nil {
			t.Fatalf("enable: %v %v", ok, err)
		}
		apply(t, db, "op-3", "carol@example.com")
		settled(t, db)
		if len(gone.got()) != 2 {
			t.Fatal("an enabled endpoint got no delivery")
		}
	})
}

// 429 with Retry-After: the next attempt waits at least that long (longer than the schedule's).
func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		rc := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) {
			if n == 0 {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			w.WriteHeader(http.StatusOK)
		})
		newEnv(t, db, webhookConfig("ci", rc.URL, "[request.accepted]"))
		apply(t, db, "op-1", "alice@example.com")
		ds := settled(t, db)
		hits := rc.got()
		if ds[0].Status != store.DeliveryDelivered || len(hits) != 2 {
			t.Fatalf("%+v, %d hits", ds[0], len(hits))
		}
		if gap := hits[1].at.Sub(hits[0].at); gap < 900*time.Millisecond {
			t.Fatalf("retried after %s despite Retry-After: 1", gap)
		}
	})
}

// A receiver that hangs is cut at notify.timeout; one that drops the connection is a dropped
// attempt; one that cannot be reached a connect failure — each tried again, none of them a
// failure of bindery. The timeout is long enough that a loaded machine still lets the dropping
// receiver hang up before it (at 200 ms a race-detector run under load classed the drop as a
// timeout); the hanging one never answers its first attempt, so its "timeout" is the cut.
func TestHangingDroppingAndUnreachableReceivers(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		release := make(chan struct{})
		hang := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) {
			if n == 0 {
				select {
				case <-release:
				case <-r.Context().Done():
				}
				return
			}
			w.WriteHeader(http.StatusOK)
		})
		t.Cleanup(func() { close(release) })
		drop := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) {
			if n == 0 {
				conn, _, err := w.(http.Hijacker).Hijack()
				if err == nil {
					conn.Close()
				}
				return
			}
			w.WriteHeader(http.StatusOK)
		})
		down := newReceiver(t, nil)
		down.Close() // nothing listens there any more
		yaml := "notify:\n  timeout: 2s\n  webhooks:\n" +
			"    - {name: hang, url: \"" + hang.URL + "\", secrets: [" + secretA + "], events: [request.accepted]}\n" +
			"    - {name: drop, url: \"" + drop.URL + "\", secrets: [" + secretA + "], events: [request.accepted]}\n" +
			"    - {name: down, url: \"" + down.URL + "\", secrets: [" + secretA + "], events: [request.accepted]}\n"
		newEnv(t, db, yaml)
		apply(t, db, "op-1", "alice@example.com")
		ds := settled(t, db)
		classes := map[string][]string{}
		for _, d := range ds {
			as, _ := db.Attempts(bg, d.ID)
			for _, a := range as {
				classes[d.Endpoint] = append(classes[d.Endpoint], a.Class)
			}
		}
		if c := classes["webhook:hang"]; len(c) != 2 || c[0] != "timeout" || c[1] != "ok" {
			t.Fatalf("hang: %v", c)
		}
		if c := classes["webhook:drop"]; len(c) != 2 || c[0] != "dropped" || c[1] != "ok" {
			t.Fatalf("drop: %v", c)
		}
		if c := classes["webhook:down"]; len(c) != len(fastSchedule) || c[0] != "connect" {
			t.Fatalf("down: %v", c)
		}
	})
}

// An endpoint that has failed for longer than notify.disableAfter is disabled, and told.
func TestAnEndpointFailingTooLongIsDisabled(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		rc := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
		newEnv(t, db, webhookConfig("ci", rc.URL, "[request.accepted]")+"  disableAfter: 100ms\n")
		apply(t, db, "op-1", "alice@example.com")
		settled(t, db)
		h, _ := db.EndpointHealth(bg, "webhook:ci")
		if !h.Disabled() || !strings.Contains(h.DisabledReason, "notify.disableAfter") {
			t.Fatalf("health %+v", h)
		}
		if c := count(t, db, "SELECT COUNT(*) FROM notify_event WHERE type = 'endpoint.disabled'"); c != 1 {
			t.Fatalf("%d endpoint.disabled events", c)
		}
	})
}

// A receiver that hangs never delays a request's own steps: the notify lane has its own
// workers, and a task of the first lane runs at once while every notify worker waits.
func TestAHangingReceiverNeverDelaysARequestsSteps(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		release := make(chan struct{})
		rc := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		t.Cleanup(func() { close(release) })
		e := newEnv(t, db, strings.Replace(webhookConfig("slow", rc.URL, "[request.accepted]"), "timeout: 2s", "timeout: 1m", 1))
		ran := make(chan time.Time, 1)
		e.eng.Register(engineKindThatFinishes("probe", ran))
		for i := range 8 {
			apply(t, db, fmt.Sprintf("op-%d", i), fmt.Sprintf("u%d@example.com", i))
		}
		testkit.Eventually(t, "every notify worker to hang", func() bool { return e.eng.Running(state.NotifyLane) == 4 })
		start := time.Now()
		put(t, db, "probe", "x", "first")
		e.eng.Nudge("first")
		select {
		case at := <-ran:
			if at.Sub(start) > 2*time.Second {
				t.Fatalf("a first-lane step waited %s behind hanging deliveries", at.Sub(start))
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a first-lane step never ran while deliveries hung")
		}
	})
}

// Two instances share the deliveries: each event is delivered once (one attempt the receiver
// took), never by both.
func TestTwoInstancesDeliverEachEventOnce(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		rc := newReceiver(t, nil)
		src := config.NewStatic(config.MustParse(webhookConfig("ci", rc.URL, `"*"`)))
		startEnv(t, db, src, "i-1")
		startEnv(t, db, src, "i-2")
		const n = 30
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				apply(t, db, fmt.Sprintf("op-%d", i), fmt.Sprintf("u%d@example.com", i), toInEffect[:2]...)
			}()
		}
		wg.Wait()
		settled(t, db)
		seen := map[string]int{}
		for _, h := range rc.got() {
			seen[h.header.Get(HeaderID)]++
		}
		events := count(t, db, "SELECT COUNT(*) FROM notify_event")
		if len(seen) != events || events != 2*n {
			t.Fatalf("%d ids delivered of %d events", len(seen), events)
		}
		// Every event was taken once, by one instance: one attempt the receiver took. A second
		// hit of an id is only ever the retry of an attempt bindery recorded as failed (on a
		// starved machine its 300 ms timeout can fire while the receiver is answering): delivery
		// is at least once, and the receiver tells a retry by its webhook-id.
		for id, k := range seen {
			var attempts, taken int
			if err := db.Raw().QueryRowContext(bg, "SELECT COUNT(*), COALESCE(SUM(CASE WHEN a.class = ? THEN 1 ELSE 0 END), 0) FROM notify_attempt a JOIN notify_delivery d ON d.id = a.delivery_id WHERE d.event_id = ? AND d.channel = 'webhook'",
				store.ClassOK, id).Scan(&attempts, &taken); err != nil {
				t.Fatal(err)
			}
			if taken != 1 || k > attempts {
				t.Fatalf("%s reached the endpoint %d times in %d attempts, %d of them taken", id, k, attempts, taken)
			}
		}
		if c := count(t, db, "SELECT COUNT(DISTINCT instance) FROM notify_attempt"); c != 2 {
			t.Logf("attempts made by %d instance(s)", c)
		}
	})
}
