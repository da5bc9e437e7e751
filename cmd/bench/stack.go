package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"bindery/internal/testkit/proc"
)

// The product as it runs in production: the built binary, `bindery serve` on a generated
// configuration and a fresh database, and the simulators (`bindery sim`, or in process when a
// section needs their counters).

// buildBindery builds the binary once per bench run, the way README.md says:
// CGO_ENABLED=0 go build -o bindery . With -profile, the build has one more file, added with
// go build -overlay (the checkout is not touched): it serves net/http/pprof on the address in
// pprofEnv, so that the bench can take CPU profiles of `bindery serve` under load.
func (e *env) buildBindery(ctx context.Context) (string, error) {
	if e.bindery != "" {
		return e.bindery, nil
	}
	out := filepath.Join(e.work, "bindery")
	var extra []string
	if e.profile != "" {
		hook := filepath.Join(e.work, "pprof_hook.go")
		if err := os.WriteFile(hook, []byte(pprofHook), 0o644); err != nil {
			return "", err
		}
		overlay := filepath.Join(e.work, "overlay.json")
		data := fmt.Sprintf(`{"Replace":{%q:%q}}`, filepath.Join(e.root, "zz_bench_pprof_hook.go"), hook)
		if err := os.WriteFile(overlay, []byte(data), 0o644); err != nil {
			return "", err
		}
		extra = append(extra, "-overlay", overlay)
	}
	if err := proc.Build(ctx, e.root, out, ".", extra...); err != nil {
		return "", err
	}
	e.bindery = out
	return out, nil
}

// pprofEnv carries the address the profiling build serves net/http/pprof on (serve only).
const pprofEnv = "BINDERY_BENCH_PPROF"

const pprofHook = `package main

import (
	"net/http"
	_ "net/http/pprof"
	"os"
)

// Added by go run ./cmd/bench -profile (go build -overlay); not part of the product.
func init() {
	if addr := os.Getenv("` + pprofEnv + `"); addr != "" && len(os.Args) > 1 && os.Args[1] == "serve" {
		go http.ListenAndServe(addr, nil)
	}
}
`

// database is a fresh database for one stack.
type database struct {
	kind string // "sqlite" or "mysql"
	dsn  string
	drop func()
}

func (d database) name() string {
	if d.kind == "mysql" {
		return "MariaDB"
	}
	return "SQLite"
}

// newDatabase creates an empty database: a file in dir, or a uniquely named MariaDB database
// (dropped by drop).
func newDatabase(ctx context.Context, e *env, kind, dir string) (database, error) {
	if kind == "sqlite" {
		// Not beside config.yaml: serve and sim watch the configuration's directory, and every
		// write of the database would wake both watchers (see BENCHMARKS.md, "Profiled and fixed").
		data := filepath.Join(dir, "data")
		if err := os.MkdirAll(data, 0o755); err != nil {
			return database{}, err
		}
		return database{kind: kind, dsn: "sqlite:" + filepath.Join(data, "bindery.db"), drop: func() {}}, nil
	}
	admin, err := sql.Open("mysql", e.mysql)
	if err != nil {
		return database{}, err
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "bindery_bench_" + strconv.FormatInt(time.Now().Unix(), 10) + "_" + hex.EncodeToString(b[:])
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		admin.Close()
		return database{}, fmt.Errorf("create database: %w", err)
	}
	cfg, err := mysql.ParseDSN(e.mysql)
	if err != nil {
		admin.Close()
		return database{}, err
	}
	cfg.DBName = name
	drop := func() {
		if _, err := admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			fmt.Fprintf(e.log, "   drop database %s: %v\n", name, err)
		}
		admin.Close()
	}
	return database{kind: kind, dsn: "mysql://" + cfg.FormatDSN(), drop: drop}, nil
}

func pingMySQL(ctx context.Context, dsn string) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

