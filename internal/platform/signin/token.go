package signin

import (
	"encoding/base64"
	"encoding/hex"
	"strings"
)

// Personal API tokens (docs/api.md, 'API tokens'): "bdy_" and 32 random bytes in base64url. The
// first 8 bytes, in hex, are the token's lookup key — stored in clear to find its row, useless
// without the rest; the SHA-256 of the whole token is what the row keeps to compare with, in
// constant time. The token itself is shown once and never stored.

// TokenPrefix starts every personal API token, so that a leaked one is recognisable (secret
// scanners) and a bearer token of another kind (the deploy hook's) is never looked up as one.
const TokenPrefix = "bdy_"

// lookupBytes is how much of the secret names the row.
const lookupBytes = 8

// Token is a token as handed out once, and what is stored of it.
type Token struct {
	Value  string // shown to its owner once
	Lookup string // hex of the first 8 random bytes
	Hash   string // SHA-256 of Value
}

// NewToken makes a token.
func NewToken() Token {
	t, _ := ParseToken(TokenPrefix + Random())
	return t
}

// ParseToken reads a presented token: its lookup key and hash, or false when it is not a
// well-formed personal API token (it is then not looked up).
func ParseToken(value string) (Token, bool) {
	secret, ok := strings.CutPrefix(value, TokenPrefix)
	if !ok || !wellFormed(secret) {
		return Token{}, false
	}
	raw, _ := base64.RawURLEncoding.DecodeString(secret)
	return Token{Value: value, Lookup: hex.EncodeToString(raw[:lookupBytes]), Hash: Hash(value)}, true
}
