package signin_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"

	"bindery/internal/platform/config"
	"bindery/internal/platform/signin"
	"bindery/internal/sim"
)

// The relying party against the simulated provider over HTTP (the server's tests cover every
// failure a person reads; these are the protocol's own).

type rp struct {
	sims   *sim.Sims
	ts     *httptest.Server
	oidc   *signin.OIDC
	set    *metrics.Set
	client signin.Client
}

func setup(t *testing.T) *rp {
	sims := sim.New(sim.Options{Config: config.NewStatic(config.MustParse(""))})
	ts := httptest.NewServer(sims.Handler())
	t.Cleanup(ts.Close)
	const redirect = "http://bindery.test/auth/callback"
	sims.OIDC.Register(sim.OIDCClient{ID: "bindery", Secret: "s3cret", RedirectURIs: []string{redirect}})
	set := metrics.NewSet()
	return &rp{sims: sims, ts: ts, set: set, oidc: signin.NewOIDC(signin.Options{Metrics: set}),
		client: signin.Client{Issuer: ts.URL + "/sim/oidc", ClientID: "bindery", ClientSecret: "s3cret", Scopes: []string{"openid", "email"}, RedirectURL: redirect}}
}

// code is the person signing in at the provider: the code it sends back.
func (r *rp) code(t *testing.T, start signin.Start) string {
	t.Helper()
	u, _ := url.Parse(start.URL)
	back, err := sim.AnswerSignIn(context.Background(), u, "alice@example.com")
	if err != nil || back.Query().Get("state") != start.State {
		t.Fatalf("the provider's answer: %v %v", back, err)
	}
	return back.Query().Get("code")
}

func TestTheCodeFlowYieldsTheProvidersClaims(t *testing.T) {
	r := setup(t)
	start, err := r.oidc.Begin(context.Background(), r.client)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := r.oidc.Finish(context.Background(), r.client, start.Nonce, start.Verifier, r.code(t, start))
	if err != nil {
		t.Fatal(err)
	}
	if claims.String("email") != "alice@example.com" || claims.Subject != "u-1001" || strings.Join(claims.Strings("groups"), ",") != "staff" || claims.EmailUnverified() {
		t.Fatalf("claims: %+v", claims)
	}
	// The calls went through the guard: counted per endpoint.
	var b bytes.Buffer
	r.set.WritePrometheus(&b)
	for _, ep := range []string{"discovery", "token", "keys"} {
		if !strings.Contains(b.String(), `bindery_outbound_requests_total{system="oidc",endpoint="`+ep+`",status="2xx"} 1`) {
			t.Errorf("no 2xx call of %s counted:\n%s", ep, b.String())
		}
	}
}

// A failed code exchange is one call: the client authenticates one way (HTTP Basic with a
// secret), never trying another after a failure, so the provider is not asked twice.
func TestAFailedCodeExchangeIsOneCall(t *testing.T) {
	r := setup(t)
	start, err := r.oidc.Begin(context.Background(), r.client)
	if err != nil {
		t.Fatal(err)
	}
	code := r.code(t, start)
	r.sims.OIDC.Inject("token", sim.FaultError, 1)
	_, err = r.oidc.Finish(context.Background(), r.client, start.Nonce, start.Verifier, code)
	if signin.ReasonOf(err) != signin.Unreachable || r.sims.OIDC.Calls("token") != 1 {
		t.Fatalf("reason %q after %d calls: %v", signin.ReasonOf(err), r.sims.OIDC.Calls("token"), err)
	}
}

