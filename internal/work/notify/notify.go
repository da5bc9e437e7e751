// Package notify tells people (docs/notifications.md): it routes each event of the outbox
// (store.Event, written in the transaction of the change it reports) to its receivers — webhook
// endpoints (Standard Webhooks v1), the requester's mailbox, chats, the batch's merge request —
// and delivers each one as durable work of the engine, on a lane of its own: one bounded attempt
// per run, every attempt recorded, the Standard Webhooks retry schedule with jitter, a receiver
// that answers 410 or fails for longer than notify.disableAfter disabled and reported.
//
// Delivery is at least once: an instance that dies after a receiver took a delivery and before
// its outcome committed leaves the delivery's claim to expire, and another instance sends it
// again with the same id (webhook-id, Message-ID). Receivers deduplicate by that id.
package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"bindery/api"
	"bindery/internal/platform/config"
	"bindery/internal/platform/identity"
	"bindery/internal/platform/metric"
	"bindery/internal/remote/outbound"
	"bindery/internal/vocab/explain"
	"bindery/internal/vocab/state"
	"bindery/internal/work/engine"
	"bindery/store"
)

// Channels of a delivery.
const (
	ChannelWebhook = "webhook"
	ChannelEmail   = "email"
	ChannelChat    = "chat"
	ChannelMRNote  = "mrnote"
)

// Options configure New. DB, Config and Engine are required.
type Options struct {
	DB     *store.DB
	Config *config.Source
	Engine *engine.Engine
	Log    *slog.Logger
	// Recorder takes the bindery_notify_* metrics (nil: none).
	Recorder *metric.Recorder
	Instance string
	// BaseURL is bindery's own URL while server.publicURL is blank (links to requests).
	BaseURL string
	// GitLabURL is GitLab's web base while gitlab.baseURL is blank (links to merge requests).
	GitLabURL string
	// HTTPClient sends webhooks and chat messages (nil: a dedicated client without redirects).
	HTTPClient *http.Client
	// Notes writes the batch's merge request note (nil: no notes, whatever notify.mrNotes says).
	Notes Notes
	// Jitter draws the retry schedule's jitter in [0, 1) (nil: random).
	Jitter func() float64
	// DemoEmail is the email setting while notify.email is not configured (the demo's mail
	// sink); DemoWebhooks are endpoints beside notify.webhooks (the demo's webhook receiver),
	// unless one configured has the same name.
	DemoEmail    config.Email
	DemoWebhooks []config.Webhook
}

// Notifier routes and delivers events.
type Notifier struct {
	db     *store.DB
	cfg    *config.Source
	engine *engine.Engine
	log    *slog.Logger
	rec    *metric.Recorder
	inst   string
	base   string
	gitlab string
	hc     *http.Client
	notes  Notes
	jitter func() float64
	// schedule is the retry schedule (the Standard Webhooks one; tests shorten it).
	schedule     []time.Duration
	demoEmail    config.Email
	demoWebhooks []config.Webhook
	// chosen is every event type some person chose to be emailed about, besides the defaults
	// (refreshed by the watch and at each choice made here; nil until first read: all).
	chosen atomic.Pointer[map[state.EventType]bool]
	// sent counts deliveries this process made (tests).
	sent atomic.Int64
}

