package identity

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"unicode"
)

func TestEverySpellingOfADemoUserIsOneIdentity(t *testing.T) {
	d := DemoDirectory()
	for _, u := range []struct{ name, account, employee string }{
		{"alice", "alice@example.com", "E1001"}, {"bob", "bob@example.com", "E1002"}, {"ops", "ops@example.com", "E1003"},
	} {
		for _, spelling := range []string{u.name, u.account, u.employee, strings.ToUpper(u.account), " " + strings.ToLower(u.employee) + " "} {
			got, err := Resolve(spelling, d)
			if err != nil || got.ID != u.account || got.Name != u.name {
				t.Errorf("Resolve(%q) = %+v, %v; want %s", spelling, got, err, u.account)
			}
		}
	}
}

func TestResolverRefusesWhatItCannotMap(t *testing.T) {
	d, err := NewDirectory([]Entry{{Account: "Carol@Corp.Example", EmployeeID: "77123"}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		raw  string
		want string
		err  error
	}{
		{"77123", "carol@corp.example", nil},
		{"carol@corp.example", "carol@corp.example", nil},
		{"Dave@Corp.Example", "dave@corp.example", nil}, // email-shaped: the login layer vouched for it
		{"88888", "", ErrUnknown},                       // an employee id we cannot map is not a new identity
		{"dave", "", ErrUnknown},
		{"", "", ErrNone},
		{"   ", "", ErrNone},
		{"a b@c.d", "", ErrInvalid},
		{"x@y.z\x00", "", ErrInvalid},
		{strings.Repeat("a", 250) + "@b.cd", "", ErrInvalid},
		{"a@b", "", ErrUnknown},
		{"a@@b.c", "", ErrUnknown},
		{"a@b..c", "", ErrUnknown},
	}
	for _, c := range cases {
		got, err := Resolve(c.raw, d)
		if got.ID != c.want || !errors.Is(err, c.err) {
			t.Errorf("Resolve(%q) = %q, %v; want %q, %v", c.raw, got.ID, err, c.want, c.err)
		}
	}
}

func TestStrictParseNeverGuessesABareID(t *testing.T) {
	for raw, want := range map[string]string{"Alice@Example.com": "alice@example.com", "E1001": "", "alice": "", "": "", "a@b": ""} {
		got, ok := Strict(raw)
		if got != want || ok != (want != "") {
			t.Errorf("Strict(%q) = %q, %v", raw, got, ok)
		}
	}
}

func TestAmbiguousDirectoryIsRejected(t *testing.T) {
	for name, entries := range map[string][]Entry{
		"employee id claimed twice": {{Account: "a@x.io", EmployeeID: "1"}, {Account: "b@x.io", EmployeeID: "1"}},
		"name is another's account": {{Account: "a@x.io"}, {Account: "b@x.io", Name: "A@X.io"}},
		"account not email-shaped":  {{Account: "alice"}},
		"name with a space":         {{Account: "a@x.io", Name: "a b"}},
	} {
		if _, err := NewDirectory(entries); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := NewDirectory([]Entry{{Account: "a@x.io", EmployeeID: "1"}, {Account: "A@x.io", Name: "a"}}); err != nil {
		t.Errorf("the same account listed twice is not ambiguous: %v", err)
	}
}

var trusted = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}

func TestClientAddrTakesTheRightmostUntrustedHop(t *testing.T) {
	cases := []struct {
		name, peer string
		xff        []string
		want       string
	}{
		{"untrusted peer: the header is ignored", "203.0.113.9:5555", []string{"1.1.1.1"}, "203.0.113.9"},
		{"trusted proxy: the hop it appended", "10.0.0.2:80", []string{"6.6.6.6, 198.51.100.7"}, "198.51.100.7"},
		{"forged first hop is not believed", "10.0.0.2:80", []string{"1.2.3.4, 198.51.100.7, 10.0.0.3"}, "198.51.100.7"},
		{"repeated headers are one list", "10.0.0.2:80", []string{"1.2.3.4", "198.51.100.7"}, "198.51.100.7"},
		{"all hops trusted: the leftmost", "10.0.0.2:80", []string{"10.1.1.1, 10.2.2.2"}, "10.1.1.1"},
		{"no header from a trusted proxy: the proxy", "10.0.0.2:80", nil, "10.0.0.2"},
		{"ports and brackets", "[::1]:80", []string{"[2001:db8::1]:443, 198.51.100.7:8080"}, "198.51.100.7"},
		{"IPv6 keyed by its /64", "[::1]:80", []string{"2001:db8:1:2:aaaa::1"}, "2001:db8:1:2::/64"},
		{"mapped IPv4 is IPv4", "[::ffff:203.0.113.9]:1", nil, "203.0.113.9"},
		{"garbage hop gets its own bucket", "10.0.0.2:80", []string{"1.1.1.1, bogus<script>"}, "invalid:bogus<script>"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ClientAddr(c.peer, c.xff, trusted); got != c.want {
				t.Fatalf("ClientAddr = %q, want %q", got, c.want)
			}
		})
	}
}

func TestLoginHeaderIsBelievedOnlyFromATrustedProxy(t *testing.T) {
	src := Sources{LoginHeader: "X-Forwarded-User", Trusted: trusted}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Forwarded-User", "carol@corp.example")
	r.RemoteAddr = "203.0.113.9:1"
	if c := FromRequest(r, src); c.Authenticated() || !errors.Is(c.Err, ErrUntrustedPeer) {
		t.Fatalf("untrusted peer: %+v", c)
	}
	r.RemoteAddr = "10.9.9.9:1"
	if c := FromRequest(r, src); c.ID != "carol@corp.example" || c.From != "login-header" {
		t.Fatalf("trusted proxy: %+v", c)
	}
}

