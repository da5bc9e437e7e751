package config

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Outbound integrations: GitLab (bot and reviewer accounts), the approval system and the
// permission service, and the circuit breaker every one of them sits behind. Every key here is
// dynamic: the clients read it at each call, so a token rotation or a new URL applies without a
// restart.

type integrationSettings struct {
	gitlabBaseURL      string
	gitlabBotToken     string
	gitlabReviewers    []string
	gitlabTimeout      time.Duration
	approvalBackoff    time.Duration
	approvalSystemURL  string
	approvalSystemWait time.Duration
	permissionURL      string
	permissionTimeout  time.Duration
	permissionRules    map[string][]string
	breakerFailures    int
	breakerCooldown    time.Duration
}

func init() {
	register(
		Key{
			Name: "gitlab.baseURL", Type: "URL", Default: "(required in serve; demo: the built-in simulator)",
			Doc:       "GitLab instance bindery talks to, without /api/v4 (e.g. https://gitlab.example.com). In demo mode a blank value means the simulator mounted at <bindery URL>/sim/gitlab.",
			Misconfig: "blank in serve → building the GitLab client fails with a clear error (the start fails, never a crash); a value that is not an http(s) URL rejects the file.",
			apply: func(s *Snapshot, v value) (string, string, error) {
				u, note, err := httpURL("gitlab.baseURL", v)
				s.gitlabBaseURL = strings.TrimRight(strings.TrimSuffix(strings.TrimRight(u, "/"), "/api/v4"), "/")
				return s.gitlabBaseURL, note, err
			},
		},
		Key{
			Name: "gitlab.botToken", Type: "string", Default: "(none)", Secret: true,
			Doc:       "Token of the bot account that creates branches, commits and merge requests, and merges them.",
			Misconfig: "missing/blank → building the GitLab client fails with a clear error; after a reload to blank, every GitLab call fails as \"not configured\" (nothing is sent unauthenticated).",
			apply: func(s *Snapshot, v value) (string, string, error) {
				s.gitlabBotToken, _ = stringOr(v, "")
				return s.gitlabBotToken, blankNote(v), nil
			},
		},
		Key{
			Name: "gitlab.reviewerTokens", Type: "list of strings", Default: "(none)", Secret: true,
			Doc:       "Tokens of the reviewer accounts that approve each merge request (two accounts; each is retried separately).",
			Misconfig: "missing/blank → building the GitLab client fails with a clear error; after a reload to blank, the approve step fails as \"not configured\" (never a merge without approvals). Blank entries are skipped; a value that is not a list (one string, even with commas) counts as blank.",
			apply: func(s *Snapshot, v value) (string, string, error) {
				var note string
				s.gitlabReviewers, note = stringList(v)
				if len(s.gitlabReviewers) == 0 {
					return "", note, nil
				}
				return fmt.Sprintf("%d tokens", len(s.gitlabReviewers)), note, nil
			},
		},
		timeoutKey("gitlab.timeout", 15*time.Second, "Longest a single GitLab call may take (connect, send, answer). The library's own retries are off: the workflow retries.",
			func(s *Snapshot) *time.Duration { return &s.gitlabTimeout }),
		Key{
			Name: "approval.backoff", Type: "duration", Default: "1s",
			Doc:       "First wait between two approve attempts of one reviewer account; it doubles at each retry (1s, 2s, 4s, …). The waits inside one step stop at 10s in all: the retries left are then the step's own (it is due again by its backoff), so no worker sleeps longer.",
			Misconfig: "blank, unparsable or ≤ 0 → 1s.",
			apply: func(s *Snapshot, v value) (string, string, error) {
				var note string
				s.approvalBackoff, note = durationOr(v, time.Second)
				return s.approvalBackoff.String(), note, nil
			},
		},
		Key{
			Name: "approvalSystem.url", Type: "URL", Default: "(required in serve; demo: the built-in simulator)",
			Doc:       "Base URL of the external approval system; tickets are opened with POST <url>/tickets. In demo mode a blank value means the simulator at <bindery URL>/sim/approval.",
			Misconfig: "blank in serve → building the approval client fails with a clear error; after a reload to blank, opening a ticket fails as \"not configured\"; a value that is not an http(s) URL rejects the file.",
			apply: func(s *Snapshot, v value) (string, string, error) {
				u, note, err := httpURL("approvalSystem.url", v)
				s.approvalSystemURL = strings.TrimRight(u, "/")
				return s.approvalSystemURL, note, err
			},
		},
		timeoutKey("approvalSystem.timeout", 10*time.Second, "Longest a call to the approval system may take.",
			func(s *Snapshot) *time.Duration { return &s.approvalSystemWait }),
		Key{
			Name: "permission.url", Type: "URL", Default: "(none: static rules)",
			Doc:       "Base URL of the permission service (POST <url>/check). Blank: the static rules of permission.rules decide (demo).",
			Misconfig: "blank → permission.rules decide; a value that is not an http(s) URL rejects the file. When the service errs or times out, access is denied (authorization fails closed).",
			apply: func(s *Snapshot, v value) (string, string, error) {
				u, note, err := httpURL("permission.url", v)
				s.permissionURL = strings.TrimRight(u, "/")
				return s.permissionURL, note, err
			},
		},
		timeoutKey("permission.timeout", 3*time.Second, "Longest a call to the permission service may take; a timeout denies access.",
			func(s *Snapshot) *time.Duration { return &s.permissionTimeout }),
		Key{
			Name: "permission.rules", Type: "map: rule code → list of identities", Default: "(none)",
			Doc:       "Static permission rules, used when permission.url is blank: each rule code lists the canonical identities (e.g. alice@example.com) it grants. Identities compare case-insensitively.",
			Misconfig: "missing/blank → no rule grants anything (authorization fails closed); an entry that is not a list of identities (one string, even with commas) is skipped and reported.",
			apply: func(s *Snapshot, v value) (string, string, error) {
				var note string
				s.permissionRules, note = parseRules(v)
				return fmt.Sprintf("%d rules", len(s.permissionRules)), note, nil
			},
		},
		Key{
			Name: "breaker.failures", Type: "int", Default: "5",
			Doc:       "Consecutive failed calls (no answer, timeout, 5xx or 429) after which the circuit breaker of that base URL (GitLab, approval system, permission service) opens and fails calls at once.",
			Misconfig: "blank, unparsable or < 1 → 5.",
			apply: func(s *Snapshot, v value) (string, string, error) {
				n, note := intOr(v, 5, 5)
				if n < 1 {
					n, note = 5, "must be ≥ 1"
				}
				s.breakerFailures = n
				return itoa(n), note, nil
			},
		},
		Key{
			Name: "breaker.cooldown", Type: "duration", Default: "30s",
			Doc:       "How long an open circuit breaker refuses calls before it lets one trial call through.",
			Misconfig: "blank, unparsable or ≤ 0 → 30s.",
			apply: func(s *Snapshot, v value) (string, string, error) {
				var note string
				s.breakerCooldown, note = durationOr(v, 30*time.Second)
				return s.breakerCooldown.String(), note, nil
			},
		},
	)
}

