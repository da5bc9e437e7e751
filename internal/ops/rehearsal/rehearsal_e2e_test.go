//go:build e2e

package rehearsal

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"bindery/internal/testkit/proc"
)

// overlaid are the machine's directories the guide writes to. Each block runs in a private mount
// namespace where they are overlays over the machine's own, their changes kept in the test's
// directory: the commands run as written, and the machine is left as it was.
var overlaid = []string{"/etc", "/usr/local/bin", "/var/backups"}

// The install guide, followed as written: every marked block of docs/install.md runs in order in
// bash -euo pipefail, each seeing the variables and functions the blocks before it left, with
// the values of the guide's first blocks chosen for this machine (bindery sim as GitLab and the
// approval system, a MariaDB database and user of their own, a login proxy of the test's). The
// release is built, the database made with exactly the documented grants and migrated as its
// user, doctor fails on the webhook left out on purpose and passes once the guide's webhook block
// ran, two instances serve, a person signs in and applies, an approver approves, bindery merges,
// the shipped deploy job calls back and the request is in effect; a dump taken while the
// instances run is restored into a fresh database and the request is still in effect there.
func TestTheInstallGuideWorksWhenFollowedAsWritten(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := guideBlocks(filepath.Join(root, "docs/install.md"))
	if err != nil {
		t.Fatal(err)
	}
	guide := map[string]block{}
	var names []string
	for _, b := range blocks {
		guide[b.Name] = b
		names = append(names, b.Name)
	}
	if !slices.Equal(names, rehearsed) {
		t.Fatalf("docs/install.md marks %v, the rehearsal runs %v", names, rehearsed)
	}

	s := newSession(t, root)
	simAddr := freeAddr(t)
	login := newLoginProxy(t)
	suffix := randomHex(4)
	values := map[string]string{
		"BINDERY_URL":        login.URL,
		"GITLAB":             "http://" + simAddr + "/sim/gitlab",
		"GITLAB_ADMIN_TOKEN": "admin-" + randomHex(16),
		"PROJECT":            "infra/access-config",
		"APPROVAL_URL":       "http://" + simAddr + "/sim/approval",
		"DB_HOST":            "127.0.0.1",
		"DB_NAME":            "bindery_rehearsal_" + suffix,
		"DB_USER":            "rehearsal_" + suffix,
		"DB_PASSWORD":        randomHex(24),
		// The accounts of step 3, as the simulator names them, with tokens it accepts.
		"BOT_USER":        "bindery-bot",
		"BOT_TOKEN":       "bot-" + randomHex(16),
		"REVIEWER_USERS":  "reviewer-1 reviewer-2",
		"REVIEWER_TOKENS": "rev1-" + randomHex(16) + ", rev2-" + randomHex(16),
	}
	t.Cleanup(func() { dropDatabases(t, values) })
	for _, name := range []string{"values", "accounts"} {
		for _, v := range exports(guide[name].Script) {
			if _, ok := values[v]; !ok {
				t.Fatalf("the guide's %s block sets %s, which the rehearsal does not choose", name, v)
			}
		}
	}
	for k, v := range values {
		s.env = append(s.env, k+"="+v)
	}

	s.mustRun("release")
	bin := filepath.Join(s.upper("/usr/local/bin"), "bindery")
	if out, err := exec.Command(bin, "version").CombinedOutput(); err != nil || strings.Contains(string(out), "not a release build") {
		t.Fatalf("the installed binary: %v\n%s", err, out)
	}
	s.mustRun("database")
	s.mustRun("config")
	configFile := filepath.Join(s.upper("/etc"), "bindery/config.yaml")

	// bindery sim stands in for GitLab (with the administrator of GITLAB_ADMIN_TOKEN), the
	// approval system and the runner of the project's pipeline; it shares the secrets of the
	// configuration the guide wrote, as the real systems would after the steps above.
	cfg, err := os.ReadFile(configFile)
	if err != nil {
		t.Fatal(err)
	}
	simConfig := filepath.Join(s.work, "sim.yaml")
	if err := os.WriteFile(simConfig, append(cfg, []byte("sim:\n  gitlab:\n    pipelineDuration: 2s\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	simProc, err := proc.Start(ctx, s.work, nil, "sim", bin, "sim", "-addr", simAddr, "-config", simConfig, "-run-jobs", "-admin-token", values["GITLAB_ADMIN_TOKEN"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(simProc.Stop)
	if err := proc.WaitReady(ctx, simProc, "http://"+simAddr+"/healthz", time.Minute); err != nil {
		t.Fatal(err)
	}

	s.mustRun("members")
	s.mustRun("deploy-job")
	s.mustRun("protect")
	// doctor with the webhook left out: it fails on that line alone.
	out, err := s.run(guide["check"])
	if err == nil {
		t.Fatalf("doctor passed without the project webhook:\n%s", out)
	}
	if fails := failLines(out); len(fails) != 1 || !strings.Contains(fails[0], "webhook") {
		t.Fatalf("doctor without the webhook: want one FAIL line, on the webhook; got %q\n%s", fails, out)
	}
	// The block's migrate ran first, as the user of step 2: its grants carry every migration.
	if !regexp.MustCompile(`applied [1-9][0-9]* migration\(s\)`).MatchString(out) {
		t.Fatalf("bindery migrate did not migrate the new database as its user:\n%s", out)
	}
	s.mustRun("webhook")
	out = s.mustRun("check")
	if len(failLines(out)) > 0 {
		t.Fatalf("doctor failed:\n%s", out)
	}
	t.Logf("doctor, once the webhook is there:\n%s", out)

	// Two instances, as the guide starts them, behind the login proxy.
	instances := s.startInstances(ctx, guide["instances"])
	login.serve(instances...)

	alice := login.signIn(t, "alice@example.com")
	op := "rehearsal-" + suffix
	if code, body := do(t, alice, "POST", login.URL+"/api/apply", fmt.Sprintf(`{"operationId":%q,"targetKey":"db-readonly","reason":"on call this week"}`, op)); code != http.StatusAccepted {
		t.Fatalf("apply: %d %s", code, body)
	}
	ticket := waitTicket(ctx, t, simAddr, op)
	if code, body := do(t, http.DefaultClient, "POST", "http://"+simAddr+"/sim/approvals/"+ticket+"/decide", `{"decision":"APPROVED","decidedBy":"approver@example.com","comment":"ok"}`); code != http.StatusOK {
		t.Fatalf("approve ticket %s: %d %s", ticket, code, body)
	}
	waitStatus(ctx, t, alice, login.URL, op, "VALIDATED", 4*time.Minute, instances...)
	// In effect through the deploy job the guide committed: the simulator has no deploy
	// callback of its own when the project's pipeline runs jobs.
	checkDeployJob(t, simAddr)

	// A dump while the instances run, then the restore: every instance stopped, the dump loaded
	// into a fresh database, the configuration pointed at it. The old database goes, so the
	// instance started next can only be reading the restored one.
	s.mustRun("backup")
	for _, p := range instances {
		p.proc.Stop()
	}
	s.mustRun("restore")
	mariadb(t, fmt.Sprintf("DROP DATABASE `%s`", values["DB_NAME"]))
	restored := s.startInstances(ctx, guide["instances"])[:1]
	login.serve(restored...)
	waitStatus(ctx, t, alice, login.URL, op, "VALIDATED", time.Minute, restored...)
}

// ---- the shell ----

// session runs the guide's blocks, one bash each, carrying the variables and functions they
// set from one to the next, as one terminal would.
type session struct {
	t     *testing.T
	root  string   // the checkout: the guide's commands run there (go run ./cmd/release, deploy/…)
	work  string   // the overlays' changes, the carried shell state, logs
	env   []string // the values chosen for the guide's variables
	state string
}

func newSession(t *testing.T, root string) *session {
	s := &session{t: t, root: root, work: t.TempDir()}
	s.state = filepath.Join(s.work, "shell-state.sh")
	if err := os.WriteFile(s.state, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range overlaid {
		for _, sub := range []string{"upper", "work"} {
			if err := os.MkdirAll(filepath.Join(s.overlay(d), sub), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	return s
}

func (s *session) overlay(dir string) string {
	return filepath.Join(s.work, "overlay", strings.ReplaceAll(strings.Trim(dir, "/"), "/", "-"))
}

// upper is where what the guide wrote under dir lies on the machine.
func (s *session) upper(dir string) string { return filepath.Join(s.overlay(dir), "upper") }

// namespaced is a command running script in a new mount namespace with the overlays mounted.
func (s *session) namespaced(script string) (string, []string) {
	var b strings.Builder
	b.WriteString("set -e\n")
	for _, d := range overlaid {
		fmt.Fprintf(&b, "mount -t overlay overlay -o lowerdir=%s,upperdir=%s/upper,workdir=%s/work %s\n", d, s.overlay(d), s.overlay(d), d)
	}
	b.WriteString(script)
	return "unshare", []string{"--mount", "--propagation", "private", "bash", "-c", b.String()}
}

// saveState writes the shell's variables (not bash's own, nor read-only ones) and functions.
const saveState = `__save() {
  { declare -p | grep -Ev '^declare -[a-zA-Z-]*r[a-zA-Z]* |^declare -[a-zA-Z-]+ (BASH[A-Z_]*|PIPESTATUS|FUNCNAME|GROUPS|RANDOM|SRANDOM|SECONDS|LINENO|HISTCMD|EPOCHREALTIME|EPOCHSECONDS|DIRSTACK|COMP_[A-Z_]*|OPTIND|OPTARG|PWD|OLDPWD|SHLVL|_)(=|$)'
    declare -f; } > %q
}
trap __save EXIT
`

// run runs one block as written and returns what it printed.
func (s *session) run(b block) (string, error) {
	script := fmt.Sprintf("source %q\n", s.state) + fmt.Sprintf(saveState, s.state) + "set -euo pipefail\ncd " + shellQuote(s.root) + "\n" + b.Script
	name, args := s.namespaced(script)
	cmd := exec.Command(name, args...)
	cmd.Env = append(append(os.Environ(), "PATH=/usr/local/bin:"+os.Getenv("PATH")), s.env...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	s.t.Logf("block %s (docs/install.md:%d) in %s", b.Name, b.Line, time.Since(start).Round(time.Millisecond))
	return string(out), err
}

// mustRun runs the guide's block name and fails the test when it fails.
func (s *session) mustRun(name string) string {
	s.t.Helper()
	b, err := guideBlocks(filepath.Join(s.root, "docs/install.md"))
	if err != nil {
		s.t.Fatal(err)
	}
	for _, blk := range b {
		if blk.Name == name {
			out, err := s.run(blk)
			if err != nil {
				s.t.Fatalf("docs/install.md block %s (line %d) failed: %v\n%s\n--- the block:\n%s", name, blk.Line, err, out, blk.Script)
			}
			return out
		}
	}
	s.t.Fatalf("docs/install.md has no block %s", name)
	return ""
}

// instance is one bindery serve the guide started.
type instance struct {
	addr string
	proc *proc.Process
}

// startInstances starts the guide's instances block, one process per line, each on a free
// address of this machine instead of the guide's 127.0.0.1:808N (other servers may hold those
// here), in the namespace where the guide installed the binary and wrote the configuration.
func (s *session) startInstances(ctx context.Context, b block) []instance {
	s.t.Helper()
	addrs := regexp.MustCompile(`127\.0\.0\.1:\d+`)
	var out []instance
	for _, line := range strings.Split(strings.TrimSpace(b.Script), "\n") {
		line = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(line), "&"))
		if !strings.HasPrefix(line, "bindery serve ") || !addrs.MatchString(line) {
			s.t.Fatalf("the instances block has a line the rehearsal cannot start: %q", line)
		}
		addr := freeAddr(s.t)
		name, args := s.namespaced("export PATH=/usr/local/bin:$PATH\nexec " + addrs.ReplaceAllString(line, addr) + "\n")
		p, err := proc.Start(ctx, s.work, nil, "serve-"+addr, name, args...)
		if err != nil {
			s.t.Fatal(err)
		}
		s.t.Cleanup(p.Stop)
		if err := proc.WaitReady(ctx, p, "http://"+addr+"/readyz", time.Minute); err != nil {
			s.t.Fatal(err)
		}
		out = append(out, instance{addr: addr, proc: p})
	}
	return out
}

func failLines(out string) []string {
	var fails []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "FAIL ") {
			fails = append(fails, l)
		}
	}
	return fails
}

// ---- signing in ----

// loginProxy stands in for oauth2-proxy and the TLS terminator of step 7: it signs a person in
// (as oauth2-proxy does once the identity provider's page said who they are), sends their
// requests on with X-Forwarded-User, passes /hooks/ and the health checks without a sign-in,
// and spreads requests over the instances. When bindery signs people in itself (OpenID
// Connect), signIn becomes that flow and the proxy only spreads requests.
type loginProxy struct {
	URL      string
	mu       sync.Mutex
	backends []*url.URL
	next     atomic.Int64
	sessions sync.Map // cookie value → who
}

func newLoginProxy(t *testing.T) *loginProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &loginProxy{URL: "http://" + ln.Addr().String()}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return p
}

func (p *loginProxy) serve(instances ...instance) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.backends = nil
	for _, in := range instances {
		p.backends = append(p.backends, &url.URL{Scheme: "http", Host: in.addr})
	}
}

func (p *loginProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/oauth2/sign_in" {
		cookie := randomHex(16)
		p.sessions.Store(cookie, r.URL.Query().Get("user"))
		http.SetCookie(w, &http.Cookie{Name: "_oauth2_proxy", Value: cookie, Path: "/", HttpOnly: true})
		w.WriteHeader(http.StatusNoContent)
		return
	}
	for _, h := range []string{"X-Forwarded-User", "X-Forwarded-Email", "X-Forwarded-For"} {
		r.Header.Del(h)
	}
	open := strings.HasPrefix(r.URL.Path, "/hooks/") || r.URL.Path == "/healthz" || r.URL.Path == "/readyz"
	if !open {
		c, err := r.Cookie("_oauth2_proxy")
		var who any
		if err == nil {
			who, _ = p.sessions.Load(c.Value)
		}
		if who == nil {
			http.Error(w, "sign in first", http.StatusUnauthorized)
			return
		}
		r.Header.Set("X-Forwarded-User", who.(string))
		r.Header.Set("X-Forwarded-Email", who.(string))
	}
	p.mu.Lock()
	backends := p.backends
	p.mu.Unlock()
	if len(backends) == 0 {
		http.Error(w, "no instance yet", http.StatusBadGateway)
		return
	}
	target := backends[int(p.next.Add(1))%len(backends)]
	(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target); pr.Out.Host = pr.In.Host }}).ServeHTTP(w, r)
}

