package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"net"
	"strconv"
	"strings"
	textTemplate "text/template"
	"time"

	mail "github.com/wneessen/go-mail"

	"bindery/api"
	"bindery/internal/platform/config"
	"bindery/internal/vocab/state"
	"bindery/store"
)

// Email to the requester (notify.email), through go-mail: one message per event, plain text
// and HTML, the messages about one request in one thread — each names the request's thread
// (In-Reply-To, References: <request-…@bindery>) and has the event's id as its Message-ID, so a
// resend after the at-least-once window is the same message to the mail client.

// emailSender sends one delivery's message.
type emailSender struct{ n *Notifier }

func (s emailSender) send(ctx context.Context, d store.Delivery, e store.Event, snap *config.Snapshot) result {
	// The footer says why the person gets it: their own choice, or the defaults they never changed.
	_, chose, err := s.n.db.EmailPrefs(ctx, e.SubjectID)
	if err != nil {
		return transportFailure(ctx, err)
	}
	msg, err := s.n.message(e, d.Target, snap, chose)
	if err != nil {
		return result{class: classInternal, err: "the message could not be written: " + err.Error()}
	}
	return sendMail(ctx, s.n.email(snap), snap.NotifyTimeout(), msg)
}

// threadDomain is the right-hand side of bindery's message ids.
const threadDomain = "bindery"

// ThreadID is the Message-ID every message about a request refers to (without the brackets).
func ThreadID(operationID string) string { return "request-" + operationID + "@" + threadDomain }

// MessageID is the Message-ID of the message of event id (without the brackets).
func MessageID(eventID string) string { return eventID + "@" + threadDomain }

// message writes the email of e to address (chose: the person chose what they are emailed
// about; else the defaults email them).
func (n *Notifier) message(e store.Event, address string, snap *config.Snapshot, chose bool) (*mail.Msg, error) {
	set := n.email(snap)
	m := mail.NewMsg()
	if err := m.From(set.From); err != nil {
		return nil, fmt.Errorf("from: %w", err)
	}
	if err := m.To(address); err != nil {
		return nil, fmt.Errorf("to: %w", err)
	}
	m.Subject("[bindery] " + mailSubject(e, snap))
	m.SetMessageIDWithValue(MessageID(e.ID))
	m.SetDateWithValue(e.CreatedAt)
	if op := e.Facts.OperationID; op != "" {
		thread := "<" + ThreadID(op) + ">"
		m.SetGenHeader(mail.HeaderInReplyTo, thread)
		m.SetGenHeader(mail.HeaderReferences, thread)
	}
	m.SetGenHeader("Auto-Submitted", "auto-generated")
	v := mailView{Summary: mailSubject(e, snap), Words: Words(e.Type), Event: string(e.Type), ID: e.ID, Chose: chose}
	if rn, ok := news(e, snap, n.links(snap)).(*api.RequestNews); ok {
		v.Request = rn
	}
	var text, html bytes.Buffer
	if err := textMail.Execute(&text, v); err != nil {
		return nil, err
	}
	if err := htmlMail.Execute(&html, v); err != nil {
		return nil, err
	}
	m.SetBodyString(mail.TypeTextPlain, text.String())
	m.AddAlternativeString(mail.TypeTextHTML, html.String())
	return m, nil
}

// mailView is what an email shows.
type mailView struct {
	Summary, Words, Event, ID string
	Request                   *api.RequestNews
	Chose                     bool // the person chose their emails (else the defaults)
}

// mailSubject is an email's subject: the requester's own request in the words of the others
// ("Your request for Grafana editor: needs a person — it failed"), never an operation id.
func mailSubject(e store.Event, snap *config.Snapshot) string {
	f := e.Facts
	title := f.TargetKey
	if t, ok := snap.Target(f.TargetKey); ok && t.Title != "" {
		title = t.Title
	}
	switch e.Type {
	case state.EventRequestNeedsAttention:
		return fmt.Sprintf("Your request for %s: %s — %s", title, Words(e.Type), shortAttention(f))
	case state.EventDeployOverdue:
		return fmt.Sprintf("Your request for %s: merged, its deploy not reported in time", title)
	}
	return Summary(e, snap)
}

var textMail = textTemplate.Must(textTemplate.New("text").Parse(`{{.Summary}}.
{{with .Request}}{{if .OperationID}}
Request:  {{.OperationID}}{{end}}
Target:   {{.TargetTitle}} ({{.TargetKey}}){{if .Project}}, project {{.Project}}{{end}}
{{- with .Step.Label}}
Now:      {{.}}{{end}}
{{- if .Note}}
Note:     {{.Note}}{{end}}
{{- if .MR}}
MR:       !{{.MR.ID}}{{if .MR.URL}} {{.MR.URL}}{{end}}{{end}}

What now: {{.NextActionText}}

{{if .OperationID}}Your request's page{{else}}The review's page{{end}}: {{.URL}}
{{end}}
--
{{if .Chose}}bindery tells you this because you chose to be emailed about it ({{.Words}}).
{{else}}bindery tells you this because every requester is emailed about it ({{.Words}}) unless
they choose otherwise.
{{end}}Choose what you are emailed about on the settings page.
`))