func mysqlVersion(ctx context.Context, dsn string) (string, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return "", err
	}
	defer db.Close()
	var v string
	err = db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v)
	return v, err
}

// stackConfig is what varies between the sections' configurations.
type stackConfig struct {
	addr, simURL  string
	db            database
	approvalFirst bool
	autoApprove   bool
	// fast: zero simulated latency and fast polling, for the end-to-end runs.
	fast bool
	// realistic (instead of fast): one target in each of realistic.projects projects, pipelines
	// of realistic.pipeline divided by realistic.timeScale (sim.timeScale).
	realistic *realisticCI
}

// realisticCI is the end-to-end run with CI of a realistic length, scaled down in time.
type realisticCI struct {
	projects  int
	pipeline  time.Duration // before scaling
	timeScale float64
	// The merge train's run (trainSection) sets these; zero values keep the defaults.
	train       int           // batch.train
	isolation   int           // batch.isolationCars
	mergeMethod string        // sim.gitlab.mergeMethod
	failOn      string        // sim.gitlab.pipelineFailOn: a pipeline whose tree carries it fails
	pollShort   time.Duration // poll.short (poll.long is four times it); 0: 250ms and 1s
	maxWait     time.Duration // batch.maxWait
}

// targets are the catalog's target keys: one per project, bench-pNN in bench/pNN.
func (r *realisticCI) targets() []string {
	out := make([]string, r.projects)
	for i := range out {
		out[i] = fmt.Sprintf("bench-p%02d", i)
	}
	return out
}

// benchTargets are the catalog of the generated configuration: unrestricted targets (no
// permission round trip) in two projects.
var benchTargets = []struct{ key, project string }{
	{"bench-db-read", "bench/access-config"},
	{"bench-db-write", "bench/access-config"},
	{"bench-dashboards", "bench/observability-config"},
}

func targetKeys() []string {
	var out []string
	for _, t := range benchTargets {
		out = append(out, t.key)
	}
	return out
}

// configYAML is the configuration of serve and sim: rate limits off (the load comes from a few
// loopback connections, not from many people), applications open, identities from the login
// header of a loopback proxy, the simulators as GitLab, approval system and permission service.
func configYAML(c stackConfig) string {
	var b strings.Builder
	fmt.Fprintf(&b, `server:
  addr: %s
  trustedProxies: [127.0.0.1/32]
  shutdownTimeout: 5s
database:
  dsn: %q
log:
  level: info
ratelimit:
  apply: 0
  revoke: 0
identity:
  loginHeader: %s
apply:
  mode: OPEN
authz:
  opsRule: bindery-ops
workflow:
  approvalFirst: %t
batch:
  maxRequests: 50
%shooks:
  approvalSecret: bench-approval-secret
  deployToken: bench-deploy-token
  gitlabToken: bench-gitlab-token
gitlab:
  baseURL: %s/sim/gitlab
  botToken: bench-bot-token
  reviewerTokens: [bench-reviewer-1-token, bench-reviewer-2-token]
approvalSystem:
  url: %s/sim/approval
permission:
  url: %s/sim/permission
  rules:
    bindery-ops: [ops@bench.example]
sim:
  approval:
    autoApprove: %t
    callbackDelay: 0s
`, c.addr, c.db.dsn, loginHeader, c.approvalFirst, trainKey(c.realistic), c.simURL, c.simURL, c.simURL, c.autoApprove)
	if c.fast {
		b.WriteString(`  gitlab:
    pipelineDuration: 0s
    rebaseDuration: 0s
  deploy:
    delay: 0s
    dropRate: 0
poll:
  short: 20ms
  shortCount: 100000
  long: 100ms
  timeout: 10m
`)
		b.WriteString(quickCrons)
	}
	if r := c.realistic; r != nil {
		// Every simulated duration is divided by timeScale (the pipeline, rebases, the deploy
		// pipeline's 3s); bindery's own polling is not, so it polls at a pace that suits the
		// scaled pipeline (a few looks per pipeline), and waits long enough for a queue of them.
		short := r.pollShort
		if short <= 0 {
			short = 250 * time.Millisecond
		}
		fmt.Fprintf(&b, "  timeScale: %g\n  gitlab:\n    pipelineDuration: %s\n", r.timeScale, r.pipeline)
		if r.mergeMethod != "" {
			fmt.Fprintf(&b, "    mergeMethod: %s\n", r.mergeMethod)
		}
		if r.failOn != "" {
			fmt.Fprintf(&b, "    pipelineFailOn: [%q]\n", r.failOn)
		}
		fmt.Fprintf(&b, `  deploy:
    dropRate: 0
poll:
  short: %s
  shortCount: 100000
  long: %s
  timeout: 2h
`, short, 4*short)
		b.WriteString(quickCrons + "targets:\n")
		for _, key := range r.targets() {
			fmt.Fprintf(&b, "  - key: %s\n    title: %s\n    project: bench/%s\n    branch: main\n    path: bindings/%s/{subject}.yaml\n    ruleCodes: []\n",
				key, key, strings.TrimPrefix(key, "bench-"), key)
		}
		return b.String()
	}
	b.WriteString("targets:\n")
	for _, t := range benchTargets {
		fmt.Fprintf(&b, "  - key: %s\n    title: %s\n    project: %s\n    branch: main\n    path: bindings/%s/{subject}.yaml\n    ruleCodes: []\n",
			t.key, t.key, t.project, t.key)
	}
	return b.String()
}

