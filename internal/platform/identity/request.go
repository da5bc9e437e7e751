package identity

import (
	"errors"
	"net/http"
	"net/netip"
	"net/url"
)

// ErrUntrustedPeer: a login header arrived from a peer that is not a trusted proxy. It is ignored
// (anyone can send the header); the request has no identity.
var ErrUntrustedPeer = errors.New("login header from a peer that is not a trusted proxy; ignored")

// ErrAmbiguous: an identity source was given more than once (two login headers, two demo
// headers, two demo cookies). Which one the proxy meant cannot be known — a proxy that appends
// instead of replacing would let the client choose — so the request has no identity.
var ErrAmbiguous = errors.New("identity presented more than once")

// Sources says where a request's identity may come from; the caller builds it from the config
// in force at each request.
type Sources struct {
	LoginHeader string         // header set by the login proxy; "" → none is read
	Trusted     []netip.Prefix // server.trustedProxies
	Demo        bool           // demo mode: DemoHeader and DemoCookie are trusted
	Directory   *Directory     // identity.directory
}

// Caller is what a request says about who sent it.
type Caller struct {
	Identity
	Presented string // the value as presented, for the strict metrics parse only
	From      string // "demo-header", "demo-cookie", "login-header" or ""
	Err       error  // why there is no identity (nil when ID is set)
}

// Authenticated reports whether the caller has a canonical identity.
func (c Caller) Authenticated() bool { return c.Err == nil && c.ID != "" }

// FromRequest resolves the request's identity with the one resolver. In demo mode the demo
// header, then the demo cookie, are read first (and the demo users are in the directory); the
// login header is read only when the direct peer is a trusted proxy.
func FromRequest(r *http.Request, src Sources) Caller {
	dirs := []*Directory{src.Directory}
	if src.Demo {
		dirs = []*Directory{demoDirectory, src.Directory}
		if vs := r.Header.Values(DemoHeader); len(vs) > 0 {
			if len(vs) > 1 || (src.LoginHeader != "" && r.Header.Get(src.LoginHeader) != "") {
				return Caller{From: "demo-header", Err: ErrAmbiguous} // two users named: which one?
			}
			return resolved(vs[0], "demo-header", dirs)
		}
		if cs := cookies(r, DemoCookie); len(cs) > 1 {
			return Caller{From: "demo-cookie", Err: ErrAmbiguous}
		} else if len(cs) == 1 {
			v, err := url.QueryUnescape(cs[0])
			if err != nil {
				return Caller{Presented: cs[0], From: "demo-cookie", Err: ErrInvalid}
			}
			return resolved(v, "demo-cookie", dirs)
		}
	}
	if src.LoginHeader == "" {
		return Caller{Err: ErrNone}
	}
	vs := r.Header.Values(src.LoginHeader)
	switch {
	case len(vs) == 0 || (len(vs) == 1 && vs[0] == ""):
		return Caller{Err: ErrNone}
	case !PeerTrusted(r.RemoteAddr, src.Trusted):
		return Caller{Presented: vs[0], From: "login-header", Err: ErrUntrustedPeer}
	case len(vs) > 1:
		return Caller{From: "login-header", Err: ErrAmbiguous}
	}
	return resolved(vs[0], "login-header", dirs)
}

// cookies are the non-empty values of every cookie named name.
func cookies(r *http.Request, name string) []string {
	var out []string
	for _, c := range r.CookiesNamed(name) {
		if c.Value != "" {
			out = append(out, c.Value)
		}
	}
	return out
}

var demoDirectory = DemoDirectory()

func resolved(v, from string, dirs []*Directory) Caller {
	id, err := Resolve(v, dirs...)
	return Caller{Identity: id, Presented: v, From: from, Err: err}
}
