package explain

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"bindery/internal/vocab/state"
)

// What a requester must never read: a status or step name, an identifier with an underscore, a
// step code, a configuration key, bindery's own jargon.
var internal = func() *regexp.Regexp {
	words := []string{`\b[A-Z][A-Z0-9]*(_[A-Z0-9]+)+\b`, `\b10[0-9]{3}\b`, `(?i:\bbatch rounds?\b)`, `(?i:\bwaiting set\b)`,
		`\b(approval|batch|poll|reconcile|support|workers|deploy)\.[a-zA-Z]+\b`}
	for _, s := range state.AllStatuses {
		words = append(words, `\b`+string(s)+`\b`)
	}
	for _, s := range state.Steps() {
		words = append(words, `\b`+s.String()+`\b`)
	}
	return regexp.MustCompile(strings.Join(words, "|"))
}()

// A promise that someone tries again: only a row whose task retries, or whose operators were
// alerted, may make it.
var promise = regexp.MustCompile(`(?i)\b(retr(y|ies|ied|ying)|tries again|try again|operators? (will|can|have been|has been|are))\b`)

// reachable walks the transition table from a new row: every status a request can come to.
func reachable() []state.BindingStatus {
	seen := map[state.BindingStatus]bool{}
	queue := []state.BindingStatus{""}
	var out []state.BindingStatus
	for len(queue) > 0 {
		from := queue[0]
		queue = queue[1:]
		for _, to := range state.Allowed(from) {
			if !seen[to] {
				seen[to] = true
				out = append(out, to)
				queue = append(queue, to)
			}
		}
	}
	return out
}

// Every (status, step, next action) a request can be at — each status the transition table
// reaches, each step it can have there, each next action the view tells there — has its label,
// the requester's sentence and the operator's; the requester's holds no internal code, and
// promises a retry only where a task tries again or operators were alerted; the operator's never
// sends them to support (they are the support).
func TestEveryReachableStateHasTrueSentences(t *testing.T) {
	rows := Sentences()
	at := map[key]Row{}
	for _, r := range rows {
		at[key{r.Status, r.Step, r.Action}] = r
	}
	statuses := reachable()
	if len(statuses) != len(state.AllStatuses) {
		t.Errorf("the transition table reaches %v, the statuses are %v", statuses, state.AllStatuses)
	}
	walked := 0
	for _, status := range statuses {
		steps := state.StepsAt(status)
		if len(steps) == 0 {
			t.Errorf("%s: no step a request can be at", status)
		}
		for _, step := range steps {
			for _, action := range Actions(status, step) {
				walked++
				r, ok := at[key{status, step, action}]
				name := string(status) + " " + step.String() + " " + string(action)
				switch {
				case !ok:
					t.Errorf("%s: no row", name)
					continue
				case r.Label == "" || r.Requester == "" || r.Operator == "":
					t.Errorf("%s: a sentence is missing: %+v", name, r)
				}
				for what, text := range map[string]string{"label": r.Label, "requester's sentence": r.Requester} {
					if m := internal.FindString(text); m != "" {
						t.Errorf("%s: the %s %q holds %q", name, what, text, m)
					}
				}
				if m := promise.FindString(r.Requester); m != "" && !r.Retries && !r.Alerted {
					t.Errorf("%s: %q promises %q, but nothing tries again and no operator was alerted", name, r.Requester, m)
				}
				if regexp.MustCompile(`(?i)contact (support|the maintainers)`).MatchString(r.Operator) {
					t.Errorf("%s: the operator reads %q", name, r.Operator)
				}
				if strings.Contains(r.Requester, "Nothing to do") && action != state.NextWait {
					t.Errorf("%s: %q says nothing to do, but the request is told %s", name, r.Requester, action)
				}
				// The row's claim of an alert is the event the state writes: request.needs_attention
				// on the way into it, or the watch's deploy.overdue, or the blocking batch's
				// batch.blocked.
				manual := action == state.NextWaitManual
				alerted := state.NeedsAttention(status, step) || manual && (state.AwaitsDeploy(status, step) || behindBlockedAt(status, step))
				if r.Alerted != alerted {
					t.Errorf("%s: the row says alerted=%v, the events say %v", name, r.Alerted, alerted)
				}
				// The list of requests words WAIT_MANUAL as "Operators alerted" whatever the row.
				if manual && !r.Alerted {
					t.Errorf("%s: told %s, yet no operator was alerted", name, action)
				}
			}
		}
	}
	if walked != len(rows) {
		t.Errorf("walked %d combinations, the table has %d rows: rows for unreachable states", walked, len(rows))
	}
}

// A request whose batch was settled by an operator (or by the sweep after it stayed blocked) says
// what happened — its change did not merge — and what happens next: nothing by itself; it does
// not claim a failure of its own.
func TestASettledBatchSaysWhatHappenedAndWhatComesNext(t *testing.T) {
	for _, status := range []state.BindingStatus{state.StatusCreateFailed, state.StatusHandleFailed} {
		if !slices.Contains(state.StepsAt(status), state.StepBatchAbandoned) {
			t.Fatalf("%s cannot be at BATCH_ABANDONED", status)
		}
		r := Sentence(status, state.StepBatchAbandoned, state.NextActionFor(status, state.StepBatchAbandoned))
		for _, want := range []string{"was stopped before its merge request merged", "Nothing tries it again by itself", "withdraw"} {
			if !strings.Contains(r.Requester, want) {
				t.Errorf("%s: %q does not say %q", status, r.Requester, want)
			}
		}
		if strings.Contains(r.Requester, "could not prepare") || r.Retries {
			t.Errorf("%s: %+v", status, r)
		}
	}
	// A batch that failed by itself keeps its cause: a pipeline that failed says so.
	if r := Sentence(state.StatusCreateFailed, state.StepCreatePipelineFailed, state.NextContactSupport); !strings.Contains(r.Requester, "pipeline") {
		t.Errorf("a failed pipeline reads %q", r.Requester)
	}
}

// The rules that check the table catch what they are there for.
func TestTheSentenceChecksCatchInternalsAndPromises(t *testing.T) {
	for _, bad := range []string{"Approved, in the merge queue MR_CREATING", "Step QUEUED", "at step 10010", "the next batch round", "held by batch.maxWait"} {
		if !internal.MatchString(bad) {
			t.Errorf("%q passes as a requester's words", bad)
		}
	}
	if internal.MatchString(Sentence(state.StatusMRCreating, state.StepQueued, state.NextWait).Requester) {
		t.Error("the queued sentence holds an internal code")
	}
	if !promise.MatchString("You can keep waiting: operators will retry it.") || promise.MatchString("You can apply again.") {
		t.Error("the promise check is wrong")
	}
}

// A step's words reach its requester too — the timeline's label, what the request waits for, a
// failure's sentence — and hold no internal code either.
func TestStepWordsHoldNoInternalCode(t *testing.T) {
	for _, s := range state.Steps() {
		for what, text := range map[string]string{"label": Label(s), "waiting": Waiting(s), "failure": Failure(s)} {
			if m := internal.FindString(text); m != "" {
				t.Errorf("%s: its %s %q holds %q", s, what, text, m)
			}
		}
	}
}
