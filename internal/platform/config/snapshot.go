package config

import (
	"log/slog"
	"net/netip"
	"time"
)

// Snapshot is one validated configuration. It is immutable once built; a reload builds a new one
// and swaps it in atomically (see Source). Code that serves a request or runs a step calls
// Source.Current() and then a getter, at each use, so that a reload takes effect at once.
//
// Each getter's doc comment states the default and what a blank, unknown or invalid value does.
// The direction of each fallback follows docs/config.md, 'Defaults follow the lighter consequence':
// rate limits fail open, feature switches fail off, access-mode typos close, authorization fails
// closed.
type Snapshot struct {
	// Generation counts successful loads of this process, starting at 1.
	Generation int64
	LoadedAt   time.Time
	// Report lists every known key with its effective value and whether a fallback applied.
	Report []KeyReport
	// Unknown lists keys in the file that no part of bindery reads (typos, usually).
	Unknown []string

	values   map[string]value
	sections []string // the known top-level sections of the file that hold keys, in file order
	named    []string // every known top-level section the file names, empty ones too

	// static
	serverAddr, serverPublicURL string
	serverLoginURL              string
	approvalTicketURL           string
	supportContact              string
	metricsAddr, metricsToken   string
	dbRequestTimeout            time.Duration
	shutdownTimeout             time.Duration
	dsn                         string
	maxOpenConns, maxIdleConns  int
	logFormat                   string
	workerCount, firstWorkers   int
	notifyWorkers               int
	idlePoll                    time.Duration

	// dynamic
	logLevel         slog.Level
	logAccess        bool
	trustedProxies   []netip.Prefix
	rateWindow       time.Duration
	rateLimits       map[string]int // config key → limit, 0 = unlimited; absent = declared default
	applyMode        AccessMode
	applyWindow      Window
	applyLocation    *time.Location
	approvalFirst    bool
	batchMaxRequests int
	approvalRetries  int
	checklistMode    bool
	idempotencyTTL   time.Duration
	targets          []Target

	// last is the configuration in force while a reload is parsed (nil otherwise).
	last *Snapshot

	// area settings, declared beside their keys
	notifySettings
	hookSettings
	integrationSettings
	simSettings
	httpSettings
	workflowSettings
}

// KeyReport is one line of the effective configuration, for the ops console.
type KeyReport struct {
	Key       string `json:"key"`
	Effective string `json:"effective"` // secrets are redacted
	Status    string `json:"status"`    // "set", "default" (missing), "fallback" (invalid → default) or "flag" (a flag overrides it)
	Note      string `json:"note,omitempty"`
	Static    bool   `json:"static"`
}

// Key statuses in KeyReport.
const (
	StatusSet      = "set"
	StatusDefault  = "default"
	StatusFallback = "fallback"
	// StatusFlag: a command-line flag overrides the key (server.addr by -addr); the process
	// reports it, the loader never does.
	StatusFlag = "flag"
)

// LoginURL is server.loginURL, where a person signs in: the 401 answer and the page without an
// identity link to it. Default "" (no link: the page says to sign in through the login in front
// of bindery); a value that is not an absolute http(s) URL is ignored ("") and reported.
func (s *Snapshot) LoginURL() string { return s.serverLoginURL }

// TicketURL is approval.ticketURL, the web address of an approval ticket with {id} for its id.
// Default "" (the request page shows the id without a link; the demo links its simulator's
// page); a value that is not an absolute http(s) URL with {id} is ignored ("") and reported.
func (s *Snapshot) TicketURL() string { return s.approvalTicketURL }

// SupportContact is support.contact, where a requester whose request failed may ask for help:
// a URL or a short text, which the failure's words name. Default "" (the words say "the
// operators of bindery"); a value longer than 200 characters or with control characters is
// ignored ("") and reported.
func (s *Snapshot) SupportContact() string { return s.supportContact }

// ---- static keys: read once at start; a change logs "restart needed" ----

// ListenAddr is server.addr. Default 127.0.0.1:8080. Static.
func (s *Snapshot) ListenAddr() string { return s.serverAddr }

// DatabaseRequestTimeout is database.requestTimeout, the deadline of one API request's database
// work. Default 5s; blank, unparsable or ≤ 0 → 5s.
func (s *Snapshot) DatabaseRequestTimeout() time.Duration { return s.dbRequestTimeout }

// MetricsAddr is server.metricsAddr, the separate listener of /metrics ("" : the API's, where
// /metrics is served only to loopback, server.trustedProxies and server.metricsToken).
func (s *Snapshot) MetricsAddr() string { return s.metricsAddr }

// MetricsToken is server.metricsToken, the bearer token that reads /metrics from anywhere ("":
// none).
func (s *Snapshot) MetricsToken() string { return s.metricsToken }

// PublicURL is server.publicURL, the base URL external systems use to call bindery back
// (approval and deploy callbacks). Default: "" (the caller derives http://<listen address>).
func (s *Snapshot) PublicURL() string { return s.serverPublicURL }

// ShutdownTimeout is server.shutdownTimeout. Default 10s; blank/garbage/≤0 → default.
func (s *Snapshot) ShutdownTimeout() time.Duration { return s.shutdownTimeout }

