package identity

import (
	"net/netip"
	"strings"
)

// maxHops bounds how many X-Forwarded-For entries are looked at; a longer chain is either an
// attack or a loop, and the hops that matter are on the right.
const maxHops = 32

// ClientAddr returns the address a request came from, for rate limiting (docs/api.md, 'Rate
// limits'). The peer (remoteAddr) is believed; X-Forwarded-For hops are believed only as far as a
// trusted proxy vouches for them: walking from the right, each hop appended by a trusted proxy is
// skipped, and the first hop not in trusted is the client. The raw first hop is client-controlled
// and never used just for being first. Entries that are not addresses stop the walk: the value is
// then the sanitised text of that entry, so a client behind a misbehaving proxy still gets a bucket
// of its own rather than a shared one.
//
// IPv6 clients are keyed by their /64, the block one subscriber usually holds, so rotating
// addresses inside it does not escape the limit.
func ClientAddr(remoteAddr string, forwardedFor []string, trusted []netip.Prefix) string {
	peer, ok := parseHop(remoteAddr)
	if !ok {
		return sanitizeHop(remoteAddr)
	}
	if !contains(trusted, peer) {
		return keyOf(peer)
	}
	hops := splitHops(forwardedFor)
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := parseHop(hops[i])
		if !ok {
			return sanitizeHop(hops[i])
		}
		if !contains(trusted, a) {
			return keyOf(a)
		}
		peer = a
	}
	// Every hop is a trusted proxy: the leftmost is the best we know.
	return keyOf(peer)
}

// PeerTrusted reports whether the direct peer is one of the trusted proxies (whose login header
// is believed).
func PeerTrusted(remoteAddr string, trusted []netip.Prefix) bool {
	a, ok := parseHop(remoteAddr)
	return ok && contains(trusted, a)
}

// splitHops flattens repeated headers and comma lists, keeping at most the rightmost maxHops.
func splitHops(values []string) []string {
	var hops []string
	for _, v := range values {
		for _, h := range strings.Split(v, ",") {
			if h = strings.TrimSpace(h); h != "" {
				hops = append(hops, h)
			}
		}
	}
	if len(hops) > maxHops {
		hops = hops[len(hops)-maxHops:]
	}
	return hops
}

// parseHop reads "1.2.3.4", "1.2.3.4:5678", "::1", "[::1]:5678" or "[::1]".
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), true
	}
	return netip.Addr{}, false
}

func contains(trusted []netip.Prefix, a netip.Addr) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func keyOf(a netip.Addr) string {
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

// sanitizeHop keeps a bounded, printable form of an entry that is not an address.
func sanitizeHop(s string) string {
	var b strings.Builder
	for _, r := range strings.TrimSpace(s) {
		if b.Len() >= 64 {
			break
		}
		if r > 0x20 && r < 0x7f {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "unknown"
	}
	return "invalid:" + b.String()
}
