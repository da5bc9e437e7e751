package doctor_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"bindery/internal/ops/doctor"
	"bindery/internal/platform/config"
	"bindery/internal/sim"
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
}

func newSetup(t *testing.T) *setup {
	t.Helper()
	s := &setup{dsn: storetest.MySQLDSN(t), public: "https://bindery.example.com", over: map[string]string{}}
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
	r, err := doctor.Run(context.Background(), doctor.Options{ConfigPath: path, Schema: schema.FS, HTTPClient: s.srv.Client()})
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
	r, err := doctor.Run(context.Background(), doctor.Options{ConfigPath: path, Schema: schema.FS, HTTPClient: s.srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	if out := text(r); !r.Failed() || !strings.Contains(out, "FAIL  gitlab: infra/no-ci: pipelines: no .gitlab-ci.yml on main") {
		t.Fatalf("want the missing CI file named:\n%s", out)
	}
}

// With merge commits, a branch others may push to is a warning: such a push lands beside the
// tree bindery tested.
func TestMergeCommitsOnABranchOthersPushToWarn(t *testing.T) {
	s := newSetup(t)
	s.sims.GitLab.SetFaults(sim.GitLabFaults{MergeMethod: config.MergeMethodMerge})
	s.sims.GitLab.Protect(project, "main", sim.Maintainer, sim.Maintainer, nil, nil)
	r := s.run(t)
	out := text(r)
	if r.Failed() || !strings.Contains(out, "warn  gitlab: "+project+": merge method: merge commits, and others may push to main") {
		t.Fatalf("want a warning, no failure:\n%s", out)
	}
	s.sims.GitLab.Protect(project, "main", sim.NoAccess, sim.Maintainer, nil, nil)
	if out := text(s.run(t)); !strings.Contains(out, "ok    gitlab: "+project+": merge method: merge") {
		t.Fatalf("nobody but the bot may push: merge commits are fine:\n%s", out)
	}
}

// An OIDC issuer in the file is discovered whether or not this binary knows the key.
func TestSignInWithOIDCIsDiscovered(t *testing.T) {
	s := newSetup(t)
	var issuer string
	op := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/.well-known/openid-configuration":
			fmt.Fprintf(w, `{"issuer":%q,"authorization_endpoint":"%[1]s/auth","token_endpoint":"%[1]s/token","jwks_uri":"%[1]s/keys"}`, issuer)
		case "/keys":
			fmt.Fprint(w, `{"keys":[{"kty":"RSA","kid":"k1","n":"x","e":"AQAB"}]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer op.Close()
	issuer = op.URL
	path := filepath.Join(t.TempDir(), "config.yaml")
	cfg := strings.Replace(s.yaml(s.srv.URL), "identity:", "x:", 1) + "identity:\n  oidc:\n    issuer: " + issuer + "\n    clientID: bindery\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := doctor.Run(context.Background(), doctor.Options{ConfigPath: path, Schema: schema.FS, HTTPClient: s.srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	if out := text(r); !strings.Contains(out, "ok    sign-in: OIDC "+issuer+": discovered, 1 signing key(s); register the redirect URL https://bindery.example.com/auth/callback") {
		t.Fatalf("want the provider discovered:\n%s", out)
	}
	issuer = "https://impostor.example.com"
	r, _ = doctor.Run(context.Background(), doctor.Options{ConfigPath: path, Schema: schema.FS, HTTPClient: s.srv.Client()})
	if out := text(r); !strings.Contains(out, "FAIL  sign-in: OIDC "+op.URL+": the provider calls itself") {
		t.Fatalf("want a wrong issuer named:\n%s", out)
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