var htmlMail = template.Must(template.New("html").Parse(`<!doctype html>
<html><body style="font-family: sans-serif; line-height: 1.4">
<p><strong>{{.Summary}}.</strong></p>
{{with .Request}}<table style="border-collapse: collapse">
{{if .OperationID}}<tr><td style="padding-right: 1em">Request</td><td><a href="{{.URL}}">{{.OperationID}}</a></td></tr>{{end}}
<tr><td style="padding-right: 1em">Target</td><td>{{.TargetTitle}} ({{.TargetKey}}){{if .Project}}, project {{.Project}}{{end}}</td></tr>
{{with .Step.Label}}<tr><td style="padding-right: 1em">Now</td><td>{{.}}</td></tr>{{end}}
{{if .Note}}<tr><td style="padding-right: 1em">Note</td><td>{{.Note}}</td></tr>{{end}}
{{if .MR}}<tr><td style="padding-right: 1em">Merge request</td><td>{{if .MR.URL}}<a href="{{.MR.URL}}">!{{.MR.ID}}</a>{{else}}!{{.MR.ID}}{{end}}</td></tr>{{end}}
</table>
<p>{{.NextActionText}}</p>
<p><a href="{{.URL}}">{{if .OperationID}}Open your request{{else}}Open the review{{end}}</a></p>{{end}}
<p style="color: #666; font-size: small">{{if .Chose}}bindery tells you this because you chose to be emailed about it ({{.Words}}).{{else}}bindery tells you this because every requester is emailed about it ({{.Words}}) unless they choose otherwise.{{end}} Choose what you are emailed about on the settings page.</p>
</body></html>
`))

// sendMail sends one message through the SMTP server of set within timeout, and classifies the
// outcome: the server's reply code when it refused; a 5xx reply for the recipient or the
// message is permanent (trying again sends the same message to the same refusal).
func sendMail(ctx context.Context, set config.Email, timeout time.Duration, msg *mail.Msg) result {
	host, portText, err := net.SplitHostPort(set.SMTP)
	port, perr := strconv.Atoi(portText)
	if err != nil || perr != nil {
		return result{class: classInternal, err: "notify.email.smtp is not host:port"}
	}
	policy := mail.TLSMandatory
	switch set.StartTLS {
	case config.StartTLSOpportunistic:
		policy = mail.TLSOpportunistic
	case config.StartTLSNone:
		policy = mail.NoTLS
	}
	opts := []mail.Option{mail.WithPort(port), mail.WithTLSPolicy(policy), mail.WithHELO("bindery"), mail.WithTimeout(timeout)}
	if set.Username != "" {
		// Over TLS the strongest mechanism the server offers; without it (starttls: none, chosen
		// by the operator) PLAIN, which the discovery rightly will not pick in the clear.
		mech := mail.SMTPAuthAutoDiscover
		if policy == mail.NoTLS {
			mech = mail.SMTPAuthPlain
		}
		opts = append(opts, mail.WithSMTPAuth(mech), mail.WithUsername(set.Username), mail.WithPassword(set.Password))
	}
	c, err := mail.NewClient(host, opts...)
	if err != nil {
		return result{class: classInternal, err: "the mail client could not be set up"}
	}
	err = c.DialAndSendWithContext(ctx, msg)
	if err == nil {
		return result{code: 250, class: store.ClassOK}
	}
	return mailFailure(ctx, err)
}

// mailFailure classifies a failed send.
func mailFailure(ctx context.Context, err error) result {
	var se *mail.SendError
	if errors.As(err, &se) && se.ErrorCode() > 0 {
		r := result{code: se.ErrorCode(), class: classRefused, err: fmt.Sprintf("the mail server refused the message (%d)", se.ErrorCode())}
		r.permanent = se.ErrorCode() >= 500 && !se.IsTemp() && (se.Reason == mail.ErrSMTPRcptTo || se.Reason == mail.ErrSMTPData || se.Reason == mail.ErrSMTPDataClose)
		return r
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "STARTTLS") || strings.Contains(msg, "tls:") || strings.Contains(msg, "x509"):
		return result{class: classTLS, err: "the mail server offers no STARTTLS, or its TLS failed (notify.email.starttls)"}
	case strings.Contains(msg, "auth"):
		return result{class: classRefused, err: "the mail server refused bindery's login (notify.email.username)"}
	}
	r := transportFailure(ctx, err)
	r.err = strings.Replace(r.err, "receiver", "mail server", 1)
	return r
}
