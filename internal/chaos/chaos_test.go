//go:build e2e || chaos

package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"bindery/internal/testkit/proc"
	"bindery/store/storetest"
)

// TestChaos is the multi-process reliability run of issue 8 (see the package doc). Its phases:
// start (sim, proxy, three serve instances on one fresh MariaDB database), load with faults and
// kills, drain with the faults off (sweeps, reconciliation, and an operator's retries and
// settlements through the ops API), then the checks, which name every offending request, batch
// or MR.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the multi-process chaos run takes minutes")
	}
	p := loadParams(t)
	dsn := storetest.MySQLDSN(t) // skips loudly without MariaDB, fails with BINDERY_REQUIRE_MYSQL=1
	began := time.Now()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bindery")
	if err := proc.Build(context.Background(), "../..", bin, "."); err != nil { // "../.." is the module root
		t.Fatal(err)
	}
	t.Logf("built the binary in %s", time.Since(began).Round(time.Millisecond))
	db := openSQL(t, dsn)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	insts := make([]*instance, 3)
	for i := range insts {
		insts[i] = &instance{idx: i, addr: freeAddr(t)}
	}
	px := newProxy(insts)
	proxyURL := serveProxy(ctx, t, px)
	simAddr := freeAddr(t)
	simURL := "http://" + simAddr
	// Not beside anything that writes: the config's directory is watched by every process.
	cfgDir := filepath.Join(dir, "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(cfgDir, "config.yaml")
	writeConfig(t, cfg, configYAML(p, dsn, proxyURL, simURL, true))

	// The processes' logs outlive a failed run (t.TempDir would remove them).
	logDir, err := os.MkdirTemp("", "bindery-chaos-logs-")
	if err != nil {
		t.Fatal(err)
	}
	var simProc *proc.Process
	simProc, err = proc.Start(context.Background(), logDir, nil, "sim", bin, "sim", "-addr", simAddr, "-bindery", proxyURL, "-config", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(simProc.Stop)
	if err := proc.WaitReady(context.Background(), simProc, simURL+"/healthz", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	k := &killer{t: t, insts: insts, dir: logDir, bin: bin, cfg: cfg, db: db, ledger: &counterLedger{}, startedAt: make([]time.Time, len(insts))}
	// One at a time: the first start migrates the database.
	for _, in := range insts {
		k.startedAt[in.idx] = dbNow(db)
		if err := in.start(logDir, bin, cfg); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, in := range insts {
			if p := in.current(); p != nil {
				p.Stop()
			}
		}
	})
	defer func() {
		if t.Failed() {
			t.Logf("logs of the processes are in %s (kept: the test failed)", logDir)
			return
		}
		os.RemoveAll(logDir)
	}()
	t.Logf("cluster up in %s: sim %s, proxy %s, serve %s %s %s", time.Since(began).Round(time.Millisecond), simURL, proxyURL, insts[0].addr, insts[1].addr, insts[2].addr)

	sampler := &slotSampler{db: db}
	stopSampler, sampled := make(chan struct{}), make(chan struct{})
	go func() { defer close(sampled); sampler.run(stopSampler) }()

	// ---- load, faults on, kills ----
	runID := fmt.Sprintf("c%d", time.Now().Unix()%100000)
	l := &load{c: &client{base: proxyURL, hc: &http.Client{Timeout: 15 * time.Second}}, p: p, runID: runID}
	loadStart := time.Now()
	pace := time.Duration(float64(p.load) * float64(p.users) / float64(max(p.apps, 1)))
	lctx, stopLoad := context.WithCancel(ctx)
	var users, side sync.WaitGroup
	for u := range p.users {
		users.Add(1)
		go func() { defer users.Done(); l.user(lctx, u, pace) }()
	}
	side.Add(8)
	go func() { defer side.Done(); l.drifter(lctx, simURL, db) }()
	go func() { defer side.Done(); l.revoker(lctx) }()
	go func() { defer side.Done(); l.renewer(lctx) }()
	go func() { defer side.Done(); l.reviewer(lctx) }()
	go func() { defer side.Done(); l.outsider(lctx, simURL) }()
	go func() { defer side.Done(); l.rounds(lctx) }()
	go func() { defer side.Done(); k.run(lctx, p.kills, p.killEvery) }()
	var cutRefused, cutLive int
	go func() {
		defer side.Done()
		cutRefused, cutLive = k.cutConfig(lctx, p.load/3, configYAML(p, dsn, proxyURL, simURL, true))
	}()
	users.Wait()
	// The kills and revokes go on until the load phase's length and every kill are done.
	for time.Since(loadStart) < p.load && k.kills.Load() < int64(p.kills) {
		time.Sleep(200 * time.Millisecond) // the behaviour: the load phase lasts p.load
	}
	// Every planned kill happens, and a validated binding is revoked under the faults (the first
	// validations take a while after the first applications), within one bound.
	for (k.kills.Load() < int64(p.kills) || l.tally.get("revoke.202_") == 0) && time.Since(loadStart) < 2*p.load+time.Duration(p.kills)*p.killEvery {
		time.Sleep(200 * time.Millisecond) // the behaviour: the load phase goes on until then
	}
	stopLoad()
	side.Wait()
	loadTook := time.Since(loadStart)
	if cutRefused != cutLive || cutLive == 0 {
		t.Errorf("a config file cut short was refused by %d of %d live instances", cutRefused, cutLive)
	}
	t.Logf("config cut short mid-load: refused by %d of %d live instances", cutRefused, cutLive)
	// An instance killed just before the load stopped is started again by its killer; make sure
	// all three serve the drain.
	for _, in := range insts {
		if done, _ := in.current().Exited(); done {
			k.restart(in)
		}
	}
	for _, err := range k.errs {
		t.Errorf("restart after a kill: %v", err)
	}
	// Every application ends in an answer a user can act on: accepted (a replay after a lost
	// answer included) or refused because the relation already has an active request; every
	// renewal and review call is done or refused as a conflict (accessAnswers). An
	// operator's manual round may also be told to try again (503: the database did not answer
	// within the request's deadline while instances were killed, seen under -race); the cron runs
	// the same round anyway, and nothing waits on the operator's.
	for _, name := range sortedKeys(l.tally.m) {
		if accessAnswers[name] {
			continue
		}
		switch name {
		case "apply.ACCEPTED", "apply.409_APPLY_IN_PROGRESS", "apply.cancelled", "apply.resubmit_replayed",
			"apply.resent_after_lost_or_5xx", "apply.resent_after_409_pending",
			"revoke.202_", "revoke.409_CONFLICT", "ops.round.200", "ops.round.0", "ops.round.502", "ops.round.503", "outside.201", "drift.201":
		default:
			t.Errorf("unexpected answers during the load: %s=%d", name, l.tally.get(name))
		}
	}
	t.Logf("load done in %s: %d applications started, %s", loadTook.Round(time.Second), min(int(l.next.Load()), p.apps), l.tally.String())

	// ---- drain, faults off ----
	writeConfig(t, cfg, configYAML(p, dsn, proxyURL, simURL, false))
	drainStart := time.Now()
	op := &operator{c: l.c, db: db, runID: runID, maxRetries: p.opsRetries, tries: map[string]int{}, lateAt: map[string]time.Time{}}
	quiet, snap := op.drain(ctx, t, p.drain)
	drainTook := time.Since(drainStart)
	t.Logf("drain: %s after %s (%s); operator: %s", map[bool]string{true: "quiescent", false: "NOT quiescent"}[quiet], drainTook.Round(time.Second), snap, op.tally.String())

	close(stopSampler)
	<-sampled

	// ---- checks ----
	checksStart := time.Now()
	c := &checker{t: t, db: db, simURL: simURL}
	c.leftovers(quiet)
	c.accepted(l.accepted)
	c.invariants()
	c.mergeRequests()
	c.driftRoundsRead(ctx)
	touched := c.drift(l.drifts)
	c.repository(touched)
	untested := c.mergedAsTested()
	t.Logf("merges: %s", untested)
	c.validatedCounter(insts, k.ledger)
	c.requesterViews(ctx, l.c, simURL+"/sim/gitlab")
	told := c.deliveredOnce()
	t.Logf("notifications: %s", told)
	t.Logf("access over time: %s", c.access())
	if len(sampler.seen) > 0 {
		t.Errorf("an active batch held its slot without members in %d of %d samples: %v", len(sampler.seen), sampler.samples, sampler.seen)
	}
	if len(sampler.orphans) > 0 {
		t.Errorf("in-flight work without a task (no due time) in %d of %d samples: %v", len(sampler.orphans), sampler.samples, sampler.orphans)
	}
	t.Logf("live samples: %d (active slots and in-flight work without a task, each sample)", sampler.samples)

	t.Logf("checks took %s", time.Since(checksStart).Round(time.Millisecond))

	// ---- summary ----
	sum := c.summary()
	fmt.Printf(`
== chaos summary ==
applications submitted: %d by %d users (%s of load); accepted: %d
load outcomes: %s
kills (SIGKILL): %d, restarts: %d, proxy fail-overs (refused connections sent on): %d
drain: %s in %s; operator actions: %s
final operation states: %s
batches: %s; at most %d active at once (%d projects)
merge requests merged: %d; deploy callbacks dropped by the sim: %d of %d; bindings checked against the files on main: %d
merged as tested: %s
sim fault counts: %s
validated: %s
notifications: %s
total duration: %s
`, min(int(l.next.Load()), p.apps), p.users, loadTook.Round(time.Second), len(l.accepted), l.tally.String(),
		k.kills.Load(), k.restarts.Load(), px.failover.Load(),
		map[bool]string{true: "quiescent", false: "NOT quiescent"}[quiet], drainTook.Round(time.Second), op.tally.String(),
		sum.states, sum.batches, sum.mostActive, p.projects, sum.merged, sum.deployDropped, sum.deploys, c.files, untested, simFaults(simURL), c.counterLine, told, time.Since(began).Round(time.Second))
}

func openSQL(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(strings.TrimPrefix(dsn, "mysql://"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ParseTime = true
	cfg.Loc = time.Local
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// simFaults reads the simulators' fault counters, when the sim exposes them.
func simFaults(simURL string) string {
	resp, err := http.Get(simURL + "/sim/faults")
	if err != nil {
		return "(not read: " + err.Error() + ")"
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprintf("(not exposed: GET /sim/faults answered %d)", resp.StatusCode)
	}
	var m map[string]map[string]int
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	var parts []string
	for _, sim := range sortedKeys(m) {
		for _, k := range sortedKeys(m[sim]) {
			parts = append(parts, fmt.Sprintf("%s.%s=%d", sim, k, m[sim][k]))
		}
	}
	return strings.Join(parts, " ")
}

func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := proc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}
