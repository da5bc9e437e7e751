// Package steptest holds a kind's step table to the steps its package names: every constant of
// the kind's step type is a row of its table (the function that builds the table lists it as a
// row's Name), and no step is named by a raw string anywhere in the package. The engine refuses,
// at run time, a step a table does not list; this finds it before a run does.
package steptest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Check parses the package in dir (its non-test files) and fails t for every constant of type
// stepType that the function tableFunc does not list as a row's Name, and for every raw string
// given as a step: a conversion stepType("…") outside a constant, or a Step: "…" field.
func Check(t testing.TB, dir, stepType, tableFunc string) {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, e := range entries {
		if name := e.Name(); strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
	}
	declared := map[string]token.Pos{}
	var listed []string
	tableFound := false
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				if d.Tok != token.CONST {
					continue
				}
				for _, spec := range d.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if isType(vs.Type, stepType) || (i < len(vs.Values) && isConversion(vs.Values[i], stepType)) {
							declared[n.Name] = n.Pos()
						}
					}
				}
			case *ast.FuncDecl:
				if d.Name.Name != tableFunc || d.Body == nil {
					continue
				}
				tableFound = true
				ast.Inspect(d.Body, func(n ast.Node) bool {
					if kv, ok := n.(*ast.KeyValueExpr); ok {
						if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Name" {
							if v, ok := kv.Value.(*ast.Ident); ok {
								listed = append(listed, v.Name)
							}
						}
					}
					return true
				})
			}
		}
	}
	if !tableFound {
		t.Fatalf("%s: no function %s builds the step table", dir, tableFunc)
	}
	if len(declared) == 0 {
		t.Fatalf("%s: no constant of type %s", dir, stepType)
	}
	for name, pos := range declared {
		if !slices.Contains(listed, name) {
			t.Errorf("%s: step %s is not a row of %s", fset.Position(pos), name, tableFunc)
		}
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GenDecl:
				return n.Tok != token.CONST // a constant may convert a string: that is its declaration
			case *ast.CallExpr:
				if isConversion(n, stepType) {
					if lit, ok := n.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						t.Errorf("%s: a raw step name %s: name it by a constant of the table", fset.Position(n.Pos()), lit.Value)
					}
				}
			case *ast.KeyValueExpr:
				if k, ok := n.Key.(*ast.Ident); ok && k.Name == "Step" {
					if lit, ok := n.Value.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						t.Errorf("%s: a raw step name %s: name it by a constant of the table", fset.Position(n.Pos()), lit.Value)
					}
				}
			}
			return true
		})
	}
}

func isType(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

func isConversion(e ast.Expr, name string) bool {
	c, ok := e.(*ast.CallExpr)
	return ok && len(c.Args) == 1 && isType(c.Fun, name)
}
