package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"bindery/store"
)

// A kind of durable work owns its steps: one table of them (Step), each a typed constant of the
// kind with its lane, how it waits and how an unavailable dependency is retried, and its memo is a
// typed struct M that the engine decodes before a run and encodes with its outcome. Everything
// the engine, the repair sweep and the documentation need to know of a step is in that table
// (docs/architecture.md, "The kinds").

// Step is one step of a kind whose steps are named by S and whose memo is M.
type Step[M any, S ~string] struct {
	Name S      // stored as the task's step: never rename one
	Lane string // LaneFirst or LaneBackground
	// Polls: the step waits for news by the staged schedule (Run.Poll): a wake makes it due at
	// once, and a dependency that does not answer is looked at again until the wait times out.
	Polls bool
	// Attempts bounds the runs of a step whose dependency does not answer (a polling step keeps
	// looking instead); Backoff is the wait before the second (0: the kind's short wait).
	Attempts int
	Backoff  time.Duration
	Run      func(ctx context.Context, j *Job[M, S]) error
}

// Def defines a kind of work whose memo is M and whose steps are named by S.
type Def[M any, S ~string] struct {
	Name  string
	Steps []Step[M, S]
	// Fail records the declared failure of j's step for err and ends with j.Finish or j.Next.
	Fail func(ctx context.Context, j *Job[M, S], err error) error
	// Short is the kind's short wait: the backoff of a step that sets none, and the start of a
	// polling step's backoff (doubling up to Long).
	Short, Long func() time.Duration
	// Timeout is how long a polling step's wait may last before an unavailable dependency is no
	// longer retried (the step's failure is written instead).
	Timeout func() time.Duration
	// GiveUp, when set, is asked before a transient failure is retried (true: fail instead),
	// beside the step's own rule.
	GiveUp func(j *Job[M, S]) bool
	Lease  func() time.Duration
}

// Job is one run of a task of a kind: the task as claimed, its step's row, its memo decoded,
// and the kind's own state of the run (what its Fail needs).
type Job[M any, S ~string] struct {
	*Run
	Step  Step[M, S]
	Memo  M
	steps map[S]Step[M, S]
}

// Kind is the engine's view of the definition: what to register.
func (d Def[M, S]) Kind() Kind {
	steps := d.table()
	k := Kind{Name: d.Name, Lease: d.Lease}
	k.Run = func(ctx context.Context, r *Run) error {
		st, ok := steps[S(r.Task.Step)]
		if !ok {
			return r.Park(ctx, fmt.Sprintf("no step %q of a %s here", r.Task.Step, d.Name))
		}
		j := &Job[M, S]{Run: r, Step: st, steps: steps}
		_ = json.Unmarshal([]byte(r.Task.Memo), &j.Memo) // unreadable: empty, the step re-reads
		r.job = j
		return st.Run(ctx, j)
	}
	k.Fail = func(ctx context.Context, r *Run, err error) error {
		j, ok := r.job.(*Job[M, S])
		if !ok {
			j = &Job[M, S]{Run: r, steps: steps} // parked or unknown step: nothing of it ran
		}
		return d.Fail(ctx, j, err)
	}
	k.Retry = func(r *Run, err error) (time.Duration, bool) {
		j, _ := r.job.(*Job[M, S])
		if j == nil {
			return Backoff(time.Second, time.Minute)(r, err)
		}
		if d.GiveUp != nil && d.GiveUp(j) {
			return 0, false
		}
		short, long := time.Second, time.Minute
		if d.Short != nil {
			short = d.Short()
		}
		if d.Long != nil {
			long = d.Long()
		}
		if j.Step.Polls {
			// A failed look tells nothing: keep looking until the wait times out.
			wait, _ := Backoff(short, long)(r, err)
			return wait, d.Timeout == nil || r.Task.Waited < d.Timeout()
		}
		if j.Step.Attempts == 0 {
			return Backoff(short, long)(r, err)
		}
		base := j.Step.Backoff
		if base == 0 {
			base = short
		}
		return Attempts(j.Step.Attempts, base)(r, err)
	}
	return k
}

