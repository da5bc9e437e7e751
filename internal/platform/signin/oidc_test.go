package signin_test

import (
	"bytes"
	"context"
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
	if err := r.oidc.Check(context.Background(), down); signin.ReasonOf(err) != signin.Unreachable {
		t.Fatalf("a check of a provider down: %v", err)
	}
	if err := r.oidc.Check(context.Background(), r.client); err != nil {
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
