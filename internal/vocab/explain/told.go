package explain

import (
	"bindery/internal/vocab/state"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Told is the one place that turns what bindery recorded at a step into text a requester may
// read, for both flows. A step of bindery's own progress keeps its note as written (bindery's
// words: "MR !3 merged", the reason a person must clear, which deploy validated it). A failure
// step (its Told sentence is set) has a note that holds the cause — the classified text of an
// error, naming systems, endpoints, HTTP statuses or the database — which stays for operators
// and the log: the requester reads the step's fixed sentence and only the details that are
// known to be safe, re-written from their digits (the batch, its bisections, the merge request,
// the pipeline). Whatever the note holds, nothing of it but those numbers reaches the requester.
// links, when not nil, gives the web address of a merge request ("mr") or pipeline ("pipeline")
// of the request's project by its number, added after it ("": none).
func Told(s state.Step, note string, links func(kind string, id int64) string) string {
	told := Failure(s)
	if told == "" {
		return note
	}
	if d := SafeDetails(note, links); d != "" {
		return told + " (" + d + ")."
	}
	return told + "."
}

// The details of a note a requester may read, as bindery itself writes them.
var (
	isolatedRef = regexp.MustCompile(`\bbatch (\d{1,18}) isolated the culprit \S+ after (\d{1,9}) bisections?`)
	batchRef    = regexp.MustCompile(`\bbatch (\d{1,18})\b`)
	mrRef       = regexp.MustCompile(`(?:\bMR|\bmerge request) !(\d{1,18})\b`)
	pipelineRef = regexp.MustCompile(`\bpipeline (\d{1,18})\b`)
)

// SafeDetails lists the safe details of a note — the batch (and the bisections that isolated
// the request), the merge request, the pipeline — written anew from their numbers, with links's
// addresses; "": none.
func SafeDetails(note string, links func(kind string, id int64) string) string {
	var out []string
	if m := isolatedRef.FindStringSubmatch(note); m != nil {
		out = append(out, fmt.Sprintf("batch %s isolated this request as the change that fails, after %s %s", m[1], m[2], plural(m[2], "bisection")))
	} else if m := batchRef.FindStringSubmatch(note); m != nil {
		out = append(out, "batch "+m[1])
	}
	if m := mrRef.FindStringSubmatch(note); m != nil {
		out = append(out, linked("merge request !"+m[1], "mr", m[1], links))
	}
	if m := pipelineRef.FindStringSubmatch(note); m != nil {
		out = append(out, linked("pipeline "+m[1], "pipeline", m[1], links))
	}
	return strings.Join(out, "; ")
}

func linked(words, kind, digits string, links func(kind string, id int64) string) string {
	id, err := strconv.ParseInt(digits, 10, 64)
	if links == nil || err != nil {
		return words
	}
	if url := links(kind, id); url != "" {
		return words + ": " + url
	}
	return words
}

func plural(n, word string) string {
	if n == "1" {
		return word
	}
	return word + "s"
}
