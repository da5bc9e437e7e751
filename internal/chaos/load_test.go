//go:build e2e || chaos

package chaos

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// client calls bindery's API through the proxy as one identity.
type client struct {
	base string
	hc   *http.Client
}

// call sends method path as who with body (none when ""); it returns the status and the body.
// Status 0 is a transport error (the answer was lost).
func (c *client) call(ctx context.Context, method, path, who, body string) (int, []byte) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, nil
	}
	req.Header.Set(loginHeader, who)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// tally counts outcomes by name, safe for concurrent use.
type tally struct {
	mu sync.Mutex
	m  map[string]int
}

func (t *tally) add(name string, n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]int{}
	}
	t.m[name] += n
}

func (t *tally) get(name string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[name]
}

func (t *tally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var parts []string
	for _, k := range sortedKeys(t.m) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, t.m[k]))
	}
	return strings.Join(parts, " ")
}

// accepted is an application bindery accepted (202 ACCEPTED or, after a lost answer, a replayed
// DUPLICATE_SUBMIT of the first send).
type accepted struct{ id, user string }

// load is the users' side of the run.
type load struct {
	c        *client
	p        run
	runID    string
	next     atomic.Int64 // applications started
	tally    tally
	mu       sync.Mutex
	accepted []accepted
	drifts   []outsideDrift // the drifter's changes of bindery's files
}

func (l *load) codeOf(data []byte) string {
	var v struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(data, &v)
	return v.Code
}

// apply sends one application, resending the same operationId (the same payload) while the
// answer is lost or the service is unavailable, as the SPA does; some are resent once more after
// an answer, to exercise the replay. It returns the final answer's code.
func (l *load) apply(ctx context.Context, user, target, id string) string {
	body := fmt.Sprintf(`{"operationId":%q,"targetKey":%q,"reason":"chaos run %s"}`, id, target, l.runID)
	sends := 0
	for ctx.Err() == nil {
		sends++
		status, data := l.c.call(ctx, "POST", "/api/apply", user, body)
		code := l.codeOf(data)
		switch {
		case sends < 60 && (status == 0 || status >= 500):
			l.tally.add("apply.resent_after_lost_or_5xx", 1)
			sleep(ctx, time.Duration(100+rand.IntN(400))*time.Millisecond)
			continue
		case sends < 60 && status == http.StatusConflict && code == "CONFLICT":
			// The key is held by a send whose instance was killed: "retry shortly" until its
			// lease runs out, then the resend runs (the ids here are never another request's).
			l.tally.add("apply.resent_after_409_pending", 1)
			sleep(ctx, time.Second)
			continue
		case status == http.StatusAccepted && (code == "ACCEPTED" || (code == "DUPLICATE_SUBMIT" && sends > 1)):
			l.mu.Lock()
			l.accepted = append(l.accepted, accepted{id, user})
			l.mu.Unlock()
			if rand.IntN(10) == 0 { // a double click, a reload: the same key again
				status, data := l.c.call(ctx, "POST", "/api/apply", user, body)
				if c := l.codeOf(data); status == http.StatusAccepted && c == "DUPLICATE_SUBMIT" {
					l.tally.add("apply.resubmit_replayed", 1)
				} else if status != 0 && status != http.StatusBadGateway {
					l.tally.add(fmt.Sprintf("apply.resubmit_unexpected_%d_%s", status, c), 1)
				}
			}
			return "ACCEPTED"
		default:
			return fmt.Sprintf("%d_%s", status, code)
		}
	}
	return "cancelled"
}

// user submits applications until the run's quota is used, spread over the load phase.
func (l *load) user(ctx context.Context, u int, pace time.Duration) {
	who := fmt.Sprintf("user%03d@chaos.example", u)
	targets := targetKeys(l.p.projects)
	for ctx.Err() == nil {
		n := l.next.Add(1)
		if n > int64(l.p.apps) {
			return
		}
		id := fmt.Sprintf("%s-%d", l.runID, n)
		outcome := l.apply(ctx, who, targets[rand.IntN(len(targets))], id)
		l.tally.add("apply."+outcome, 1)
		sleep(ctx, time.Duration(float64(pace)*(0.5+rand.Float64())))
	}
}

