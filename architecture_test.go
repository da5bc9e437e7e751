package main

import (
	"go/build"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docs/architecture.md lists what each package imports of bindery's: the picture a reader trusts
// before reading the code. The table must be the code: a package missing from it, or an import
// added or dropped without it, fails here.
func TestTheArchitectureTableIsTheCode(t *testing.T) {
	doc, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	table := map[string][]string{}
	in := false
	ticked := regexp.MustCompile("`([a-z/]+)`")
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "| package | imports |") {
			in = true
			continue
		}
		if !in || strings.HasPrefix(line, "|---") {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			if len(table) > 0 {
				break
			}
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 4 {
			t.Fatalf("a row of the table is not `| packages | imports |`: %q", line)
		}
		var imports []string
		for _, m := range ticked.FindAllStringSubmatch(strings.Split(cells[2], "(")[0], -1) {
			imports = append(imports, m[1])
		}
		slices.Sort(imports)
		for _, m := range ticked.FindAllStringSubmatch(cells[1], -1) {
			table[m[1]] = imports
		}
	}
	if len(table) == 0 {
		t.Fatal("docs/architecture.md has no table under `| package | imports |`")
	}

	code := map[string][]string{}
	err = filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		name := filepath.ToSlash(path)
		if strings.HasPrefix(d.Name(), ".") || name == "." || omitted(name) {
			if name == "." {
				return nil
			}
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(path, 0)
		if err != nil {
			return nil // no Go files outside tests: not a package of the product
		}
		var ours []string
		for _, imp := range pkg.Imports {
			if rest, ok := strings.CutPrefix(imp, "bindery/"); ok {
				ours = append(ours, rest)
			}
		}
		slices.Sort(ours)
		code[name] = ours
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, imports := range code {
		listed, ok := table[name]
		if !ok {
			t.Errorf("package %s (imports %v) is missing from the table in docs/architecture.md", name, imports)
			continue
		}
		if !slices.Equal(listed, imports) {
			t.Errorf("docs/architecture.md says %s imports %v; the code imports %v", name, listed, imports)
		}
	}
	for name := range table {
		if _, ok := code[name]; !ok {
			t.Errorf("docs/architecture.md lists %s, which is no package of the product", name)
		}
	}
}

// omitted are the directories the table leaves out: the tools under cmd/, what only tests use,
// and what is no Go code of ours (docs, schema files come as package schema, the SPA's sources).
func omitted(dir string) bool {
	switch dir {
	case "cmd", "internal/chaos", "internal/testkit", "docs", "testdata", "deploy", "ui/src", "ui/dist":
		return true
	}
	return strings.HasSuffix(dir, "test") // storetest, servicetest, logtest, steptest
}
