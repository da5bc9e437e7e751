package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"bindery/api"
	"bindery/internal/platform/config"
	"bindery/internal/remote/approval"
	"bindery/internal/work/service"
)

// The simulated approval system. bindery opens tickets with POST /sim/approval/tickets (the
// approval system protocol); people decide them in the inbox (GET /sim/approvals, POST
// /sim/approvals/:id/decide, with who decided and their comment); each decision goes back to the ticket's callback URL as a real
// callback signed with hooks.approvalSecret, retried until bindery answers 2xx.

// ApprovalFaults are the approval simulator's knobs; the struct the sim.approval.* keys fill.
type ApprovalFaults = config.SimApproval

// Ticket statuses: the approval protocol's.
const (
	TicketPending  = approval.StatusPending
	TicketApproved = approval.StatusApproved
	TicketRejected = approval.StatusRejected
)

// Ticket is one approval ticket as the inbox lists it.
type Ticket struct {
	ID          string     `json:"id"`
	OperationID string     `json:"operationId"`
	Subject     string     `json:"subject"`
	TargetKey   string     `json:"targetKey"`
	Reason      string     `json:"reason"`
	Status      string     `json:"status"` // PENDING, APPROVED, REJECTED
	CreatedAt   time.Time  `json:"createdAt"`
	DecidedAt   *time.Time `json:"decidedAt"`
	// DecidedBy and Comment: who decided and what they wrote; the callback carries them.
	DecidedBy string `json:"decidedBy,omitempty"`
	Comment   string `json:"comment,omitempty"`

	title       string
	callbackURL string
	ext         map[string]string
	callbackID  string // of the decision's callback
	delivered   bool   // bindery answered 2xx to it
}

// CallbackRecord is one callback the simulator sent (or tried to).
type CallbackRecord struct {
	TicketID   string
	CallbackID string // the callback's request id; a duplicate repeats it
	Result     string
	Attempts   int
	Status     int // bindery's last answer; 0: none
}

// Approval simulates the external approval system.
type Approval struct {
	opts Options
	cfg  *config.Source
	log  *slog.Logger
	gate *gate
	hc   *http.Client

	mu        sync.Mutex
	override  *ApprovalFaults
	tickets   []*Ticket
	byOp      map[string]*Ticket
	callbacks []CallbackRecord
	held      *pendingCallback // reorder: the callback waiting for the next one
	nextID    int
	nextCB    int

	bg *service.Base // the simulators' service: timed callbacks are its goroutines
}

type pendingCallback struct {
	ticket *Ticket
	body   api.ApprovalCallback
}

func newApproval(o Options, bg *service.Base) *Approval {
	return &Approval{opts: o, cfg: o.Config, log: o.Log, gate: newGate(), hc: &http.Client{Timeout: 10 * time.Second},
		byOp: map[string]*Ticket{}, bg: bg}
}

// SetFaults pins the knobs for a test, instead of the sim.approval.* configuration.
func (a *Approval) SetFaults(f ApprovalFaults) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.override = &f
}

// ResetFaults returns to the sim.approval.* configuration.
func (a *Approval) ResetFaults() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.override = nil
}

func (a *Approval) faults() ApprovalFaults {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.override != nil {
		return *a.override
	}
	return a.cfg.Current().SimApproval()
}

// Inject makes the next times calls of endpoint ("open_ticket", "list", "decide") misbehave.
func (a *Approval) Inject(endpoint string, f Fault, times int) { a.gate.inject(endpoint, f, times) }

// Calls is how many calls of endpoint reached the simulator.
func (a *Approval) Calls(endpoint string) int { return a.gate.count(endpoint) }

// Tickets lists the tickets, newest first.
func (a *Approval) Tickets() []Ticket {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Ticket, 0, len(a.tickets))
	for i := len(a.tickets) - 1; i >= 0; i-- {
		out = append(out, *a.tickets[i])
	}
	return out
}

// TicketExt returns the ext fields and callback URL a ticket was opened with.
func (a *Approval) TicketExt(id string) (ext map[string]string, callbackURL string, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, t := range a.tickets {
		if t.ID == id {
			return t.ext, t.callbackURL, true
		}
	}
	return nil, "", false
}

// Callbacks lists the callbacks sent so far, in sending order.
func (a *Approval) Callbacks() []CallbackRecord {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]CallbackRecord(nil), a.callbacks...)
}