// A provider down at the first sign-in is Unreachable, and asked again at the next one: no
// restart needed once it is up. Without an issuer or a client id nothing is asked.
func TestAProviderDownIsAskedAgainAtTheNextSignIn(t *testing.T) {
	r := setup(t)
	down := r.client
	closed := httptest.NewServer(http.NotFoundHandler())
	down.Issuer = closed.URL + "/sim/oidc"
	closed.Close()
	if _, err := r.oidc.Begin(context.Background(), down); signin.ReasonOf(err) != signin.Unreachable {
		t.Fatalf("down: %v", err)
	}
	if _, err := r.oidc.Check(context.Background(), down); signin.ReasonOf(err) != signin.Unreachable {
		t.Fatalf("a check of a provider down: %v", err)
	}
	if _, err := r.oidc.Check(context.Background(), r.client); err != nil {
		t.Fatalf("a check of a provider up: %v", err)
	}
	if _, err := r.oidc.Begin(context.Background(), r.client); err != nil {
		t.Fatalf("up: %v", err)
	}
	for _, c := range []signin.Client{{ClientID: "bindery"}, {Issuer: r.client.Issuer}} {
		if _, err := r.oidc.Begin(context.Background(), c); signin.ReasonOf(err) != signin.NotConfigured {
			t.Fatalf("%+v: %v", c, err)
		}
	}
	wrong := r.client
	wrong.Issuer = r.ts.URL + "/sim/nothing-here"
	if _, err := r.oidc.Begin(context.Background(), wrong); signin.ReasonOf(err) != signin.Misconfigured {
		t.Fatalf("no discovery document there: %v", err)
	}
}

// A check reads what a sign-in reads: the discovery document, its issuer compared as written
// (a trailing slash is another issuer), and the key set the ID tokens are verified with — a
// provider that publishes none, or names no token endpoint, is misconfigured, one whose keys
// cannot be fetched is unreachable.
func TestACheckReadsTheDiscoveryAndTheKeysAsASignInDoes(t *testing.T) {
	r := setup(t)
	found, err := r.oidc.Check(context.Background(), r.client)
	if err != nil || found.Keys != 1 || found.KeysURL != r.ts.URL+"/sim/oidc/keys" {
		t.Fatalf("a check of the provider: %+v %v", found, err)
	}
	slash := r.client
	slash.Issuer += "/"
	if _, err := r.oidc.Check(context.Background(), slash); signin.ReasonOf(err) != signin.Misconfigured || !strings.Contains(err.Error(), `"`+r.client.Issuer+`"`) {
		t.Fatalf("the issuer with a trailing slash the provider does not write: %v", err)
	}
	r.sims.OIDC.Inject("keys", sim.FaultError, 1)
	if _, err := r.oidc.Check(context.Background(), r.client); signin.ReasonOf(err) != signin.Unreachable {
		t.Fatalf("the key set answers 500: %v", err)
	}

	var doc, keys string
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.HasSuffix(req.URL.Path, "/keys") {
			w.Write([]byte(keys))
			return
		}
		w.Write([]byte(doc))
	}))
	defer fake.Close()
	c := signin.Client{Issuer: fake.URL, ClientID: "bindery"}
	for _, tc := range []struct{ name, doc, keys string }{
		{"no keys", `{"issuer":%q,"authorization_endpoint":"%[1]s/a","token_endpoint":"%[1]s/t","jwks_uri":"%[1]s/keys"}`, `{"keys":[]}`},
		{"not a key set", `{"issuer":%q,"authorization_endpoint":"%[1]s/a","token_endpoint":"%[1]s/t","jwks_uri":"%[1]s/keys"}`, `<html>`},
		{"no token endpoint", `{"issuer":%q,"authorization_endpoint":"%[1]s/a","jwks_uri":"%[1]s/keys"}`, `{"keys":[{"kty":"EC"}]}`},
	} {
		doc, keys = fmt.Sprintf(tc.doc, fake.URL), tc.keys
		// A relying party of its own for each: the discovery document is kept for an hour.
		o := signin.NewOIDC(signin.Options{})
		if _, err := o.Check(context.Background(), c); signin.ReasonOf(err) != signin.Misconfigured {
			t.Errorf("%s: %v, want %s", tc.name, err, signin.Misconfigured)
		}
	}
}
