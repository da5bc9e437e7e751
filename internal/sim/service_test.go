package sim_test

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"bindery/internal/platform/config"
	"bindery/internal/sim"
	"bindery/internal/work/service/servicetest"
)

// The simulators keep the start/stop contract of every background service. Stopped before they
// start, they never start. Started, with a deploy and an approval callback still timed when
// they stop, Stop drops both and returns once every goroutine of theirs ended (the deploy stays
// PENDING, the decision undelivered for the next start); a second Stop is harmless.
func TestTheSimulatorsStopBeforeTheyStartTwiceAndLeaveNoGoroutine(t *testing.T) {
	t.Run("stopped before they start", func(t *testing.T) {
		servicetest.StoppedBeforeStart(t, sim.New(sim.Options{Config: config.NewStatic(config.MustParse(simConfig))}))
	})
	t.Run("started, with callbacks pending, and stopped twice", func(t *testing.T) {
		rec := &receiver{}
		bindery := httptest.NewServer(rec)
		defer bindery.Close()
		src := config.NewStatic(config.MustParse(strings.Replace(simConfig, "delay: 0s", "delay: 1h", 1)))
		sims := sim.New(sim.Options{Config: src, BinderyURL: bindery.URL, StateFile: filepath.Join(t.TempDir(), "state.json")})
		srv := httptest.NewServer(sims.Handler())
		defer srv.Close()
		e := &env{sims: sims, url: srv.URL, bindery: bindery.URL, hook: rec, src: src}
		servicetest.StartedAndStoppedTwice(t, sims, func() {
			// The test's own HTTP connections are not the simulators' goroutines.
			defer http.DefaultTransport.(*http.Transport).CloseIdleConnections()
			e.mergeMR(t) // its deploy is due in an hour
			sims.Approval.SetFaults(sim.ApprovalFaults{CallbackDelay: time.Hour})
			if a := e.raw(t, "POST", "/sim/approval/tickets", `{"operationId":"op-t","subject":"s","targetKey":"t1","callbackUrl":"`+bindery.URL+`/hooks/approval"}`); a.status != 201 {
				t.Fatalf("open ticket: %d %s", a.status, a.body)
			}
			if _, err := sims.Approval.Decide(sims.Approval.Tickets()[0].ID, sim.TicketApproved); err != nil {
				t.Fatal(err)
			}
		})
		if r := sims.Deploy.Records(); len(r) != 1 || r[0].Status != sim.DeployPending {
			t.Fatalf("deploys after the stop: %+v", r)
		}
		if cbs := sims.Approval.Callbacks(); len(cbs) != 0 {
			t.Fatalf("a callback went out after the stop: %+v", cbs)
		}
	})
}
