package doctor_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"bindery/internal/ops/doctor"
	"bindery/internal/platform/config"
	"bindery/internal/sim"
	"bindery/internal/work/notify"
	"bindery/schema"
	"bindery/store"
	"bindery/store/storetest"
)

const project = "infra/access-config"

// setup is a clean deployment: MariaDB migrated, the simulators as GitLab (the bot a Maintainer,
// two reviewers, the branch protected so that only Maintainers merge and nobody pushes, a CI
// file, the webhook), the approval system and the permission service.
type setup struct {
	sims   *sim.Sims
	srv    *httptest.Server
	dsn    string
	public string
	over   map[string]string // config lines replaced by a case (key prefix → line)
	extra  []string          // config lines added by a case ("section.key: value")
	send   bool              // -send-test
}

func newSetup(t *testing.T) *setup {
	t.Helper()
	s := &setup{dsn: storetest.MigratedDSN(t, store.MySQL), public: "https://bindery.example.com", over: map[string]string{}}
	storetest.Open(t, s.dsn, store.Options{}) // migrated
	s.sims = sim.New(sim.Options{Config: config.NewStatic(config.MustParse(s.yaml("http://sim.invalid")))})
	s.srv = httptest.NewServer(s.sims.Handler())
	t.Cleanup(s.srv.Close)
	g := s.sims.GitLab
	g.SetFaults(sim.GitLabFaults{MergeMethod: config.MergeMethodFF})
	g.Protect(project, "main", sim.NoAccess, sim.Maintainer, nil, nil)
	if _, err := g.PushToBranch(project, "main", ".gitlab-ci.yml", "test:\n  script: [make test]\n"); err != nil {
		t.Fatal(err)
	}
	g.AddHook(project, s.public+"/hooks/gitlab", "gitlab-hook-secret-0123456789")
	return s
}

func (s *setup) yaml(base string) string {
	lines := []string{
		"server.publicURL: " + s.public,
		"database.dsn: " + s.dsn,
		"gitlab.baseURL: " + base + "/sim/gitlab",
		"gitlab.botToken: bot-token",
		"gitlab.reviewerTokens: [reviewer-token-1, reviewer-token-2]",
		"approvalSystem.url: " + base + "/sim/approval",
		"permission.url: " + base + "/sim/permission",
		"hooks.deployToken: deploy-token-0123456789abcdef",
		"hooks.gitlabToken: gitlab-hook-secret-0123456789",
		"hooks.approvalSecret: approval-secret-0123456789abc",
		"server.trustedProxies: [127.0.0.1/32]",
	}
	lines = append(lines, s.extra...)
	var b strings.Builder
	var order []string
	sections := map[string][]string{}
	for _, l := range lines {
		key, value, _ := strings.Cut(l, ": ")
		if o, ok := s.over[key]; ok {
			if o == "" {
				continue
			}
			value = o
		}
		section, name, _ := strings.Cut(key, ".")
		if sections[section] == nil {
			order = append(order, section)
		}
		sections[section] = append(sections[section], fmt.Sprintf("  %s: %s\n", name, value))
	}
	for _, sec := range order {
		b.WriteString(sec + ":\n" + strings.Join(sections[sec], ""))
	}
	b.WriteString("targets:\n  - {key: db-readonly, title: DB read-only, project: " + project + ", branch: main, path: \"b/{subject}.yaml\"}\n")
	return b.String()
}

