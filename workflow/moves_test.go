package workflow_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// A request's status changes only through the movers named for their transitions: the
// workflow's own (moves.go) and a batch's member moves (batch/moves.go). Anywhere else, a step
// names the mover; it never builds a store.Change or store.MemberChange with a status of its own
// — and store, which writes them, never builds one at all (its statements take the move).
func TestStatusesChangeOnlyThroughTheNamedMovers(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{".", "../batch", "../store"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") || filepath.Base(name) == "moves.go" {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.CompositeLit)
				if !ok {
					return true
				}
				switch typ := lit.Type.(type) {
				case *ast.SelectorExpr: // store.Change outside store
					if pkg, ok := typ.X.(*ast.Ident); !ok || pkg.Name != "store" || (typ.Sel.Name != "Change" && typ.Sel.Name != "MemberChange") {
						return true
					}
				case *ast.Ident: // Change inside store
					if dir != "../store" || (typ.Name != "Change" && typ.Name != "MemberChange") {
						return true
					}
				default:
					return true
				}
				for _, e := range lit.Elts {
					if kv, ok := e.(*ast.KeyValueExpr); ok {
						if k, ok := kv.Key.(*ast.Ident); ok && (k.Name == "To" || k.Name == "From") {
							t.Errorf("%s: a status change built in place; name it in moves.go", fset.Position(lit.Pos()))
						}
					}
				}
				return true
			})
		}
	}
}
