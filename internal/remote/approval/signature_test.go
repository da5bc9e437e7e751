package approval

import (
	"errors"
	"strconv"
	"testing"
	"time"
)

func TestSignatureRoundTripAndRefusals(t *testing.T) {
	secret := []byte("s3cret")
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"operationId":"op-1","result":"APPROVED"}`)
	ts := strconv.FormatInt(now.Unix(), 10)
	sig := Sign(secret, now, body)
	if err := Verify(secret, ts, sig, body, now.Add(30*time.Second), 5*time.Minute); err != nil {
		t.Fatalf("valid callback refused: %v", err)
	}
	for name, c := range map[string]struct {
		secret  []byte
		ts, sig string
		body    []byte
		at      time.Time
		want    error
	}{
		"no secret configured": {nil, ts, sig, body, now, ErrNoSecret},
		"tampered body":        {secret, ts, sig, []byte(`{"operationId":"op-2","result":"APPROVED"}`), now, ErrBadSignature},
		"other secret":         {[]byte("other"), ts, sig, body, now, ErrBadSignature},
		"timestamp moved":      {secret, strconv.FormatInt(now.Unix()+1, 10), sig, body, now, ErrBadSignature},
		"replayed later":       {secret, ts, sig, body, now.Add(10 * time.Minute), ErrSkew},
		"from the future":      {secret, ts, sig, body, now.Add(-10 * time.Minute), ErrSkew},
		"garbage timestamp":    {secret, "yesterday", sig, body, now, ErrBadTimestamp},
		"missing signature":    {secret, ts, "", body, now, ErrBadSignature},
		"not hex":              {secret, ts, "sha256=zz", body, now, ErrBadSignature},
	} {
		if err := Verify(c.secret, c.ts, c.sig, c.body, c.at, 5*time.Minute); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", name, err, c.want)
		}
	}
}