// trainKey is the batch.train and batch.maxWait lines of r's configuration ("" : the defaults).
func trainKey(r *realisticCI) string {
	out := ""
	if r != nil && r.train > 0 {
		out += fmt.Sprintf("  train: %d\n", r.train)
	}
	if r != nil && r.isolation > 0 {
		out += fmt.Sprintf("  isolationCars: %d\n", r.isolation)
	}
	if r != nil && r.maxWait > 0 {
		out += fmt.Sprintf("  maxWait: %s\n", r.maxWait)
	}
	return out
}

// quickCrons: the end-to-end runs reconcile soon after a merge and run their rounds and sweeps
// often, so that what they measure is bindery's work, not the crons' spacing.
const quickCrons = `reconcile:
  minAge: 2s
cron:
  rounds: "@every 1s"
  reconcile: "@every 5s"
  sweep: "@every 5s"
`

// rss reads the process's resident set (VmRSS) and its peak (VmHWM) from /proc, in bytes.
func rssOf(p *proc.Process) (cur, peak float64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid()))
	if err != nil {
		return 0, 0, err
	}
	for _, l := range strings.Split(string(data), "\n") {
		var kb float64
		switch {
		case strings.HasPrefix(l, "VmRSS:"):
			fmt.Sscanf(strings.TrimPrefix(l, "VmRSS:"), "%f", &kb)
			cur = kb * 1024
		case strings.HasPrefix(l, "VmHWM:"):
			fmt.Sscanf(strings.TrimPrefix(l, "VmHWM:"), "%f", &kb)
			peak = kb * 1024
		}
	}
	if cur == 0 {
		return 0, 0, fmt.Errorf("no VmRSS for %s", p.Name)
	}
	return cur, peak, nil
}

// stack is bindery serve with its simulators.
type stack struct {
	url, simURL, config string
	serve, sim          *proc.Process // sim is nil when the simulators run in this process
	pprof               string        // -profile: serve's net/http/pprof address
}

