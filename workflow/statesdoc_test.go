package workflow_test

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"bindery/batch"
	"bindery/internal/vocab/explain"
	"bindery/internal/vocab/state"
	"bindery/internal/work/engine"
	"bindery/internal/work/notify"
	"bindery/workflow"
)

var updateStates = flag.Bool("update-states", false, "rewrite the generated tables of docs/states.md from the code's tables")

// docs/states.md's tables are generated from the code's: the binding transitions and the step
// codes (package state, with their words from package explain) and each kind's step table
// (workflow.StepDocs, batch.StepDocs). The prose around them is written by hand; each generated
// table sits between <!-- generated: NAME --> and <!-- end: NAME -->. Regenerate with
// `go test ./workflow -run TestStatesDocIsCurrent -update-states`.
func TestStatesDocIsCurrent(t *testing.T) {
	const path = "../docs/states.md"
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tables := map[string]string{
		"binding-transitions": transitionsTable(),
		"steps":               stepsTable(),
		"request-steps":       kindTable(workflow.StepDocs(), true),
		"batch-steps":         kindTable(batch.StepDocs(), false),
		"notify-steps":        kindTable(notify.StepDocs(), false),
		"sentences":           sentencesTable(),
	}
	doc := string(old)
	for name, table := range tables {
		re := regexp.MustCompile(`(?s)(<!-- generated: ` + name + ` -->\n).*?(<!-- end: ` + name + ` -->)`)
		if !re.MatchString(doc) {
			t.Fatalf("docs/states.md has no generated region %q", name)
		}
		doc = re.ReplaceAllLiteralString(doc, "<!-- generated: "+name+" -->\n"+table+"<!-- end: "+name+" -->")
	}
	if doc == string(old) {
		return
	}
	if *updateStates {
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatal("docs/states.md is stale: run go test ./workflow -run TestStatesDocIsCurrent -update-states")
}

func transitionsTable() string {
	var b strings.Builder
	b.WriteString("| from | may move to |\n|---|---|\n")
	for _, from := range append([]state.BindingStatus{""}, state.AllStatuses...) {
		name := "(a new row)"
		if from != "" {
			name = "`" + string(from) + "`"
		}
		var tos []string
		for _, to := range state.Allowed(from) {
			tos = append(tos, "`"+string(to)+"`")
		}
		if len(tos) == 0 {
			tos = []string{"(terminal)"}
		}
		fmt.Fprintf(&b, "| %s | %s |\n", name, strings.Join(tos, ", "))
	}
	return b.String()
}

func stepsTable() string {
	var b strings.Builder
	b.WriteString("| code | name | stage | deterministic | pending | label | waiting for | a failure reads |\n|---|---|---|---|---|---|---|---|\n")
	for _, s := range state.Steps() {
		i := s.Info()
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %s | %s |\n", int(s), i.Name, i.Stage, yes(i.Deterministic), yes(i.Pending || i.Person),
			explain.Label(s), cell(explain.Waiting(s)), cell(explain.Failure(s)))
	}
	return b.String()
}

func sentencesTable() string {
	var b strings.Builder
	b.WriteString("| status | step | next action | label | the requester reads | the operator reads | retries | alerted |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range explain.Sentences() {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s | %s | %s |\n", r.Status, r.Step, r.Action, cell(r.Label), cell(r.Requester), cell(r.Operator), yes(r.Retries), yes(r.Alerted))
	}
	return b.String()
}

func kindTable(rows []engine.StepDoc, resumes bool) string {
	var b strings.Builder
	head := "| step | lane | retries | declared failure | what it does | the requester waits for |"
	sep := "|---|---|---|---|---|---|"
	if resumes {
		head, sep = head+" an operator's retry of |", sep+"---|"
	}
	b.WriteString(head + "\n" + sep + "\n")
	for _, r := range rows {
		fails := r.Fails
		if fails == "" {
			fails = "(none: nothing to fail)"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s |", r.Name, r.Lane, r.Retry, fails, cell(r.Does), cell(r.Waiting))
		if resumes {
			fmt.Fprintf(&b, " %s |", strings.Join(r.Resumes, ", "))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return ""
}

// cell keeps a table cell on its line.
func cell(s string) string { return strings.ReplaceAll(s, "|", "\\|") }
