package server

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"bindery/api"
	"bindery/internal/platform/signin"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// Personal API tokens: made by a person signed in, used by scripts as a bearer token.

// mintToken makes a token for account (as POST /api/tokens does, whichever way its owner signs
// in) and returns it.
func mintToken(t testing.TB, h *harness, account string, scopes ...string) string {
	t.Helper()
	tok := signin.NewToken()
	if _, err := h.db.CreateToken(context.Background(), store.APIToken{Owner: account, Name: "script of " + account, Scopes: scopes, LookupKey: tok.Lookup, SecretHash: tok.Hash},
		30*24*time.Hour, maxLiveTokens, store.AuditEvent{Actor: account, Action: "token.create"}); err != nil {
		t.Fatalf("create a token for %s: %v", account, err)
	}
	return tok.Value
}

func bearer(token string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + token}
}

var tokenShape = regexp.MustCompile(`^bdy_[A-Za-z0-9_-]{43}$`)

// A token is shown once, stored as a hash, listed without its secret; it acts as its owner
// within its scopes — read: GET only; apply: apply, revoke and withdraw of the owner's own
// requests — never on the ops endpoints or the tokens, never with an operator's powers; every
// use is audited with its id. On both databases.
func TestAnAPITokenActsAsItsOwnerWithinItsScopes(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, options{serve: true, db: db})
		h.wf.put(api.RequestView{OperationID: "op-ops", Subject: "ops@example.com", TargetKey: "public-a", Status: state.StatusValidated})
		h.wf.put(api.RequestView{OperationID: "op-alice", Subject: "alice@example.com", TargetKey: "restricted-b", Status: state.StatusValidated})

		rec := h.do(call{method: "POST", path: "/api/tokens", peer: "10.0.0.9:4000", header: map[string]string{"X-Forwarded-User": "ops@example.com"},
			body: `{"name":"  nightly report  ","scopes":["read"]}`})
		if rec.Code != 201 || rec.Header().Get("Cache-Control") != "no-store" {
			t.Fatalf("create: %d %s", rec.Code, rec.Body)
		}
		var created struct {
			ID        int64
			Name      string
			Scopes    []string
			Token     string
			CreatedAt time.Time
			ExpiresAt time.Time
		}
		json.Unmarshal(rec.Body.Bytes(), &created)
		if !tokenShape.MatchString(created.Token) || created.Name != "nightly report" || strings.Join(created.Scopes, " ") != "read" ||
			created.ExpiresAt.Sub(created.CreatedAt).Round(time.Hour) != 90*24*time.Hour {
			t.Fatalf("created: %s", rec.Body)
		}
		var lookup, hash string
		db.Raw().QueryRow("SELECT lookup_key, secret_hash FROM api_token WHERE id = ?", created.ID).Scan(&lookup, &hash)
		if hash != signin.Hash(created.Token) || strings.Contains(created.Token, hash) || strings.Contains(h.dbState(), created.Token) || len(lookup) != 16 {
			t.Fatalf("stored: lookup %q hash %q; the token must not be stored", lookup, hash)
		}
		list := h.do(call{method: "GET", path: "/api/tokens", peer: "10.0.0.9:4000", header: map[string]string{"X-Forwarded-User": "ops@example.com"}})
		if list.Code != 200 || !strings.Contains(list.Body.String(), `"name":"nightly report"`) || strings.Contains(list.Body.String(), created.Token[4:20]) ||
			strings.Contains(list.Body.String(), `"token"`) {
			t.Fatalf("list: %d %s", list.Code, list.Body)
		}

		read := bearer(created.Token)
		for _, c := range []struct {
			call  call
			code  int
			words string
		}{
			{call{method: "GET", path: "/api/me", header: read}, 200, `"identity":"ops@example.com"`},
			{call{method: "GET", path: "/api/me", header: read}, 200, `"ops":false`}, // no operator's powers
			{call{method: "GET", path: "/api/requests/op-ops", header: read}, 200, `"operationId":"op-ops"`},
			{call{method: "GET", path: "/api/requests/op-alice", header: read}, 404, "No such request"}, // an operator's, by token: only the owner's
			{call{method: "POST", path: "/api/apply", body: applyJSON("op-t1", "public-a"), header: read}, 403, "may only read (scope read)"},
			{call{method: "GET", path: "/api/ops/batches", header: read}, 403, "never call the ops endpoints"},
			{call{method: "POST", path: "/api/ops/reconcile", body: `{"operationId":"x-1"}`, header: read}, 403, "never call the ops endpoints"},
			{call{method: "GET", path: "/api/tokens", header: read}, 403, "not open to API tokens"},
			{call{method: "POST", path: "/api/tokens", body: `{"name":"escalate","scopes":["read","apply"]}`, header: read}, 403, "not open to API tokens"},
			{call{method: "POST", path: "/api/my/notifications", body: `{"events":[]}`, header: read}, 403, "not open to API tokens"},
		} {
			rec := h.do(c.call)
			if rec.Code != c.code || !strings.Contains(rec.Body.String(), c.words) {
				t.Errorf("%s %s: %d %s; want %d %q", c.call.method, c.call.path, rec.Code, rec.Body, c.code, c.words)
			}
		}
		if h.wf.count("Apply") != 0 || h.wf.count("Reconcile") != 0 {
			t.Fatal("a refused token use ran")
		}
		// Every use, allowed or not, is in the audit log with the token's id.
		var uses int
		db.Raw().QueryRow("SELECT COUNT(*) FROM audit_log WHERE action = 'token.use' AND actor = 'ops@example.com' AND params LIKE ?", fmt.Sprintf(`%%"id":%d%%`, created.ID)).Scan(&uses)
		if uses != 10 {
			t.Fatalf("%d uses audited, want 10", uses)
		}
		if tok, err := db.TokenByLookup(context.Background(), lookup); err != nil || tok.LastUsedAt.IsZero() {
			t.Fatalf("last use not recorded: %+v %v", tok, err)
		}

		rec = h.do(call{method: "POST", path: "/api/tokens", peer: "10.0.0.9:4000", header: map[string]string{"X-Forwarded-User": "alice@example.com"},
			body: `{"name":"onboarding","scopes":["apply","read"],"expiresInDays":7}`})
		var second struct{ Token string }
		if json.Unmarshal(rec.Body.Bytes(), &second); rec.Code != 201 || !tokenShape.MatchString(second.Token) {
			t.Fatalf("create: %d %s", rec.Code, rec.Body)
		}
		apply := bearer(second.Token)
		if rec := h.do(call{method: "POST", path: "/api/apply", body: applyJSON("op-t2", "public-a"), header: apply}); rec.Code != 202 {
			t.Fatalf("apply with an apply token: %d %s", rec.Code, rec.Body)
		}
		if got := h.wf.Calls(); len(got) == 0 || !strings.Contains(got[len(got)-1], "alice@example.com") {
			t.Fatalf("the application is not the owner's: %v", got)
		}
		if rec := h.do(call{method: "POST", path: "/api/requests/op-alice/revoke", body: `{"operationId":"rv-1"}`, header: apply}); rec.Code != 202 {
			t.Fatalf("revoke the owner's request: %d %s", rec.Code, rec.Body)
		}
		if rec := h.do(call{method: "POST", path: "/api/requests/op-ops/revoke", body: `{"operationId":"rv-2"}`, header: apply}); rec.Code != 404 {
			t.Fatalf("revoke someone else's request: %d %s", rec.Code, rec.Body)
		}

		if strings.Contains(h.logs.String(), created.Token) || strings.Contains(h.logs.String(), second.Token) {
			t.Error("the log holds a token")
		}
		// Revoked: refused at once, in words, and counted as a refused credential.
		del := h.do(call{method: "DELETE", path: fmt.Sprintf("/api/tokens/%d", created.ID), peer: "10.0.0.9:4000", header: map[string]string{"X-Forwarded-User": "ops@example.com"}})
		if del.Code != 200 || !strings.Contains(del.Body.String(), `"revokedAt"`) {
			t.Fatalf("revoke: %d %s", del.Code, del.Body)
		}
		if rec := h.do(call{method: "GET", path: "/api/me", header: read}); rec.Code != 401 || !strings.Contains(rec.Body.String(), "was revoked") {
			t.Fatalf("a revoked token: %d %s", rec.Code, rec.Body)
		}
		if rec := h.do(call{method: "DELETE", path: fmt.Sprintf("/api/tokens/%d", created.ID), peer: "10.0.0.9:4000", header: map[string]string{"X-Forwarded-User": "alice@example.com"}}); rec.Code != 404 {
			t.Fatalf("someone else revoking it: %d %s", rec.Code, rec.Body)
		}
		// Expired: refused, saying when.
		expiring := mintToken(t, h, "bob@example.com", "read")
		tok, _ := signin.ParseToken(expiring)
		storetest.Backdate(t, db, "api_token", "expires_at", "lookup_key", tok.Lookup, time.Minute)
		if rec := h.do(call{method: "GET", path: "/api/me", header: bearer(expiring)}); rec.Code != 401 || !strings.Contains(rec.Body.String(), "expired on") {
			t.Fatalf("an expired token: %d %s", rec.Code, rec.Body)
		}
	})
}

