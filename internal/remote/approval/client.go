package approval

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/VictoriaMetrics/metrics"

	"bindery/internal/platform/config"
	"bindery/internal/remote/outbound"
)

// Ticket is what bindery asks the approval system to decide. The system calls CallbackURL back
// (POST /hooks/approval, signed, see Sign) with the decision and Ext unchanged.
type Ticket struct {
	OperationID string            `json:"operationId"`
	Subject     string            `json:"subject"`
	TargetKey   string            `json:"targetKey"`
	Title       string            `json:"title"`
	Reason      string            `json:"reason"`
	CallbackURL string            `json:"callbackUrl"`
	Ext         map[string]string `json:"ext,omitempty"` // e.g. "mrId" in the legacy MR-first flow
}

// Options configure New.
type Options struct {
	Metrics *metrics.Set // per-endpoint metrics (nil: a private set)
	Log     *slog.Logger // breaker changes (nil: discarded)
	// DefaultURL is used while approvalSystem.url is blank: demo passes its simulator
	// (<bindery URL>/sim/approval); serve passes nothing, so a blank key is an error.
	DefaultURL string
	HTTPClient *http.Client // nil: outbound.NewHTTPClient()
}

// Client opens tickets in the approval system: POST <approvalSystem.url>/tickets with the
// ticket as JSON → 201 {"ticketId": "…"}; a repeated operationId answers 200 with the existing
// ticket, so retrying after a lost answer opens nothing twice. Each call has the
// approvalSystem.timeout deadline and runs behind the base URL's circuit breaker.
type Client struct {
	cfg   *config.Source
	opts  Options
	guard *outbound.Guard
	hc    *http.Client
}

const system = "approval"

// New builds the client. It fails with a clear error when no approval system URL is
// configured (and no default given).
func New(src *config.Source, o Options) (*Client, error) {
	if baseURL(src.Current(), o) == "" {
		return nil, errors.New("approvalSystem.url is not set: bindery cannot open approval tickets; set it in the config file")
	}
	if o.HTTPClient == nil {
		o.HTTPClient = outbound.NewHTTPClient()
	}
	return &Client{cfg: src, opts: o, guard: outbound.NewGuard(system, o.Metrics, o.Log), hc: o.HTTPClient}, nil
}

func baseURL(snap *config.Snapshot, o Options) string {
	if u := snap.ApprovalSystemURL(); u != "" {
		return u
	}
	return strings.TrimRight(o.DefaultURL, "/")
}

// Open opens a ticket and returns its id. Failures are *outbound.Error values (status, timeout,
// no answer, breaker open, not configured) whose text carries no upstream body.
func (c *Client) Open(ctx context.Context, t Ticket) (string, error) {
	if t.OperationID == "" || t.CallbackURL == "" {
		return "", fmt.Errorf("approval ticket needs an operationId and a callbackUrl")
	}
	snap := c.cfg.Current()
	base := baseURL(snap, c.opts)
	if base == "" {
		return "", outbound.NewError(system, "open_ticket", outbound.KindNotConfigured, errors.New("approvalSystem.url is blank"))
	}
	limits := outbound.Limits{Timeout: snap.ApprovalSystemTimeout(), Failures: snap.BreakerFailures(), Cooldown: snap.BreakerCooldown()}
	var answer struct {
		TicketID string `json:"ticketId"`
	}
	err := c.guard.Call(ctx, base, "open_ticket", limits, func(ctx context.Context) (int, error) {
		status, data, err := outbound.DoJSON(ctx, c.hc, outbound.Request{
			System: system, Endpoint: "open_ticket", Method: http.MethodPost, URL: base + "/tickets", Body: t,
		}, &answer)
		if err == nil && answer.TicketID == "" {
			return status, outbound.NewStatusError(system, "open_ticket", status, "malformed_answer", string(data), nil)
		}
		return status, err
	})
	if err != nil {
		return "", err
	}
	return answer.TicketID, nil
}

// TicketState is a ticket as the approval system reports it (GET <url>/tickets/:id).
type TicketState struct {
	TicketID    string `json:"ticketId"`
	OperationID string `json:"operationId"`
	Status      string `json:"status"` // PENDING, APPROVED, REJECTED
	// RequestID is the id the decision's callback carries (requestId): applying a decision read
	// here under that id makes its callback, should it still arrive, a duplicate.
	RequestID string            `json:"requestId,omitempty"`
	Ext       map[string]string `json:"ext,omitempty"`
	// DecidedBy and Comment: who decided and what they wrote, as the decision's callback
	// carries them ("": the system sends none).
	DecidedBy string `json:"decidedBy,omitempty"`
	Comment   string `json:"comment,omitempty"`
}

// Ticket statuses (a decided ticket's is the result its callback carries).
const (
	StatusPending   = "PENDING"
	StatusApproved  = "APPROVED"
	StatusRejected  = "REJECTED"
	StatusWithdrawn = "WITHDRAWN"
)

// Get reads a ticket: how bindery learns a decision whose callback was lost. ErrNoTicket when
// the approval system does not know it; an answer without a known status is malformed.
func (c *Client) Get(ctx context.Context, ticketID string) (TicketState, error) {
	if ticketID == "" || strings.ContainsAny(ticketID, "/?#") {
		return TicketState{}, fmt.Errorf("ticket id %q cannot be looked up", ticketID)
	}
	snap := c.cfg.Current()
	base := baseURL(snap, c.opts)
	if base == "" {
		return TicketState{}, outbound.NewError(system, "get_ticket", outbound.KindNotConfigured, errors.New("approvalSystem.url is blank"))
	}
	limits := outbound.Limits{Timeout: snap.ApprovalSystemTimeout(), Failures: snap.BreakerFailures(), Cooldown: snap.BreakerCooldown()}
	var t TicketState
	err := c.guard.Call(ctx, base, "get_ticket", limits, func(ctx context.Context) (int, error) {
		status, data, err := outbound.DoJSON(ctx, c.hc, outbound.Request{
			System: system, Endpoint: "get_ticket", Method: http.MethodGet, URL: base + "/tickets/" + url.PathEscape(ticketID),
		}, &t)
		if err == nil && !slices.Contains([]string{StatusPending, StatusApproved, StatusRejected, StatusWithdrawn}, t.Status) {
			return status, outbound.NewStatusError(system, "get_ticket", status, "malformed_answer", string(data), nil)
		}
		return status, err
	})
	if outbound.StatusOf(err) == http.StatusNotFound {
		return TicketState{}, fmt.Errorf("ticket %s: %w", ticketID, ErrNoTicket)
	}
	return t, err
}

// ErrNoTicket: the approval system does not know the ticket.
var ErrNoTicket = errors.New("the approval system does not know this ticket")

// BreakerState is the state of the configured approval system's circuit breaker.
func (c *Client) BreakerState() string {
	snap := c.cfg.Current()
	return c.guard.BreakerState(baseURL(snap, c.opts), outbound.Limits{Timeout: snap.ApprovalSystemTimeout(), Failures: snap.BreakerFailures(), Cooldown: snap.BreakerCooldown()})
}
