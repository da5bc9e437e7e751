// Package signin signs people in and recognises them afterwards (docs/api.md, 'Who may call'):
// the OpenID Connect relying party (authorization code with PKCE, state and nonce; the ID
// token's checks), the random values a browser or a script holds — the state of a sign-in on its
// way, the session id, the personal API token — and what bindery keeps of them (a SHA-256, never
// the value), the session cookie, and the one rule for where a sign-in may return to.
//
// It keeps nothing itself: the server stores sign-ins, sessions and tokens through the store,
// and asks this package only what needs no database.
package signin

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Cookie names (docs/api.md, 'Who may call').
const (
	// SessionCookie carries the id of a server-side session, and nothing else.
	SessionCookie = "bindery_session"
	// AttemptCookie carries the state of the sign-in this browser started, so that a callback
	// brought by another browser (a forged link) finds nothing to finish.
	AttemptCookie = "bindery_signin"
	// AttemptPath is where the attempt cookie is sent: the callback only.
	AttemptPath = "/auth/"
)

// randomBytes is the size of every random value handed out: the state, the nonce, the session
// id, a token's secret.
const randomBytes = 32

// Random returns randomBytes of crypto/rand, base64url without padding (43 characters).
func Random() string {
	b := make([]byte, randomBytes)
	_, _ = rand.Read(b) // never fails (crypto/rand panics rather than return short)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Hash is what bindery stores of a random value: its SHA-256, in hex. A copy of the database
// holds no session, state or token that works.
func Hash(value string) string {
	sum := sha256.Sum256([]byte(value))
	return hex.EncodeToString(sum[:])
}

// Equal compares two random values, or their hashes, in constant time.
func Equal(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// wellFormed reports whether v is a value Random could have returned: bounded and of the
// base64url alphabet, before anything is looked up with it.
func wellFormed(v string) bool {
	if len(v) != base64.RawURLEncoding.EncodedLen(randomBytes) {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(v)
	return err == nil
}

// SessionID returns the hash of a presented session id, or false when it cannot be one (a
// tampered or foreign cookie is then no session, without a database read).
func SessionID(value string) (hash string, ok bool) {
	if !wellFormed(value) {
		return "", false
	}
	return Hash(value), true
}

// Cookie is a cookie of bindery's: HttpOnly (no script reads it), SameSite=Lax (not sent with
// another site's form posts or requests; sent when the identity provider redirects back), and
// Secure when bindery is reached over https (server.publicURL). maxAge 0 deletes it.
func Cookie(name, value, path string, maxAge time.Duration, secure bool) *http.Cookie {
	c := &http.Cookie{Name: name, Value: value, Path: path, HttpOnly: true, Secure: secure, SameSite: http.SameSiteLaxMode}
	if maxAge <= 0 {
		c.MaxAge, c.Value = -1, ""
	} else {
		c.MaxAge = int(maxAge / time.Second)
	}
	return c
}

// maxNext bounds the page a sign-in returns to, in characters.
const maxNext = 2048

// SafeNext returns the page a sign-in returns to. next must be a path from bindery's root — not
// "//host" or "/\host", which a browser reads as another host, with no backslash or control
// character anywhere — or false: a sign-in never sends a person to an address someone else
// chose (an open redirect). Empty is the root; so is a path of that shape that is still no page
// of bindery's (an escape that does not parse, the sign-in's own routes).
func SafeNext(next string) (string, bool) {
	if utf8.RuneCountInString(next) > maxNext || (next != "" && !strings.HasPrefix(next, "/")) || strings.HasPrefix(next, "//") ||
		strings.ContainsRune(next, '\\') || strings.ContainsFunc(next, unicode.IsControl) {
		return "", false
	}
	u, err := url.Parse(next)
	if next == "" || err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || strings.HasPrefix(u.Path, "/auth/") {
		return "/", true
	}
	return next, true
}
