package cli

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"bindery/internal/platform/config"
	"bindery/internal/sim"
)

// bindery import against the simulated GitLab: the dry run lists and writes nothing, the import
// adopts, the second adds nothing.
func TestImportCommandAdoptsOnceAndItsDryRunWritesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dsn := "sqlite:" + filepath.Join(dir, "i.db")
	cfg := `
database:
  dsn: "` + dsn + `"
gitlab:
  botToken: bot-token
  reviewerTokens: [rev1-token]
targets:
  - key: db-read
    project: infra/access-config
    path: bindings/db-read/{subject}.yaml
`
	sims := sim.New(sim.Options{Config: config.NewStatic(config.MustParse(cfg))})
	srv := httptest.NewServer(sims.Handler())
	t.Cleanup(srv.Close)
	cfg = strings.Replace(cfg, "  reviewerTokens: [rev1-token]\n", "  reviewerTokens: [rev1-token]\n  baseURL: "+srv.URL+"/sim/gitlab\n", 1)
	path := filepath.Join(dir, "bindery.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var out bytes.Buffer
	if code := run(ctx, []string{"migrate", "-config", path}, &out, &out); code != 0 {
		t.Fatalf("migrate: %s", out.String())
	}
	// The simulator makes the project at its first read; then two files are pushed by hand.
	if code := run(ctx, []string{"import", "-config", path, "-dry-run"}, &out, &out); code != 0 {
		t.Fatalf("first look: %s", out.String())
	}
	for p, c := range map[string]string{"bindings/db-read/zed@example.com.yaml": "subject: zed@example.com\n", "bindings/db-read/bad@example.com.yaml": "{{{"} {
		if _, err := sims.GitLab.PushToBranch("infra/access-config", "main", p, c); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range []struct {
		args []string
		want string
	}{
		{[]string{"import", "-config", path, "-dry-run"}, "dry run: 2 file(s), 1 would become bindings in effect, 1 cannot be imported; nothing was written"},
		{[]string{"import", "-config", path}, "2 file(s): 1 binding(s) adopted in effect, 1 cannot be imported"},
		{[]string{"import", "-config", path}, "2 file(s): 0 binding(s) adopted in effect, 1 cannot be imported"},
	} {
		out.Reset()
		if code := run(ctx, c.args, &out, &out); code != 0 || !strings.Contains(out.String(), c.want) {
			t.Fatalf("run %d: exit %d:\n%s\nwant %q", i, code, out.String(), c.want)
		}
		if !strings.Contains(out.String(), "NOT IMPORTED: not YAML") {
			t.Fatalf("run %d does not say why bad@ is left out:\n%s", i, out.String())
		}
	}
}