func (d Def[M, S]) table() map[S]Step[M, S] {
	steps := make(map[S]Step[M, S], len(d.Steps))
	for _, s := range d.Steps {
		if _, dup := steps[s.Name]; dup || s.Run == nil || s.Lane == "" {
			panic(fmt.Sprintf("engine: kind %s: step %q is listed twice, or without its run or lane", d.Name, s.Name))
		}
		steps[s.Name] = s
	}
	return steps
}

// StepNames lists the kind's steps in the order of its table (documentation, tests).
func (d Def[M, S]) StepNames() []S {
	out := make([]S, len(d.Steps))
	for i, s := range d.Steps {
		out[i] = s.Name
	}
	return out
}

// Lookup is the row of step name (false: not in the table).
func (d Def[M, S]) Lookup(name S) (Step[M, S], bool) {
	i := slices.IndexFunc(d.Steps, func(s Step[M, S]) bool { return s.Name == name })
	if i < 0 {
		return Step[M, S]{}, false
	}
	return d.Steps[i], true
}

// Spec is a new task of the kind at step, due in `in`, with memo m: what a transaction that
// starts the work writes (an application, a claim, an operator's retry).
func (d Def[M, S]) Spec(ref string, step S, in time.Duration, m M) store.TaskSpec {
	st, ok := d.Lookup(step)
	if !ok {
		panic(fmt.Sprintf("engine: kind %s has no step %q", d.Name, step))
	}
	return store.TaskSpec{Kind: d.Name, Ref: ref, Lane: st.Lane, Step: string(step), In: in, Memo: encodeMemo(m), Wait: st.Polls}
}

func encodeMemo[M any](m M) string {
	b, err := json.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("engine: memo %T does not encode: %v", m, err)) // a struct of plain fields always does
	}
	return string(b)
}

// To is the outcome "go on to step next": its lane, and — for a polling step — a wait that
// starts now with its first look at once.
func (j *Job[M, S]) To(next S) store.TaskNext {
	st, ok := j.steps[next]
	n := store.TaskNext{Step: string(next), Lane: st.Lane}
	if ok && st.Polls {
		n.Wait = store.WaitStart
	}
	return n
}

// Next records the outcome with the memo as the run leaves it (unless n carries one), checking
// that the step it goes to is one of the kind's.
func (j *Job[M, S]) Next(ctx context.Context, n store.TaskNext, write func(tx *store.Tx) error) error {
	if n.Step != "" {
		if _, ok := j.steps[S(n.Step)]; !ok {
			return fmt.Errorf("internal error: step %q is not in the table of kind %s", n.Step, j.Task.Kind)
		}
	}
	if n.Memo == nil {
		m := encodeMemo(j.Memo)
		n.Memo = &m
	}
	return j.Run.Next(ctx, n, write)
}

// Poll is Run.Poll, carrying the memo.
func (j *Job[M, S]) Poll(st Stages, note string) (store.TaskNext, bool) {
	n, timedOut := j.Run.Poll(st, note)
	if !timedOut {
		m := encodeMemo(j.Memo)
		n.Memo = &m
	}
	return n, timedOut
}

// StepDoc is what docs/states.md says of one step of a kind: the engine's columns (DocOf), the
// kind's own (its declared failure, what it does, what the requester waits for at it, the stopped
// steps an operator's retry resumes at it).
type StepDoc struct {
	Name, Lane, Retry    string
	Fails, Does, Waiting string
	Resumes              []string
}

// DocOf is the engine's columns of a step's documentation.
func DocOf[M any, S ~string](s Step[M, S]) StepDoc {
	d := StepDoc{Name: string(s.Name), Lane: s.Lane}
	switch {
	case s.Polls:
		d.Retry = "polls (`poll.*`); an unavailable dependency: looked at again until the wait times out"
	case s.Attempts > 0:
		d.Retry = fmt.Sprintf("%d attempts on an unavailable dependency", s.Attempts)
	default:
		d.Retry = "backoff on an unavailable dependency"
	}
	return d
}
