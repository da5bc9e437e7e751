//go:build e2e || chaos

package chaos

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// params are the knobs of one run. The build tag picks the defaults (params_short_test.go,
// params_long_test.go); each can be overridden by an environment variable:
//
//	BINDERY_CHAOS_APPS        applications submitted (new operationIds)
//	BINDERY_CHAOS_USERS       simulated users, one goroutine each
//	BINDERY_CHAOS_KILLS       SIGKILLs of a serve instance during the load
//	BINDERY_CHAOS_LOAD        how long the load phase lasts at least (applications are spread over it)
//	BINDERY_CHAOS_DRAIN       bound of the drain phase (faults off, sweeps and operators)
//	BINDERY_CHAOS_KILL_EVERY  mean time between two kills
//	BINDERY_CHAOS_OPS_RETRIES most operator retries of one request in the drain
//	BINDERY_CHAOS_PROJECTS    GitLab projects of the catalog (partitions: batches in parallel)
//	BINDERY_CHAOS_PIPELINE    how long a simulated pipeline runs (real time: sim.timeScale 4)
type params struct {
	apps, users, kills int
	load, drain        string
	killEvery          string
	opsRetries         int
	projects           int
	pipeline           string
}

type run struct {
	apps, users, kills     int
	load, drain, killEvery time.Duration
	opsRetries             int
	projects               int
	pipeline               time.Duration
}

func loadParams(t *testing.T) run {
	t.Helper()
	p := defaults
	num := func(env string, v *int) {
		if s := os.Getenv(env); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				t.Fatalf("%s=%q: want a non-negative integer", env, s)
			}
			*v = n
		}
	}
	str := func(env string, v *string) {
		if s := os.Getenv(env); s != "" {
			*v = s
		}
	}
	num("BINDERY_CHAOS_APPS", &p.apps)
	num("BINDERY_CHAOS_USERS", &p.users)
	num("BINDERY_CHAOS_KILLS", &p.kills)
	num("BINDERY_CHAOS_OPS_RETRIES", &p.opsRetries)
	num("BINDERY_CHAOS_PROJECTS", &p.projects)
	str("BINDERY_CHAOS_PIPELINE", &p.pipeline)
	str("BINDERY_CHAOS_LOAD", &p.load)
	str("BINDERY_CHAOS_DRAIN", &p.drain)
	str("BINDERY_CHAOS_KILL_EVERY", &p.killEvery)
	dur := func(name, s string) time.Duration {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive duration", name, s)
		}
		return d
	}
	r := run{apps: p.apps, users: max(p.users, 1), kills: p.kills, opsRetries: p.opsRetries, projects: max(p.projects, 1),
		load: dur("BINDERY_CHAOS_LOAD", p.load), drain: dur("BINDERY_CHAOS_DRAIN", p.drain),
		killEvery: dur("BINDERY_CHAOS_KILL_EVERY", p.killEvery), pipeline: dur("BINDERY_CHAOS_PIPELINE", p.pipeline)}
	return r
}
