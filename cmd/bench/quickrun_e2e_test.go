//go:build e2e

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The whole command in -quick mode on SQLite, every section, tiny sizes: it must finish, keep
// the file's intro, replace its figures, and write well-formed tables for every section. The
// figures themselves are not judged (no timed assertions); a section that cannot measure must
// say why.
func TestQuickRunWritesEverySection(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary and runs every section (about a minute)")
	}
	out := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	intro := "# Benchmarks\n\nA hand-written intro that must survive.\n"
	if err := os.WriteFile(out, []byte(intro+"\n"+marker+"\n\n## Stale figures\n\nthese go away\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// No deadline of its own: on a busy machine the build and the runs take minutes more, and
	// the test binary's -timeout is the hang guard.
	ctx := t.Context()
	var stderr strings.Builder
	// Sizes as small as still measure every section: the command's shape is under test here,
	// not its figures (the realistic end-to-end run with 10 requests on 2 projects, not 100 on 5).
	args := []string{"-quick", "-mysql", "", "-n", "3", "-real-n", "10", "-real-projects", "2", "-duration", "300ms", "-conc", "4", "-out", out}
	if code := run(ctx, args, os.Stdout, &stderr); code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr.String())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	if !strings.HasPrefix(text, intro) || strings.Count(text, marker) != 1 || strings.Contains(text, "Stale figures") {
		t.Fatalf("intro not kept or old figures not replaced:\n%s", text)
	}
	for _, want := range []string{"## Run", "## Targets", "go run ./cmd/bench -quick", "load average before"} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	for _, s := range sections {
		if !strings.Contains(text, "\n## "+s.title+"\n") {
			t.Errorf("report lacks section %q", s.title)
		}
	}
	// The sections that need nothing but SQLite and the binary must measure; MariaDB ones and
	// the workflow ones must say why they did not.
	for _, s := range strings.Split(text, "\n## ")[1:] {
		title, body, _ := strings.Cut(s, "\n")
		if strings.Contains(body, "**Not measured:") {
			t.Errorf("section %q failed:\n%s", title, body)
		}
		if strings.Contains(body, "Not measured") && !strings.Contains(body, "MariaDB only") && !strings.Contains(body, "workflow is not wired") {
			t.Errorf("section %q does not say why it did not measure:\n%s", title, body)
		}
	}
	checkTables(t, text)
}

var numberCell = regexp.MustCompile(`\d`)

// checkTables: every table row has its header's number of cells, and every table has a row
// holding a figure.
func checkTables(t *testing.T, text string) {
	t.Helper()
	lines := strings.Split(text, "\n")
	tables := 0
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "| ") {
			continue
		}
		tables++
		cells := strings.Count(lines[i], " | ") + 1
		if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "|---") {
			t.Errorf("table at line %d has no separator row", i+1)
		}
		figures := false
		j := i + 2
		for ; j < len(lines) && strings.HasPrefix(lines[j], "| "); j++ {
			if got := strings.Count(lines[j], " | ") + 1; got != cells {
				t.Errorf("line %d has %d cells, its header %d: %q", j+1, got, cells, lines[j])
			}
			figures = figures || numberCell.MatchString(lines[j])
		}
		if !figures {
			t.Errorf("table at line %d holds no figure:\n%s", i+1, strings.Join(lines[i:j], "\n"))
		}
		i = j
	}
	if tables < len(sections) {
		t.Errorf("%d tables for %d sections", tables, len(sections))
	}
}
