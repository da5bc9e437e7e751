package sim_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"bindery/api"
	"bindery/internal/platform/config"
	"bindery/internal/sim"
)

// The deploy simulator: a callback after each merge in the simulated GitLab.

func (e *env) mergeMR(t *testing.T) {
	t.Helper()
	e.prepare(t)
	for _, tok := range []string{"rev1-token", "rev2-token"} {
		e.call(t, "POST", proj+"/merge_requests/1/approve", tok, nil)
	}
	if a := e.call(t, "PUT", proj+"/merge_requests/1/merge", "bot-token", nil); a.status != 200 {
		t.Fatalf("merge: %d %s", a.status, a.body)
	}
}

// deployCallbacks waits for the receiver to have seen n calls to /hooks/deploy.
func (e *env) deployCallbacks(t *testing.T, n int) []api.DeployCallback {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var out []api.DeployCallback
		reqs, bodies := e.hook.requests()
		for i, r := range reqs {
			if r.URL.Path != "/hooks/deploy" {
				continue
			}
			if r.Header.Get("Authorization") != "Bearer deploy-token" {
				t.Fatalf("Authorization %q", r.Header.Get("Authorization"))
			}
			var cb api.DeployCallback
			if err := json.Unmarshal(bodies[i], &cb); err != nil {
				t.Fatal(err)
			}
			out = append(out, cb)
		}
		if len(out) >= n || time.Now().After(deadline) {
			return out
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestDeployCallsBackAfterAMerge(t *testing.T) {
	e := newEnv(t, "", nil)
	e.mergeMR(t)
	got := e.deployCallbacks(t, 1)
	if len(got) != 1 || got[0].Project != "grp/sub.proj" || got[0].MRIID != 1 || strings.Join(got[0].OperationIDs, ",") != "op-a" {
		t.Fatalf("deploy callbacks %+v", got)
	}
	// The record is updated once bindery's answer is in, just after the receiver saw the call.
	deadline := time.Now().Add(10 * time.Second)
	a := e.raw(t, "GET", "/sim/deploys", "")
	for !strings.Contains(a.body, `"status":"SENT"`) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
		a = e.raw(t, "GET", "/sim/deploys", "")
	}
	if a.status != 200 || !strings.Contains(a.body, `"status":"SENT"`) || !strings.Contains(a.body, `"answer":200`) {
		t.Fatalf("deploys: %d %s", a.status, a.body)
	}
}

func TestDeployKnobs(t *testing.T) {
	t.Run("dropped callbacks are never sent", func(t *testing.T) {
		e := newEnv(t, "", nil)
		e.sims.Deploy.SetFaults(sim.DeployFaults{DropRate: 1, WithOperationIDs: true})
		e.mergeMR(t)
		deadline := time.Now().Add(10 * time.Second)
		for (len(e.sims.Deploy.Records()) == 0 || e.sims.Deploy.Records()[0].Status == sim.DeployPending) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if r := e.sims.Deploy.Records(); len(r) != 1 || r[0].Status != sim.DeployDropped {
			t.Fatalf("records %+v", r)
		}
		if got := e.deployCallbacks(t, 0); len(got) != 0 {
			t.Fatalf("a dropped deploy was sent: %+v", got)
		}
	})
	t.Run("without operationIds the project, mrIid and the deployed merge commit are sent", func(t *testing.T) {
		e := newEnv(t, "", nil)
		e.sims.Deploy.SetFaults(sim.DeployFaults{})
		e.mergeMR(t)
		got := e.deployCallbacks(t, 1)
		if len(got) != 1 || got[0].OperationIDs != nil || got[0].MRIID != 1 || len(got[0].SHA) != 40 {
			t.Fatalf("callbacks %+v", got)
		}
		_, bodies := e.hook.requests()
		if strings.Contains(string(bodies[len(bodies)-1]), "operationIds") {
			t.Fatalf("body %s", bodies[len(bodies)-1])
		}
		// The record keeps what the merge carried, and the commit is the MR's merge commit.
		rec := e.sims.Deploy.Records()[0]
		mr := e.call(t, "GET", proj+"/merge_requests/1", "bot-token", nil).json(t)
		if rec.Exact || strings.Join(rec.OperationIDs, ",") != "op-a" || rec.SHA != mr["merge_commit_sha"] {
			t.Fatalf("record %+v, MR merge commit %v", rec, mr["merge_commit_sha"])
		}
	})
	t.Run("exactRate names the ids on a share of the callbacks", func(t *testing.T) {
		e := newEnv(t, "", nil)
		e.sims.Deploy.SetFaults(sim.DeployFaults{ExactRate: 1})
		e.mergeMR(t)
		if got := e.deployCallbacks(t, 1); len(got) != 1 || strings.Join(got[0].OperationIDs, ",") != "op-a" {
			t.Fatalf("callbacks %+v", got)
		}
	})
	t.Run("the delay holds the callback back", func(t *testing.T) {
		e := newEnv(t, "", nil)
		e.sims.Deploy.SetFaults(sim.DeployFaults{Delay: time.Hour})
		e.mergeMR(t)
		time.Sleep(30 * time.Millisecond)
		if r := e.sims.Deploy.Records(); len(r) != 1 || r[0].Status != sim.DeployPending {
			t.Fatalf("records %+v", r)
		}
	})
	t.Run("the configured time scale speeds it up", func(t *testing.T) {
		e := newEnv(t, strings.Replace(strings.Replace(simConfig, "delay: 0s", "delay: 1h", 1), "sim:\n", "sim:\n  timeScale: 3600000\n", 1), nil)
		e.mergeMR(t)
		if got := e.deployCallbacks(t, 1); len(got) != 1 {
			t.Fatalf("an hour at scale 3,600,000 is a millisecond: %+v", got)
		}
	})
}

// GET /sim/faults counts what the knobs injected, per simulator and kind, so a chaos run can
// report the faults it survived.
func TestFaultCountsAreServed(t *testing.T) {
	e := newEnv(t, "", nil)
	e.sims.Deploy.SetFaults(sim.DeployFaults{DropRate: 1})
	e.mergeMR(t)
	e.sims.GitLab.SetFaults(sim.GitLabFaults{SimTransport: config.SimTransport{ErrorRate: 1}})
	for range 2 {
		if a := e.call(t, "GET", proj+"/merge_requests/1", "bot-token", nil); a.status != 500 {
			t.Fatalf("with errorRate 1: %d %s", a.status, a.body)
		}
	}
	a := e.raw(t, "GET", "/sim/faults", "")
	var got map[string]map[string]int
	if err := json.Unmarshal([]byte(a.body), &got); a.status != 200 || err != nil {
		t.Fatalf("GET /sim/faults: %d %s %v", a.status, a.body, err)
	}
	if got["gitlab"]["error_500"] != 2 || got["deploy"]["callback_dropped"] != 1 || len(got["approval"]) != 0 {
		t.Fatalf("fault counts %v, want gitlab error_500=2, deploy callback_dropped=1, nothing else", got)
	}
}
