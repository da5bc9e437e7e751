package sim

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net"
	"net/http"
	"net/mail"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/emersion/go-smtp"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"bindery/internal/platform/config"
)

// The mailbox: where a demo's notifications arrive, so that a newcomer watches them come in as
// a request moves. A real SMTP server (emersion/go-smtp) takes bindery's email on a loopback
// port, and a webhook receiver (POST /sim/webhooks/:name) takes its webhooks and checks each
// signature with the Standard Webhooks library — the receiver a real one would be. GET
// /sim/mailbox lists both, newest first; the SPA's Mailbox page shows them.

// DemoWebhookSecret signs the demo's own webhook endpoint (whsec_ and 32 bytes).
const DemoWebhookSecret = "whsec_ZGVtby1tYWlsYm94LXdlYmhvb2stc2VjcmV0IQ=="

// mailboxKeep bounds what the mailbox keeps of each kind (the oldest go first).
const mailboxKeep = 300

// Mailbox is the demo's mail sink and webhook receiver.
type Mailbox struct {
	opts Options

	mu       sync.Mutex
	emails   []Email
	webhooks []WebhookDelivery
	seen     map[string]int // webhook-id → deliveries received (the at-least-once window)

	ln  net.Listener
	srv *smtp.Server
}

// Email is one message the sink received.
type Email struct {
	At        time.Time `json:"at"`
	From      string    `json:"from"`
	To        []string  `json:"to"`
	Subject   string    `json:"subject"`
	MessageID string    `json:"messageId"`
	InReplyTo string    `json:"inReplyTo,omitempty"`
	Text      string    `json:"text"`
	HTML      string    `json:"html,omitempty"`
}

// WebhookDelivery is one webhook the receiver took.
type WebhookDelivery struct {
	At       time.Time       `json:"at"`
	Endpoint string          `json:"endpoint"`
	ID       string          `json:"id"`
	Type     string          `json:"type"`
	Verified bool            `json:"verified"` // the signature checked out with a configured secret
	Error    string          `json:"error,omitempty"`
	Repeat   int             `json:"repeat"` // 1: first delivery of this webhook-id; more: a redelivery
	Body     json.RawMessage `json:"body"`
}

func newMailbox(o Options) *Mailbox {
	return &Mailbox{opts: o, seen: map[string]int{}}
}

// Listen starts the SMTP sink on a loopback port; SMTPAddr names it.
func (m *Mailbox) Listen() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &sinkSession{m: m}, nil }))
	s.Domain = "mailbox.bindery.demo"
	s.ReadTimeout, s.WriteTimeout = time.Minute, time.Minute
	s.MaxMessageBytes = 1 << 20
	s.AllowInsecureAuth = true
	m.mu.Lock()
	m.ln, m.srv = ln, s
	m.mu.Unlock()
	go func() { _ = s.Serve(ln) }()
	return nil
}

// SMTPAddr is the sink's host:port ("" before Listen).
func (m *Mailbox) SMTPAddr() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ln == nil {
		return ""
	}
	return m.ln.Addr().String()
}

// Close stops the SMTP sink (also done by the simulators' Stop); safe more than once.
func (m *Mailbox) Close() { m.stop() }

func (m *Mailbox) stop() {
	m.mu.Lock()
	s := m.srv
	m.srv, m.ln = nil, nil
	m.mu.Unlock()
	if s != nil {
		_ = s.Close()
	}
}

// Emails are the messages received, newest first.
func (m *Mailbox) Emails() []Email {
	m.mu.Lock()
	defer m.mu.Unlock()
	return newestFirst(m.emails)
}

// Webhooks are the webhook deliveries received, newest first.
func (m *Mailbox) Webhooks() []WebhookDelivery {
	m.mu.Lock()
	defer m.mu.Unlock()
	return newestFirst(m.webhooks)
}

// newestFirst is a reversed copy of what was appended oldest first.
func newestFirst[T any](xs []T) []T {
	out := slices.Clone(xs)
	slices.Reverse(out)
	return out
}

// Received is how many deliveries of each webhook-id the receiver took (the chaos check counts
// them).
func (m *Mailbox) Received() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]int, len(m.seen))
	for k, v := range m.seen {
		out[k] = v
	}
	return out
}

// ServeHTTP serves POST /sim/webhooks/:name, GET /sim/webhooks (deliveries received per
// webhook-id) and GET /sim/mailbox.
func (m *Mailbox) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case p == "/sim/mailbox" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, map[string]any{"smtp": m.SMTPAddr(), "emails": m.Emails(), "webhooks": m.Webhooks()})
	case p == "/sim/webhooks" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, m.Received())
	case strings.HasPrefix(p, "/sim/webhooks/") && r.Method == http.MethodPost:
		m.receive(w, r, strings.TrimPrefix(p, "/sim/webhooks/"))
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "404 Not Found"})
	}
}