// signIn is a person's browser after signing in: a client whose requests carry the session.
func (p *loginProxy) signIn(t *testing.T, who string) *http.Client {
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	resp, err := c.Get(p.URL + "/oauth2/sign_in?user=" + url.QueryEscape(who))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("sign in: %d", resp.StatusCode)
	}
	return c
}

// ---- the person, the approver, the deploy ----

func do(t *testing.T, c *http.Client, method, u, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// waitTicket waits for the approval system's ticket of op and returns its id.
func waitTicket(ctx context.Context, t *testing.T, simAddr, op string) string {
	t.Helper()
	for {
		_, body := do(t, http.DefaultClient, "GET", "http://"+simAddr+"/sim/approvals", "")
		var inbox struct {
			Items []struct {
				ID          string `json:"id"`
				OperationID string `json:"operationId"`
			} `json:"items"`
		}
		json.Unmarshal([]byte(body), &inbox)
		for _, tk := range inbox.Items {
			if tk.OperationID == op {
				return tk.ID
			}
		}
		if wait(ctx, 200*time.Millisecond) != nil {
			t.Fatalf("no approval ticket for %s: %s", op, body)
		}
	}
}

// waitStatus waits until the person sees op in status.
func waitStatus(ctx context.Context, t *testing.T, c *http.Client, base, op, status string, within time.Duration, instances ...instance) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last string
	for {
		code, body := do(t, c, "GET", base+"/api/requests/"+op, "")
		var v struct {
			Status string `json:"status"`
			Label  string `json:"label"`
		}
		if code == http.StatusOK && json.Unmarshal([]byte(body), &v) == nil && v.Status == status {
			return
		}
		last = fmt.Sprintf("%d %s", code, body)
		if wait(ctx, 500*time.Millisecond) != nil {
			var logs []string
			for _, in := range instances {
				logs = append(logs, in.addr+":\n"+in.proc.Tail(40))
			}
			t.Fatalf("%s did not reach %s within %s; last: %s\n%s", op, status, within, last, strings.Join(logs, "\n"))
		}
	}
}

