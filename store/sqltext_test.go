package store_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"bindery/internal/vocab/state"
)

// The store offers statements; which statuses a statement reads or writes is its caller's rule
// or the vocabulary's. So no SQL text in the store names a request's or a batch's status: every
// status reaches a statement as a parameter, from its caller or from internal/vocab/state.
func TestNoStatusIsWrittenIntoTheStoresSQL(t *testing.T) {
	t.Parallel()
	var words []string
	for _, s := range state.AllStatuses {
		words = append(words, "'"+string(s)+"'")
	}
	for _, s := range []state.BatchStatus{state.BatchRunning, state.BatchBlocked, state.BatchSucceeded, state.BatchFailed} {
		words = append(words, "'"+string(s)+"'")
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			text, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			// A status built into the text by concatenation ("status = '" + s + "'") leaves a
			// literal that ends in an opening quote after the column.
			for _, w := range words {
				if strings.Contains(text, w) {
					t.Errorf("%s: SQL names the status %s; pass it as a parameter", fset.Position(lit.Pos()), w)
				}
			}
			for _, glue := range []string{"status = '", "status IN ('", "status <> '"} {
				if strings.HasSuffix(text, glue) {
					t.Errorf("%s: SQL builds a status into its text (%q…); pass it as a parameter", fset.Position(lit.Pos()), glue)
				}
			}
			return true
		})
	}
}