// ErrTicketDecided / ErrNoTicket / ErrBadDecision are Decide's refusals.
var (
	ErrNoTicket      = fmt.Errorf("no such ticket")
	ErrTicketDecided = fmt.Errorf("ticket already decided")
	ErrBadDecision   = fmt.Errorf(`decision must be "APPROVED" or "REJECTED"`)
)

// Decide records a decision and sends the signed callback (after sim.approval.callbackDelay).
func (a *Approval) Decide(id, decision string) (Ticket, error) {
	return a.DecideAs(id, decision, "", "")
}

// maxComment bounds an approver's comment, as an approval system's form would.
const maxComment = 2000

// ErrLongComment is DecideAs's refusal of a comment longer than maxComment characters.
var ErrLongComment = fmt.Errorf("comment must be at most %d characters", maxComment)

// DecideAs is Decide by the approver by ("": unnamed), with their comment (""), both sent in
// the callback.
func (a *Approval) DecideAs(id, decision, by, comment string) (Ticket, error) {
	if decision != TicketApproved && decision != TicketRejected {
		return Ticket{}, ErrBadDecision
	}
	if utf8.RuneCountInString(comment) > maxComment || utf8.RuneCountInString(by) > 255 {
		return Ticket{}, ErrLongComment
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, t := range a.tickets {
		if t.ID != id {
			continue
		}
		if t.Status != TicketPending {
			return *t, ErrTicketDecided
		}
		now := time.Now()
		t.Status, t.DecidedAt, t.DecidedBy, t.Comment = decision, &now, strings.TrimSpace(by), strings.TrimSpace(comment)
		a.nextCB++
		t.callbackID = fmt.Sprintf("cb-%s-%d", newUUID()[:8], a.nextCB)
		a.enqueue(t.callback())
		return *t, nil
	}
	return Ticket{}, ErrNoTicket
}

func (t *Ticket) callback() pendingCallback {
	return pendingCallback{ticket: t, body: api.ApprovalCallback{CallbackID: t.callbackID, OperationID: t.OperationID, Result: t.Status, Ext: t.ext,
		DecidedBy: t.DecidedBy, Comment: t.Comment}}
}

func (a *Approval) faultsLocked() ApprovalFaults { // holds a.mu
	if a.override != nil {
		return *a.override
	}
	return a.cfg.Current().SimApproval()
}

// later runs fn after the simulated delay d, unless the simulators stop first. While they do not
// run (before Start, after Stop) nothing is sent: the decision stays undelivered on its ticket,
// and the next Start sends it (resendUndelivered).
func (a *Approval) later(d time.Duration, fn func(ctx context.Context)) {
	a.bg.Go(func(ctx context.Context) {
		if d = scaled(a.cfg, d); d > 0 {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				return
			}
		}
		fn(ctx)
	})
}

// enqueue schedules a decided ticket's callback under the knobs in force. Reordering is
// decided here, in decision order, so "the newer first" is deterministic.
func (a *Approval) enqueue(cb pendingCallback) { // holds a.mu
	f := a.faultsLocked()
	switch {
	case f.Reorder && a.held == nil:
		a.held = &cb // wait for the next decision; a lone one goes out after 2s anyway
		a.later(f.CallbackDelay+2*time.Second, func(ctx context.Context) { a.flushHeld(ctx, cb.body.CallbackID) })
	case f.Reorder:
		a.gate.faults.add("callbacks_reordered")
		held := *a.held
		a.held = nil
		a.later(f.CallbackDelay, func(ctx context.Context) { a.sendAll(ctx, cb, held) })
	default:
		a.later(f.CallbackDelay, func(ctx context.Context) { a.sendAll(ctx, cb) })
	}
}

func (a *Approval) flushHeld(ctx context.Context, callbackID string) {
	a.mu.Lock()
	held := a.held
	if held == nil || held.body.CallbackID != callbackID {
		a.mu.Unlock()
		return
	}
	a.held = nil
	a.mu.Unlock()
	a.sendAll(ctx, *held)
}