// run writes the configuration and runs doctor.
func (s *setup) run(t *testing.T) doctor.Report {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(s.yaml(s.srv.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := doctor.Run(context.Background(), doctor.Options{ConfigPath: path, Schema: schema.FS, HTTPClient: s.srv.Client(), SendTest: s.send})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func text(r doctor.Report) string {
	var b bytes.Buffer
	_ = r.WriteText(&b)
	return b.String()
}

func TestACleanSetupPasses(t *testing.T) {
	s := newSetup(t)
	r := s.run(t)
	if r.Failed() {
		t.Fatalf("a clean setup failed:\n%s", text(r))
	}
	out := text(r)
	for _, want := range []string{
		"ok    database: privileges", "ok    database: migrations: all applied", "ok    database: clock",
		"ok    gitlab: bot token: user bindery-bot, scopes [api]", "ok    gitlab: accounts",
		"ok    gitlab: " + project + ": branch main: protected; the bot may merge", "ok    gitlab: " + project + ": pipelines",
		"ok    gitlab: " + project + ": merge method: ff", "ok    gitlab: " + project + ": webhook",
		"ok    approval system", "ok    permission service", "ok    sign-in",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	// It wrote nothing to GitLab: every call that reached the simulator was a read.
	for endpoint, n := range s.sims.GitLab.Usage().Calls {
		write := slices.Contains([]string{"merge", "approve", "unapprove", "rebase"}, endpoint)
		for _, prefix := range []string{"create_", "add_", "delete_", "update_", "protect_", "unprotect_", "retry_"} {
			write = write || strings.HasPrefix(endpoint, prefix)
		}
		if write && n > 0 {
			t.Errorf("doctor called %s %d times", endpoint, n)
		}
	}
}

// Each broken item alone gives its FAIL line, and the report fails (bindery doctor exits 1).
func TestEachBrokenItemAloneGivesItsFailLine(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(t *testing.T, s *setup)
		want   string
	}{
		{"the database cannot be reached", func(t *testing.T, s *setup) {
			s.over["database.dsn"] = "mysql://root@tcp(127.0.0.1:1)/none?timeout=1s"
		}, "FAIL  database: connection"},
		{"the database user lacks ALTER", func(t *testing.T, s *setup) { s.over["database.dsn"] = limitedUser(t, s.dsn) },
			"FAIL  database: privileges: the user lacks CREATE, ALTER, INDEX"},
		{"the schema is newer than the binary", func(t *testing.T, s *setup) {
			raw(t, s.dsn, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, '9999_future.sql', 'x')")
		}, "FAIL  database: migrations: the schema is at 9999"},
		{"the bot token is wrong", func(t *testing.T, s *setup) { s.over["gitlab.botToken"] = "nobody" },
			"FAIL  gitlab: bot token: gitlab.botToken is refused by GitLab (401)"},
		{"the bot token cannot write", func(t *testing.T, s *setup) {
			s.sims.GitLab.SetUser(sim.BotUsername, func(u *sim.User) { u.Scopes = []string{"read_api"} })
		}, "FAIL  gitlab: bot token: user bindery-bot, scopes [read_api]"},
		{"a reviewer token is the bot's", func(t *testing.T, s *setup) { s.over["gitlab.reviewerTokens"] = "[bot-token, reviewer-token-2]" },
			"FAIL  gitlab: reviewer 1: is bindery-bot, the same account as the bot"},
		{"the bot may not merge into the protected branch", func(t *testing.T, s *setup) {
			s.sims.GitLab.SetUser(sim.BotUsername, func(u *sim.User) { u.AccessLevel = sim.Developer })
		}, "FAIL  gitlab: " + project + ": branch main: protected, and bindery-bot (Developer) may not merge"},
		{"the webhook is missing", func(t *testing.T, s *setup) { s.public = "https://elsewhere.example.com" },
			"FAIL  gitlab: " + project + ": webhook: no webhook to https://elsewhere.example.com/hooks/gitlab — add a project webhook"},
		{"the approval system is down", func(t *testing.T, s *setup) { s.over["approvalSystem.url"] = "http://127.0.0.1:1" },
			"FAIL  approval system"},
		{"the permission service is down", func(t *testing.T, s *setup) { s.over["permission.url"] = "http://127.0.0.1:1" },
			"FAIL  permission service"},
		{"the deploy callback token is not set", func(t *testing.T, s *setup) { s.over["hooks.deployToken"] = "\"\"" },
			"FAIL  callbacks: hooks.deployToken: not set"},
		{"nobody can sign in", func(t *testing.T, s *setup) { s.over["server.trustedProxies"] = "[]" },
			"FAIL  sign-in: no identity.oidc.issuer and no server.trustedProxies"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSetup(t)
			tc.break_(t, s)
			r := s.run(t)
			out := text(r)
			if !r.Failed() || !strings.Contains(out, tc.want) {
				t.Fatalf("want a failure with %q:\n%s", tc.want, out)
			}
			if n := strings.Count(out, "\nFAIL") + map[bool]int{true: 1}[strings.HasPrefix(out, "FAIL")]; n != 1 {
				t.Errorf("%d FAIL lines, want exactly one (the broken item):\n%s", n, out)
			}
		})
	}
}

func TestAProjectWithoutCIFails(t *testing.T) {
	s := newSetup(t)
	s.sims.GitLab.CreateProject("infra/no-ci", "main")
	s.sims.GitLab.Protect("infra/no-ci", "main", sim.NoAccess, sim.Maintainer, nil, nil)
	s.sims.GitLab.AddHook("infra/no-ci", s.public+"/hooks/gitlab", "x")
	path := filepath.Join(t.TempDir(), "config.yaml")
	cfg := s.yaml(s.srv.URL) + "  - {key: other, title: Other, project: infra/no-ci, branch: main, path: \"o/{subject}.yaml\"}\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := doctor.Run(context.Background(), doctor.Options{ConfigPath: path, Schema: schema.FS, HTTPClient: s.srv.Client(), SendTest: s.send})
	if err != nil {
		t.Fatal(err)
	}
	if out := text(r); !r.Failed() || !strings.Contains(out, "FAIL  gitlab: infra/no-ci: pipelines: no .gitlab-ci.yml on main") {
		t.Fatalf("want the missing CI file named:\n%s", out)
	}
}

// A target whose project GitLab does not show the bot (absent, or the bot no member of it) is
// named as such: GitLab answers 404 for both.
func TestATargetsProjectGitLabDoesNotShowFails(t *testing.T) {
	s := newSetup(t)
	path := filepath.Join(t.TempDir(), "config.yaml")
	cfg := s.yaml(s.srv.URL) + "  - {key: gone, title: Gone, project: infra/gone, branch: main, path: \"g/{subject}.yaml\"}\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := doctor.Run(context.Background(), doctor.Options{ConfigPath: path, Schema: schema.FS, HTTPClient: s.srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	if fails := failures(r); len(fails) != 1 || !strings.HasPrefix(fails[0], "FAIL  gitlab: infra/gone: not found (or the bot is not a member)") {
		t.Fatalf("FAIL lines %q:\n%s", fails, text(r))
	}
}

// With merge commits, a branch that anyone but the bot may write to while bindery merges is a
// warning — each way alone: pushing, force-pushing, merging (a role, or another user by name),
// no protection at all. Only the bot pushing nothing and merging alone passes.
func TestMergeCommitsOnABranchOthersMayWriteToWarn(t *testing.T) {
	for _, tc := range []struct {
		name    string
		protect func(g *sim.GitLab)
		reason  string // "": no warning
	}{
		{"only the bot merges, nobody pushes", func(g *sim.GitLab) {}, ""},
		{"Maintainers may push", func(g *sim.GitLab) {
			g.Protect(project, "main", sim.Maintainer, sim.NoAccess, nil, []string{sim.BotUsername})
		}, "Maintainers may push"},
		{"force pushes are allowed", func(g *sim.GitLab) { g.AllowForcePush(project, "main", true) }, "force pushes are allowed"},
		{"Maintainers may merge", func(g *sim.GitLab) {
			g.Protect(project, "main", sim.NoAccess, sim.Maintainer, nil, nil)
		}, "Maintainers may merge"},
		{"a person may merge", func(g *sim.GitLab) {
			g.Protect(project, "main", sim.NoAccess, sim.NoAccess, nil, []string{sim.BotUsername, sim.ReviewerUsername(0)})
		}, "Reviewer 1 may merge"},
		{"the branch is not protected", func(g *sim.GitLab) { g.Unprotect(project, "main") }, "it is not protected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSetup(t)
			g := s.sims.GitLab
			g.SetFaults(sim.GitLabFaults{MergeMethod: config.MergeMethodMerge})
			g.Protect(project, "main", sim.NoAccess, sim.NoAccess, nil, []string{sim.BotUsername})
			tc.protect(g)
			r := s.run(t)
			out := text(r)
			if r.Failed() {
				t.Fatalf("a warning, never a failure:\n%s", out)
			}
			want := "ok    gitlab: " + project + ": merge method: merge\n"
			if tc.reason != "" {
				want = "warn  gitlab: " + project + ": merge method: merge commits, and others may write to main (" + tc.reason + "): a commit that lands there while bindery merges"
			}
			if !strings.Contains(out, want) {
				t.Fatalf("want %q:\n%s", want, out)
			}
		})
	}
}

