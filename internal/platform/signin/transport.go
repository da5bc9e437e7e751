package signin

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"

	"bindery/internal/remote/outbound"
)

// system names the identity provider in outbound metrics and errors.
const system = "oidc"

// maxAnswer bounds what is read of one answer of the provider (a discovery document, a key set,
// a token answer are a few KiB).
const maxAnswer = 1 << 20

// guarded carries every call to the identity provider through outbound.Guard — a deadline and
// a circuit breaker per issuer, metrics per endpoint — whichever library makes it (go-oidc's
// discovery and key set, oauth2's code exchange). A 5xx or 429 is an error here, so that the
// libraries see "no answer", the breaker counts it and the person reads "cannot be reached";
// other answers go to the library, which reads the provider's refusal from them.
type guarded struct {
	guard  *outbound.Guard
	base   http.RoundTripper
	limits func() outbound.Limits
}

func (g guarded) RoundTrip(req *http.Request) (*http.Response, error) {
	endpoint := endpointOf(req)
	var resp *http.Response
	err := g.guard.Call(req.Context(), req.URL.Scheme+"://"+req.URL.Host, endpoint, g.limits(), func(ctx context.Context) (int, error) {
		r, err := g.base.RoundTrip(req.WithContext(ctx))
		if err != nil {
			return 0, err
		}
		// Read inside the deadline: the call's context ends when Call returns.
		body, err := io.ReadAll(io.LimitReader(r.Body, maxAnswer))
		r.Body.Close()
		if err != nil {
			return r.StatusCode, err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if r.StatusCode >= 500 || r.StatusCode == http.StatusTooManyRequests {
			return r.StatusCode, outbound.NewStatusError(system, endpoint, r.StatusCode, "", string(body), nil)
		}
		resp = r
		return r.StatusCode, nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// endpointOf names a call for the metrics: discovery, the code exchange (the one POST), or the
// key set.
func endpointOf(req *http.Request) string {
	switch {
	case strings.HasSuffix(req.URL.Path, "/.well-known/openid-configuration"):
		return "discovery"
	case req.Method == http.MethodPost:
		return "token"
	}
	return "keys"
}