// sendAll sends callbacks in order, each twice when the duplicate knob says so; a lost one
// (sim.approval.callbackLossRate) is recorded as never delivered.
func (a *Approval) sendAll(ctx context.Context, cbs ...pendingCallback) {
	for _, cb := range cbs {
		if chance(a.faults().CallbackLossRate) {
			a.gate.faults.add("callback_lost")
			a.mu.Lock()
			a.callbacks = append(a.callbacks, CallbackRecord{TicketID: cb.ticket.ID, CallbackID: cb.body.CallbackID, Result: cb.body.Result})
			a.mu.Unlock()
			continue
		}
		a.send(ctx, cb)
		if chance(a.faults().DuplicateRate) {
			a.gate.faults.add("callback_duplicated")
			a.send(ctx, cb)
		}
	}
}

// send delivers one callback, signed at each attempt, retrying (up to 6 attempts) until bindery
// answers 2xx. IGNORED_STALE and DUPLICATE answers are 2xx, so they end the retries too.
func (a *Approval) send(ctx context.Context, cb pendingCallback) {
	body, _ := json.Marshal(cb.body)
	rec := CallbackRecord{TicketID: cb.ticket.ID, CallbackID: cb.body.CallbackID, Result: cb.body.Result}
	backoff := 100 * time.Millisecond
	for attempt := 1; attempt <= 6; attempt++ {
		rec.Attempts = attempt
		rec.Status = a.post(ctx, cb.ticket.callbackURL, body)
		if rec.Status >= 200 && rec.Status < 300 {
			break
		}
		select {
		case <-time.After(scaled(a.cfg, backoff)):
		case <-ctx.Done():
			attempt = 6
		}
		backoff *= 2
	}
	if rec.Status < 200 || rec.Status > 299 {
		a.log.Warn("approval simulator: callback not accepted", "ticket", rec.TicketID, "status", rec.Status, "attempts", rec.Attempts)
	}
	a.mu.Lock()
	a.callbacks = append(a.callbacks, rec)
	if rec.Status >= 200 && rec.Status < 300 {
		cb.ticket.delivered = true
	}
	a.mu.Unlock()
}

func (a *Approval) post(ctx context.Context, url string, body []byte) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0
	}
	now := time.Now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(approval.TimestampHeader, fmt.Sprint(now.Unix()))
	req.Header.Set(approval.SignatureHeader, approval.Sign(a.cfg.Current().ApprovalSecret(), now, body))
	resp, err := a.hc.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// ---- HTTP ----

// ServeHTTP serves POST /sim/approval/tickets, GET /sim/approval/tickets/:id (the protocol),
// GET /sim/approvals and POST /sim/approvals/:id/decide (the inbox), and GET /sim/approvals/:id,
// a ticket's page (what approval.ticketURL links in demo mode).
func (a *Approval) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	var endpoint string
	var handle func(w http.ResponseWriter)
	switch {
	case p == "/sim/approval/tickets" && r.Method == http.MethodPost:
		endpoint, handle = "open_ticket", func(w http.ResponseWriter) { a.openTicket(w, r) }
	case strings.HasPrefix(p, "/sim/approval/tickets/") && r.Method == http.MethodGet:
		id := strings.TrimPrefix(p, "/sim/approval/tickets/")
		endpoint, handle = "get_ticket", func(w http.ResponseWriter) { a.getTicket(w, id) }
	case p == "/sim/approvals" && r.Method == http.MethodGet:
		endpoint, handle = "list", func(w http.ResponseWriter) { writeJSON(w, http.StatusOK, map[string][]Ticket{"items": a.Tickets()}) }
	case strings.HasPrefix(p, "/sim/approvals/") && !strings.HasSuffix(p, "/decide") && r.Method == http.MethodGet:
		id := strings.TrimPrefix(p, "/sim/approvals/")
		endpoint, handle = "ticket_page", func(w http.ResponseWriter) { a.ticketPage(w, id) }
	case strings.HasPrefix(p, "/sim/approvals/") && strings.HasSuffix(p, "/decide") && r.Method == http.MethodPost:
		id := strings.TrimSuffix(strings.TrimPrefix(p, "/sim/approvals/"), "/decide")
		endpoint, handle = "decide", func(w http.ResponseWriter) { a.decide(w, r, id) }
	case p == "/sim/approval/tickets" || p == "/sim/approvals" || strings.HasSuffix(p, "/decide"):
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"message": "method not allowed"})
		return
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"message": "not found"})
		return
	}
	a.gate.serve(w, r, endpoint, a.faults().SimTransport, messageBody, handle)
}

