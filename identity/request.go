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
		if v := r.Header.Get(DemoHeader); v != "" {
			return resolved(v, "demo-header", dirs)
		}
		if c, err := r.Cookie(DemoCookie); err == nil && c.Value != "" {
			v, err := url.QueryUnescape(c.Value)
			if err != nil {
				return Caller{Presented: c.Value, From: "demo-cookie", Err: ErrInvalid}
			}
			return resolved(v, "demo-cookie", dirs)
		}
	}
	if src.LoginHeader == "" {
		return Caller{Err: ErrNone}
	}
	v := r.Header.Get(src.LoginHeader)
	if v == "" {
		return Caller{Err: ErrNone}
	}
	if !PeerTrusted(r.RemoteAddr, src.Trusted) {
		return Caller{Presented: v, From: "login-header", Err: ErrUntrustedPeer}
	}
	return resolved(v, "login-header", dirs)
}

var demoDirectory = DemoDirectory()

func resolved(v, from string, dirs []*Directory) Caller {
	id, err := Resolve(v, dirs...)
	return Caller{Identity: id, Presented: v, From: from, Err: err}
}