// httpURL reads an optional http(s) URL; anything else rejects the file, because a wrong URL
// would send tokens or callbacks to the wrong place.
func httpURL(name string, v value) (string, string, error) {
	u, note := stringOr(v, "")
	if u != "" && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		return "", "", fmt.Errorf("%s%s: %q is not an http(s) URL", name, v.where(), u)
	}
	return u, note, nil
}

// timeoutKey declares an outbound call timeout: blank, unparsable or ≤ 0 → def.
func timeoutKey(name string, def time.Duration, doc string, field func(*Snapshot) *time.Duration) Key {
	return Key{
		Name: name, Type: "duration", Default: def.String(),
		Doc:       doc,
		Misconfig: "blank, unparsable or ≤ 0 → " + def.String() + " (a call never runs without a timeout).",
		apply: func(s *Snapshot, v value) (string, string, error) {
			d, note := durationOr(v, def)
			*field(s) = d
			return d.String(), note, nil
		},
	}
}

// parseRules reads permission.rules. A broken entry grants nothing: it is skipped and named in
// the note, the other rules stay in force.
func parseRules(v value) (map[string][]string, string) {
	out := map[string][]string{}
	if !v.present {
		return out, ""
	}
	if v.blank() {
		return out, "blank"
	}
	if v.node.Kind != yaml.MappingNode {
		return out, "not a mapping of rule code → identities"
	}
	var bad []string
	for i := 0; i+1 < len(v.node.Content); i += 2 {
		code := strings.TrimSpace(v.node.Content[i].Value)
		ids, note := stringList(value{present: true, node: v.node.Content[i+1]})
		if code == "" || (note != "" && note != "blank") {
			bad = append(bad, code)
			continue
		}
		for j := range ids {
			ids[j] = strings.ToLower(ids[j])
		}
		out[code] = ids
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return out, "skipped invalid rules: " + strings.Join(bad, ", ")
	}
	return out, ""
}

