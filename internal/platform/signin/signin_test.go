package signin_test

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"bindery/internal/platform/signin"
)

// A sign-in returns only to a page of bindery's own: anything a browser could read as another
// host, or that carries a backslash or a control character, is refused; a path of the right
// shape that is no page (an escape that does not parse, the sign-in's own routes) is the root.
func TestSafeNextIsOnlyEverAPageOfBinderys(t *testing.T) {
	for next, want := range map[string]string{
		"":                              "/",
		"/":                             "/",
		"/requests":                     "/requests",
		"/requests/op-1?x=1#top":        "/requests/op-1?x=1#top",
		"/%zz":                          "/",
		"/auth/logout":                  "/",
		"/auth/login?next=//evil":       "/",
		"/" + strings.Repeat("é", 2047): "/" + strings.Repeat("é", 2047),
	} {
		if got, ok := signin.SafeNext(next); !ok || got != want {
			t.Errorf("SafeNext(%.40q) = %q, %v; want %q", next, got, ok, want)
		}
	}
	for _, next := range []string{
		"https://evil.example/", "//evil.example", "///evil.example", "/\\evil.example", "\\\\evil.example", "/ok\\..\\x",
		"http:evil.example", "javascript:alert(1)", "evil.example", "requests", "/ok\r\nLocation: x", "/\x00", "/\u0085x",
		"/" + strings.Repeat("a", 2048),
	} {
		if got, ok := signin.SafeNext(next); ok {
			t.Errorf("SafeNext(%.40q) = %q, accepted", next, got)
		}
	}
}

// A token is bdy_ and 32 random bytes; what is stored of it finds it (the lookup key, a prefix
// that is no secret) and checks it (its SHA-256); a value of another shape is not a token.
func TestATokenIsRandomAndOnlyItsHashIsKept(t *testing.T) {
	a, b := signin.NewToken(), signin.NewToken()
	if a.Value == b.Value || a.Lookup == b.Lookup {
		t.Fatal("two tokens alike")
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(a.Value, signin.TokenPrefix))
	if !strings.HasPrefix(a.Value, "bdy_") || err != nil || len(raw) != 32 {
		t.Fatalf("token %q: %d bytes, %v", a.Value, len(raw), err)
	}
	if len(a.Lookup) != 16 || a.Hash != signin.Hash(a.Value) || strings.Contains(a.Value, a.Hash) {
		t.Fatalf("lookup %q hash %q", a.Lookup, a.Hash)
	}
	if again, ok := signin.ParseToken(a.Value); !ok || again != a {
		t.Fatalf("parse = %+v, %v", again, ok)
	}
	for _, bad := range []string{"", "bdy_", "bdy_short", a.Value + "x", strings.TrimPrefix(a.Value, "bdy_"), "BDY_" + a.Value[4:], a.Value[:len(a.Value)-1] + "*", "dtok"} {
		if _, ok := signin.ParseToken(bad); ok {
			t.Errorf("%q parsed as a token", bad)
		}
	}
}

// A session id is a random value of Random's shape; a cookie of another shape is no session and
// needs no database read.
func TestASessionIDIsRandomAndHashedBeforeItIsLookedUp(t *testing.T) {
	id := signin.Random()
	hash, ok := signin.SessionID(id)
	if !ok || hash != signin.Hash(id) || len(hash) != 64 || signin.Random() == id {
		t.Fatalf("id %q hash %q %v", id, hash, ok)
	}
	for _, bad := range []string{"", "x", id + "A", id[:42], strings.Repeat("!", 43), "x'; DROP TABLE signin_session; --"} {
		if _, ok := signin.SessionID(bad); ok {
			t.Errorf("%q read as a session id", bad)
		}
	}
	if !signin.Equal("abc", "abc") || signin.Equal("abc", "abd") || signin.Equal("abc", "ab") {
		t.Fatal("Equal")
	}
}

// bindery's cookies are HttpOnly and SameSite=Lax, Secure over https; a zero life deletes one.
func TestTheCookiesAreHttpOnlyLaxAndSecureOverHTTPS(t *testing.T) {
	c := signin.Cookie(signin.SessionCookie, "v", "/", 8*time.Hour, true)
	if !c.HttpOnly || !c.Secure || c.SameSite != http.SameSiteLaxMode || c.MaxAge != 8*3600 || c.Path != "/" || c.Value != "v" {
		t.Fatalf("%+v", c)
	}
	if c := signin.Cookie(signin.SessionCookie, "v", "/", 0, false); c.MaxAge != -1 || c.Value != "" || c.Secure {
		t.Fatalf("a deletion: %+v", c)
	}
}
