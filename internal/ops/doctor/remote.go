package doctor

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/smtp"
	"net/url"
	"strings"
	"time"

	"bindery/internal/platform/signin"
	"bindery/internal/remote/approval"
	"bindery/internal/remote/outbound"
	"bindery/internal/remote/permission"
	"bindery/internal/work/notify"
)

// checkSecrets: each callback is refused while its secret is blank.
func (d *doctor) checkSecrets() {
	for _, s := range []struct{ key, value, who string }{
		{"hooks.deployToken", d.snap.DeployToken(), "the deploy job's callback (POST /hooks/deploy)"},
		{"hooks.gitlabToken", d.snap.GitLabHookToken(), "GitLab's webhook (POST /hooks/gitlab)"},
		{"hooks.approvalSecret", string(d.snap.ApprovalSecret()), "the approval system's signed callback (POST /hooks/approval)"},
	} {
		switch {
		case s.value == "":
			d.fail("callbacks: "+s.key, "not set: every call of "+s.who+" is refused", "set it to a random secret (openssl rand -hex 32) and give the same value to the caller")
		case len(s.value) < 16:
			d.warn("callbacks: "+s.key, fmt.Sprintf("only %d characters", len(s.value)), "use a random secret of 32 bytes or more (openssl rand -hex 32)")
		default:
			d.ok("callbacks: "+s.key, "set")
		}
	}
}

// checkApproval reads a ticket that cannot exist: a 404 shows the system answers bindery and
// takes its credentials, without opening anything.
func (d *doctor) checkApproval(ctx context.Context) {
	if d.snap.ApprovalSystemURL() == "" {
		d.fail("approval system", "approvalSystem.url is not set", "set it to the approval system's API (docs/approval.md says what it must implement)")
		return
	}
	c, err := approval.New(d.cfg, approval.Options{HTTPClient: d.hc})
	if err != nil {
		d.fail("approval system", hint(err), "")
		return
	}
	cctx, cancel := d.call(ctx)
	defer cancel()
	_, err = c.Get(cctx, "bindery-doctor-probe")
	switch st := outbound.StatusOf(err); {
	case errors.Is(err, approval.ErrNoTicket):
		d.ok("approval system", d.snap.ApprovalSystemURL()+" answers (GET /tickets/:id: 404 for an unknown ticket)")
	case st == http.StatusUnauthorized || st == http.StatusForbidden:
		d.fail("approval system", fmt.Sprintf("refuses bindery's calls (%d)", st), "give bindery's calls access to the approval system (docs/approval.md, 'Access')")
	case err == nil:
		d.warn("approval system", "answered a ticket that should not exist (bindery-doctor-probe)", "check approvalSystem.url points at the approval API (docs/approval.md)")
	default:
		d.fail("approval system", hint(err), "check approvalSystem.url and that this host reaches it")
	}
}

// checkPermission asks about an identity nobody has: any well-formed answer shows it works.
func (d *doctor) checkPermission(ctx context.Context) {
	if d.snap.PermissionURL() == "" {
		if _, ok := d.snap.PermissionRule(d.snap.OpsRule()); !ok {
			d.warn("permission service", "not set, and permission.rules has no "+d.snap.OpsRule()+" rule: nobody reaches the ops console",
				"set permission.url, or list the operators under permission.rules."+d.snap.OpsRule())
			return
		}
		d.ok("permission service", "none: the static rules of permission.rules decide")
		return
	}
	cctx, cancel := d.call(ctx)
	defer cancel()
	if _, err := permission.New(d.cfg, permission.Options{HTTPClient: d.hc}).Check(cctx, "bindery-doctor@invalid", nil, []string{d.snap.OpsRule()}); err != nil {
		d.fail("permission service", hint(err), "check permission.url and that the service answers POST /check")
		return
	}
	d.ok("permission service", d.snap.PermissionURL()+" answers POST /check")
}