// revoker revokes some validated requests as their owners; a relation revoked and closed may
// be applied for again by the users.
func (l *load) revoker(ctx context.Context) {
	for ctx.Err() == nil {
		sleep(ctx, time.Duration(300+rand.IntN(700))*time.Millisecond)
		l.mu.Lock()
		if len(l.accepted) == 0 {
			l.mu.Unlock()
			continue
		}
		a := l.accepted[rand.IntN(len(l.accepted))]
		l.mu.Unlock()
		status, data := l.c.call(ctx, "GET", "/api/requests/"+a.id, a.user, "")
		var v struct {
			Status     string `json:"status"`
			NextAction string `json:"nextAction"`
		}
		if status != http.StatusOK || json.Unmarshal(data, &v) != nil || v.Status != "VALIDATED" || v.NextAction != "NONE" {
			continue
		}
		key := fmt.Sprintf("rv-%s", a.id)
		body := fmt.Sprintf(`{"operationId":%q,"reason":"chaos revoke"}`, key)
		for tries := 0; tries < 10 && ctx.Err() == nil; tries++ {
			status, data := l.c.call(ctx, "POST", "/api/requests/"+a.id+"/revoke", a.user, body)
			if status == 0 || status >= 500 {
				sleep(ctx, 200*time.Millisecond)
				continue
			}
			l.tally.add(fmt.Sprintf("revoke.%d_%s", status, l.codeOf(data)), 1)
			break
		}
	}
}

// rounds triggers batch rounds by hand as the operator, beside every instance's cron.
func (l *load) rounds(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		sleep(ctx, time.Duration(500+rand.IntN(1500))*time.Millisecond)
		body := fmt.Sprintf(`{"operationId":"round-%s-%d"}`, l.runID, i)
		status, _ := l.c.call(ctx, "POST", "/api/ops/batches/run", opsIdentity, body)
		l.tally.add(fmt.Sprintf("ops.round.%d", status), 1)
	}
}

// outsidePushes is how many commits a person pushes straight to the targets' branches during the
// load, spread over it: each lands beside the merge trains (internal/chaos/check_test.go mergedAsTested).
const outsidePushes = 12

// outsider pushes a person's commit to the main branch of a random project of the catalog now and
// then (the simulator's POST /sim/gitlab/push): the cars in CI must rebase and test again rather
// than merge beside it. A project bindery has not written to yet has no branch in the simulator
// (404): another project is tried a moment later.
func (l *load) outsider(ctx context.Context, simURL string) {
	hc := &http.Client{Timeout: 5 * time.Second}
	ps := projects(l.p.projects)
	for i := 0; i < outsidePushes && ctx.Err() == nil; {
		sleep(ctx, time.Duration(float64(l.p.load)/outsidePushes*(0.5+rand.Float64())))
		form := url.Values{"project": {ps[rand.IntN(len(ps))]}, "branch": {"main"},
			"path": {fmt.Sprintf("outside/%s-%d.txt", l.runID, i)}, "content": {"a person's change\n"}}
		resp, err := hc.PostForm(simURL+"/sim/gitlab/push", form)
		if err != nil {
			l.tally.add("outside.unanswered", 1)
			i++
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusNotFound {
			continue // no branch there yet
		}
		l.tally.add(fmt.Sprintf("outside.%d", resp.StatusCode), 1)
		i++
	}
}

// outsideDrifts is how many binding files of bindery's a person deletes or edits straight on
// the branch during the load phase (docs/drift.md): each is found by the drift check.
const outsideDrifts = 6

// outsideDrift is one such change: the file, the binding it belonged to, and what was done.
type outsideDrift struct {
	project, path, op, kind string // kind: missing (deleted) or changed (edited)
}

// drifter deletes or edits the file of a binding in effect (read from the database) now and
// then, as a person's hotfix or clean-up would, while the requests flow.
func (l *load) drifter(ctx context.Context, simURL string, db *sql.DB) {
	hc := &http.Client{Timeout: 5 * time.Second}
	for i := 0; i < outsideDrifts && ctx.Err() == nil; {
		sleep(ctx, time.Duration(float64(l.p.load)/outsideDrifts*(0.5+rand.Float64())))
		var subject, target, op, project string
		err := db.QueryRowContext(ctx, "SELECT b.subject_id, b.target_key, b.operation_id, o.project FROM binding b JOIN operation o ON o.operation_id = b.operation_id "+
			"WHERE b.status = 'VALIDATED' AND o.step = 10301 ORDER BY RAND() LIMIT 1").Scan(&subject, &target, &op, &project)
		if err != nil {
			continue // none in effect yet
		}
		d := outsideDrift{project: project, path: "bindings/" + target + "/" + subject + ".yaml", op: op, kind: "missing"}
		form := url.Values{"project": {project}, "branch": {"main"}, "path": {d.path}}
		if i%2 == 0 {
			form.Set("delete", "true")
		} else {
			d.kind = "changed"
			form.Set("content", "subject: "+subject+"\nedited: by a person, outside bindery\n")
		}
		resp, err := hc.PostForm(simURL+"/sim/gitlab/push", form)
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			continue // the file went meanwhile (a removal merged): another one
		}
		l.tally.add("drift.201", 1)
		l.mu.Lock()
		l.drifts = append(l.drifts, d)
		l.mu.Unlock()
		i++
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// scrape is one read of an instance's validated counter.
type scrape struct {
	instance  int
	validated float64
}

// validatedCounter sums bindery_requests_validated_total over its label sets.
func validatedCounter(url string) (float64, error) {
	return metricSum(url, "bindery_requests_validated_total")
}

// metricSum is the sum of every series of the metric name on an instance's /metrics.
func metricSum(url, name string) (float64, error) {
	hc := &http.Client{Timeout: 2 * time.Second}
	resp, err := hc.Get(url + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics: %d", resp.StatusCode)
	}
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line != name && !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("metrics line %q: %v", line, err)
		}
		sum += v
	}
	return sum, sc.Err()
}