// With identity.oidc set, doctor reads the provider as sign-in does: the issuer is compared
// with the discovery document's as written, so a trailing slash the provider does not write is
// the FAIL that every sign-in would be (not an ok); an impostor, signing keys that cannot be read
// and a missing client id are each one FAIL line.
func TestSignInWithOIDCIsCheckedAsSignInReadsTheProvider(t *testing.T) {
	for _, tc := range []struct {
		name   string
		oidc   func(issuer string) string
		break_ func(s *setup)
		want   string
	}{
		{"the provider as it names itself", func(iss string) string { return "{issuer: " + iss + ", clientID: bindery}" }, nil,
			"ok    sign-in: OIDC %s: discovered, 1 signing key(s); register the redirect URL https://bindery.example.com/auth/callback for client bindery"},
		{"a trailing slash the provider does not write", func(iss string) string { return "{issuer: " + iss + "/, clientID: bindery}" }, nil,
			`FAIL  sign-in: OIDC %[1]s/: oidc: issuer URL provided to client ("%[1]s/") did not match the issuer URL returned by provider ("%[1]s") — set identity.oidc.issuer to exactly`},
		{"an impostor", func(iss string) string { return "{issuer: " + iss + ", clientID: bindery}" },
			func(s *setup) { s.sims.OIDC.SetFaults(sim.OIDCFaults{DiscoveryIssuer: "https://impostor.example.com"}) },
			`FAIL  sign-in: OIDC %[1]s: oidc: issuer URL provided to client ("%[1]s") did not match the issuer URL returned by provider ("https://impostor.example.com")`},
		{"the signing keys cannot be read", func(iss string) string { return "{issuer: " + iss + ", clientID: bindery}" },
			func(s *setup) { s.sims.OIDC.Inject("keys", sim.FaultError, 1) },
			`FAIL  sign-in: OIDC %[1]s: Get "%[1]s/keys": oidc keys: HTTP 500 — check identity.oidc.issuer and that this host reaches the provider`},
		{"no client id", func(iss string) string { return "{issuer: " + iss + "}" }, nil,
			"FAIL  sign-in: OIDC %s: identity.oidc.clientID is not set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSetup(t)
			issuer := s.srv.URL + "/sim/oidc"
			s.extra = []string{"identity.oidc: " + tc.oidc(issuer)}
			if tc.break_ != nil {
				tc.break_(s)
			}
			r := s.run(t)
			out := text(r)
			want := fmt.Sprintf(tc.want, issuer)
			if !strings.Contains(out, want) {
				t.Fatalf("want %q:\n%s", want, out)
			}
			if fails := failures(r); strings.HasPrefix(want, "FAIL") != (len(fails) == 1) || len(fails) > 1 {
				t.Fatalf("FAIL lines %q", fails)
			}
		})
	}
}

