package permission_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"

	"bindery/internal/platform/config"
	"bindery/internal/remote/outbound"
	"bindery/internal/remote/permission"
	"bindery/internal/sim"
	"bindery/internal/testkit"
)

// The HTTP layer calls the permission checker through an interface with exactly this method.
var _ interface {
	Check(ctx context.Context, identity string, groups, ruleCodes []string) (bool, error)
} = (*permission.Checker)(nil)

const rules = `
permission:
  timeout: 2s
  rules:
    ops-admin: [ops@example.com]
    payments-admin: [Alice@Example.com, bob@example.com]
    audit-readers: ["group:Auditors"]
breaker:
  failures: 2
  cooldown: 50ms
`

var ctx = context.Background()

func TestStaticRulesDecideWithoutAURL(t *testing.T) {
	t.Parallel()
	c := permission.New(config.NewStatic(config.MustParse(rules)), permission.Options{})
	for _, tc := range []struct {
		identity string
		groups   []string
		codes    []string
		want     bool
	}{
		{"alice@example.com", nil, []string{"payments-admin"}, true},
		{"ALICE@example.com", nil, []string{"ops-admin", "payments-admin"}, true}, // several codes, one round
		{"alice@example.com", nil, []string{"ops-admin"}, false},
		{"alice@example.com", nil, []string{"nobody-configured-this"}, false}, // unconfigured → no
		{"alice@example.com", nil, nil, false},
		{"", nil, []string{"payments-admin"}, false},
		// A group the identity provider named grants what the rules give "group:NAME".
		{"dan@example.com", []string{"staff", "auditors"}, []string{"audit-readers"}, true},
		{"dan@example.com", []string{"staff"}, []string{"audit-readers"}, false},
		{"dan@example.com", nil, []string{"audit-readers"}, false},
		{"", []string{"auditors"}, []string{"audit-readers"}, false}, // a group is no identity
		// A person named like a group gains nothing: only the groups list grants a group's rule.
		{"group:auditors", nil, []string{"audit-readers"}, false},
	} {
		if got, err := c.Check(ctx, tc.identity, tc.groups, tc.codes); got != tc.want || err != nil {
			t.Errorf("Check(%q, %v, %v) = %v, %v; want %v", tc.identity, tc.groups, tc.codes, got, err, tc.want)
		}
	}
	none := permission.New(config.NewStatic(config.MustParse("")), permission.Options{})
	if ok, _ := none.Check(ctx, "ops@example.com", nil, []string{"ops-admin"}); ok {
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
	t.Parallel()
	b := setup(t)
	ok, err := b.c.Check(ctx, "bob@example.com", nil, []string{"ops-admin", "payments-admin"})
	if !ok || err != nil || b.sims.Permission.Calls() != 1 {
		t.Fatalf("Check = %v, %v after %d calls", ok, err, b.sims.Permission.Calls())
	}
	if ok, err := b.c.Check(ctx, "bob@example.com", nil, []string{"ops-admin"}); ok || err != nil {
		t.Fatalf("not granted = %v, %v", ok, err)
	}
	// The caller's groups travel with the question: the service grants a group's rule.
	if ok, err := b.c.Check(ctx, "dan@example.com", []string{"Auditors"}, []string{"audit-readers"}); !ok || err != nil {
		t.Fatalf("granted through a group = %v, %v", ok, err)
	}
	// Blanking permission.url switches to the static rules at the next call (none here).
	b.src.Replace(config.MustParse("permission:\n  timeout: 100ms\n"))
	if ok, _ := b.c.Check(ctx, "bob@example.com", nil, []string{"payments-admin"}); ok || b.sims.Permission.Calls() != 3 {
		t.Fatal("static rules (none) must decide once the URL is blank")
	}
}

func TestServiceFailuresDeny(t *testing.T) {
	t.Parallel()
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
		if ok, err := b.c.Check(ctx, "bob@example.com", nil, []string{"payments-admin"}); ok || err == nil {
			t.Errorf("%s: Check = %v, %v; want a denial with an error", tc.name, ok, err)
		}
		// Reset the breaker's failure count with a good call.
		if ok, err := b.c.Check(ctx, "bob@example.com", nil, []string{"payments-admin"}); !ok || err != nil {
			t.Fatalf("%s: recovery call = %v, %v", tc.name, ok, err)
		}
	}
}

func TestHangingServiceDeniesWithinTheTimeoutAndOpensTheBreaker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.sims.Permission.SetFaults(config.SimTransport{Hang: true})
	for range 2 {
		ok, err := b.c.Check(ctx, "ops@example.com", nil, []string{"ops-admin"})
		var oe *outbound.Error
		if ok || !errors.As(err, &oe) || oe.Kind != outbound.KindTimeout {
			t.Fatalf("Check = %v, %v", ok, err)
		}
	}
	calls := b.sims.Permission.Calls()
	ok, err := b.c.Check(ctx, "ops@example.com", nil, []string{"ops-admin"})
	var oe *outbound.Error
	if ok || !errors.As(err, &oe) || oe.Kind != outbound.KindCircuitOpen || b.sims.Permission.Calls() != calls {
		t.Fatalf("with the breaker open: %v, %v", ok, err)
	}
	b.sims.Permission.SetFaults(config.SimTransport{})
	testkit.Eventually(t, "the breaker to let the service back in", func() bool {
		ok, err := b.c.Check(ctx, "ops@example.com", nil, []string{"ops-admin"})
		return ok && err == nil
	})
}