// receive takes one webhook: it checks the signature with the secrets of the configured
// endpoint of that name (the demo's own: DemoWebhookSecret) and records it; 204 either way, as
// a receiver that deduplicates by webhook-id answers a redelivery.
func (m *Mailbox) receive(w http.ResponseWriter, r *http.Request, name string) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "unreadable body"})
		return
	}
	d := WebhookDelivery{At: time.Now(), Endpoint: name, ID: r.Header.Get("webhook-id"), Body: json.RawMessage(body)}
	if !json.Valid(body) {
		d.Body = json.RawMessage(`null`)
	}
	var head struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(body, &head)
	d.Type = head.Type
	d.Verified, d.Error = verify(secretsOf(m.opts.Config, name), body, r.Header)
	m.mu.Lock()
	m.seen[d.ID]++
	d.Repeat = m.seen[d.ID]
	m.webhooks = append(m.webhooks, d)
	if len(m.webhooks) > mailboxKeep {
		m.webhooks = m.webhooks[len(m.webhooks)-mailboxKeep:]
	}
	m.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// secretsOf are the secrets of the configured webhook endpoint name, and the demo's own.
func secretsOf(src *config.Source, name string) []string {
	out := []string{DemoWebhookSecret}
	for _, wh := range src.Current().Webhooks() {
		if wh.Name == name {
			out = append(out, wh.Secrets...)
		}
	}
	return out
}

// verify checks a delivery's signature with the Standard Webhooks library, with each secret.
func verify(secrets []string, body []byte, h http.Header) (bool, string) {
	last := "no secret"
	for _, s := range secrets {
		wh, err := standardwebhooks.NewWebhook(s)
		if err != nil {
			continue
		}
		if err := wh.Verify(body, h); err == nil {
			return true, ""
		} else {
			last = err.Error()
		}
	}
	return false, last
}

// sinkSession is one SMTP session of the sink.
type sinkSession struct {
	m        *Mailbox
	from     string
	to       []string
	authUser string
}

func (s *sinkSession) Reset()        { s.from, s.to = "", nil }
func (s *sinkSession) Logout() error { return nil }

func (s *sinkSession) Mail(from string, _ *smtp.MailOptions) error { s.from = from; return nil }

func (s *sinkSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	if len(s.to) >= 50 {
		return &smtp.SMTPError{Code: 452, EnhancedCode: smtp.EnhancedCode{4, 5, 3}, Message: "Too many recipients"}
	}
	s.to = append(s.to, to)
	return nil
}

func (s *sinkSession) Data(r io.Reader) error {
	raw, err := io.ReadAll(io.LimitReader(r, 1<<20))
	if err != nil {
		return err
	}
	e, err := parseEmail(raw)
	if err != nil {
		return &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 6, 0}, Message: "Message not readable"}
	}
	e.At, e.To = time.Now(), s.to
	s.m.mu.Lock()
	s.m.emails = append(s.m.emails, e)
	if len(s.m.emails) > mailboxKeep {
		s.m.emails = s.m.emails[len(s.m.emails)-mailboxKeep:]
	}
	s.m.mu.Unlock()
	return nil
}

// parseEmail reads a message's headers and its plain and HTML parts.
func parseEmail(raw []byte) (Email, error) {
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return Email{}, err
	}
	dec := new(mime.WordDecoder)
	subject, err := dec.DecodeHeader(msg.Header.Get("Subject"))
	if err != nil {
		subject = msg.Header.Get("Subject")
	}
	e := Email{From: msg.Header.Get("From"), Subject: subject, MessageID: msg.Header.Get("Message-Id"), InReplyTo: msg.Header.Get("In-Reply-To")}
	ct, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil {
		ct = "text/plain"
	}
	if !strings.HasPrefix(ct, "multipart/") {
		b, err := decodePart(msg.Body, msg.Header.Get("Content-Transfer-Encoding"))
		e.Text = b
		return e, err
	}
	mr := multipart.NewReader(msg.Body, params["boundary"])
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return e, nil
		}
		if err != nil {
			return e, err
		}
		pt, _, _ := mime.ParseMediaType(part.Header.Get("Content-Type"))
		b, err := decodePart(part, part.Header.Get("Content-Transfer-Encoding"))
		if err != nil {
			return e, err
		}
		switch pt {
		case "text/plain":
			e.Text = b
		case "text/html":
			e.HTML = b
		}
	}
}

// decodePart reads a body in its transfer encoding.
func decodePart(r io.Reader, encoding string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case "base64":
		r = base64.NewDecoder(base64.StdEncoding, &lineless{r: r})
	case "quoted-printable":
		r = quotedprintable.NewReader(r)
	}
	b, err := io.ReadAll(io.LimitReader(r, 1<<20))
	return string(b), err
}

// lineless drops the line breaks base64 bodies are wrapped with.
type lineless struct{ r io.Reader }

func (l *lineless) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	k := 0
	for _, c := range p[:n] {
		if c != '\r' && c != '\n' {
			p[k] = c
			k++
		}
	}
	if k == 0 && n > 0 && err == nil {
		return l.Read(p)
	}
	return k, err
}
