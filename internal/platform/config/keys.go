package config

import (
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Key describes one configuration key. Keys is the single list of every key bindery reads:
// the loader applies it, docs/config.md is generated from it (a test fails when the file is
// stale), and the ops console reports it.
//
// Adding a key: declare it (here, or in an area file such as integrations.go that calls register
// from init), give Snapshot a getter whose doc comment repeats Default and Misconfig (area
// fields live in a struct embedded in Snapshot), add rows to the misconfig table test
// (misconfigTable and probes; area test files add theirs from init) and regenerate the docs.
type Key struct {
	Name      string // dotted path: "ratelimit.apply" is ratelimit: → apply:
	Type      string
	Default   string
	Static    bool // read once at start; a change logs "restart needed"
	Secret    bool // redacted in the ops console and logs
	Doc       string
	Misconfig string // what blank, unknown or invalid values do
	// apply interprets the raw value into the snapshot. It returns the effective value as
	// text, a note when a fallback was taken, and an error only for values that must reject
	// the whole file.
	apply func(s *Snapshot, v value) (effective, note string, err error)
}

func itoa(n int) string { return strconv.Itoa(n) }

// Keys is the registry: the core keys below, then the area files' keys in file-name order.
// Order is the order of docs/config.md.
var Keys = coreKeys

// register appends an area's keys; call it from the area file's init.
func register(ks ...Key) { Keys = append(Keys, ks...) }

var coreKeys = []Key{
	{
		Name: "server.addr", Type: "host:port", Default: "127.0.0.1:8080", Static: true,
		Doc:       "Listen address of the HTTP server. The -addr flag overrides it.",
		Misconfig: "blank → default; an address that cannot be bound fails the start with a clear error.",
		apply: func(s *Snapshot, v value) (string, string, error) {
			s.serverAddr, _ = stringOr(v, "127.0.0.1:8080")
			return s.serverAddr, "", nil
		},
	},
	{
		Name: "server.metricsAddr", Type: "host:port", Default: "(the API's listener)", Static: true,
		Doc:       "Listen address of a separate listener that serves only /metrics, open to whoever reaches it (protect it by where it listens) or to server.metricsToken when set. Blank: /metrics is on the API's listener, served only to loopback, server.trustedProxies and server.metricsToken.",
		Misconfig: "blank → the API's listener; an address that cannot be bound fails the start with a clear error.",
		apply: func(s *Snapshot, v value) (string, string, error) {
			s.metricsAddr, _ = stringOr(v, "")
			return s.metricsAddr, "", nil
		},
	},
	{
		Name: "server.metricsToken", Type: "string", Default: "(none)", Secret: true,
		Doc:       "Token a scraper may send as \"Authorization: Bearer <token>\" to read /metrics from anywhere.",
		Misconfig: "missing/blank → /metrics is served only by the peer rule (loopback, server.trustedProxies) or on server.metricsAddr.",
		apply: func(s *Snapshot, v value) (string, string, error) {
			s.metricsToken, _ = stringOr(v, "")
			note := ""
			if v.present && v.blank() {
				note = "blank: /metrics is served to loopback and server.trustedProxies only"
			}
			return s.metricsToken, note, nil
		},
	},
	{
		Name: "server.publicURL", Type: "URL", Default: "(http://<listen address>)", Static: true,
		Doc:       "Base URL external systems use to reach bindery (approval and deploy callbacks).",
		Misconfig: "blank → derived from the listen address; a value that is not an http(s) URL rejects the file.",
		apply: func(s *Snapshot, v value) (string, string, error) {
			u, _ := stringOr(v, "")
			if u != "" && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
				return "", "", fmt.Errorf("server.publicURL%s: %q is not an http(s) URL", v.where(), u)
			}
			s.serverPublicURL = strings.TrimRight(u, "/")
			return s.serverPublicURL, "", nil
		},
	},
	{
		Name: "server.loginURL", Type: "URL", Default: "(none)",
		Doc:       "Where a person signs in (serve mode): the page a caller without an identity sees links to it, and the 401 answer names it (loginUrl).",
		Misconfig: "missing/blank → the page says to sign in through the login in front of bindery, with no link; a value that is not an absolute http(s) URL is ignored (no link) and reported.",
		apply: func(s *Snapshot, v value) (string, string, error) {
			u, note := stringOr(v, "")
			s.serverLoginURL = ""
			if u != "" && !absoluteHTTP(u) {
				return "", fmt.Sprintf("%q is not an absolute http(s) URL: no sign-in link", u), nil
			}
			s.serverLoginURL = u
			return u, note, nil
		},
	},
	{
		Name: "server.shutdownTimeout", Type: "duration", Default: "10s", Static: true,
		Doc:       "How long a graceful shutdown waits for in-flight requests and steps.",
		Misconfig: "blank, unparsable or ≤ 0 → 10s.",
		apply: func(s *Snapshot, v value) (string, string, error) {
			var note string
			s.shutdownTimeout, note = durationOr(v, 10*time.Second)
			return s.shutdownTimeout.String(), note, nil
		},
	},
	{
		Name: "server.trustedProxies", Type: "list of IP or CIDR", Default: "(none)",
		Doc:       "Proxies whose X-Forwarded-For hop and login header are believed. The client address is the rightmost X-Forwarded-For hop not in this list.",
		Misconfig: "missing/blank → no proxy is trusted (the peer address is the client); an invalid entry is skipped and reported: trusting fewer proxies is the safe direction. A value that is not a list (one string, even with commas) trusts none.",
		apply: func(s *Snapshot, v value) (string, string, error) {
			items, note := stringList(v)
			var bad []string
			s.trustedProxies = nil
			for _, it := range items {
				if p, err := netip.ParsePrefix(it); err == nil {
					s.trustedProxies = append(s.trustedProxies, p.Masked())
				} else if a, err := netip.ParseAddr(it); err == nil {
					s.trustedProxies = append(s.trustedProxies, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
				} else {
					bad = append(bad, it)
				}
			}
			if len(bad) > 0 {
				note = "skipped invalid entries: " + strings.Join(bad, ", ")
			}
			eff := make([]string, len(s.trustedProxies))
			for i, p := range s.trustedProxies {
				eff[i] = p.String()
			}
			return strings.Join(eff, ", "), note, nil
		},
	},
	{
		Name: "database.dsn", Type: "DSN", Default: "(required in serve)", Static: true, Secret: true,
		Doc:       "mysql://user:pass@tcp(host:3306)/db or sqlite:/path/to/file.db. The -dsn flag of demo overrides it.",
		Misconfig: "blank in serve → the start fails with a clear error; an unknown scheme fails the start.",
		apply: func(s *Snapshot, v value) (string, string, error) {
			s.dsn, _ = stringOr(v, "")
			return s.dsn, "", nil
		},
	},
	{
		Name: "database.maxOpenConns", Type: "int", Default: "20", Static: true,
		Doc:       "Most open connections to MySQL (SQLite always writes through one connection).",
		Misconfig: "blank, unparsable or < 1 → 20.",
		apply: func(s *Snapshot, v value) (string, string, error) {
			s.maxOpenConns, _ = intOr(v, 20, 20)
			note := ""
			if s.maxOpenConns < 1 {
				s.maxOpenConns, note = 20, "must be ≥ 1"
			}
			return itoa(s.maxOpenConns), note, nil
		},
	},
	timeoutKey("database.requestTimeout", 5*time.Second,
		"Longest the database work of one API request may take (reads, writes, the commit, waiting for a connection). Beyond it, or when the connection is lost, the answer is 503 with Retry-After — never a 500, never a long wait. /readyz holds a test write to the same limit.",
		func(s *Snapshot) *time.Duration { return &s.dbRequestTimeout }),
	{
		Name: "database.maxIdleConns", Type: "int", Default: "10", Static: true,
		Doc:       "Most idle connections kept open.",
		Misconfig: "blank, unparsable or < 0 → 10.",
		apply: func(s *Snapshot, v value) (string, string, error) {
			s.maxIdleConns, _ = intOr(v, 10, 10)
			note := ""
			if s.maxIdleConns < 0 {
				s.maxIdleConns, note = 10, "must be ≥ 0"
			}
			return itoa(s.maxIdleConns), note, nil
		},
	},
	{
		Name: "log.format", Type: "json | text", Default: "(json in serve, text in demo)", Static: true,
		Doc:       "Log line format.",
		Misconfig: "blank → the command's default; anything else than json or text rejects the file.",
		apply: func(s *Snapshot, v value) (string, string, error) {
			f, _ := stringOr(v, "")
			f = strings.ToLower(f)
			if f != "" && f != "json" && f != "text" {
				return "", "", fmt.Errorf("log.format%s: %q is not json or text", v.where(), f)
			}
			s.logFormat = f
			return f, "", nil
		},
	},
	{
		Name: "log.level", Type: "debug | info | warn | error", Default: "info",
		Doc:       "Lowest level logged. Changes take effect without restart.",
		Misconfig: "blank or unknown → info.",
		apply: func(s *Snapshot, v value) (string, string, error) {
			raw, note := stringOr(v, "info")
			switch strings.ToLower(raw) {
			case "debug":
				s.logLevel = slog.LevelDebug
			case "info":
				s.logLevel = slog.LevelInfo
			case "warn", "warning":
				s.logLevel = slog.LevelWarn
			case "error":
				s.logLevel = slog.LevelError
			default:
				s.logLevel, note = slog.LevelInfo, fmt.Sprintf("%q is not a level", raw)
			}
			return s.logLevel.String(), note, nil
		},
	},
	{
		Name: "log.access", Type: "bool", Default: "true",
		Doc:       "One info line per HTTP request (method, route, status, duration, request id). Changes take effect without restart.",
		Misconfig: "blank or invalid → true: the lines are on unless switched off with a clear false.",
		apply: func(s *Snapshot, v value) (string, string, error) {
			var note string
			s.logAccess, note = boolOr(v, true, true)
			return strconv.FormatBool(s.logAccess), note, nil
		},
	},
	workerKey("workers.size", 8, func(s *Snapshot) *int { return &s.workerCount },
		"Workers of the background lane on each instance: pipeline checks, merges, settlements, batches — each one bounded action (one GitLab call or one look), never a wait: work waiting on CI is a row with a due time, not a busy worker."),
	workerKey("workers.notify", 4, func(s *Snapshot) *int { return &s.notifyWorkers },
		"Workers of the notify lane on each instance: routing events and delivering them (webhooks, email, chat, merge request notes), one bounded attempt each. A lane of its own, so that a slow or hanging receiver never delays a request's steps."),
	workerKey("workers.first", 4, func(s *Snapshot) *int { return &s.firstWorkers },
		"Workers of the first-steps lane on each instance: a new application's approval ticket, a legacy MR's creation. A lane of their own, so that no number of batches in CI delays an application; work waits in the database for a free worker, and the request view says how many are ahead."),
	{
		Name: "workers.idlePoll", Type: "duration", Default: "1s", Static: true,
		Doc:       "How often an idle lane looks for work that another instance made due (a webhook, a callback or an operator's action received there); work this instance makes due runs at once.",
		Misconfig: "blank, unparsable, ≤ 0 or below 10ms → 1s.",
		apply: func(s *Snapshot, v value) (string, string, error) {
			d, note := durationOr(v, time.Second)
			if d < 10*time.Millisecond {
				d, note = time.Second, "below the minimum 10ms"
			}
			s.idlePoll = d
			return d.String(), note, nil
		},
	},
	{
		Name: "ratelimit.window", Type: "duration", Default: "1m",
		Doc:       "Sliding window of every rate limit.",
		Misconfig: "blank, unparsable or ≤ 0 → 1m.",
		apply: func(s *Snapshot, v value) (string, string, error) {
			var note string
			s.rateWindow, note = durationOr(v, time.Minute)
			return s.rateWindow.String(), note, nil
		},
	},
	rateLimitKey("ratelimit.apply", 10, "Applications (POST /api/apply) per subject per window."),
	{
		Name: "apply.mode", Type: "OPEN | TEST_WINDOW | CLOSED", Default: "TEST_WINDOW",
		Doc:       "Whether new applications are accepted: always, only inside apply.window, or never.",
		Misconfig: "missing/blank → TEST_WINDOW; read case- and space-insensitively; any other value (a typo) → CLOSED.",
		apply: func(s *Snapshot, v value) (string, string, error) {
			var note string
			s.applyMode, note = parseAccessMode(v)
			return string(s.applyMode), note, nil
		},
	},
	{
		Name: "apply.window", Type: "\"<days> <HH:MM>-<HH:MM>\"", Default: "Mon-Fri 10:00-18:00",
		Doc:       "When TEST_WINDOW accepts applications, read in apply.timezone. Days: Mon..Sun, ranges and comma lists, or daily.",
		Misconfig: "missing → default; blank or invalid → the window opens nothing.",
		apply: func(s *Snapshot, v value) (string, string, error) {
			if !v.present {
				s.applyWindow, _ = ParseWindow("Mon-Fri 10:00-18:00")
				return "Mon-Fri 10:00-18:00", "", nil
			}
			raw, _ := v.scalar()
			w, err := ParseWindow(raw)
			if err != nil {
				s.applyWindow = Window{}
				return "(opens nothing)", err.Error(), nil
			}
			s.applyWindow = w
			return raw, "", nil
		},
	},
	{
		Name: "apply.timezone", Type: "IANA zone", Default: "Asia/Shanghai",
		Doc:       "Zone apply.window is read in. Never the host's zone, so every host agrees.",
		Misconfig: "blank → default; an unknown zone → the window opens nothing.",
		apply: func(s *Snapshot, v value) (string, string, error) {
			name, note := stringOr(v, "Asia/Shanghai")
			loc, err := time.LoadLocation(name)
			if err != nil || name == "Local" {
				s.applyLocation = nil
				return "(opens nothing)", fmt.Sprintf("unknown zone %q", name), nil
			}
			s.applyLocation = loc
			return name, note, nil
		},
	},
	{
		Name: "workflow.approvalFirst", Type: "bool", Default: "false",
		Doc:       "New applications use the approval-first, batched flow (true) or the legacy MR-first flow (false). Requests in flight finish in the flow they started in.",
		Misconfig: "blank or invalid → false (legacy flow), as a switch fails off.",
		apply: func(s *Snapshot, v value) (string, string, error) {
			var note string
			s.approvalFirst, note = boolOr(v, false, false)
			return strconv.FormatBool(s.approvalFirst), note, nil
		},
	},
	{
		Name: "batch.maxRequests", Type: "int", Default: "50",
		Doc:       "Most requests one batch (one MR) claims.",
		Misconfig: "blank, unparsable or ≤ 0 → 50; above 1000 → 1000.",
		apply: func(s *Snapshot, v value) (string, string, error) {
			n, note := intOr(v, 50, 50)
			switch {
			case n <= 0:
				n, note = 50, "must be > 0"
			case n > 1000:
				n, note = 1000, "capped at 1000"
			}
			s.batchMaxRequests = n
			return itoa(n), note, nil
		},
	},
	{
		Name: "approval.maxRetries", Type: "int", Default: "3",
		Doc:       "Retries of the MR approve call per reviewer account, with exponential backoff.",
		Misconfig: "negative → 0; blank or unparsable → 3.",
		apply: func(s *Snapshot, v value) (string, string, error) {
			n, note := intOr(v, 3, 3)
			if n < 0 {
				n, note = 0, "negative means no retries"
			}
			s.approvalRetries = n
			return itoa(n), note, nil
		},
	},
	{
		Name: "approval.ticketURL", Type: "URL template", Default: "(none; the demo: its simulator's ticket page)",
		Doc:       "The web address of an approval ticket, {id} standing for the ticket's id: the request page links the ticket it was sent with.",
		Misconfig: "missing/blank → the ticket id is shown without a link; a value that is not an absolute http(s) URL with {id} is ignored (no link) and reported.",
		apply: func(s *Snapshot, v value) (string, string, error) {
			u, note := stringOr(v, "")
			s.approvalTicketURL = ""
			if u != "" && (!strings.Contains(u, "{id}") || !absoluteHTTP(strings.ReplaceAll(u, "{id}", "T-1"))) {
				return "", fmt.Sprintf("%q is not an absolute http(s) URL with {id}: no ticket link", u), nil
			}
			s.approvalTicketURL = u
			return u, note, nil
		},
	},
	{
		Name: "support.contact", Type: "URL or text", Default: "(none: \"the operators of bindery\")",
		Doc:       "Where a requester whose request failed may ask for help — a URL (a chat channel, a ticket queue) or a short text (\"the platform team in #access\"). The failure's words on the request page name it beside the requester's own way out (withdraw and apply again).",
		Misconfig: "missing/blank → the words say \"the operators of bindery\"; a value longer than 200 characters or with control characters is ignored (the default words) and reported. An http(s) URL is shown as a link, anything else as text.",
		apply: func(s *Snapshot, v value) (string, string, error) {
			c, note := stringOr(v, "")
			c = strings.TrimSpace(c)
			s.supportContact = ""
			switch {
			case utf8.RuneCountInString(c) > 200:
				return "", "longer than 200 characters: the default words", nil
			case strings.ContainsFunc(c, unicode.IsControl):
				return "", "control characters: the default words", nil
			}
			s.supportContact = c
			return c, note, nil
		},
	},
	{
		Name: "approval.checklistMode", Type: "bool", Default: "false",
		Doc:       "Approve MRs through the raw-HTTP call that carries the project's required checklist (true) or through the client library (false). Read at each call.",
		Misconfig: "blank or invalid → false, as a switch fails off.",
		apply: func(s *Snapshot, v value) (string, string, error) {
			var note string
			s.checklistMode, note = boolOr(v, false, false)
			return strconv.FormatBool(s.checklistMode), note, nil
		},
	},
	{
		Name: "idempotency.ttl", Type: "duration", Default: "24h",
		Doc:       "How long a write request's idempotency record (operationId → answer) is kept.",
		Misconfig: "blank, unparsable or ≤ 0 → 24h.",
		apply: func(s *Snapshot, v value) (string, string, error) {
			var note string
			s.idempotencyTTL, note = durationOr(v, 24*time.Hour)
			return s.idempotencyTTL.String(), note, nil
		},
	},
	{
		Name: "targets", Type: "list of targets", Default: "(empty catalog)",
		Doc:       "The catalog: key ([a-z0-9-], unique), title, project (GitLab project and batch partition), branch (default main), path (template with {subject}, inside the repository), ruleCodes (empty: anyone signed in), ttl (how long a binding stays in effect: whole days such as 30d, or a duration such as 720h; empty: no expiry), maxTtl (a renewal never sets the expiry later than this after the binding first came into effect; at least the ttl; empty: no bound), renewal (auto: a renewal is granted at once; approval, the default: it goes to the approval system like an application), owners (who reviews its bindings: identities, or group:NAME, compared case-insensitively; operators always may), reviews (every: a review starts by itself this long after the last one, such as 90d; due: how long its reviewers have, default 14d or every if shorter).",
		Misconfig: "any invalid target rejects the whole file; the last good catalog stays in force. A removed target refuses new applications; requests in flight finish.",
		apply: func(s *Snapshot, v value) (string, string, error) {
			ts, err := parseTargets(v)
			if err != nil {
				return "", "", err
			}
			s.targets = ts
			return fmt.Sprintf("%d targets", len(ts)), "", nil
		},
	},
}

// workerKey declares a lane's worker count (static: read at start).
func workerKey(name string, def int, field func(*Snapshot) *int, doc string) Key {
	return Key{
		Name: name, Type: "int", Default: itoa(def), Static: true, Doc: doc,
		Misconfig: fmt.Sprintf("blank, unparsable or < 1 → %d.", def),
		apply: func(s *Snapshot, v value) (string, string, error) {
			n, note := intOr(v, def, def)
			if n < 1 {
				n, note = def, "must be ≥ 1"
			}
			*field(s) = n
			return itoa(n), note, nil
		},
	}
}

// rateLimitKey declares a per-route rate limit key. Routes declare the same default beside
// their route (docs/api.md, 'Rate limits'); a test checks that the two agree.
func rateLimitKey(name string, def int, doc string) Key {
	return Key{
		Name: name, Type: "int", Default: itoa(def),
		Doc:       doc,
		Misconfig: "missing → default; blank, unparsable or ≤ 0 → no limiting (a misconfiguration must not block traffic).",
		apply: func(s *Snapshot, v value) (string, string, error) {
			if !v.present {
				return itoa(def), "", nil
			}
			n, note := intOr(v, def, 0)
			if n <= 0 {
				if note == "" {
					note = "≤ 0"
				}
				n = 0
			}
			s.rateLimits[name] = n
			if n == 0 {
				return "unlimited", note, nil
			}
			return itoa(n), note, nil
		},
	}
}

// absoluteHTTP reports whether u is an absolute http(s) URL with a host: what a link on a page
// must be.
func absoluteHTTP(u string) bool {
	p, err := url.Parse(u)
	return err == nil && (p.Scheme == "http" || p.Scheme == "https") && p.Host != ""
}
