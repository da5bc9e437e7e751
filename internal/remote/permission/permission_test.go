package permission_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"bindery/internal/platform/config"
	"bindery/internal/remote/outbound"
	"bindery/internal/remote/permission"
	"bindery/internal/sim"
)

// The HTTP layer calls the permission checker through an interface with exactly this method.
var _ interface {
	Check(ctx context.Context, identity string, ruleCodes []string) (bool, error)
} = (*permission.Checker)(nil)

const rules = `
permission:
  timeout: 2s
  rules:
    ops-admin: [ops@example.com]
    payments-admin: [Alice@Example.com, bob@example.com]
breaker:
  failures: 2
  cooldown: 50ms
`

var ctx = context.Background()

func TestStaticRulesDecideWithoutAURL(t *testing.T) {
	c := permission.New(config.NewStatic(config.MustParse(rules)), permission.Options{})
	for _, tc := range []struct {
		identity string
		codes    []string
		want     bool
	}{
		{"alice@example.com", []string{"payments-admin"}, true},
		{"ALICE@example.com", []string{"ops-admin", "payments-admin"}, true}, // several codes, one round
		{"alice@example.com", []string{"ops-admin"}, false},
		{"alice@example.com", []string{"nobody-configured-this"}, false}, // unconfigured → no
		{"alice@example.com", nil, false},
		{"", []string{"payments-admin"}, false},
	} {
		if got, err := c.Check(ctx, tc.identity, tc.codes); got != tc.want || err != nil {
			t.Errorf("Check(%q, %v) = %v, %v; want %v", tc.identity, tc.codes, got, err, tc.want)
		}
	}
	none := permission.New(config.NewStatic(config.MustParse("")), permission.Options{})
	if ok, _ := none.Check(ctx, "ops@example.com", []string{"ops-admin"}); ok {
		t.Fatal("no rules must grant nothing")
	}
}

type bundle struct {
	src  *config.Source
	sims *sim.Sims
	c    *permission.Checker
	url  string
}

func setup(t *testing.T) *bundle {
	t.Helper()
	simSrc := config.NewStatic(config.MustParse(rules))
	sims := sim.New(sim.Options{Config: simSrc})
	srv := httptest.NewServer(sims.Handler())
	t.Cleanup(func() { sims.Stop(context.Background()); srv.Close() })
	url := srv.URL + "/sim/permission"
	src := config.NewStatic(config.MustParse("permission:\n  url: " + url + "\n  timeout: 100ms\nbreaker:\n  failures: 2\n  cooldown: 50ms\n"))
	return &bundle{src: src, sims: sims, c: permission.New(src, permission.Options{}), url: url}
}

func TestServiceAnswersSeveralCodesInOneRoundTrip(t *testing.T) {
	b := setup(t)
	ok, err := b.c.Check(ctx, "bob@example.com", []string{"ops-admin", "payments-admin"})
	if !ok || err != nil || b.sims.Permission.Calls() != 1 {
		t.Fatalf("Check = %v, %v after %d calls", ok, err, b.sims.Permission.Calls())
	}
	if ok, err := b.c.Check(ctx, "bob@example.com", []string{"ops-admin"}); ok || err != nil {
		t.Fatalf("not granted = %v, %v", ok, err)
	}
	// Blanking permission.url switches to the static rules at the next call (none here).
	b.src.Replace(config.MustParse("permission:\n  timeout: 100ms\n"))
	if ok, _ := b.c.Check(ctx, "bob@example.com", []string{"payments-admin"}); ok || b.sims.Permission.Calls() != 2 {
		t.Fatal("static rules (none) must decide once the URL is blank")
	}
}

func TestServiceFailuresDeny(t *testing.T) {
	b := setup(t)
	for _, tc := range []struct {
		name  string
		fault sim.Fault
	}{
		{"500", sim.FaultError},
		{"malformed answer", sim.FaultAnswer(200, map[string]any{"matched": []string{"payments-admin"}})},
		{"allowed without a matching code", sim.FaultAnswer(200, map[string]any{"allowed": true, "matched": []string{"something-else"}})},
	} {
		b.sims.Permission.Inject(tc.fault, 1)
		if ok, err := b.c.Check(ctx, "bob@example.com", []string{"payments-admin"}); ok || err == nil {
			t.Errorf("%s: Check = %v, %v; want a denial with an error", tc.name, ok, err)
		}
		// Reset the breaker's failure count with a good call.
		if ok, err := b.c.Check(ctx, "bob@example.com", []string{"payments-admin"}); !ok || err != nil {
			t.Fatalf("%s: recovery call = %v, %v", tc.name, ok, err)
		}
	}
}

func TestHangingServiceDeniesWithinTheTimeoutAndOpensTheBreaker(t *testing.T) {
	b := setup(t)
	b.sims.Permission.SetFaults(config.SimTransport{Hang: true})
	for range 2 {
		ok, err := b.c.Check(ctx, "ops@example.com", []string{"ops-admin"})
		var oe *outbound.Error
		if ok || !errors.As(err, &oe) || oe.Kind != outbound.KindTimeout {
			t.Fatalf("Check = %v, %v", ok, err)
		}
	}
	calls := b.sims.Permission.Calls()
	ok, err := b.c.Check(ctx, "ops@example.com", []string{"ops-admin"})
	var oe *outbound.Error
	if ok || !errors.As(err, &oe) || oe.Kind != outbound.KindCircuitOpen || b.sims.Permission.Calls() != calls {
		t.Fatalf("with the breaker open: %v, %v", ok, err)
	}
	b.sims.Permission.SetFaults(config.SimTransport{})
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if ok, err := b.c.Check(ctx, "ops@example.com", []string{"ops-admin"}); ok && err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the breaker never let the service back in")
}