// counterLedger keeps what the killed incarnations' validated counters said last, and the
// stretches of time ("blind windows", on the database clock) in which a kill may have lost
// counts: from just before the last scrape to just after the kill.
type counterLedger struct {
	mu      sync.Mutex
	scraped float64
	windows [][2]time.Time
	failed  int // scrapes that failed: their window opens at the incarnation's start
}

func dbNow(db *sql.DB) time.Time {
	var t time.Time
	if err := db.QueryRow("SELECT NOW(6)").Scan(&t); err != nil {
		return time.Time{}
	}
	return t
}

// killer kills a random instance at random moments and restarts it after a short pause.
type killer struct {
	t         *testing.T
	insts     []*instance
	dir, bin  string
	cfg       string
	db        *sql.DB
	ledger    *counterLedger
	kills     atomic.Int64
	restarts  atomic.Int64
	startedAt []time.Time // database clock at each incarnation's start, per instance
	restartMu sync.Mutex
	errs      []error
	// cfgMu is held while a cut-off config file is in place (cutConfig): a start then would
	// fail on it, as a first load must succeed.
	cfgMu sync.Mutex
}

// cutConfig writes the config file cut short (the first ~45 %: a deploy that copied half, an
// editor that truncated first) in the middle of the load, leaves it there for a few seconds,
// then the whole file again. Every live instance and the sim must refuse it (their reload error
// counter moves; the catalog, the secrets, the fault knobs stay); refused counts the instances
// whose counter moved.
func (k *killer) cutConfig(ctx context.Context, after time.Duration, full string) (refused, live int) {
	sleep(ctx, after)
	if ctx.Err() != nil {
		return 0, 0
	}
	k.cfgMu.Lock()
	defer k.cfgMu.Unlock()
	before := map[int]float64{}
	for _, in := range k.insts {
		if v, err := metricSum(in.url(), "bindery_config_reload_errors_total"); err == nil {
			before[in.idx] = v
		}
	}
	writeConfig(k.t, k.cfg, full[:len(full)*45/100])
	k.t.Logf("config file cut to %d of %d bytes", len(full)*45/100, len(full))
	sleep(context.Background(), 4*time.Second) // fsnotify, or the 2 s re-read
	for _, in := range k.insts {
		b, ok := before[in.idx]
		if !ok {
			continue
		}
		// An instance killed meanwhile (kills do not wait for this window; its restart does)
		// was not live through it: it neither refused nor took the cut file.
		v, err := metricSum(in.url(), "bindery_config_reload_errors_total")
		if err != nil {
			continue
		}
		live++
		if v > b {
			refused++
		}
	}
	writeConfig(k.t, k.cfg, full)
	return refused, live
}

func (k *killer) run(ctx context.Context, n int, every time.Duration) {
	for i := 0; i < n && ctx.Err() == nil; i++ {
		sleep(ctx, time.Duration(float64(every)*(0.5+rand.Float64())))
		if ctx.Err() != nil {
			return
		}
		in := k.insts[rand.IntN(len(k.insts))]
		p := in.current()
		from := dbNow(k.db).Add(-500 * time.Millisecond)
		v, err := validatedCounter(in.url())
		if err != nil {
			k.ledger.mu.Lock()
			k.ledger.failed++
			k.ledger.mu.Unlock()
			k.restartMu.Lock()
			from = k.startedAt[in.idx]
			k.restartMu.Unlock()
		}
		p.Kill()
		to := dbNow(k.db).Add(100 * time.Millisecond)
		k.kills.Add(1)
		k.ledger.mu.Lock()
		k.ledger.scraped += v
		k.ledger.windows = append(k.ledger.windows, [2]time.Time{from, to})
		k.ledger.mu.Unlock()
		k.t.Logf("kill %d: SIGKILL serve%d (pid %d), its validated counter read %v", i+1, in.idx, p.Pid(), v)
		sleep(ctx, time.Duration(1000+rand.IntN(2000))*time.Millisecond)
		k.restart(in)
	}
}

func (k *killer) restart(in *instance) {
	k.cfgMu.Lock()
	defer k.cfgMu.Unlock()
	k.restartMu.Lock()
	k.startedAt[in.idx] = dbNow(k.db)
	k.restartMu.Unlock()
	if err := in.start(k.dir, k.bin, k.cfg); err != nil {
		k.restartMu.Lock()
		k.errs = append(k.errs, err)
		k.restartMu.Unlock()
		return
	}
	k.restarts.Add(1)
}
