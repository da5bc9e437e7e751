package config

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Row generators shared by the area tables (integrations and simulators).

func durationRows(def, valid time.Duration) []misconfigCase {
	return []misconfigCase{
		{"missing", nil, def}, {"blank", nil, def}, {"garbage", str("a while"), def},
		{"negative/zero", str("-1s"), def}, {"valid", str(valid.String()), valid},
	}
}

func urlRows(valid, want string) []misconfigCase {
	return []misconfigCase{ // -1: a URL that is not http(s) rejects the file
		{"missing", nil, ""}, {"blank", nil, ""}, {"garbage", str("gitlab.example.com"), -1},
		{"negative/zero", str("0"), -1}, {"valid", str(valid), want},
	}
}

func init() {
	probes["gitlab.baseURL"] = func(s *Snapshot) any { return s.GitLabBaseURL() }
	probes["gitlab.botToken"] = func(s *Snapshot) any { return s.GitLabBotToken() }
	probes["gitlab.reviewerTokens"] = func(s *Snapshot) any { return strings.Join(s.GitLabReviewerTokens(), ",") }
	probes["gitlab.timeout"] = func(s *Snapshot) any { return s.GitLabTimeout() }
	probes["database.requestTimeout"] = func(s *Snapshot) any { return s.DatabaseRequestTimeout() }
	probes["approval.backoff"] = func(s *Snapshot) any { return s.ApprovalBackoff() }
	probes["approvalSystem.url"] = func(s *Snapshot) any { return s.ApprovalSystemURL() }
	probes["approvalSystem.timeout"] = func(s *Snapshot) any { return s.ApprovalSystemTimeout() }
	probes["permission.url"] = func(s *Snapshot) any { return s.PermissionURL() }
	probes["permission.timeout"] = func(s *Snapshot) any { return s.PermissionTimeout() }
	probes["permission.rules"] = func(s *Snapshot) any { ids, ok := s.PermissionRule("admins"); return fmt.Sprint(ids, ok) }
	probes["breaker.failures"] = func(s *Snapshot) any { return s.BreakerFailures() }
	probes["breaker.cooldown"] = func(s *Snapshot) any { return s.BreakerCooldown() }

	misconfigTable["gitlab.baseURL"] = urlRows("https://gitlab.example.com/api/v4/", "https://gitlab.example.com")
	misconfigTable["approvalSystem.url"] = urlRows("http://approvals.internal/v1/", "http://approvals.internal/v1")
	misconfigTable["permission.url"] = urlRows("https://perm.internal", "https://perm.internal")
	misconfigTable["gitlab.botToken"] = []misconfigCase{ // fail closed: no token, no call
		{"missing", nil, ""}, {"blank", nil, ""}, {"garbage", str("'%%%'"), "%%%"},
		{"negative/zero", str("0"), "0"}, {"valid", str("glpat-abc"), "glpat-abc"},
	}
	misconfigTable["gitlab.reviewerTokens"] = []misconfigCase{
		{"missing", nil, ""}, {"blank", nil, ""}, {"garbage", str("[{a: 1}]"), ""},
		{"negative/zero", str("0"), ""}, {"valid", str("[r1, '', r2]"), "r1,r2"},
		{"a comma string", str("r1, r2"), ""}, // not a list: no reviewer is guessed
	}
	misconfigTable["gitlab.timeout"] = durationRows(15*time.Second, 2*time.Second)
	misconfigTable["database.requestTimeout"] = durationRows(5*time.Second, time.Second)
	misconfigTable["approval.backoff"] = durationRows(time.Second, 50*time.Millisecond)
	misconfigTable["approvalSystem.timeout"] = durationRows(10*time.Second, time.Second)
	misconfigTable["permission.timeout"] = durationRows(3*time.Second, 500*time.Millisecond)
	misconfigTable["breaker.cooldown"] = durationRows(30*time.Second, time.Minute)
	misconfigTable["permission.rules"] = []misconfigCase{ // fail closed: a broken rule grants nothing
		{"missing", nil, "[] false"}, {"blank", nil, "[] false"}, {"garbage", str("[admins, ops]"), "[] false"},
		{"negative/zero", str("{admins: [{x: 1}]}"), "[] false"},
		{"valid", str("{admins: [Alice@Example.com, bob@example.com], ops: ops@example.com}"), "[alice@example.com bob@example.com] true"},
	}
	misconfigTable["breaker.failures"] = []misconfigCase{
		{"missing", nil, 5}, {"blank", nil, 5}, {"garbage", str("many"), 5},
		{"negative/zero", str("0"), 5}, {"valid", str("3"), 3},
	}
}

func TestBrokenPermissionRuleIsReportedAndOthersStay(t *testing.T) {
	s := MustParse("permission:\n  rules:\n    ops: [ops@example.com]\n    broken: {a: b}\n")
	if ids, ok := s.PermissionRule("ops"); !ok || len(ids) != 1 {
		t.Fatalf("ops rule = %v %v", ids, ok)
	}
	if _, ok := s.PermissionRule("broken"); ok {
		t.Fatal("a broken rule must grant nothing")
	}
	if r := reportFor(t, s, "permission.rules"); r.Status != StatusFallback || !strings.Contains(r.Note, "broken") {
		t.Fatalf("report %+v", r)
	}
}

func TestIntegrationSecretsAreRedacted(t *testing.T) {
	s := MustParse("gitlab:\n  botToken: glpat-secret\n  reviewerTokens: [one-secret, two-secret]\n")
	for _, r := range s.Report {
		if strings.Contains(r.Effective, "secret") {
			t.Errorf("%s shows %q", r.Key, r.Effective)
		}
	}
}
