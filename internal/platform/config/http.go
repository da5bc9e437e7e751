package config

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"bindery/internal/platform/identity"
)

// HTTP area: who the caller is (identity.*), who is an operator (authz.*), and the rate limits
// of routes other than apply. Read by package server at each request.

type httpSettings struct {
	loginHeader string // "" → no login header is read
	directory   *identity.Directory
	opsRule     string // "" → nobody is an operator
}

// DefaultLoginHeader is the header the login proxy sets when identity.loginHeader is missing.
const DefaultLoginHeader = "X-Forwarded-User"

func init() {
	register(
		Key{
			Name: "identity.loginHeader", Type: "header name", Default: DefaultLoginHeader,
			Doc:       "Header the login proxy sets to the caller's account (email-shaped) or employee id. Believed only when the direct peer is in server.trustedProxies.",
			Misconfig: "missing/blank → default; a value that is not a valid header name → no login header is read, every request without a demo identity is 401 (authentication fails closed).",
			apply: func(s *Snapshot, v value) (string, string, error) {
				name, note := stringOr(v, DefaultLoginHeader)
				if !validHeaderName(name) {
					s.loginHeader = ""
					return "(none)", fmt.Sprintf("%q is not a header name", name), nil
				}
				s.loginHeader = name
				return name, note, nil
			},
		},
		Key{
			Name: "identity.directory", Type: "list of {account, employeeId, name}", Default: "(empty)",
			Doc:       "Maps the other spellings the login layer may send (employee id, short name) to the canonical email-shaped account. An email-shaped account not listed is still an identity; an employee id not listed is refused (401).",
			Misconfig: "missing/blank → empty; an entry whose account is not email-shaped, or a spelling claimed by two accounts, rejects the whole file (the last good directory stays in force).",
			apply: func(s *Snapshot, v value) (string, string, error) {
				d, err := parseDirectory(v)
				if err != nil {
					return "", "", err
				}
				s.directory = d
				return fmt.Sprintf("%d entries", len(d.Entries())), blankOnly(v), nil
			},
		},
		Key{
			Name: "authz.opsRule", Type: "rule code", Default: "bindery-ops",
			Doc:       "Permission rule code that makes a caller an operator: the ops endpoints, and access to every request. Checked with the permission service, in the same round trip as a target's rule codes.",
			Misconfig: "missing → default; blank → nobody is an operator and every ops endpoint answers 403 (authorization fails closed).",
			apply: func(s *Snapshot, v value) (string, string, error) {
				if !v.present {
					s.opsRule = "bindery-ops"
					return s.opsRule, "", nil
				}
				s.opsRule, _ = stringOr(v, "")
				if s.opsRule == "" {
					return "(none)", "blank: nobody is an operator", nil
				}
				return s.opsRule, "", nil
			},
		},
		rateLimitKey("ratelimit.revoke", 10, "Revocations and withdrawals (POST /api/requests/:operationId/revoke and …/withdraw) per subject per window."),
		rateLimitKey("ratelimit.renew", 10, "Renewals (POST /api/requests/:operationId/renew) per subject per window."),
	)
}

// blankOnly notes a key written but left blank.
func blankOnly(v value) string {
	if v.present && v.blank() {
		return "blank"
	}
	return ""
}

// validHeaderName: an RFC 7230 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r > 0x7e || r <= 0x20 || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) {
			return false
		}
	}
	return true
}

func parseDirectory(v value) (*identity.Directory, error) {
	if !v.present || v.blank() {
		return identity.NewDirectory(nil)
	}
	if v.node.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("identity.directory%s: want a list of {account, employeeId, name}", v.where())
	}
	entries := make([]identity.Entry, 0, len(v.node.Content))
	for i, n := range v.node.Content {
		var e identity.Entry
		if err := decodeStrict(n, &e); err != nil {
			return nil, fmt.Errorf("identity.directory[%d] (line %d): %w", i, n.Line, err)
		}
		entries = append(entries, e)
	}
	d, err := identity.NewDirectory(entries)
	if err != nil {
		return nil, fmt.Errorf("identity.directory%s: %w", v.where(), err)
	}
	return d, nil
}

// LoginHeader is identity.loginHeader, the header the login proxy sets (believed only from
// server.trustedProxies). Default X-Forwarded-User; missing/blank → default; not a valid header
// name → "" (no login header is read: every request without a demo identity is 401).
func (s *Snapshot) LoginHeader() string { return s.loginHeader }

// IdentityDirectory is identity.directory. Default empty. An invalid or ambiguous directory
// rejects the whole file (the last good one stays in force).
func (s *Snapshot) IdentityDirectory() *identity.Directory { return s.directory }

// OpsRule is authz.opsRule, the rule code that makes a caller an operator. Default
// "bindery-ops"; blank → "" (nobody is an operator: ops endpoints answer 403).
func (s *Snapshot) OpsRule() string { return s.opsRule }