func raw(t *testing.T, dsn, stmt string) {
	t.Helper()
	cfg, err := store.MySQLConfig(strings.TrimPrefix(dsn, "mysql://"))
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(stmt); err != nil {
		t.Fatal(err)
	}
}

// limitedUser makes a user of the test database that may read and write rows but not change the
// schema, and returns its DSN.
func limitedUser(t *testing.T, dsn string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(strings.TrimPrefix(dsn, "mysql://"))
	if err != nil {
		t.Fatal(err)
	}
	user := "bdoc_" + fmt.Sprint(os.Getpid())
	raw(t, dsn, "CREATE USER IF NOT EXISTS '"+user+"'@'%' IDENTIFIED BY 'pw'")
	t.Cleanup(func() { raw(t, dsn, "DROP USER IF EXISTS '"+user+"'@'%'") })
	raw(t, dsn, "GRANT SELECT, INSERT, UPDATE, DELETE ON `"+cfg.DBName+"`.* TO '"+user+"'@'%'")
	cfg.User, cfg.Passwd = user, "pw"
	return "mysql://" + cfg.FormatDSN()
}

// -send-test posts one test delivery to each webhook (signed with its secret, as bindery's news
// is) and chat, and says what each answered; without it nothing reaches them. A receiver that
// refuses the delivery is a FAIL line naming its answer.
func TestSendTestPostsATestDeliveryToEachWebhookAndChat(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	var mu sync.Mutex
	got := map[string][]*http.Request{}
	bodies := map[string][]byte{}
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got[r.URL.Path] = append(got[r.URL.Path], r)
		bodies[r.URL.Path] = b
		mu.Unlock()
		if r.URL.Path == "/refuses" {
			w.WriteHeader(http.StatusForbidden)
		}
	}))
	defer receiver.Close()
	s := newSetup(t)
	s.extra = []string{
		fmt.Sprintf("notify.webhooks: [{name: ops-hook, url: %q, secrets: [%s], events: [request.failed]}]", receiver.URL+"/hook", secret),
		fmt.Sprintf("notify.chat: [{name: ops-chat, url: %q}]", receiver.URL+"/chat"),
	}

	out := text(s.run(t))
	if len(got) != 0 {
		t.Fatalf("without -send-test the endpoints got %v", got)
	}
	for _, want := range []string{"ok    notify: webhook ops-hook", "ok    notify: chat ops-chat", "nothing sent"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}

	s.send = true
	r := s.run(t)
	out = text(r)
	if r.Failed() {
		t.Fatalf("-send-test failed:\n%s", out)
	}
	for _, want := range []string{"ok    notify: webhook ops-hook: a test delivery (endpoint.test) to " + receiver.URL + "/hook was answered 200", "ok    notify: chat ops-chat: a test delivery"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	if len(got["/hook"]) != 1 || len(got["/chat"]) != 1 {
		t.Fatalf("deliveries: %d to the webhook, %d to the chat; want one each", len(got["/hook"]), len(got["/chat"]))
	}
	// The webhook's delivery is a Standard Webhooks one, signed with its secret, of type
	// endpoint.test although the endpoint subscribes to request.failed only.
	h := got["/hook"][0].Header
	ts, _ := strconv.ParseInt(h.Get(notify.HeaderTimestamp), 10, 64)
	if want := notify.Sign([]string{secret}, h.Get(notify.HeaderID), time.Unix(ts, 0), bodies["/hook"]); h.Get(notify.HeaderSignature) != want || want == "" {
		t.Errorf("signature %q, want %q", h.Get(notify.HeaderSignature), want)
	}
	var body struct {
		Type string `json:"type"`
		Data struct {
			Endpoint string `json:"endpoint"`
		} `json:"data"`
	}
	if err := json.Unmarshal(bodies["/hook"], &body); err != nil || body.Type != "endpoint.test" || body.Data.Endpoint != "ops-hook" {
		t.Errorf("webhook body %s (%v)", bodies["/hook"], err)
	}
	if !strings.HasPrefix(h.Get(notify.HeaderID), "test-") {
		t.Errorf("webhook-id %q: want a test- id, never a real event's", h.Get(notify.HeaderID))
	}
	if !strings.Contains(string(bodies["/chat"]), "A test delivery to ops-chat") {
		t.Errorf("chat body %s", bodies["/chat"])
	}

	s.extra[1] = fmt.Sprintf("notify.chat: [{name: ops-chat, url: %q}]", receiver.URL+"/refuses")
	r = s.run(t)
	if fails := failures(r); len(fails) != 1 || !strings.Contains(fails[0], "notify: chat ops-chat") || !strings.Contains(fails[0], "403") {
		t.Fatalf("a chat that refuses: FAIL lines %q", fails)
	}
}

// failures are the report's FAIL lines.
func failures(r doctor.Report) []string {
	var out []string
	for _, l := range strings.Split(text(r), "\n") {
		if strings.HasPrefix(l, "FAIL") {
			out = append(out, l)
		}
	}
	return out
}