// startStack writes the configuration, starts `bindery sim` (unless simURL is given: the caller
// serves the simulators) and `bindery serve`, and waits until serve is ready.
func startStack(ctx context.Context, e *env, c stackConfig, dir string) (*stack, error) {
	bin, err := e.buildBindery(ctx)
	if err != nil {
		return nil, err
	}
	if c.addr == "" {
		if c.addr, err = proc.FreeAddr(); err != nil {
			return nil, err
		}
	}
	s := &stack{url: "http://" + c.addr, config: filepath.Join(dir, "config.yaml")}
	if c.simURL == "" {
		simAddr, err := proc.FreeAddr()
		if err != nil {
			return nil, err
		}
		c.simURL = "http://" + simAddr
		if err := os.WriteFile(s.config, []byte(configYAML(c)), 0o600); err != nil {
			return nil, err
		}
		if s.sim, err = proc.Start(ctx, e.work, nil, "sim", bin, "sim", "-addr", simAddr, "-bindery", s.url, "-config", s.config); err != nil {
			return nil, err
		}
		if err := proc.WaitReady(ctx, s.sim, c.simURL+"/healthz", 30*time.Second); err != nil {
			s.stop()
			return nil, err
		}
	} else if err := os.WriteFile(s.config, []byte(configYAML(c)), 0o600); err != nil {
		return nil, err
	}
	s.simURL = c.simURL
	var extraEnv []string
	if e.profile != "" {
		if s.pprof, err = proc.FreeAddr(); err != nil {
			return nil, err
		}
		extraEnv = append(extraEnv, pprofEnv+"="+s.pprof)
	}
	if s.serve, err = proc.Start(ctx, e.work, extraEnv, "serve", bin, "serve", "-config", s.config); err != nil {
		s.stop()
		return nil, err
	}
	if err := proc.WaitReady(ctx, s.serve, s.url+"/readyz", 60*time.Second); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

func (s *stack) stop() {
	if s.serve != nil {
		s.serve.Stop()
	}
	if s.sim != nil {
		s.sim.Stop()
	}
}

// errNoWorkflow: the binary answers 503 on the workflow routes (builds from before the app
// always wired its workflow).
var errNoWorkflow = errors.New("the workflow is not wired in this build: POST /api/apply answers 503 UNAVAILABLE")

// probeApply sends one application and says whether the workflow answers.
func probeApply(ctx context.Context, url string) error {
	body := fmt.Sprintf(`{"operationId":"probe-%d","targetKey":%q,"reason":"probe"}`, time.Now().UnixNano(), benchTargets[0].key)
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/api/apply", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(loginHeader, fmt.Sprintf("probe-%d@bench.example", time.Now().UnixNano()))
	status, answer, err := send(http.DefaultClient, req)
	switch {
	case err != nil:
		return err
	case status == http.StatusServiceUnavailable:
		return errNoWorkflow
	case status != http.StatusAccepted:
		return fmt.Errorf("POST /api/apply answered %d: %s", status, oneLine(string(answer)))
	}
	return nil
}

// cpuSeconds is the CPU time (user + system) process pid has used, from /proc/<pid>/stat.
func cpuSeconds(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; the fields after its closing parenthesis are
	// state, ppid, …: utime and stime are the 12th and 13th of them.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return (utime + stime) / clockTicks, nil
}

// clockTicks is the kernel's USER_HZ, 100 on Linux for every architecture Go supports.
const clockTicks = 100

// findProcess returns the pid of a running process whose command name is one of names, or 0
// (the database server when it runs on this machine).
func findProcess(names ...string) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil {
			continue
		}
		for _, n := range names {
			if strings.TrimSpace(string(comm)) == n {
				return pid
			}
		}
	}
	return 0
}

// mysqlCounters are the server's global status counters the HTTP section charges to requests.
var mysqlCounters = []string{"Questions", "Com_select", "Com_insert", "Com_update", "Com_commit"}

// mysqlStatus reads mysqlCounters (global: other clients of the server add to them).
func mysqlStatus(ctx context.Context, dsn string) (map[string]float64, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name IN ('"+strings.Join(mysqlCounters, "','")+"')")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]float64{}
	for rows.Next() {
		var name string
		var v float64
		if err := rows.Scan(&name, &v); err != nil {
			return nil, err
		}
		out[name] = v
	}
	return out, rows.Err()
}