// checkNotify reaches each notification endpoint without sending anything; with SendTest it
// posts one test delivery to each webhook and chat instead, as bindery would post its news, and
// says what each answered.
func (d *doctor) checkNotify(ctx context.Context) {
	if d.opts.SendTest {
		for _, t := range notify.SendTests(ctx, d.hc, d.snap, "bindery doctor -send-test") {
			check := "notify: " + t.Kind + " " + t.Endpoint
			if t.Err != nil {
				d.fail(check, "test delivery to "+t.URL+": "+t.Err.Error(), "check the URL and that the receiver accepts bindery's deliveries (a webhook: its secret in notify.webhooks)")
				continue
			}
			d.ok(check, fmt.Sprintf("a test delivery (endpoint.test) to %s was answered %d", t.URL, t.Code))
		}
	} else {
		for _, w := range d.snap.Webhooks() {
			d.reach(ctx, "notify: webhook "+w.Name, w.URL)
		}
		for _, c := range d.snap.Chats() {
			d.reach(ctx, "notify: chat "+c.Name, c.URL)
		}
	}
	if e := d.snap.Email(); e.On() {
		d.checkSMTP(ctx)
	}
}

// reach opens a connection (and a verified TLS session for https) to a URL's host.
func (d *doctor) reach(ctx context.Context, check, raw string) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		d.fail(check, fmt.Sprintf("%q is not a URL", raw), "")
		return
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	cctx, cancel := d.call(ctx)
	defer cancel()
	addr := net.JoinHostPort(u.Hostname(), port)
	var conn net.Conn
	if u.Scheme == "https" {
		conn, err = (&tls.Dialer{Config: &tls.Config{ServerName: u.Hostname()}}).DialContext(cctx, "tcp", addr)
	} else {
		conn, err = (&net.Dialer{}).DialContext(cctx, "tcp", addr)
	}
	if err != nil {
		d.fail(check, hint(err), "check the URL and that this host may reach it")
		return
	}
	conn.Close()
	d.ok(check, u.Scheme+"://"+u.Host+" reachable (nothing sent; -send-test posts a test delivery)")
}

// checkSMTP greets the server and, when required, starts TLS and authenticates; with SendTest it
// mails the from address.
func (d *doctor) checkSMTP(ctx context.Context) {
	e := d.snap.Email()
	check := "notify: email " + e.SMTP
	host, _, err := net.SplitHostPort(e.SMTP)
	if err != nil {
		d.fail(check, "notify.email.smtp is not host:port", "")
		return
	}
	cctx, cancel := d.call(ctx)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(cctx, "tcp", e.SMTP)
	if err != nil {
		d.fail(check, hint(err), "check notify.email.smtp and that this host may reach it")
		return
	}
	if dl, ok := cctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	c, err := smtp.NewClient(conn, host)
	if err != nil {
		conn.Close()
		d.fail(check, "no SMTP greeting: "+hint(err), "")
		return
	}
	defer c.Close()
	if err := c.Hello("bindery-doctor"); err != nil {
		d.fail(check, hint(err), "")
		return
	}
	tlsOn := false
	if ok, _ := c.Extension("STARTTLS"); ok && e.StartTLS != "none" {
		if err := c.StartTLS(&tls.Config{ServerName: host}); err != nil {
			d.fail(check, "STARTTLS: "+hint(err), "the server's certificate must verify from this host")
			return
		}
		tlsOn = true
	} else if e.StartTLS == "required" {
		d.fail(check, "the server offers no STARTTLS and notify.email.starttls is required", "enable STARTTLS on the server, or set starttls: opportunistic")
		return
	}
	if e.Username != "" {
		if err := c.Auth(smtp.PlainAuth("", e.Username, e.Password, host)); err != nil {
			d.fail(check, "authentication refused: "+hint(err), "check notify.email.username and password")
			return
		}
	}
	detail := fmt.Sprintf("greets (TLS %v)", tlsOn)
	if d.opts.SendTest {
		if err := sendTest(c, e.From); err != nil {
			d.fail(check, "test message refused: "+hint(err), "")
			return
		}
		detail += "; a test message was sent to " + e.From
	} else {
		detail += "; nothing sent (-send-test mails the from address)"
	}
	_ = c.Quit()
	d.ok(check, detail)
}

