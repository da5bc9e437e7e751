package identity

import (
	"net/netip"
	"testing"
)

// FuzzForwardedFor: whatever a client puts in X-Forwarded-For, ClientAddr answers a bounded,
// printable key and never lets a hop left of an untrusted one decide.
func FuzzForwardedFor(f *testing.F) {
	f.Add("10.0.0.2:80", "1.2.3.4, 198.51.100.7")
	f.Add("[::1]:80", "[2001:db8::1]:443,,, ::ffff:1.2.3.4")
	f.Add("203.0.113.9:1", "10.0.0.1")
	f.Add("garbage", "\x00\xff, 999.1.1.1")
	f.Fuzz(func(t *testing.T, peer, xff string) {
		trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
		got := ClientAddr(peer, []string{xff}, trusted)
		if got == "" || len(got) > 80 {
			t.Fatalf("key %q", got)
		}
		for _, r := range got {
			if r <= 0x20 || r >= 0x7f {
				t.Fatalf("unprintable key %q", got)
			}
		}
		if !PeerTrusted(peer, trusted) {
			if a, ok := parseHop(peer); ok && got != keyOf(a) {
				t.Fatalf("untrusted peer %q: header decided %q", peer, got)
			}
		}
	})
}