// checkDeployJob: the merge's branch pipeline ran the guide's deploy job, and bindery took its
// callback.
func checkDeployJob(t *testing.T, simAddr string) {
	t.Helper()
	_, body := do(t, http.DefaultClient, "GET", "http://"+simAddr+"/sim/deploys", "")
	var deploys struct {
		Items []struct {
			Project string `json:"project"`
			Status  string `json:"status"`
			Job     string `json:"job"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(body), &deploys); err != nil || len(deploys.Items) == 0 {
		t.Fatalf("deploys: %v %s", err, body)
	}
	d := deploys.Items[0]
	if d.Status != "SENT" || !strings.Contains(d.Job, "bindery-deploy-callback") {
		t.Fatalf("the merge's pipeline: %s, job output:\n%s", d.Status, d.Job)
	}
}

func wait(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// ---- the machine ----

func freeAddr(t *testing.T) string {
	a, err := proc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func mariadb(t *testing.T, sql string) {
	t.Helper()
	if out, err := exec.Command("mariadb", "-h127.0.0.1", "-uroot", "-e", sql).CombinedOutput(); err != nil {
		t.Fatalf("mariadb %q: %v\n%s", sql, err, out)
	}
}

func dropDatabases(t *testing.T, v map[string]string) {
	for _, sql := range []string{
		fmt.Sprintf("DROP DATABASE IF EXISTS `%s`", v["DB_NAME"]),
		fmt.Sprintf("DROP DATABASE IF EXISTS `%s_restored`", v["DB_NAME"]),
		fmt.Sprintf("DROP USER IF EXISTS '%s'@'%%'", v["DB_USER"]),
	} {
		if out, err := exec.Command("mariadb", "-h127.0.0.1", "-uroot", "-e", sql).CombinedOutput(); err != nil {
			t.Errorf("clean up: %s: %v\n%s", sql, err, out)
		}
	}
}