// A token bindery does not know says so, without telling which part was wrong; refused
// credentials from one address are limited (ratelimit.authFailures), then answered 429 without
// a look-up — and a good credential from elsewhere is not affected.
func TestRefusedCredentialsSayWhyAndAreLimited(t *testing.T) {
	h := setup(t, options{serve: true, config: map[string]string{"ratelimit.authFailures": "3"}})
	good := mintToken(t, h, "alice@example.com", "read")
	unknown := signin.NewToken().Value
	tampered := []byte(good)
	tampered[10] = map[bool]byte{true: 'A', false: 'B'}[tampered[10] != 'A'] // still base64url
	for i, tc := range []struct {
		token, words string
	}{
		{"bdy_short", "not a token bindery issued"},
		{unknown, "bindery knows no such token"},
		{string(tampered), "bindery knows no such token"},
	} {
		rec := h.do(call{method: "GET", path: "/api/targets", header: bearer(tc.token), peer: "198.51.100.7:5000"})
		if rec.Code != 401 || !strings.Contains(rec.Body.String(), tc.words) || strings.Contains(rec.Body.String(), "loginUrl") {
			t.Fatalf("try %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	rec := h.do(call{method: "GET", path: "/api/targets", header: bearer(good), peer: "198.51.100.7:5000"})
	if rec.Code != 429 || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), "Too many refused") {
		t.Fatalf("over the limit, even the good token waits: %d %s", rec.Code, rec.Body)
	}
	if rec := h.do(call{method: "GET", path: "/api/targets", header: bearer(good), peer: "203.0.113.9:5000"}); rec.Code != 200 {
		t.Fatalf("another address: %d %s", rec.Code, rec.Body)
	}
	if got := h.metric(`bindery_ratelimited_total{bucket="authfail"}`); got != "1" {
		t.Fatalf("refusals counted: %q", got)
	}
}

// Creating a token checks what it is given and holds each person to 50 live tokens.
func TestTokenCreationChecksItsInputAndCapsLiveTokens(t *testing.T) {
	h := setup(t, options{serve: true})
	as := map[string]string{"X-Forwarded-User": "carol@corp.example"}
	for body, words := range map[string]string{
		`{"name":"x","scopes":["apply"]}`:                                     "scopes: must be",
		`{"name":"x","scopes":[]}`:                                            "scopes: must be",
		`{"name":"x","scopes":["read","read"]}`:                               "scopes: must be",
		`{"name":"x","scopes":["read","admin"]}`:                              "scopes: must be",
		`{"name":"  ","scopes":["read"]}`:                                     "name: is required",
		`{"name":"a\u0007b","scopes":["read"]}`:                               "control characters",
		`{"name":"x","scopes":["read"],"expiresInDays":0}`:                    "from 1 to 365",
		`{"name":"x","scopes":["read"],"expiresInDays":366}`:                  "from 1 to 365",
		`{"name":"x","scopes":["read"],"operationId":"op-1"}`:                 "operationId: is not a known field",
		fmt.Sprintf(`{"name":%q,"scopes":["read"]}`, strings.Repeat("n", 65)): "at most 64 characters",
	} {
		rec := h.do(call{method: "POST", path: "/api/tokens", body: body, peer: "10.0.0.9:4000", header: as})
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), words) {
			t.Errorf("%s: %d %s", body, rec.Code, rec.Body)
		}
	}
	if n := counted(t, h.db, "api_token"); n != 0 {
		t.Fatalf("%d tokens made of refused requests", n)
	}
	for i := range maxLiveTokens {
		if rec := h.do(call{method: "POST", path: "/api/tokens", body: fmt.Sprintf(`{"name":"t%d","scopes":["read"],"expiresInDays":1}`, i), peer: "10.0.0.9:4000", header: as}); rec.Code != 201 {
			t.Fatalf("token %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	rec := h.do(call{method: "POST", path: "/api/tokens", body: `{"name":"one more","scopes":["read"]}`, peer: "10.0.0.9:4000", header: as})
	if rec.Code != 409 || !strings.Contains(rec.Body.String(), "revoke one first") {
		t.Fatalf("the 51st: %d %s", rec.Code, rec.Body)
	}
	if rec := h.do(call{method: "DELETE", path: "/api/tokens/abc", peer: "10.0.0.9:4000", header: as}); rec.Code != 400 {
		t.Fatalf("a malformed id: %d %s", rec.Code, rec.Body)
	}
}
