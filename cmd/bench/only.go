package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// A run of some sections (-only) into a report file that already holds a whole run replaces only
// those sections and their rows of the Targets table: the figures of the other sections stay, and
// so does the Run table of the run that measured them. Each replaced section starts with how it
// was measured on its own.

// generatedPart is what the output file holds below the marker ("" : no file, or no marker).
func generatedPart(e *env) string {
	path := e.out
	if !filepath.IsAbs(path) {
		path = filepath.Join(e.root, path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	_, after, ok := strings.Cut(string(data), marker+"\n")
	if !ok {
		return ""
	}
	return after
}

// reportPart is one "## " section of a generated report: its title and its text.
type reportPart struct{ title, body string }

func splitReport(text string) []reportPart {
	var out []reportPart
	for _, chunk := range strings.Split("\n"+text, "\n## ")[1:] {
		title, body, _ := strings.Cut(chunk, "\n")
		out = append(out, reportPart{title, body})
	}
	return out
}

// mergeOnly rewrites old (a generated report) with a -only run's sections (titles → text) and
// goals; note says how they were measured. ok false: old is not a whole run's report (no Run
// table), and the caller writes the new report as it is.
func mergeOnly(old string, bodies map[string]string, goals []goal, note string) (string, bool) {
	parts := splitReport(old)
	if len(parts) == 0 || parts[0].title != "Run" {
		return "", false
	}
	byTitle := map[string]string{}
	var targets string
	for _, p := range parts {
		byTitle[p.title] = p.body
		if p.title == "Targets" {
			targets = p.body
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Run\n%s", parts[0].body)
	b.WriteString(renderGoals(mergeGoals(targets, goals)))
	for _, s := range sections {
		body, fresh := bodies[s.title]
		if fresh {
			body = "\n" + note + "\n\n" + strings.TrimLeft(body, "\n")
		} else if body, fresh = byTitle[s.title]; !fresh {
			continue
		}
		fmt.Fprintf(&b, "\n## %s\n%s", s.title, body)
	}
	return b.String(), true
}

// mergeGoals keeps the rows of an old Targets table, each replaced by the new goal of the same
// name, and adds the new goals it did not hold.
func mergeGoals(oldTable string, goals []goal) []goal {
	fresh := map[string]goal{}
	for _, g := range goals {
		fresh[g.what] = g
	}
	var out []goal
	used := map[string]bool{}
	for _, line := range strings.Split(oldTable, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if !strings.HasPrefix(line, "| ") || len(cells) != 4 || cells[0] == "target" {
			continue
		}
		if g, ok := fresh[cells[0]]; ok {
			out, used[g.what] = append(out, g), true
			continue
		}
		out = append(out, goal{what: cells[0], target: cells[1], measured: cells[2], status: parseStatus(cells[3])})
	}
	for _, g := range goals {
		if !used[g.what] {
			out = append(out, g)
		}
	}
	return out
}

func parseStatus(s string) goalStatus {
	for _, st := range []goalStatus{met, missed} {
		if st.String() == s {
			return st
		}
	}
	return notMeasured
}

// onlyNote says how a section of a -only run was measured, where the Run table speaks of another
// run.
func onlyNote(e *env, m machine) string {
	note := fmt.Sprintf("*Measured on its own:* `%s`, %s, commit %s, load average %.2f before and %.2f after (1 min), %s.",
		commandLine(e.args), time.Now().UTC().Format("2006-01-02 15:04 UTC"), m.commit, m.loadBefore[0], m.loadAfter[0], m.elapsed.Round(time.Second))
	if e.quick {
		note += " **Quick run (-quick): not figures to quote.**"
	}
	return note
}
