package config

import (
	"strings"
	"testing"
	"time"
)

func init() {
	probes["identity.oidc.issuer"] = func(s *Snapshot) any { return s.OIDCIssuer() }
	probes["identity.oidc.clientID"] = func(s *Snapshot) any { return s.OIDCClientID() }
	probes["identity.oidc.clientSecret"] = func(s *Snapshot) any { return s.OIDCClientSecret() }
	probes["identity.oidc.scopes"] = func(s *Snapshot) any { return strings.Join(s.OIDCScopes(), " ") }
	probes["identity.oidc.accountClaim"] = func(s *Snapshot) any { return s.OIDCAccountClaim() }
	probes["identity.oidc.groupsClaim"] = func(s *Snapshot) any { return s.OIDCGroupsClaim() }
	probes["identity.session.idle"] = func(s *Snapshot) any { return s.SessionIdle() }
	probes["identity.session.absolute"] = func(s *Snapshot) any { return s.SessionAbsolute() }
	probes["ratelimit.authFailures"] = func(s *Snapshot) any { return s.RateLimit("ratelimit.authFailures", 20) }

	misconfigTable["identity.oidc.issuer"] = []misconfigCase{ // not a URL: the file is refused (-1 is "rejected")
		{"missing", nil, ""}, {"blank", nil, ""}, {"garbage", str("sso.example.com/realms/main"), -1},
		{"negative/zero", str("0"), -1}, {"valid", str("https://sso.example.com/realms/main"), "https://sso.example.com/realms/main"},
		{"kept as written (discovery compares it exactly)", str("https://sso.example.com/"), "https://sso.example.com/"},
	}
	misconfigTable["identity.oidc.clientID"] = []misconfigCase{ // blank with an issuer: nobody signs in (fails closed)
		{"missing", nil, ""}, {"blank", nil, ""}, {"garbage", str("'%%%'"), "%%%"},
		{"negative/zero", str("0"), "0"}, {"valid", str("bindery"), "bindery"},
	}
	misconfigTable["identity.oidc.clientSecret"] = []misconfigCase{ // blank: a public client
		{"missing", nil, ""}, {"blank", nil, ""}, {"garbage", str("'%%%'"), "%%%"},
		{"negative/zero", str("0"), "0"}, {"valid", str("s3cret"), "s3cret"},
	}
	misconfigTable["identity.oidc.scopes"] = []misconfigCase{
		{"missing", nil, "openid email profile"}, {"blank", nil, "openid email profile"},
		{"garbage", str("openid email"), "openid email profile"}, // one string is not a list
		{"negative/zero", str("[0]"), "openid 0"}, {"valid", str("[openid, email, groups]"), "openid email groups"},
		{"without openid", str("[email]"), "openid email"},
	}
	misconfigTable["identity.oidc.accountClaim"] = []misconfigCase{
		{"missing", nil, "email"}, {"blank", nil, "email"}, {"garbage", str("'%%%'"), "%%%"},
		{"negative/zero", str("0"), "0"}, {"valid", str("preferred_username"), "preferred_username"},
	}
	misconfigTable["identity.oidc.groupsClaim"] = []misconfigCase{
		{"missing", nil, ""}, {"blank", nil, ""}, {"garbage", str("'%%%'"), "%%%"},
		{"negative/zero", str("0"), "0"}, {"valid", str("groups"), "groups"},
	}
	misconfigTable["identity.session.idle"] = []misconfigCase{
		{"missing", nil, 8 * time.Hour}, {"blank", nil, 8 * time.Hour}, {"garbage", str("a day"), 8 * time.Hour},
		{"negative/zero", str("0s"), 8 * time.Hour}, {"valid", str("30m"), 30 * time.Minute},
	}
	misconfigTable["identity.session.absolute"] = []misconfigCase{
		{"missing", nil, 168 * time.Hour}, {"blank", nil, 168 * time.Hour}, {"garbage", str("a week"), 168 * time.Hour},
		{"negative/zero", str("-1h"), 168 * time.Hour}, {"valid", str("12h"), 12 * time.Hour},
	}
	misconfigTable["ratelimit.authFailures"] = []misconfigCase{ // fail open, as every rate limit
		{"missing", nil, 20}, {"blank", nil, 0}, {"garbage", str("some"), 0},
		{"negative/zero", str("0"), 0}, {"valid", str("5"), 5},
	}
}

// The client secret is a secret: the effective configuration the ops console and the log show
// never holds it, and a reload that would blank it is refused like any other secret's.
func TestTheClientSecretIsNeverShown(t *testing.T) {
	const secret = "oidc-s3cret-value"
	snap := MustParse("identity:\n  oidc:\n    issuer: https://sso.example.com\n    clientID: bindery\n    clientSecret: " + secret + "\n")
	if snap.OIDCClientSecret() != secret {
		t.Fatalf("getter: %q", snap.OIDCClientSecret())
	}
	r := reportFor(t, snap, "identity.oidc.clientSecret")
	if r.Effective != "(redacted)" || strings.Contains(r.Note, secret) {
		t.Fatalf("report: %+v", r)
	}
	for _, k := range snap.Report {
		if strings.Contains(k.Effective+k.Note, secret) {
			t.Errorf("%s shows the secret: %+v", k.Key, k)
		}
	}
	cut := MustParse("identity:\n  oidc:\n    issuer: https://sso.example.com\n    clientID: bindery\n")
	if err := halfFile(snap, cut); err == nil || !strings.Contains(err.Error(), "identity.oidc.clientSecret") {
		t.Fatalf("a reload without the secret: %v", err)
	}
}

// With the issuer set and no client id, nobody can sign in, and the report says why.
func TestAnIssuerWithoutAClientIDIsReported(t *testing.T) {
	snap := MustParse("identity:\n  oidc:\n    issuer: https://sso.example.com\n")
	if snap.OIDCIssuer() == "" || snap.OIDCClientID() != "" {
		t.Fatalf("issuer %q client %q", snap.OIDCIssuer(), snap.OIDCClientID())
	}
	if r := reportFor(t, snap, "identity.oidc.clientID"); !strings.Contains(r.Note, "nobody can sign in") {
		t.Fatalf("report: %+v", r)
	}
}

// A static rule may name a group; the groups are those the caller's sign-in carried.
func TestAStaticRuleGrantsAGroup(t *testing.T) {
	snap := MustParse("permission:\n  rules:\n    readers: [\"group:Auditors\", carol@example.com]\n")
	for _, tc := range []struct {
		id     string
		groups []string
		want   bool
	}{
		{"dan@example.com", []string{"auditors"}, true},
		{"dan@example.com", []string{" AUDITORS "}, true},
		{"dan@example.com", []string{"staff"}, false},
		{"carol@example.com", nil, true},
		{"group:auditors", nil, false},
	} {
		if got := len(snap.PermissionMatches(tc.id, tc.groups, []string{"readers"})) > 0; got != tc.want {
			t.Errorf("%s %v: %v, want %v", tc.id, tc.groups, got, tc.want)
		}
	}
}
