package approval_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"bindery/api"
	"bindery/internal/platform/config"
	"bindery/internal/remote/approval"
	"bindery/internal/remote/outbound"
	"bindery/internal/sim"
)

// The approval client against the simulated approval system over real HTTP, and the
// simulator's signed callbacks checked with the same Verify bindery's receiver uses.

const cfgText = `
approvalSystem:
  timeout: 2s
breaker:
  failures: 2
  cooldown: 50ms
hooks:
  approvalSecret: s3cret
`

// callbacks plays bindery's /hooks/approval: it verifies and records each callback.
type callbacks struct {
	mu      sync.Mutex
	got     []api.ApprovalCallback
	invalid int
	fail    int // answer 500 to this many callbacks first
}

func (c *callbacks) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := approval.Verify([]byte("s3cret"), r.Header.Get(approval.TimestampHeader), r.Header.Get(approval.SignatureHeader), body, time.Now(), time.Minute); err != nil {
		c.invalid++
		w.WriteHeader(401)
		return
	}
	if c.fail > 0 {
		c.fail--
		w.WriteHeader(500)
		return
	}
	var cb api.ApprovalCallback
	if err := json.Unmarshal(body, &cb); err != nil {
		w.WriteHeader(400)
		return
	}
	c.got = append(c.got, cb)
	w.Write([]byte(`{"code":"ACCEPTED"}`))
}

func (c *callbacks) list() []api.ApprovalCallback {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]api.ApprovalCallback(nil), c.got...)
}

