package rehearsal

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The guide's marked blocks are read as written, indented ones (inside a list item) included; a
// marker without its block is an error. Runs in go test ./...: a guide whose markers broke fails
// there, before the rehearsal runs.
func TestTheGuidesMarkedBlocksAreReadInOrder(t *testing.T) {
	blocks, err := guideBlocks("../../../docs/install.md")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, b := range blocks {
		names = append(names, b.Name)
	}
	if !slices.Equal(names, rehearsed) {
		t.Fatalf("docs/install.md marks %v, the rehearsal runs %v", names, rehearsed)
	}
	for _, b := range blocks {
		if strings.HasPrefix(b.Script, " ") || strings.TrimSpace(b.Script) == "" {
			t.Errorf("block %s (line %d) is read with its indentation or empty:\n%s", b.Name, b.Line, b.Script)
		}
	}
	if got := exports(blocks[0].Script); !slices.Equal(got, []string{"BINDERY_URL", "GITLAB", "GITLAB_ADMIN_TOKEN", "PROJECT", "APPROVAL_URL", "DB_HOST", "DB_NAME", "DB_USER", "DB_PASSWORD"}) {
		t.Errorf("the values block exports %v", got)
	}
	if got := exports(blocks[slices.Index(names, "signin")].Script); !slices.Equal(got, []string{"OIDC_ISSUER", "OIDC_CLIENT_ID", "OIDC_CLIENT_SECRET"}) {
		t.Errorf("the signin block exports %v", got)
	}

	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.md")
	os.WriteFile(bad, []byte("<!-- rehearsal: x -->\ntext\n"), 0o644)
	if _, err := guideBlocks(bad); err == nil || !strings.Contains(err.Error(), "not followed by") {
		t.Errorf("a marker without a block: %v", err)
	}
	os.WriteFile(bad, []byte("<!-- rehearsal: x -->\n```sh\necho\n"), 0o644)
	if _, err := guideBlocks(bad); err == nil {
		t.Error("an unclosed block was read")
	}
}