func (a *Approval) openTicket(w http.ResponseWriter, r *http.Request) {
	var req approval.Ticket // the protocol's body is bindery's ticket
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"message": "body must be a JSON ticket"})
		return
	}
	for field, v := range map[string]string{"operationId": req.OperationID, "subject": req.Subject, "targetKey": req.TargetKey, "callbackUrl": req.CallbackURL} {
		if strings.TrimSpace(v) == "" {
			writeJSON(w, http.StatusBadRequest, map[string]string{"message": field + " is required"})
			return
		}
	}
	if !strings.HasPrefix(req.CallbackURL, "http://") && !strings.HasPrefix(req.CallbackURL, "https://") {
		writeJSON(w, http.StatusBadRequest, map[string]string{"message": "callbackUrl must be an http(s) URL"})
		return
	}
	a.mu.Lock()
	if t := a.byOp[req.OperationID]; t != nil {
		a.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]string{"ticketId": t.ID}) // a repeat opens nothing new
		return
	}
	a.nextID++
	t := &Ticket{
		ID: fmt.Sprintf("T-%06d", a.nextID), OperationID: req.OperationID, Subject: req.Subject, TargetKey: req.TargetKey,
		Reason: req.Reason, Status: TicketPending, CreatedAt: time.Now(), title: req.Title, callbackURL: req.CallbackURL, ext: req.Ext,
	}
	a.tickets = append(a.tickets, t)
	a.byOp[t.OperationID] = t
	auto := a.faultsLocked().AutoApprove
	a.mu.Unlock()
	if auto {
		_, _ = a.Decide(t.ID, TicketApproved)
	}
	writeJSON(w, http.StatusCreated, map[string]string{"ticketId": t.ID})
}

// getTicket answers what became of a ticket: its status and, once decided, the id its callback
// carries — how bindery recovers a decision whose callback never got through.
func (a *Approval) getTicket(w http.ResponseWriter, id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, t := range a.tickets {
		if t.ID == id {
			writeJSON(w, http.StatusOK, approval.TicketState{TicketID: t.ID, OperationID: t.OperationID, Status: t.Status, RequestID: t.callbackID, Ext: t.ext,
				DecidedBy: t.DecidedBy, Comment: t.Comment})
			return
		}
	}
	writeJSON(w, http.StatusNotFound, map[string]string{"message": "no such ticket"})
}

func (a *Approval) decide(w http.ResponseWriter, r *http.Request, id string) {
	var req struct {
		Decision  string `json:"decision"`
		DecidedBy string `json:"decidedBy"`
		Comment   string `json:"comment"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"message": "body must be {\"decision\": \"APPROVED\"|\"REJECTED\", \"decidedBy\"?, \"comment\"?}"})
		return
	}
	t, err := a.DecideAs(id, req.Decision, req.DecidedBy, req.Comment)
	switch err {
	case nil:
		writeJSON(w, http.StatusOK, t)
	case ErrNoTicket:
		writeJSON(w, http.StatusNotFound, map[string]string{"message": err.Error()})
	case ErrTicketDecided:
		writeJSON(w, http.StatusConflict, map[string]string{"message": err.Error()})
	default:
		writeJSON(w, http.StatusBadRequest, map[string]string{"message": err.Error()})
	}
}

// ticketPage is a ticket's read-only web page, in the simulated GitLab's style and under its
// strict content policy.
func (a *Approval) ticketPage(w http.ResponseWriter, id string) {
	a.mu.Lock()
	var v *webView
	for _, t := range a.tickets {
		if t.ID == id {
			v = &webView{Site: "simulated approval system", Project: t.TargetKey, Title: "Ticket " + t.ID, Rows: [][2]string{
				{"status", t.Status},
				{"request", t.OperationID},
				{"subject", t.Subject},
				{"target", t.TargetKey},
				{"reason", t.Reason},
				{"opened", t.CreatedAt.UTC().Format("2006-01-02 15:04:05 UTC")},
			}}
			if t.DecidedBy != "" {
				v.Rows = append(v.Rows, [2]string{"decided by", t.DecidedBy})
			}
			if t.Comment != "" {
				v.Rows = append(v.Rows, [2]string{"comment", t.Comment})
			}
		}
	}
	a.mu.Unlock()
	if v == nil {
		http.Error(w, "no such ticket", http.StatusNotFound)
		return
	}
	writePage(w, v)
}