func (c *callbacks) wait(t *testing.T, n int) []api.ApprovalCallback {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if got := c.list(); len(got) >= n {
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%d callbacks, want %d", len(c.list()), n)
	return nil
}

type bundle struct {
	src    *config.Source
	sims   *sim.Sims
	client *approval.Client
	cb     *callbacks
	cbURL  string
}

func setup(t *testing.T, cfg string) *bundle {
	t.Helper()
	if cfg == "" {
		cfg = cfgText
	}
	src := config.NewStatic(config.MustParse(cfg))
	cb := &callbacks{}
	bindery := httptest.NewServer(cb)
	sims := sim.New(sim.Options{Config: src})
	srv := httptest.NewServer(sims.Handler())
	sims.Start(context.Background())
	t.Cleanup(func() { sims.Stop(context.Background()); srv.Close(); bindery.Close() })
	c, err := approval.New(src, approval.Options{DefaultURL: srv.URL + "/sim/approval"})
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{src: src, sims: sims, client: c, cb: cb, cbURL: bindery.URL + "/hooks/approval"}
}

func (b *bundle) ticket(op string) approval.Ticket {
	return approval.Ticket{OperationID: op, Subject: "alice@example.com", TargetKey: "payments-db-readonly", Title: "Payments DB",
		Reason: "on call", CallbackURL: b.cbURL, Ext: map[string]string{"mrId": "42"}}
}

var ctx = context.Background()

func TestOpenTicketThenDecisionCallsBackSigned(t *testing.T) {
	b := setup(t, "")
	id, err := b.client.Open(ctx, b.ticket("op-1"))
	if err != nil || id == "" {
		t.Fatalf("Open = %q, %v", id, err)
	}
	// A retry after a lost answer opens nothing new.
	if again, err := b.client.Open(ctx, b.ticket("op-1")); err != nil || again != id {
		t.Fatalf("repeat Open = %q, %v", again, err)
	}
	if n := len(b.sims.Approval.Tickets()); n != 1 {
		t.Fatalf("%d tickets", n)
	}
	if _, err := b.sims.Approval.Decide(id, sim.TicketApproved); err != nil {
		t.Fatal(err)
	}
	got := b.cb.wait(t, 1)[0]
	if got.OperationID != "op-1" || got.Result != "APPROVED" || got.CallbackID == "" || got.Ext["mrId"] != "42" {
		t.Fatalf("callback %+v", got)
	}
}

func TestAutoApproveCallsBackWithoutAClick(t *testing.T) {
	b := setup(t, cfgText+"sim:\n  approval:\n    autoApprove: true\n")
	if _, err := b.client.Open(ctx, b.ticket("op-auto")); err != nil {
		t.Fatal(err)
	}
	if got := b.cb.wait(t, 1)[0]; got.OperationID != "op-auto" || got.Result != "APPROVED" {
		t.Fatalf("callback %+v", got)
	}
}

func TestCallbackFaults(t *testing.T) {
	t.Run("duplicated callbacks repeat the callback id", func(t *testing.T) {
		b := setup(t, "")
		b.sims.Approval.SetFaults(sim.ApprovalFaults{DuplicateRate: 1})
		id, _ := b.client.Open(ctx, b.ticket("op-dup"))
		b.sims.Approval.Decide(id, sim.TicketRejected)
		got := b.cb.wait(t, 2)
		if got[0].CallbackID != got[1].CallbackID || got[1].Result != "REJECTED" {
			t.Fatalf("callbacks %+v", got)
		}
	})
	t.Run("delayed callbacks wait", func(t *testing.T) {
		b := setup(t, "")
		b.sims.Approval.SetFaults(sim.ApprovalFaults{CallbackDelay: time.Hour})
		id, _ := b.client.Open(ctx, b.ticket("op-late"))
		tk, err := b.sims.Approval.Decide(id, sim.TicketApproved)
		if err != nil || tk.Status != sim.TicketApproved || tk.DecidedAt == nil {
			t.Fatalf("decided ticket %+v, %v", tk, err)
		}
		time.Sleep(50 * time.Millisecond)
		if n := len(b.cb.list()); n != 0 {
			t.Fatalf("%d callbacks before the delay passed", n)
		}
	})
	t.Run("reordered callbacks arrive newest first", func(t *testing.T) {
		b := setup(t, "")
		b.sims.Approval.SetFaults(sim.ApprovalFaults{Reorder: true})
		a, _ := b.client.Open(ctx, b.ticket("op-a"))
		c, _ := b.client.Open(ctx, b.ticket("op-b"))
		b.sims.Approval.Decide(a, sim.TicketApproved) // held, waiting for the next decision
		b.sims.Approval.Decide(c, sim.TicketApproved)
		got := b.cb.wait(t, 2)
		if got[0].OperationID != "op-b" || got[1].OperationID != "op-a" {
			t.Fatalf("order %s, %s", got[0].OperationID, got[1].OperationID)
		}
	})
	t.Run("a refused callback is retried until accepted", func(t *testing.T) {
		b := setup(t, "")
		b.cb.fail = 2
		id, _ := b.client.Open(ctx, b.ticket("op-retry"))
		b.sims.Approval.Decide(id, sim.TicketApproved)
		b.cb.wait(t, 1)
		deadline := time.Now().Add(5 * time.Second)
		for len(b.sims.Approval.Callbacks()) == 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if rec := b.sims.Approval.Callbacks(); len(rec) != 1 || rec[0].Attempts != 3 || rec[0].Status != 200 {
			t.Fatalf("records %+v", rec)
		}
	})
}

func TestApprovalSystemFailuresAreBoundedAndBreakerProtected(t *testing.T) {
	b := setup(t, strings.Replace(cfgText, "timeout: 2s", "timeout: 100ms", 1))
	b.sims.Approval.SetFaults(sim.ApprovalFaults{SimTransport: config.SimTransport{Hang: true}})
	_, err := b.client.Open(ctx, b.ticket("op-hang"))
	var oe *outbound.Error
	if !errors.As(err, &oe) || oe.Kind != outbound.KindTimeout {
		t.Fatalf("hanging approval system: %v", err)
	}
	b.sims.Approval.SetFaults(sim.ApprovalFaults{SimTransport: config.SimTransport{ErrorRate: 1}})
	if _, err := b.client.Open(ctx, b.ticket("op-500")); outbound.StatusOf(err) != 500 {
		t.Fatalf("500: %v", err)
	}
	// timeout + 500 = breaker.failures (2): the breaker is open, nothing is sent.
	calls := b.sims.Approval.Calls("open_ticket")
	if _, err := b.client.Open(ctx, b.ticket("op-open")); !errors.As(err, &oe) || oe.Kind != outbound.KindCircuitOpen {
		t.Fatalf("breaker: %v", err)
	}
	if b.sims.Approval.Calls("open_ticket") != calls {
		t.Fatal("an open breaker let a call through")
	}
	b.sims.Approval.ResetFaults()
	deadline := time.Now().Add(5 * time.Second)
	for b.client.BreakerState() == "open" && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := b.client.Open(ctx, b.ticket("op-ok")); err != nil {
		t.Fatalf("after recovery: %v", err)
	}
}

func TestLostOpenAnswerIsSafeToRetry(t *testing.T) {
	b := setup(t, "")
	b.sims.Approval.Inject("open_ticket", sim.FaultDrop, 1)
	_, err := b.client.Open(ctx, b.ticket("op-drop"))
	var oe *outbound.Error
	if !errors.As(err, &oe) || oe.Kind != outbound.KindUnavailable {
		t.Fatalf("dropped answer: %v", err)
	}
	id, err := b.client.Open(ctx, b.ticket("op-drop"))
	if err != nil || len(b.sims.Approval.Tickets()) != 1 || b.sims.Approval.Tickets()[0].ID != id {
		t.Fatalf("retry = %q, %v; tickets %+v", id, err, b.sims.Approval.Tickets())
	}
}

func TestApprovalSystemRefusalCarriesNoUpstreamText(t *testing.T) {
	b := setup(t, "")
	tk := b.ticket("op-bad")
	tk.TargetKey = ""
	_, err := b.client.Open(ctx, tk)
	if outbound.StatusOf(err) != 400 || strings.Contains(err.Error(), "targetKey") {
		t.Fatalf("err = %v", err)
	}
}

func TestMissingApprovalSystemURL(t *testing.T) {
	src := config.NewStatic(config.MustParse(cfgText))
	if _, err := approval.New(src, approval.Options{}); err == nil || !strings.Contains(err.Error(), "approvalSystem.url is not set") {
		t.Fatalf("err = %v", err)
	}
	c, err := approval.New(config.NewStatic(config.MustParse("approvalSystem:\n  url: http://127.0.0.1:1\n")), approval.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Open(ctx, approval.Ticket{OperationID: "x", CallbackURL: "http://127.0.0.1:1/hooks/approval"})
	var oe *outbound.Error
	if !errors.As(err, &oe) || oe.Kind != outbound.KindUnavailable {
		t.Fatalf("nothing listening: %v", err)
	}
}

// A ticket can be read: pending, then decided with the id its callback carries and the ticket's
// ext; an unknown ticket is ErrNoTicket (not a transient failure), an answer without a known
// status is malformed, and an id that is not a path segment is refused before any call.
func TestATicketIsReadWithItsDecision(t *testing.T) {
	b := setup(t, "")
	id, err := b.client.Open(ctx, b.ticket("op-read"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.client.Get(ctx, id)
	if err != nil || got.TicketID != id || got.OperationID != "op-read" || got.Status != approval.StatusPending || got.RequestID != "" {
		t.Fatalf("pending ticket = %+v, %v", got, err)
	}
	if _, err := b.sims.Approval.Decide(id, sim.TicketRejected); err != nil {
		t.Fatal(err)
	}
	cb := b.cb.wait(t, 1)[0]
	got, err = b.client.Get(ctx, id)
	if err != nil || got.Status != approval.StatusRejected || got.RequestID != cb.CallbackID || got.Ext["mrId"] != "42" {
		t.Fatalf("decided ticket = %+v, %v (callback %+v)", got, err, cb)
	}
	var oe *outbound.Error
	if _, err := b.client.Get(ctx, "T-999999"); !errors.Is(err, approval.ErrNoTicket) || (errors.As(err, &oe) && oe.Temporary()) {
		t.Fatalf("unknown ticket: %v", err)
	}
	if _, err := b.client.Get(ctx, "../tickets"); err == nil {
		t.Fatal("a ticket id with a slash was looked up")
	}
	var status atomic.Value
	status.Store("MAYBE")
	odd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"ticketId":"T-1","status":"` + status.Load().(string) + `"}`))
	}))
	defer odd.Close()
	c, _ := approval.New(b.src, approval.Options{DefaultURL: odd.URL})
	if _, err := c.Get(ctx, "T-1"); !errors.As(err, &oe) || oe.Reason != "malformed_answer" {
		t.Fatalf("a status bindery does not know: %v", err)
	}
	// A withdrawn ticket is a decision like the others (the callback protocol has it too).
	status.Store(approval.StatusWithdrawn)
	if got, err := c.Get(ctx, "T-1"); err != nil || got.Status != approval.StatusWithdrawn {
		t.Fatalf("a withdrawn ticket: %+v %v", got, err)
	}
}
