// Package approval talks to the external approval system: it opens tickets and defines how the
// system's callbacks are signed. The signature scheme lives here so that the callback receiver
// (package server) and the simulator (package sim) share one implementation.
package approval

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Callback headers. The signature is "sha256=" + hex(HMAC-SHA256(secret, timestamp + "." + body))
// with timestamp the decimal Unix seconds sent in TimestampHeader. Binding the timestamp into
// the MAC and bounding its skew stops a captured callback from being replayed later.
const (
	TimestampHeader = "X-Bindery-Timestamp"
	SignatureHeader = "X-Bindery-Signature"
)

// Sign returns the signature header value for body sent at ts.
func Sign(secret []byte, ts time.Time, body []byte) string {
	return "sha256=" + hex.EncodeToString(mac(secret, strconv.FormatInt(ts.Unix(), 10), body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return m.Sum(nil)
}

// Verification failures. They are reasons for the log; the client only ever sees 401.
var (
	ErrNoSecret     = errors.New("no approval callback secret configured")
	ErrBadTimestamp = errors.New("missing or malformed timestamp")
	ErrSkew         = errors.New("timestamp outside the allowed skew")
	ErrBadSignature = errors.New("signature mismatch")
)

// Verify checks a callback's timestamp and signature headers against body, in constant time.
// An empty secret fails closed: an unconfigured receiver accepts nothing.
func Verify(secret []byte, tsHeader, sigHeader string, body []byte, now time.Time, skew time.Duration) error {
	if len(secret) == 0 {
		return ErrNoSecret
	}
	sec, err := strconv.ParseInt(strings.TrimSpace(tsHeader), 10, 64)
	if err != nil || sec <= 0 {
		return ErrBadTimestamp
	}
	if d := now.Sub(time.Unix(sec, 0)); d > skew || d < -skew {
		return fmt.Errorf("%w: %s", ErrSkew, d.Round(time.Second))
	}
	got, ok := strings.CutPrefix(strings.TrimSpace(sigHeader), "sha256=")
	if !ok {
		return ErrBadSignature
	}
	raw, err := hex.DecodeString(got)
	if err != nil || !hmac.Equal(raw, mac(secret, strconv.FormatInt(sec, 10), body)) {
		return ErrBadSignature
	}
	return nil
}