// New builds the notifier, registers the notify kind on the engine and installs the routing
// filter on the database (again at each configuration change).
func New(o Options) (*Notifier, error) {
	if o.DB == nil || o.Config == nil || o.Engine == nil {
		return nil, errors.New("notify: DB, Config and Engine are required")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.HTTPClient == nil {
		o.HTTPClient = outbound.NewHTTPClient()
		// A receiver that redirects is not followed: the delivery went where it was configured.
		o.HTTPClient.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	if o.Jitter == nil {
		o.Jitter = defaultJitter
	}
	n := &Notifier{db: o.DB, cfg: o.Config, engine: o.Engine, log: o.Log.With("component", "notify"), rec: o.Recorder, inst: o.Instance,
		base: strings.TrimRight(o.BaseURL, "/"), gitlab: strings.TrimRight(o.GitLabURL, "/"), hc: o.HTTPClient, notes: o.Notes, jitter: o.Jitter, schedule: schedule,
		demoEmail: o.DemoEmail, demoWebhooks: o.DemoWebhooks}
	o.Engine.Register(n.def().Kind())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := n.refreshChosen(ctx); err != nil {
		n.log.Warn("people's email choices not read; every requester's event is routed until the watch reads them", "err", err)
	}
	cancel()
	n.route(n.cfg.Current())
	n.cfg.OnChange(func(_, cur *config.Snapshot) { n.route(cur) })
	n.watchConfig()
	return n, nil
}

// route installs the routing filter of snap: an event gets a routing task only when a receiver
// of snap may want it.
func (n *Notifier) route(snap *config.Snapshot) {
	notes := n.notes != nil && snap.MRNotes()
	n.db.SetEventRoutes(func(t state.EventType) bool {
		if t.Info().Audience == state.AudienceBatch {
			return notes
		}
		for _, w := range n.webhooks(snap) {
			if w.Wants(t) {
				return true
			}
		}
		for _, c := range snap.Chats() {
			if c.Wants(t, "") || len(c.Projects) > 0 && t.Info().Audience == state.AudienceRequester {
				return true
			}
		}
		return n.email(snap).On() && t.ConcernsRequester() && (t.Info().EmailByDefault || n.someoneChose(t))
	})
}

// someoneChose reports whether some person chose to be emailed about t (true until the choices
// were first read).
func (n *Notifier) someoneChose(t state.EventType) bool {
	m := n.chosen.Load()
	return m == nil || (*m)[t]
}

// refreshChosen reads every person's choice again.
func (n *Notifier) refreshChosen(ctx context.Context) error {
	m, err := n.db.ChosenTypes(ctx)
	if err != nil {
		return err
	}
	n.chosen.Store(&m)
	return nil
}

// webhooks are the endpoints of snap, with the demo's.
func (n *Notifier) webhooks(snap *config.Snapshot) []config.Webhook {
	ws := snap.Webhooks()
	if len(n.demoWebhooks) == 0 {
		return ws
	}
	out := append([]config.Webhook(nil), ws...)
	for _, d := range n.demoWebhooks {
		if !slices.ContainsFunc(ws, func(w config.Webhook) bool { return w.Name == d.Name }) {
			out = append(out, d)
		}
	}
	return out
}

// email is the email setting of snap, or the demo's while it has none.
func (n *Notifier) email(snap *config.Snapshot) config.Email {
	if e := snap.Email(); e.On() {
		return e
	}
	return n.demoEmail
}

// links is where messages link to, by the configuration in force.
func (n *Notifier) links(snap *config.Snapshot) explain.Links {
	base := snap.PublicURL()
	if base == "" {
		base = n.base
	}
	gl := strings.TrimRight(snap.GitLabBaseURL(), "/")
	if gl == "" {
		gl = n.gitlab
	}
	return explain.Links{Base: strings.TrimRight(base, "/"), GitLab: gl}
}

// run is one action of the notify kind: route an event, or make one attempt of a delivery.
// Step is a step of a notify task (stored as the task's step: never rename one).
type Step string

const (
	stepRoute = Step(state.NotifyRoute) // an event's receivers recorded, each pending delivery with its send task
	stepSend  = Step(state.NotifySend)  // one attempt of one delivery, recorded with its outcome
)

// steps is the notify kind's one table of steps: both run in the notify lane, so a slow
// receiver never delays a request's steps; a database that does not answer is tried again with
// backoff (1 s doubling up to a minute) for ever, a receiver's own failure is the attempt's
// outcome (its schedule, not the engine's).
func (n *Notifier) steps() []notifyStep {
	type es = engine.Step[struct{}, Step]
	lane := engine.LaneNotify
	return []notifyStep{
		{es{Name: stepRoute, Lane: lane, Run: func(ctx context.Context, j *engine.Job[struct{}, Step]) error { return n.routeEvent(ctx, j.Run) }},
			"record the event's receivers (the configuration in force, people's choices), each pending delivery with its send task"},
		{es{Name: stepSend, Lane: lane, Run: func(ctx context.Context, j *engine.Job[struct{}, Step]) error { return n.send(ctx, j.Run) }},
			"one attempt of one delivery (webhook, email, chat, the batch MR's note), recorded; the next by the schedule, or done, or the receiver disabled"},
	}
}

// notifyStep is a row of the table: the engine's part and what the step does, in words.
type notifyStep struct {
	engine.Step[struct{}, Step]
	does string
}

// def is the notify kind as the engine runs it.
func (n *Notifier) def() engine.Def[struct{}, Step] {
	d := engine.Def[struct{}, Step]{
		Name: state.TaskNotify,
		Fail: func(ctx context.Context, j *engine.Job[struct{}, Step], err error) error {
			return n.fail(ctx, j.Run, err)
		},
		Short: func() time.Duration { return time.Second },
		Long:  func() time.Duration { return time.Minute },
		Lease: func() time.Duration { return n.cfg.Current().NotifyTimeout() + 30*time.Second },
	}
	for _, r := range n.steps() {
		d.Steps = append(d.Steps, r.Step)
	}
	return d
}

// StepDocs is the notify kind's step table for docs/states.md.
func StepDocs() []engine.StepDoc {
	var out []engine.StepDoc
	for _, r := range (&Notifier{}).steps() {
		d := engine.DocOf(r.Step)
		d.Does, d.Retry = r.does, "backoff on an unavailable database; a receiver's failure: the delivery's own schedule"
		d.Fails = "the attempt recorded as bindery's own failure, and tried again"
		out = append(out, d)
	}
	return out
}

// routeEvent records the event's receivers, each pending one with its send task, under the
// routing task's fence: an event is routed once.
func (n *Notifier) routeEvent(ctx context.Context, r *engine.Run) error {
	e, err := n.db.EventByID(ctx, r.Task.Ref)
	if errors.Is(err, store.ErrNotFound) {
		r.Log.Error("routing task of an event that does not exist; ended")
		return r.Finish(ctx, nil)
	}
	if err != nil {
		return engine.Unavailable(err)
	}
	ds, err := n.receivers(ctx, e)
	if err != nil {
		return engine.Unavailable(err)
	}
	pending := 0
	if err := r.Finish(ctx, func(tx *store.Tx) error {
		var err error
		pending, err = tx.AddDeliveries(ctx, e.ID, ds)
		return err
	}); err != nil {
		return err
	}
	n.rec.Inc("bindery_notify_events_routed_total", "type", string(e.Type))
	for _, d := range ds {
		if d.Skip != "" {
			n.rec.Inc("bindery_notify_deliveries_total", "channel", d.Channel, "outcome", store.DeliverySkipped)
		}
	}
	if pending > 0 {
		n.engine.Nudge(engine.LaneNotify)
	}
	return nil
}

// receivers are the deliveries of e by the configuration in force: the webhooks and chats that
// want it (not those disabled), the requester's mailbox when they chose its type (or it is one
// of the defaults), the batch's merge request for the batch's own events.
func (n *Notifier) receivers(ctx context.Context, e store.Event) ([]store.NewDelivery, error) {
	snap := n.cfg.Current()
	var out []store.NewDelivery
	add := func(channel, endpoint, target string) error {
		h, err := n.db.EndpointHealth(ctx, endpoint)
		if err != nil {
			return err
		}
		if !h.Disabled() {
			out = append(out, store.NewDelivery{Channel: channel, Endpoint: endpoint, Target: target})
		}
		return nil
	}
	if !e.Type.Known() {
		return nil, nil // a newer version's event: nothing here knows its receivers
	}
	for _, w := range n.webhooks(snap) {
		if w.Wants(e.Type) {
			if err := add(ChannelWebhook, config.EndpointKey(ChannelWebhook, w.Name), ""); err != nil {
				return nil, err
			}
		}
	}
	for _, c := range snap.Chats() {
		if c.Wants(e.Type, e.Facts.Project) {
			if err := add(ChannelChat, config.EndpointKey(ChannelChat, c.Name), ""); err != nil {
				return nil, err
			}
		}
	}
	if d, ok, err := n.emailReceiver(ctx, snap, e); err != nil {
		return nil, err
	} else if ok {
		out = append(out, d)
	}
	if e.Type.Info().Audience == state.AudienceBatch && n.notes != nil && snap.MRNotes() {
		f := e.Facts
		iid := f.MRIID
		if e.Type == state.EventBatchCulprit && f.RootMRIID != 0 {
			iid = f.RootMRIID // the note of the merge request whose failure started the bisection
		}
		if iid != 0 {
			if err := add(ChannelMRNote, ChannelMRNote, fmt.Sprintf("%s!%d", f.Project, iid)); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// emailReceiver is the requester's delivery of e, when they are to be emailed about it: a
// skipped one when no address is known for them (the request page says so).
func (n *Notifier) emailReceiver(ctx context.Context, snap *config.Snapshot, e store.Event) (store.NewDelivery, bool, error) {
	if !n.email(snap).On() || e.SubjectID == "" || !e.Type.ConcernsRequester() {
		return store.NewDelivery{}, false, nil
	}
	if e.Type == state.EventRequestNeedsAttention && e.Facts.Reason == store.AttentionFailed {
		return store.NewDelivery{}, false, nil // request.failed told them, with what to do
	}
	chosen, ok, err := n.db.EmailPrefs(ctx, e.SubjectID)
	if err != nil {
		return store.NewDelivery{}, false, err
	}
	if ok && !slices.Contains(chosen, e.Type) || !ok && !e.Type.Info().EmailByDefault {
		return store.NewDelivery{}, false, nil
	}
	h, err := n.db.EndpointHealth(ctx, ChannelEmail)
	if err != nil {
		return store.NewDelivery{}, false, err
	}
	d := store.NewDelivery{Channel: ChannelEmail, Endpoint: ChannelEmail}
	switch addr := AddressOf(snap, e.SubjectID); {
	case addr == "":
		d.Target, d.Skip = e.SubjectID, "no email address is known for "+e.SubjectID
	case h.Disabled():
		d.Target, d.Skip = addr, "email is disabled: "+h.DisabledReason
	default:
		d.Target = addr
	}
	return d, true, nil
}

// AddressOf is where subject is emailed: their account when it is an email address, else the
// identity directory's account for them ("": none known).
func AddressOf(snap *config.Snapshot, subject string) string {
	if a, ok := identity.Canonical(subject); ok {
		return a
	}
	if e, ok := snap.IdentityDirectory().Lookup(subject); ok {
		return e.Account
	}
	return ""
}

// sendState is what a send run read: the fail path records its attempt.
type sendState struct {
	d     store.Delivery
	start time.Time
}

// send makes one attempt of a delivery and records it: delivered, due again by the schedule, or
// failed for good; a receiver disabled or no longer configured ends it without an attempt.
func (n *Notifier) send(ctx context.Context, r *engine.Run) error {
	id, ok := store.DeliveryOf(r.Task.Ref)
	if !ok {
		return r.Park(ctx, "a send task whose ref is not a delivery: "+r.Task.Ref)
	}
	d, err := n.db.Delivery(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return r.Finish(ctx, nil)
	}
	if err != nil {
		return engine.Unavailable(err)
	}
	if d.Status != store.DeliveryPending {
		return r.Finish(ctx, nil) // ended by an outside write (an operator); nothing to send
	}
	e, err := n.db.EventByID(ctx, d.EventID)
	if err != nil {
		return engine.Unavailable(err)
	}
	h, err := n.db.EndpointHealth(ctx, d.Endpoint)
	if err != nil {
		return engine.Unavailable(err)
	}
	snap := n.cfg.Current()
	if h.Disabled() {
		return n.end(ctx, r, d, store.DeliveryFailed, "the receiver is disabled: "+h.DisabledReason)
	}
	s, why := n.sender(snap, d)
	if s == nil {
		return n.end(ctx, r, d, store.DeliveryFailed, why)
	}
	r.State = &sendState{d: d, start: time.Now()}
	actx, cancel := context.WithTimeout(ctx, snap.NotifyTimeout())
	start := time.Now()
	res := s.send(actx, d, e, snap)
	cancel()
	if ctx.Err() != nil {
		return ctx.Err() // a shutdown or a lost claim: nothing is recorded, the attempt runs again
	}
	return n.record(ctx, r, d, res, time.Since(start))
}

// record writes an attempt's outcome, then counts it.
func (n *Notifier) record(ctx context.Context, r *engine.Run, d store.Delivery, res result, took time.Duration) error {
	snap := n.cfg.Current()
	o := store.Outcome{
		Attempt:        store.Attempt{Code: res.code, Latency: took, Class: res.class, Error: res.err, Instance: n.inst},
		Status:         store.DeliveryDelivered,
		DisableAfter:   snap.NotifyDisableAfter(),
		FailingTooLong: explain.EndpointFailing(snap.NotifyDisableAfter()),
	}
	if !res.ok() {
		o.Status = store.DeliveryFailed
		if res.gone {
			o.Disable = "it answered 410 Gone: the receiver asks not to be called again"
		}
		if !res.gone && !res.permanent {
			if wait, again := nextWait(n.schedule, d.Attempts+1, res.retryAfter, n.jitter); again {
				o.Status, o.Next = store.DeliveryPending, wait
			}
		}
	}
	var disabled bool
	write := func(tx *store.Tx) error {
		var err error
		disabled, err = tx.RecordAttempt(ctx, d, o)
		return err
	}
	var err error
	if o.Status == store.DeliveryPending {
		err = r.Next(ctx, store.TaskNext{In: o.Next, Note: fmt.Sprintf("attempt %d failed (%s); next attempt in %s", d.Attempts+1, res.err, o.Next.Round(time.Second))}, write)
	} else {
		err = r.Finish(ctx, write)
	}
	if err != nil {
		return err
	}
	n.sent.Add(1)
	n.rec.Inc("bindery_notify_attempts_total", "channel", d.Channel, "outcome", res.class)
	n.rec.Observe("bindery_notify_attempt_seconds", took.Seconds(), "channel", d.Channel)
	if o.Status != store.DeliveryPending {
		n.rec.Inc("bindery_notify_deliveries_total", "channel", d.Channel, "outcome", o.Status)
	}
	if disabled {
		n.rec.Inc("bindery_notify_endpoints_disabled_total", "channel", d.Channel)
		n.log.Warn("delivery endpoint disabled", "endpoint", d.Endpoint, "why", res.err)
	}
	if !res.ok() {
		n.log.Info("delivery attempt failed", "endpoint", d.Endpoint, "delivery", d.ID, "attempt", d.Attempts+1, "class", res.class, "code", res.code,
			"error", res.err, "next", o.Next, "status", o.Status)
	}
	return nil
}

// end ends a delivery without an attempt.
func (n *Notifier) end(ctx context.Context, r *engine.Run, d store.Delivery, status, why string) error {
	if err := r.Finish(ctx, func(tx *store.Tx) error { return tx.EndDelivery(ctx, d, status, why) }); err != nil {
		return err
	}
	n.rec.Inc("bindery_notify_deliveries_total", "channel", d.Channel, "outcome", status)
	return nil
}

// fail is the kind's declared failure: a step that failed in bindery itself (a panic, a bug).
// A routing is tried again after a while (its event stays); an attempt is recorded as bindery's
// own failure and follows the schedule like any failed attempt.
func (n *Notifier) fail(ctx context.Context, r *engine.Run, err error) error {
	st, ok := r.State.(*sendState)
	if Step(r.Task.Step) != stepSend || !ok {
		return r.Next(ctx, store.TaskNext{In: time.Minute, Failures: r.Task.Failures + 1, Note: "routing failed in bindery: " + engine.Public(err)}, nil)
	}
	return n.record(ctx, r, st.d, result{class: classInternal, err: "bindery failed to make the attempt: " + engine.Public(err)}, time.Since(st.start))
}

// sender is one channel's way of delivering.
type sender interface {
	send(ctx context.Context, d store.Delivery, e store.Event, snap *config.Snapshot) result
}

// sender is the sender of d by the configuration in force (nil, and why: its receiver is no
// longer configured).
func (n *Notifier) sender(snap *config.Snapshot, d store.Delivery) (sender, string) {
	name, _ := strings.CutPrefix(d.Endpoint, d.Channel+":")
	switch d.Channel {
	case ChannelWebhook:
		for _, w := range n.webhooks(snap) {
			if w.Name == name {
				return webhookSender{w: webhook{cfg: w, hc: n.hc}, n: n}, ""
			}
		}
	case ChannelChat:
		for _, c := range snap.Chats() {
			if c.Name == name {
				return chatSender{c: c, n: n}, ""
			}
		}
	case ChannelEmail:
		if n.email(snap).On() {
			return emailSender{n: n}, ""
		}
		return nil, "email is no longer configured (notify.email)"
	case ChannelMRNote:
		if n.notes != nil {
			return noteSender{n: n}, ""
		}
	}
	return nil, "the receiver " + d.Endpoint + " is no longer configured"
}

// webhookSender renders the Standard Webhooks body and posts it.
type webhookSender struct {
	w webhook
	n *Notifier
}

func (s webhookSender) send(ctx context.Context, d store.Delivery, e store.Event, snap *config.Snapshot) result {
	body, err := json.Marshal(api.WebhookBody{Type: e.Type, Timestamp: e.CreatedAt.UTC(), Data: news(e, snap, s.n.links(snap))})
	if err != nil {
		return result{class: classInternal, err: "the body could not be written"}
	}
	return s.w.send(ctx, e, body)
}
