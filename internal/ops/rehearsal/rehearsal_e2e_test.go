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

	"bindery/internal/sim"
	"bindery/internal/testkit/proc"
)

// overlaid are the machine's directories the guide writes to. Each block runs in a private mount
// namespace where they are overlays over the machine's own, their changes kept in the test's
// directory: the commands run as written, and the machine is left as it was.
var overlaid = []string{"/etc", "/usr/local/bin", "/var/backups"}

// The install guide, followed as written: every marked block of docs/install.md runs in order in
// bash -euo pipefail, each seeing the variables and functions the blocks before it left, except
// the blocks that only export the values an operator chooses (values, accounts, signin): those
// are chosen for this machine instead (bindery sim as GitLab, the approval system and the
// identity provider, a MariaDB database and user of their own, a load balancer of the test's in
// front). The release is built, the database made with exactly the
// documented grants and migrated as its user, doctor fails on the webhook left out on purpose and
// passes once the guide's webhook block ran, two instances serve, a person signs in with OpenID
// Connect's code flow (the session one instance made is good on the other), applies, an approver
// approves, bindery merges, the shipped deploy job calls back and the request is in effect; a dump
// taken while the instances run is restored into a fresh database and the request — and the
// person's session — is still there.
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
	front := newFront(t)
	suffix := randomHex(4)
	values := map[string]string{
		"BINDERY_URL":        front.URL,
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
		// Step 4's registration at the identity provider: the simulator's knows the client the
		// configuration names, returning to server.publicURL + /auth/callback, as registered.
		"OIDC_ISSUER":        "http://" + simAddr + "/sim/oidc",
		"OIDC_CLIENT_ID":     "bindery",
		"OIDC_CLIENT_SECRET": randomHex(24),
	}
	t.Cleanup(func() { dropDatabases(t, values) })
	for _, name := range []string{"values", "accounts", "signin"} {
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
	// approval system, the runner of the project's pipeline and the identity provider; it shares
	// the secrets of the configuration the guide wrote, as the real systems would after the steps
	// above.
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
	if want := "ok    sign-in: OIDC " + values["OIDC_ISSUER"] + ": discovered"; !strings.Contains(out, want) {
		t.Fatalf("doctor did not find the identity provider of step 4 (%q):\n%s", want, out)
	}
	t.Logf("doctor, once the webhook is there:\n%s", out)

	// Two instances, as the guide starts them, behind the load balancer.
	instances := s.startInstances(ctx, guide["instances"])
	front.serve(instances...)

	alice := signIn(ctx, t, front, instances, "alice@example.com")
	op := "rehearsal-" + suffix
	if code, body := do(t, alice, "POST", front.URL+"/api/apply", fmt.Sprintf(`{"operationId":%q,"targetKey":"db-readonly","reason":"on call this week"}`, op)); code != http.StatusAccepted {
		t.Fatalf("apply: %d %s", code, body)
	}
	ticket := waitTicket(ctx, t, simAddr, op)
	if code, body := do(t, http.DefaultClient, "POST", "http://"+simAddr+"/sim/approvals/"+ticket+"/decide", `{"decision":"APPROVED","decidedBy":"approver@example.com","comment":"ok"}`); code != http.StatusOK {
		t.Fatalf("approve ticket %s: %d %s", ticket, code, body)
	}
	waitStatus(ctx, t, alice, front.URL, op, "VALIDATED", 4*time.Minute, instances...)
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
	front.serve(restored...)
	waitStatus(ctx, t, alice, front.URL, op, "VALIDATED", time.Minute, restored...)
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

// ---- in front, and signing in ----

// front stands in for the TLS terminator of step 8 (without TLS): one address for the guide's
// $BINDERY_URL, spreading requests over the instances in turn, passing every header through. It
// remembers which instance answered each path last, so that the test can name where a session
// was made.
type front struct {
	URL      string
	mu       sync.Mutex
	backends []*url.URL
	next     atomic.Int64
	served   sync.Map // path → the instance's address that answered it last
}

func newFront(t *testing.T) *front {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &front{URL: "http://" + ln.Addr().String()}
	srv := &http.Server{Handler: f, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return f
}

func (f *front) serve(instances ...instance) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.backends = nil
	for _, in := range instances {
		f.backends = append(f.backends, &url.URL{Scheme: "http", Host: in.addr})
	}
}

func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	backends := f.backends
	f.mu.Unlock()
	if len(backends) == 0 {
		http.Error(w, "no instance yet", http.StatusBadGateway)
		return
	}
	target := backends[int(f.next.Add(1))%len(backends)]
	f.served.Store(r.URL.Path, target.Host)
	(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target); pr.Out.Host = pr.In.Host }}).ServeHTTP(w, r)
}

// signIn is a person signing in as the guide sets it up: the login header, which a proxy in
// front could set, is not believed; the authorization code flow through $BINDERY_URL — to the
// provider of step 4 and back to $BINDERY_URL/auth/callback, as registered — starts a session;
// and that session, made on the instance that took the callback, is good on every instance, asked
// directly. It returns the person's browser: a client whose cookie jar holds the session.
func signIn(ctx context.Context, t *testing.T, f *front, instances []instance, who string) *http.Client {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", f.URL+"/api/me", nil)
	req.Header.Set("X-Forwarded-User", who)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("with identity.oidc set, the login header must not sign anybody in: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	if err := sim.SignIn(ctx, c, f.URL, "/requests", who); err != nil {
		t.Fatal(err)
	}
	madeOn, _ := f.served.Load("/auth/callback")
	others := 0
	for _, in := range instances {
		code, body := do(t, c, "GET", "http://"+in.addr+"/api/me", "")
		if code != http.StatusOK || !strings.Contains(body, fmt.Sprintf(`"identity":%q`, who)) {
			t.Fatalf("the session made on %v, asked at %s: %d %s", madeOn, in.addr, code, body)
		}
		if in.addr != madeOn {
			others++
			t.Logf("the session of %s made on %v is good on %s", who, madeOn, in.addr)
		}
	}
	if madeOn == nil || others != len(instances)-1 || others == 0 {
		t.Fatalf("the session was made on %v, not on one of several instances", madeOn)
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