func sendTest(c *smtp.Client, from string) error {
	addr := from
	if i := strings.LastIndex(from, "<"); i >= 0 {
		addr = strings.TrimSuffix(from[i+1:], ">")
	}
	if err := c.Mail(addr); err != nil {
		return err
	}
	if err := c.Rcpt(addr); err != nil {
		return err
	}
	w, err := c.Data()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "From: %s\r\nTo: %s\r\nSubject: bindery doctor test\r\nDate: %s\r\n\r\nbindery doctor -send-test: email from bindery reaches this mailbox.\r\n",
		from, from, time.Now().UTC().Format(time.RFC1123Z))
	return w.Close()
}

// checkSignIn checks the way people sign in: with identity.oidc.issuer, the provider as a
// sign-in reads it; else the login header behind a trusted proxy.
func (d *doctor) checkSignIn(ctx context.Context) {
	if d.snap.OIDCIssuer() != "" {
		d.checkOIDC(ctx)
		return
	}
	if len(d.snap.TrustedProxies()) == 0 {
		d.fail("sign-in", "no identity.oidc.issuer and no server.trustedProxies: nobody can sign in",
			"configure OIDC (identity.oidc) or a login proxy in server.trustedProxies that sets "+d.snap.LoginHeader()+" (docs/install.md, 'Signing in')")
		return
	}
	d.ok("sign-in", fmt.Sprintf("header %s from the login proxy (server.trustedProxies: %d entries)", d.snap.LoginHeader(), len(d.snap.TrustedProxies())))
}

// checkOIDC reads the provider with sign-in's own relying party (signin.OIDC.Check): the
// discovery document, its issuer compared with identity.oidc.issuer as written — character for
// character, as every sign-in compares it — and the signing keys. So doctor passes exactly when
// sign-in would get as far as the provider's page.
func (d *doctor) checkOIDC(ctx context.Context) {
	issuer, clientID := d.snap.OIDCIssuer(), d.snap.OIDCClientID()
	check := "sign-in: OIDC " + issuer
	if clientID == "" {
		d.fail(check, "identity.oidc.clientID is not set: every sign-in is refused", "register bindery as a client of the provider and set identity.oidc.clientID and clientSecret (docs/install.md, 'Signing in')")
		return
	}
	transport := d.hc.Transport
	if transport == nil {
		transport = http.DefaultTransport
	}
	rp := signin.NewOIDC(signin.Options{Transport: transport, Limits: func() outbound.Limits {
		return outbound.Limits{Timeout: d.opts.Timeout, Failures: d.snap.BreakerFailures(), Cooldown: d.snap.BreakerCooldown()}
	}})
	redirect := d.snap.PublicURL() + "/auth/callback"
	found, err := rp.Check(ctx, signin.Client{Issuer: issuer, ClientID: clientID, ClientSecret: d.snap.OIDCClientSecret(), Scopes: d.snap.OIDCScopes(), RedirectURL: redirect})
	switch {
	case err == nil:
		d.ok(check, fmt.Sprintf("discovered, %d signing key(s); register the redirect URL %s for client %s", found.Keys, redirect, clientID))
	case signin.ReasonOf(err) == signin.Unreachable:
		d.fail(check, hint(causeOf(err)), "check identity.oidc.issuer and that this host reaches the provider")
	default:
		d.fail(check, hint(causeOf(err)),
			"set identity.oidc.issuer to exactly the issuer the provider's discovery document names (character for character: a trailing slash counts), and check the provider")
	}
}

// causeOf is what a sign-in failure says went wrong, without its "sign-in failed: reason" frame.
func causeOf(err error) error {
	if cause := errors.Unwrap(err); cause != nil {
		return cause
	}
	return err
}