// GitLabBaseURL is gitlab.baseURL without a trailing /api/v4. Default "" (serve: building the
// client fails with a clear error; demo: the built-in simulator).
func (s *Snapshot) GitLabBaseURL() string { return s.gitlabBaseURL }

// GitLabBotToken is gitlab.botToken. Default none; blank → the client refuses to call
// ("not configured").
func (s *Snapshot) GitLabBotToken() string { return s.gitlabBotToken }

// GitLabReviewerTokens is gitlab.reviewerTokens, one token per reviewer account. Default none;
// blank → the approve step fails as "not configured". Do not modify the slice.
func (s *Snapshot) GitLabReviewerTokens() []string { return s.gitlabReviewers }

// GitLabTimeout is gitlab.timeout, the deadline of one GitLab call. Default 15s;
// blank/garbage/≤0 → 15s.
func (s *Snapshot) GitLabTimeout() time.Duration { return s.gitlabTimeout }

// ApprovalBackoff is approval.backoff, the first wait between approve attempts of one reviewer
// (doubling each retry). Default 1s; blank/garbage/≤0 → 1s.
func (s *Snapshot) ApprovalBackoff() time.Duration { return s.approvalBackoff }

// ApprovalSystemURL is approvalSystem.url. Default "" (serve: building the client fails with a
// clear error; demo: the built-in simulator).
func (s *Snapshot) ApprovalSystemURL() string { return s.approvalSystemURL }

// ApprovalSystemTimeout is approvalSystem.timeout. Default 10s; blank/garbage/≤0 → 10s.
func (s *Snapshot) ApprovalSystemTimeout() time.Duration { return s.approvalSystemWait }

// PermissionURL is permission.url. Default "": the static rules (permission.rules) decide.
func (s *Snapshot) PermissionURL() string { return s.permissionURL }

// PermissionTimeout is permission.timeout. Default 3s; blank/garbage/≤0 → 3s. A timeout denies.
func (s *Snapshot) PermissionTimeout() time.Duration { return s.permissionTimeout }

// PermissionRule returns the identities (lower case) static rule code grants, and whether the
// rule is configured. Missing/blank permission.rules → no rule is configured (deny).
func (s *Snapshot) PermissionRule(code string) ([]string, bool) {
	ids, ok := s.permissionRules[code]
	return ids, ok
}

// PermissionMatches returns the rule codes among codes whose static rule grants identity
// (compared case-insensitively), in the order given. An unconfigured code grants nothing.
func (s *Snapshot) PermissionMatches(identity string, codes []string) []string {
	identity = strings.ToLower(strings.TrimSpace(identity))
	var out []string
	for _, code := range codes {
		ids, _ := s.PermissionRule(code)
		if identity != "" && slices.Contains(ids, identity) {
			out = append(out, code)
		}
	}
	return out
}

// BreakerFailures is breaker.failures, consecutive failures that open a circuit breaker.
// Default 5; blank/garbage/<1 → 5.
func (s *Snapshot) BreakerFailures() int { return s.breakerFailures }

// BreakerCooldown is breaker.cooldown, how long an open breaker refuses calls. Default 30s;
// blank/garbage/≤0 → 30s.
func (s *Snapshot) BreakerCooldown() time.Duration { return s.breakerCooldown }