func TestDemoIdentityOnlyInDemoMode(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set(DemoHeader, "E1003")
	if c := FromRequest(r, Sources{}); c.Authenticated() {
		t.Fatalf("demo header outside demo mode was believed: %+v", c)
	}
	if c := FromRequest(r, Sources{Demo: true}); c.ID != "ops@example.com" {
		t.Fatalf("demo header: %+v", c)
	}
	r = httptest.NewRequest("GET", "/", nil)
	r.AddCookie(&http.Cookie{Name: DemoCookie, Value: "bob%40example.com"})
	if c := FromRequest(r, Sources{Demo: true}); c.ID != "bob@example.com" || c.From != "demo-cookie" {
		t.Fatalf("demo cookie: %+v", c)
	}
	r.Header.Set(DemoHeader, "mallory")
	if c := FromRequest(r, Sources{Demo: true}); c.Authenticated() || !errors.Is(c.Err, ErrUnknown) {
		t.Fatalf("unknown demo user: %+v", c)
	}
	if got := strings.Join(DemoUserNames(), ","); got != "alice,bob,ops" {
		t.Fatalf("demo users %s", got)
	}
}

// The ASCII fast path of firstBadRune finds exactly what the rune-by-rune rule finds: a space,
// a control or a non-printable character, wherever it is (also after non-ASCII text).
func TestBadCharactersAreFoundWhereverTheyAre(t *testing.T) {
	byRune := func(s string) int {
		for i, r := range s {
			if r == unicode.ReplacementChar || unicode.IsSpace(r) || !unicode.IsPrint(r) {
				return i
			}
		}
		return -1
	}
	var cases []string
	for c := range 0x80 {
		cases = append(cases, string(rune(c)), "ab"+string(rune(c))+"cd", "é"+string(rune(c)))
	}
	cases = append(cases, "", "alice@example.com", "josé@example.com", "a\u00a0b", "a\u200bb", "a\u2028b", "ok\xffbad", "é\u3000", "日本@例え.jp")
	for _, s := range cases {
		if got, want := firstBadRune(s), byRune(s); got != want {
			t.Errorf("firstBadRune(%q) = %d, want %d", s, got, want)
		}
	}
}

// An email-shaped account has no empty domain label, however the dots are placed.
func TestEmptyDomainLabelsAreNotEmailShaped(t *testing.T) {
	for s, want := range map[string]bool{
		"a@b.c": true, "a@b.c.d": true, "a@.b.c": false, "a@b.c.": false, "a@b..c": false, "a@.": false, "a@b": false, "A@B.C": true,
	} {
		if _, ok := Canonical(s); ok != want {
			t.Errorf("Canonical(%q) ok = %t, want %t", s, ok, want)
		}
	}
}

// Every identity source, given once, twice, from where it is believed and from where it is not:
// an identity presented more than once is no identity (a proxy that appends instead of replacing
// must not let the client choose).
func TestEveryIdentitySourceIsUnambiguous(t *testing.T) {
	const login = "X-Forwarded-User"
	type hdr struct{ name, value string }
	for _, c := range []struct {
		name    string
		demo    bool
		peer    string
		headers []hdr
		cookies []string
		id      string
		err     error
	}{
		{"nothing", true, "10.9.9.9:1", nil, nil, "", ErrNone},
		{"login header from a trusted proxy", false, "10.9.9.9:1", []hdr{{login, "alice@corp.example"}}, nil, "alice@corp.example", nil},
		{"two login headers", false, "10.9.9.9:1", []hdr{{login, "ops@corp.example"}, {login, "alice@corp.example"}}, nil, "", ErrAmbiguous},
		{"two login headers from an untrusted peer", false, "203.0.113.9:1", []hdr{{login, "ops@corp.example"}, {login, "alice@corp.example"}}, nil, "", ErrUntrustedPeer},
		{"an empty login header", false, "10.9.9.9:1", []hdr{{login, ""}}, nil, "", ErrNone},
		{"demo header", true, "203.0.113.9:1", []hdr{{DemoHeader, "alice"}}, nil, "alice@example.com", nil},
		{"two demo headers", true, "203.0.113.9:1", []hdr{{DemoHeader, "alice"}, {DemoHeader, "ops"}}, nil, "", ErrAmbiguous},
		{"demo header and login header", true, "10.9.9.9:1", []hdr{{DemoHeader, "alice"}, {login, "ops@corp.example"}}, nil, "", ErrAmbiguous},
		{"demo header outside demo mode", false, "10.9.9.9:1", []hdr{{DemoHeader, "ops"}}, nil, "", ErrNone},
		{"demo cookie", true, "203.0.113.9:1", nil, []string{"bob%40example.com"}, "bob@example.com", nil},
		{"two demo cookies", true, "203.0.113.9:1", nil, []string{"bob", "ops"}, "", ErrAmbiguous},
		{"demo header over demo cookie", true, "203.0.113.9:1", []hdr{{DemoHeader, "ops"}}, []string{"bob"}, "ops@example.com", nil},
		{"demo cookie outside demo mode, login header", false, "10.9.9.9:1", []hdr{{login, "carol@corp.example"}}, []string{"ops"}, "carol@corp.example", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = c.peer
			for _, h := range c.headers {
				r.Header.Add(h.name, h.value)
			}
			for _, v := range c.cookies {
				r.AddCookie(&http.Cookie{Name: DemoCookie, Value: v})
			}
			got := FromRequest(r, Sources{LoginHeader: login, Trusted: trusted, Demo: c.demo})
			if got.ID != c.id || !errors.Is(got.Err, c.err) || (c.err == nil) != got.Authenticated() {
				t.Fatalf("= %+v, want id %q err %v", got, c.id, c.err)
			}
		})
	}
}