// DSN is database.dsn ("mysql://…" or "sqlite:…"). Required in serve mode; demo supplies its
// own. Static.
func (s *Snapshot) DSN() string { return s.dsn }

// MaxOpenConns is database.maxOpenConns. Default 20; < 1 → default.
func (s *Snapshot) MaxOpenConns() int { return s.maxOpenConns }

// MaxIdleConns is database.maxIdleConns. Default 10; < 0 → default.
func (s *Snapshot) MaxIdleConns() int { return s.maxIdleConns }

// LogFormat is log.format: "json" or "text". Default "" (serve → json, demo → text).
func (s *Snapshot) LogFormat() string { return s.logFormat }

// Workers is workers.size, the background lane's workers. Default 8; blank, unparsable or < 1 →
// default.
func (s *Snapshot) Workers() int { return s.workerCount }

// FirstWorkers is workers.first, the first-steps lane's workers. Default 4; blank, unparsable or
// < 1 → default.
func (s *Snapshot) FirstWorkers() int { return s.firstWorkers }

// NotifyWorkers is workers.notify, the notify lane's workers. Default 4; blank, unparsable or
// < 1 → default.
func (s *Snapshot) NotifyWorkers() int { return s.notifyWorkers }

// IdlePoll is workers.idlePoll, how often an idle lane looks for work other instances made due.
// Default 1s; blank, unparsable, ≤ 0 or < 10ms → default.
func (s *Snapshot) IdlePoll() time.Duration { return s.idlePoll }

// ---- dynamic keys ----

// LogLevel is log.level: debug, info, warn or error. Default info; anything else → info.
func (s *Snapshot) LogLevel() slog.Level { return s.logLevel }

// LogAccess is log.access: one info line per HTTP request. Default true; blank or invalid →
// true (an access log is switched off only on purpose).
func (s *Snapshot) LogAccess() bool { return s.logAccess }

// TrustedProxies is server.trustedProxies, the addresses (IP or CIDR) whose X-Forwarded-For
// and identity headers are believed. Default: none. An invalid entry is skipped (trusting
// fewer proxies is the safe direction).
func (s *Snapshot) TrustedProxies() []netip.Prefix { return s.trustedProxies }

// RateWindow is ratelimit.window, the sliding window of every rate limit. Default 1m;
// blank/garbage/≤0 → 1m.
func (s *Snapshot) RateWindow() time.Duration { return s.rateWindow }

// RateLimit returns the limit per window for the rate-limit key (e.g. "ratelimit.apply"),
// 0 meaning "do not limit". Missing key → def (the route's declared default); blank,
// unparsable or ≤ 0 → 0: a misconfiguration must not block traffic.
func (s *Snapshot) RateLimit(key string, def int) int {
	if n, ok := s.rateLimits[key]; ok {
		return n
	}
	return def
}

// ApplyMode is apply.mode. Missing/blank → TEST_WINDOW; OPEN and TEST_WINDOW are read
// case- and space-insensitively; anything else → CLOSED.
func (s *Snapshot) ApplyMode() AccessMode { return s.applyMode }

// ApplyOpen reports whether a new application may be made at now: OPEN → yes; CLOSED → no;
// TEST_WINDOW → only inside apply.window (default "Mon-Fri 10:00-18:00"; blank/invalid opens
// nothing) read in apply.timezone (default Asia/Shanghai, never the host's zone; an unknown
// zone opens nothing).
func (s *Snapshot) ApplyOpen(now time.Time) bool {
	switch s.applyMode {
	case ModeOpen:
		return true
	case ModeTestWindow:
		return s.applyWindow.Contains(now, s.applyLocation)
	}
	return false
}

// ApprovalFirst is workflow.approvalFirst: new applications use the approval-first, batched
// flow. Missing/blank/invalid → false (the legacy MR-first flow).
func (s *Snapshot) ApprovalFirst() bool { return s.approvalFirst }

// BatchMaxRequests is batch.maxRequests, the most requests one batch claims. Default 50;
// blank/garbage/≤0 → 50; above 1000 → 1000.
func (s *Snapshot) BatchMaxRequests() int { return s.batchMaxRequests }

// ApprovalMaxRetries is approval.maxRetries, retries per reviewer account after the first
// approve attempt. Default 3; negative → 0; blank/garbage → 3.
func (s *Snapshot) ApprovalMaxRetries() int { return s.approvalRetries }

// ChecklistMode is approval.checklistMode: approve through the raw-HTTP call that carries the
// project's checklist. Missing/blank/invalid → false (the client library's call).
func (s *Snapshot) ChecklistMode() bool { return s.checklistMode }

// IdempotencyTTL is idempotency.ttl, how long a request's idempotency record is kept.
// Default 24h; blank/garbage/≤0 → 24h.
func (s *Snapshot) IdempotencyTTL() time.Duration { return s.idempotencyTTL }

// Targets is the catalog (targets). Missing → empty catalog. An invalid catalog rejects the
// whole file (the last good configuration stays in force).
func (s *Snapshot) Targets() []Target { return s.targets }

// Target looks a catalog entry up by key.
func (s *Snapshot) Target(key string) (Target, bool) {
	for _, t := range s.targets {
		if t.Key == key {
			return t, true
		}
	}
	return Target{}, false
}
