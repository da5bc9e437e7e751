package batch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"bindery/internal/platform/config"
	"bindery/internal/remote/gitlab"
	"bindery/internal/remote/outbound"
	"bindery/internal/vocab/explain"
	"bindery/internal/vocab/state"
	"bindery/internal/work/change"
	"bindery/internal/work/engine"
	"bindery/store"
)

// A batch is one task of the engine (kind state.TaskBatch, ref = the batch id): each run of it is
// one bounded action of its current step, done by the merge request's lifecycle (change.Lifecycle)
// — open the MR, one look at the pipeline, approve, one merge action — or by the batch itself
// (settle, the end of a BLOCKED window). The outcome and the next due time are recorded in one
// transaction fenced on the task's epoch, whose next statement is the batch's own guarded write
// (I6). Every step reads the remote state first, so any instance resumes a batch after a crash,
// an operator's resume or a lost claim.

// Step is a step of a batch's task (stored as the task's step: never rename one).
type Step string

const (
	stepOpen     Step = "open"     // members rendered, branch + commit + MR (or the branch regenerated)
	stepPipeline Step = "pipeline" // the MR's pipeline, one look per run (flaky retries, bisection)
	stepApprove  Step = "approve"  // both reviewer accounts approve the head
	stepTurn     Step = "turn"     // its turn to merge: the cars ahead merged, the target is what it was built on
	// The merge, one action per run; in stepMergeBlocked the batch is BLOCKED until a person
	// clears the MR.
	stepMerge              = Step(change.MergeAttempt)
	stepMergeRebase        = Step(change.MergeRebasing)
	stepMergePipeline      = Step(change.MergePipeline)
	stepMergeChecking      = Step(change.MergeChecking)
	stepMergeBlocked       = Step(change.MergeBlocked)
	stepSettle        Step = "settle"  // the decided failure (merge_batch.failing) is carried out: MR closed, members failed
	stepBlocked       Step = "blocked" // BLOCKED: operators' window; when it ends, settled as failed
)

// merging reports the merge phases: a merge there went onto the target its last look read.
func (s Step) merging() bool {
	return s == stepMerge || s == stepMergeRebase || s == stepMergePipeline || s == stepMergeChecking || s == stepMergeBlocked
}

// memo is what a batch remembers between its runs (the task's memo): the lifecycle's memory of
// its MR (the same JSON as when it was a struct embedding it).
type memo = change.Memo

// job is one run of a batch's task.
type job = engine.Job[memo, Step]

// stepRow is one step of a batch: the engine's part (name, lane, how it waits and retries, its
// action) and the batch's — the failure its members get when the step fails without deciding one
// itself, what its members wait for while the batch is at the step ({mr}: the MR), and what the
// step does, in words (docs/states.md is generated from this table).
type stepRow struct {
	engine.Step[memo, Step]
	fail    change.Failure
	waiting string
	does    string
}

// steps is the one table of a batch's steps. A batch whose dependency does not answer tries
// again with backoff (poll.short doubling up to poll.long) until it is older than
// batch.blockedTimeout (then the step's failure); an operator's resume starts it over at
// stepOpen; an active batch found without a task (the repair sweep) resumes at stepOpen, a
// BLOCKED one at stepBlocked (Repair).
func (s *Service) steps() []stepRow {
	type es = engine.Step[memo, Step]
	bg := engine.LaneBackground
	return []stepRow{
		{Step: es{Name: stepOpen, Lane: bg, Run: s.run((*run).open)}, fail: change.FailedCreate,
			waiting: "the bot to open the batch's merge request",
			does:    "render the members (failing or deferring those that cannot be in it), build the branch on the head of the car ahead in the merge train (the first car: on the target branch), one commit and the MR; rebuild when the member set or what is ahead changed"},
		{Step: es{Name: stepPipeline, Lane: bg, Polls: true, Run: s.run((*run).pipeline)}, fail: change.FailedCreate,
			waiting: "the pipeline of {mr} to pass",
			does:    "one look at the head's pipeline: pass → approve (a car beside the train first takes a place at the end of the train: its pass counts there when it stands on the last car, else it is rebuilt on it); fail → held while a car ahead is untested, else flaky retry, then bisection or the failure; no answer within `poll.timeout` → a new pipeline on the same commit once, then BLOCKED; what it was built on changed → rebuilt"},
		{Step: es{Name: stepApprove, Lane: bg, Run: s.run((*run).approve)}, fail: change.FailedApprove,
			waiting: "the reviewer bots to approve {mr}", does: "both reviewer accounts approve the head"},
		{Step: es{Name: stepTurn, Lane: bg, Polls: true, Run: s.run((*run).turn)}, fail: change.FailedMerge,
			waiting: "the batches ahead of it in the merge train to merge",
			does:    "wait for the cars ahead to merge and the project's queue not to be paused; then the target must be what the branch was built on (else: rebase and test again first)"},
		s.mergeStep(es{Name: stepMerge}, "the bot to merge {mr}",
			"one merge action, decided from the MR's state in GitLab's order ([gitlab.md](gitlab.md)): locked → look again; computing → wait; conflict → regenerate (a conflict after that: bisected, never BLOCKED); behind → rebase; CI not passed or head not the tested one → wait for the head's pipeline; not approved → approve; the target read once more (still what the head was built on, else rebase); merge at the tested SHA"),
		s.mergeStep(es{Name: stepMergeRebase}, "", "wait for GitLab's rebase (no answer within `poll.timeout` → BLOCKED)"),
		s.mergeStep(es{Name: stepMergePipeline}, "", "wait for the pipeline of a head the merge moved (flaky retry, then bisection)"),
		s.mergeStep(es{Name: stepMergeChecking}, "", "wait while GitLab computes whether the MR can be merged"),
		s.mergeStep(es{Name: stepMergeBlocked}, "", "BLOCKED with the MR open: something only a person can clear (members HANDLE_MR_BLOCKED with the reason); one look per poll, a webhook sooner; cleared → RUNNING; not within `batch.blockedTimeout` → the failure is decided"),
		{Step: es{Name: stepSettle, Lane: bg, Run: s.run((*run).settle)}, fail: change.FailedCreate,
			waiting: "bindery to settle the failed batch (closing {mr})",
			does:    "carry out the decided failure (`merge_batch.failing`): close the MR, read it again (merged wins), settle"},
		{Step: es{Name: stepBlocked, Lane: bg, Run: s.run((*run).expireBlocked)}, fail: change.FailedCreate,
			does: "the BLOCKED window (`batch.blockedTimeout`) ended: the failure is decided, then settled"},
	}
}

// mergeStep is the row of the merge phase st names (change.Phases): one merge action per run, the members
// failing at the merge when it fails without deciding a failure itself; waiting is the batch's
// own words where the phase has none.
func (s *Service) mergeStep(st engine.Step[memo, Step], waiting, does string) stepRow {
	i := slices.IndexFunc(change.Phases, func(p change.PhaseRow) bool { return Step(p.Phase) == st.Name })
	p := change.Phases[i]
	if p.Waiting != "" {
		waiting = p.Waiting
	}
	return stepRow{Step: engine.Step[memo, Step]{Name: st.Name, Lane: engine.LaneBackground, Polls: p.Polls, Run: s.run((*run).merge)},
		fail: change.FailedMerge, waiting: waiting, does: does}
}

// StepDocs is the batch kind's step table for docs/states.md.
func StepDocs() []engine.StepDoc {
	var out []engine.StepDoc
	for _, r := range (&Service{}).steps() {
		d := engine.DocOf(r.Step)
		d.Does, d.Waiting = r.does, r.waiting
		d.Fails = fmt.Sprintf("%s / %s", r.fail.Create, r.fail.Handle)
		if !r.Polls {
			d.Retry = "backoff on an unavailable dependency, until the batch is older than `batch.blockedTimeout`"
		}
		out = append(out, d)
	}
	return out
}

// def is the batch kind as the engine runs it.
func (s *Service) def() engine.Def[memo, Step] {
	d := engine.Def[memo, Step]{
		Name: state.TaskBatch, Fail: s.failBatch,
		Short: func() time.Duration { short, _, _, _ := s.cfg.Current().PollStages(); return short },
		Long:  func() time.Duration { _, _, long, _ := s.cfg.Current().PollStages(); return long },
		// A batch whose dependency keeps failing is failed once it is older than
		// batch.blockedTimeout: nothing stays in progress forever.
		GiveUp: func(j *job) bool { return j.Task.Age > s.cfg.Current().BatchBlockedTimeout() },
		Lease:  func() time.Duration { return s.cfg.Current().BatchLeaseTTL() },
	}
	for _, r := range s.rows {
		st := r.Step
		st.Attempts = 0 // GiveUp bounds a batch's retries, not a count
		d.Steps = append(d.Steps, st)
	}
	return d
}

// row is the table's row of step (the zero row for a step not in it).
func (s *Service) row(step Step) stepRow {
	for _, r := range s.rows {
		if r.Name == step {
			return r
		}
	}
	return stepRow{fail: change.FailedCreate}
}

// Waiting is what the members of a batch wait for while its task is at step, in plain words
// ({mr}: the merge request); "" when the step says nothing more than the members' own step.
func (s *Service) Waiting(step string) string { return s.row(Step(step)).waiting }

// run is one run of a batch's task.
type run struct {
	s       *Service
	r       *job
	batch   store.Batch // as read at the start: its version guards the write
	members []member    // what the batch holds, rendered (loaded by steps that need them)
	spec    change.Spec
	phase   change.Failure // the declared failure of the step running now
	// failed is the pipeline this step saw fail (0: none): recorded with the step's outcome, so
	// the request page links the run that failed rather than an earlier one; failedURL is its
	// web address, as GitLab gave it.
	failed    int64
	failedURL string
}

type member struct {
	op     store.Operation
	action state.Action
	file   change.FileAction
}

// run wraps a step's action: the batch read afresh (gone or settled: the task ends), a decided
// failure carried out whatever the step (write-ahead), then the action.
func (s *Service) run(action func(*run, context.Context) error) func(context.Context, *job) error {
	return func(ctx context.Context, j *job) error {
		id, err := strconv.ParseInt(j.Task.Ref, 10, 64)
		if err != nil {
			return j.Finish(ctx, nil) // not a batch id: nothing to run
		}
		b, err := s.db.Batch(ctx, id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return j.Finish(ctx, nil)
		case err != nil:
			return engine.Unavailable(err)
		case !b.Status.Active():
			return j.Finish(ctx, nil) // settled elsewhere
		}
		r := &run{s: s, r: j, batch: b, phase: s.row(j.Step.Name).fail}
		j.State = r
		if b.Failing != "" && j.Step.Name != stepBlocked && j.Step.Name != stepSettle {
			return r.settle(ctx) // decided (write-ahead): carried out, never run again
		}
		return action(r, ctx)
	}
}

// failBatch is the declared failure of the step that failed: decided now, carried out by the
// settle step (write-ahead), whatever happens in between. A failure decided already is never
// replaced: the settle step goes on with it.
func (s *Service) failBatch(ctx context.Context, j *job, err error) error {
	r, ok := j.State.(*run)
	switch {
	case !ok: // failed before the batch was read
		return j.Next(ctx, store.TaskNext{In: s.short(), Note: "retrying after an internal error"}, nil)
	case r.batch.Failing != "":
		return j.Next(ctx, store.TaskNext{Step: string(stepSettle), In: s.short(), Note: "settling: " + publicNote(err)}, nil)
	}
	return r.decide(ctx, r.phase.With(publicNote(err)))
}

// next records the step's outcome with the batch's own write (step.Batch is filled in).
func (r *run) next(ctx context.Context, n store.TaskNext, step store.BatchStep) error {
	step.Batch = r.batch
	if step.Change.PipelineID == 0 {
		step.Change.PipelineID = r.failed
	}
	return r.r.Next(ctx, n, func(tx *store.Tx) error {
		b, _, err := tx.AdvanceBatch(ctx, step)
		if err == nil {
			r.batch = b
		}
		return err
	})
}

// load reads what the batch holds and renders every member's file. A member that cannot be
// rendered (its target left the catalog or moved project, its subject cannot be a path) fails
// alone and leaves the batch; one whose target branch differs from the batch's, or whose file
// another member already changes, goes back to the waiting set for a later batch. When the branch
// is (re)built, a write of the file of a binding whose removal has started (a renewal's new
// expiry, a drift restore) leaves the batch as moot: the removal, admitted meanwhile, deletes the
// file, and this car might merge after it (a bisected car goes to the end of the train, behind
// the removal's) and put the file back. Every move of a car behind another is a rebuild, so the
// open step is where it is decided. Those writes are the outcome of this run (the caller's step
// runs again right after); members failing with the same reason share one statement. moved
// reports that it wrote them.
func (r *run) load(ctx context.Context) (moved bool, err error) {
	reqs, err := r.s.db.BatchRequests(ctx, r.batch.ID)
	if err != nil {
		return false, engine.Unavailable(err)
	}
	snap := r.s.cfg.Current()
	invalid := map[string][]string{} // reason → members
	var dropped, later, moot []string
	branch := ""
	paths := map[string]bool{}
	building := Step(r.r.Step.Name) == stepOpen
	for _, q := range reqs {
		if building && q.Action.InEffect() && !state.InEffect(q.Operation.Status, q.Operation.Step) {
			moot = append(moot, q.Operation.OperationID)
			continue
		}
		fa, to, err := r.changeOf(snap, q)
		if err != nil {
			invalid[err.Error()] = append(invalid[err.Error()], q.Operation.OperationID)
			dropped = append(dropped, q.Operation.OperationID)
			continue
		}
		if branch == "" {
			branch = to
		}
		if to != branch || paths[fa.Path] {
			later = append(later, q.Operation.OperationID)
			continue
		}
		paths[fa.Path] = true
		r.members = append(r.members, member{op: q.Operation, action: q.Action, file: fa})
	}
	if len(dropped)+len(later)+len(moot) > 0 {
		var moves []store.MemberMove
		for reason, ops := range invalid {
			moves = append(moves, failing(change.FailedInvalid.With(reason), ops)...)
		}
		moves = append(moves, requeued(later, fmt.Sprintf("not in batch %d: another target branch or the same file as another member; next batch", r.batch.ID))...)
		note := fmt.Sprintf("%d members failed alone (not renderable), %d wait for a later batch", len(dropped), len(later))
		if len(moot) > 0 {
			note += fmt.Sprintf(", %d file writes left: their bindings' removals started", len(moot))
		}
		return true, r.next(ctx, store.TaskNext{}, store.BatchStep{Change: store.BatchChange{Note: note}, Drop: append(dropped, moot...), Requeue: later, Moves: moves})
	}
	if len(r.members) == 0 {
		return true, r.decide(ctx, change.FailedCreate.With("no member left to change"))
	}
	r.spec = change.Spec{Project: r.batch.Project, TargetBranch: branch, SourceBranch: branchName(r.batch.ID)}
	r.respec()
	return false, nil
}

// changeOf is a member's file change and target branch: as validated at admission when it was
// recorded then, else rendered from the catalog now.
func (r *run) changeOf(snap *config.Snapshot, q store.BatchRequest) (change.FileAction, string, error) {
	if c := q.Change; c.Path != "" && c.Branch != "" {
		fa := change.FileAction{Action: "delete", Path: c.Path, OperationID: q.Operation.OperationID}
		switch q.Action {
		case state.ActionAdd, state.ActionRestore:
			fa.Action, fa.Content = "create", c.Content
		case state.ActionRewrite, state.ActionRenew:
			fa.Action, fa.Content = "update", c.Content
		}
		return fa, c.Branch, nil
	}
	t, ok := TargetOf(snap, q.Operation)
	switch {
	case !ok:
		return change.FileAction{}, "", fmt.Errorf("target %s is no longer in the catalog", q.Operation.TargetKey)
	case t.Project != r.batch.Project:
		return change.FileAction{}, "", fmt.Errorf("target %s moved to project %s", t.Key, t.Project)
	}
	fa, err := RenderChange(t, q.Operation, q.Action)
	return fa, t.Branch, err
}

// branchPrefix starts the branch of every batch: bindery/batch-<id>.
const branchPrefix = "bindery/batch-"

func branchName(id int64) string { return branchPrefix + strconv.FormatInt(id, 10) }

// TaskOfBranch names the batch task behind a branch bindery wrote for a batch (a pipeline event
// that names no MR names its branch); false for any other branch.
func TaskOfBranch(branch string) (store.TaskRef, bool) {
	id, ok := strings.CutPrefix(branch, branchPrefix)
	if !ok || id == "" || strings.Trim(id, "0123456789") != "" {
		return store.TaskRef{}, false
	}
	return store.TaskRef{Kind: state.TaskBatch, Ref: id}, true
}

// respec rebuilds the MR's title, description and actions from the members.
func (r *run) respec() {
	var desc strings.Builder
	desc.WriteString("Changes made through bindery requests:\n\n")
	r.spec.Actions = r.spec.Actions[:0]
	for _, m := range r.members {
		fmt.Fprintf(&desc, "- %s %s for %s (%s)\n", m.action, m.op.TargetKey, m.op.SubjectID, m.op.OperationID)
		r.spec.Actions = append(r.spec.Actions, m.file)
	}
	r.spec.Title = fmt.Sprintf("bindery: batch %d (%d changes)", r.batch.ID, len(r.members))
	r.spec.Description = desc.String()
}

// digest names the member set, to tell whether the MR branch carries exactly these members.
func (r *run) digest() string {
	keys := make([]string, len(r.members))
	for i, m := range r.members {
		keys[i] = string(m.action) + " " + m.op.OperationID
	}
	sort.Strings(keys)
	h := sha256.Sum256([]byte(strings.Join(keys, "\n")))
	return hex.EncodeToString(h[:16])
}

func operationIDs(ms []member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.op.OperationID
	}
	return out
}

// open makes sure the MR exists and its branch carries exactly the members held: a new batch gets
// its branch, one commit and its MR; a batch whose members changed since the branch was written
// (bisection, and a crash before the new commit) gets the branch regenerated from the target
// head; otherwise the recorded MR is read as it is. Then the pipeline wait starts. An MR created
// by an attempt whose answer was lost is found by its branch (GitLab's 409 names it).
func (r *run) open(ctx context.Context) error {
	if moved, err := r.load(ctx); moved || err != nil {
		return err
	}
	t, err := r.train(ctx)
	if err != nil {
		return engine.Unavailable(err)
	}
	b := r.batch
	baseBatch, baseSHA, wait := t.base()
	if wait {
		_, _, long, _ := r.s.cfg.Current().PollStages()
		return r.r.Next(ctx, store.TaskNext{In: long, Wait: store.WaitStart, Note: fmt.Sprintf("waiting for car %d ahead of it to write its branch", baseBatch)}, nil)
	}
	if on, ok, err := r.unsettled(ctx, t); err != nil {
		return engine.Unavailable(err)
	} else if ok {
		// A car ahead is about to be rebuilt (what it stands on changed; its own wake brought it
		// news): this car waits for its new branch rather than build on files that will leave.
		// Its rebuild wakes this car.
		_, _, long, _ := r.s.cfg.Current().PollStages()
		return r.r.Next(ctx, store.TaskNext{In: long, Wait: store.WaitStart,
			Note: fmt.Sprintf("waiting for car %d ahead of it to be rebuilt on what is ahead of it now", on)}, nil)
	}
	r.spec.Base = baseSHA
	digest := r.digest()
	why, err := r.stale(ctx, t)
	if err != nil {
		return engine.Unavailable(err)
	}
	rewrite := b.MRIID == 0 || b.BranchDigest != digest || why != "" || b.HeadSHA == ""
	flaky := r.r.Memo.Flaky // a rebuild that is itself a flaky retry (retryBehind) keeps its count
	o, err := r.s.mr.Open(ctx, r.spec, b.MRIID, rewrite, &r.r.Memo)
	if err != nil {
		return err
	}
	r.r.Memo.Flaky = flaky
	switch {
	case o.Result == change.Absent:
		// The only member deletes a file that is already gone: its change is in effect.
		return r.settleAbsent(ctx)
	case o.Result == change.Failed && baseBatch != 0:
		// Refused on top of a car ahead: what that car carries may be leaving (a failure decided
		// ahead, a bisection) — never the members' failure while the train ahead moves. Built on
		// the target, the same refusal would be theirs.
		_, _, long, _ := r.s.cfg.Current().PollStages()
		return r.r.Next(ctx, store.TaskNext{In: long, Wait: store.WaitStart,
			Note: fmt.Sprintf("GitLab refused the commit on top of car %d ahead of it (%s); waiting for the train ahead to settle", baseBatch, publicNote(o.Cause))}, nil)
	case o.Result == change.Failed:
		return r.deterministic(ctx, change.FailedCreate.With("GitLab refused the batch's commit: "+publicNote(o.Cause)))
	case o.Result == change.Restarted:
		r.s.log.Info("batch resumed: a new pipeline replaces one still running", "batch", b.ID, "mr", o.MR.IID)
		return r.next(ctx, r.r.To(stepPipeline), store.BatchStep{Change: store.BatchChange{Note: o.Note}})
	}
	c := store.BatchChange{}
	var moves []store.MemberMove
	if o.New {
		if baseSHA == "" {
			baseSHA = o.Base // built on the target's head: the commit it was then
		}
		c = store.BatchChange{MRIID: o.MR.IID, BranchDigest: &digest, Built: &store.Build{BaseBatch: baseBatch, BaseSHA: baseSHA, HeadSHA: o.Head},
			Note: fmt.Sprintf("MR !%d carries %d changes%s", o.MR.IID, len(r.members), onWords(baseBatch))}
		if b.MRIID != o.MR.IID {
			moves = mrOpened(o.MR.IID, fmt.Sprintf("batch %d, MR !%d: waiting for its pipeline", b.ID, o.MR.IID))
		}
	}
	if err := r.next(ctx, r.r.To(stepPipeline), store.BatchStep{Change: c, Moves: moves}); err != nil {
		return err
	}
	if o.New {
		r.s.wakeBehind(ctx, r.batch) // they were built on its old branch, or wait for its first
	}
	return nil
}

// onWords says what a car was built on, for its note.
func onWords(baseBatch int64) string {
	if baseBatch == 0 {
		return ""
	}
	return fmt.Sprintf(", built on batch %d ahead of it in the merge train", baseBatch)
}

// pipeline is one look at the head's pipeline: pending → the next look by the staged schedule
// (no answer within poll.timeout, even from a new pipeline: BLOCKED for operators); passed →
// approve; failed (after the flaky retries) → bisection, or the failure of a single member.
func (r *run) pipeline(ctx context.Context) error {
	b := r.batch
	t, err := r.train(ctx)
	if err != nil {
		return engine.Unavailable(err)
	}
	if why, err := r.stale(ctx, t); err != nil || why != "" {
		if err != nil {
			return engine.Unavailable(err)
		}
		return r.rebuild(ctx, why)
	}
	// A failure while a car ahead is still being tested may be that car's: it is not retried or
	// counted until the cars ahead passed (or left, and this car is rebuilt without them).
	hold := !t.aheadPassed(b)
	// A car retrying its failure (flaky) while a car behind it failed too — another pipeline
	// that carries this car's changes — has failed twice: what the retry would tell is known,
	// so the failure is decided now, and the cars behind it are rebuilt without it at once.
	if !hold && r.r.Memo.Flaky > 0 && b.Bisections == 0 && b.BisectOf == 0 && t.behind(b) {
		if failed, err := r.failedBehind(ctx, t); err != nil {
			return engine.Unavailable(err)
		} else if failed {
			return r.failedTwice(ctx, fmt.Sprintf("pipeline %d failed and ran again (batch.flakyRetries)", b.PipelineID), b.PipelineID, "")
		}
	}
	// The halves of a bisection get no flaky retry: the failure of the set they come from
	// outlived its retries already, and each retry would cost every level of the search a pipeline.
	retry := !hold && b.Bisections == 0 && b.BisectOf == 0
	// With cars behind, the flaky retry is decided here, after the failure is seen (retryBehind).
	o, err := r.s.mr.Pipeline(ctx, r.r.Run, b.Project, b.MRIID, &r.r.Memo, retry && !t.behind(b))
	if err != nil {
		return err
	}
	var pipeline int64
	if o.Pipeline != nil {
		pipeline = o.Pipeline.ID
	}
	switch {
	case o.Result == change.Closed:
		return r.decide(ctx, change.FailedMRClosed.With(fmt.Sprintf("MR !%d was closed outside bindery", b.MRIID)))
	case o.Result == change.Retried:
		return r.next(ctx, r.r.To(stepPipeline), store.BatchStep{Change: store.BatchChange{PipelineID: pipeline, Note: o.Note},
			Moves: flakyRetry(pipeline, flakyWords(o.Pipeline, r.r.Memo.Flaky, r.s.cfg.Current().BatchFlakyRetries()))})
	case o.Result == change.Merged:
		return r.settleMerged(ctx, fmt.Sprintf("MR !%d found merged", b.MRIID), o.MR)
	case o.Result == change.Passed && t.beside:
		return r.rejoin(ctx, t, o, pipeline)
	case o.Result == change.Passed:
		return r.passed(ctx, o, pipeline, store.BatchChange{Note: o.Note})
	case o.Result == change.Failed && hold:
		_, _, long, _ := r.s.cfg.Current().PollStages()
		if err := r.r.Next(ctx, store.TaskNext{In: long, Wait: store.WaitKeep, Checks: r.r.Task.Checks,
			Note: o.Note + heldFailure}, nil); err != nil {
			return err
		}
		r.s.wakeAhead(ctx, t, b) // a car ahead retrying its own failure learns that this one failed too
		return nil
	case o.Result == change.Failed && retry && t.behind(b) && r.r.Memo.Flaky < r.s.cfg.Current().BatchFlakyRetries():
		return r.retryBehind(ctx, t, o)
	case o.Result == change.Failed:
		r.failed = pipeline
		if o.Pipeline != nil {
			r.failedURL = o.Pipeline.WebURL
		}
		r.s.mr.KeepFailedJob(ctx, r.s.db, b.Project, pipeline)
		return r.deterministic(ctx, change.FailedPipeline.With(o.Note))
	case o.Result == change.Replaced:
		return r.next(ctx, r.r.To(stepPipeline), store.BatchStep{Change: store.BatchChange{Note: o.Note}})
	case o.Result == change.Stuck:
		return r.block(ctx, change.PipelineStuck, o.Reason+"; an operator can resume the batch")
	}
	// Waiting: the next look; a new pipeline id is worth recording (the request page links it).
	if pipeline != 0 && pipeline != b.PipelineID {
		return r.next(ctx, o.Next, store.BatchStep{Change: store.BatchChange{PipelineID: pipeline}})
	}
	return r.r.Next(ctx, o.Next, nil)
}

// passed records the pass of the head's pipeline (with c, the batch's change of this step) and
// goes on to the approvals.
func (r *run) passed(ctx context.Context, o change.Outcome, pipeline int64, c store.BatchChange) error {
	r.s.rec.Since("bindery_batch_ci_seconds", time.UnixMilli(r.r.Memo.CI), "project", r.batch.Project)
	r.r.Memo.CI = 0
	tested := o.MR.SHA
	c.PipelineID, c.Tested = pipeline, &tested
	if err := r.next(ctx, r.r.To(stepApprove), store.BatchStep{Change: c, Moves: pipelinePassed(pipeline, o.Note)}); err != nil {
		return err
	}
	r.s.wakeBehind(ctx, r.batch) // a failure held behind it is now theirs to decide
	return nil
}

// retryBehind is the flaky retry of a car with cars behind it. When a car behind failed too (its
// failure held: its branch carries this one's), that failure is the retry: two pipelines that
// carry the car's changes failed, so the failure is the car's (failedTwice) and the cars behind
// it are rebuilt without it at once — not after a retry of a pipeline and then the bisection.
// Otherwise the pipeline runs again on the same commit and nothing behind it changes.
func (r *run) retryBehind(ctx context.Context, t train, o change.Outcome) error {
	b := r.batch
	failedBehind, err := r.failedBehind(ctx, t)
	if err != nil {
		return engine.Unavailable(err)
	}
	if failedBehind {
		var pipeline int64
		var url string
		if o.Pipeline != nil {
			pipeline, url = o.Pipeline.ID, o.Pipeline.WebURL
		}
		return r.failedTwice(ctx, o.Note, pipeline, url)
	}
	r.r.Memo.Flaky++
	if err := r.s.mr.RetryPipeline(ctx, b.Project, o.MR, o.Pipeline); err != nil {
		return err
	}
	r.r.Memo.CI = time.Now().UnixMilli()
	note := fmt.Sprintf("%s; new run %d on the same commit (batch.flakyRetries)", o.Note, r.r.Memo.Flaky)
	return r.next(ctx, r.r.To(stepPipeline), store.BatchStep{Change: store.BatchChange{Note: note},
		Moves: flakyRetry(0, flakyWords(o.Pipeline, r.r.Memo.Flaky, r.s.cfg.Current().BatchFlakyRetries()))})
}

// flakyWords is what a member's timeline says of a flaky retry (explain.FlakyRetryNote).
func flakyWords(p *gitlab.Pipeline, n, of int) string {
	return explain.FlakyRetryNote(change.PipelineWords(p), n, of)
}

// failedTwice decides the failure of a car whose pipeline failed while a car behind it, which
// carries its changes, failed too: the car is bisected (a single member fails with it), as after
// a failed retry.
func (r *run) failedTwice(ctx context.Context, what string, pipeline int64, url string) error {
	r.failed, r.failedURL = pipeline, url
	r.s.mr.KeepFailedJob(ctx, r.s.db, r.batch.Project, pipeline)
	return r.deterministic(ctx, change.FailedPipeline.With(what+", and so did the batches behind it, which carry its changes (a failure twice, as a retry would tell: batch.flakyRetries)"))
}

// failedBehind reports whether a car behind this one failed its pipeline (held, undecided).
func (r *run) failedBehind(ctx context.Context, t train) (bool, error) {
	var refs []string
	seen := false
	for _, c := range t.cars {
		if seen {
			refs = append(refs, ref(c.ID))
		}
		seen = seen || c.ID == r.batch.ID
	}
	tasks, err := r.s.db.TasksOf(ctx, state.TaskBatch, refs)
	if err != nil {
		return false, err
	}
	for _, c := range t.cars {
		if task, ok := tasks[ref(c.ID)]; ok && CarState(c, &task) == CarFailed {
			return true, nil
		}
	}
	return false, nil
}

// deterministic handles a failure that is a property of the member set (docs/architecture.md,
// "Bisection without collateral"): a batch of several members is bisected, a single member
// fails with it — named the culprit when a bisection led to it.
func (r *run) deterministic(ctx context.Context, f change.Failure) error {
	if len(r.members) == 0 {
		if moved, err := r.load(ctx); moved || err != nil {
			return err
		}
	}
	if len(r.members) > 1 {
		return r.bisect(ctx, f)
	}
	if r.batch.Bisections == 0 {
		return r.decide(ctx, f)
	}
	culprit := r.members[0].op.OperationID
	b := r.batch
	found := fmt.Sprintf("batch %d isolated the culprit %s after %d %s", b.ID, culprit, b.Bisections, explain.Plural(b.Bisections, "bisection"))
	if b.BisectOf != 0 {
		found += fmt.Sprintf(" (bisection of batch %d)", b.BisectOf)
	}
	r.s.log.Info("culprit isolated", "batch", b.ID, "culprit", culprit, "bisections", b.Bisections, "bisection_of", b.BisectionRoot())
	return r.decideAs(ctx, f.With(found+": "+f.Note), culprit)
}

// failedLink is the web address of the pipeline this step saw fail, for the members' words.
func (r *run) failedLink(kind string, id int64) string {
	if kind == "pipeline" && id == r.failed {
		return r.failedURL
	}
	return ""
}

// bisect keeps the first half in this batch (the branch is regenerated with only their files,
// same MR, new pipeline: the open step, next) and returns the second half to the waiting set as
// one suspect group: the claim takes it alone, before anything else of the partition, so the
// culprit — if it is there — fails no newcomer, and a culprit is isolated in ⌈log₂ n⌉
// bisections. The stale branch digest makes the open step regenerate, after a crash too.
func (r *run) bisect(ctx context.Context, f change.Failure) error {
	why := f.Note
	keep := (len(r.members) + 1) / 2
	back := operationIDs(r.members[keep:])
	b := r.batch
	round := b.Bisections + 1
	note := fmt.Sprintf("%s: bisection %d of batch %d's members: %d stay in batch %d, %d return to the waiting set to be retried on their own before any newcomer",
		why, round, b.BisectionRoot(), keep, b.ID, len(back))
	stale := ""
	r.r.Memo = memo{}
	// In a train, the kept half goes to the end of it: the cars behind it move up and are rebuilt
	// without its members, so they merge without waiting for the search (with one car, or as the
	// last car, it stays where it is).
	t, err := r.train(ctx)
	if err != nil {
		return engine.Unavailable(err)
	}
	toEnd := t.behind(b)
	if toEnd {
		note += "; it goes to the end of the merge train, and the batches behind it are rebuilt without its members"
	}
	if err := r.next(ctx, r.r.To(stepOpen), store.BatchStep{
		Change: store.BatchChange{Note: note, BranchDigest: &stale, ToEnd: toEnd, Beside: r.s.cfg.Current().BatchIsolationCars()}, Requeue: back, Bisect: true,
		// The members read why in the words of the failure's step (the cause stays in the
		// batch's note, for operators).
		Moves: requeued(back, fmt.Sprintf("returned to the waiting set: batch %d is bisected; retried with its half only, before any newcomer. %s", b.ID, explain.Told(f.Create, why, r.failedLink))),
	}); err != nil {
		return err
	}
	if toEnd {
		r.s.wakeBehind(ctx, b) // as read before the move: the cars that were behind it
	}
	r.s.rec.Inc("bindery_batch_bisections_total", "project", b.Project)
	r.s.log.Info("batch bisected", "batch", b.ID, "round", round, "bisection_of", b.BisectionRoot(), "kept", keep, "returned", len(back), "why", why)
	return nil
}

// approve has both reviewer accounts approve the MR's head.
func (r *run) approve(ctx context.Context) error {
	b := r.batch
	o, err := r.s.mr.Approve(ctx, b.Project, b.MRIID, &r.r.Memo)
	if err != nil {
		return err
	}
	switch o.Result {
	case change.Closed:
		return r.decide(ctx, change.FailedMRClosed.With(fmt.Sprintf("MR !%d was closed outside bindery", b.MRIID)))
	case change.Merged:
		return r.settleMerged(ctx, fmt.Sprintf("MR !%d found merged", b.MRIID), o.MR)
	}
	return r.next(ctx, r.r.To(stepTurn), store.BatchStep{Change: store.BatchChange{Note: o.Note}, Moves: handling(state.StepHandleApproved, o.Note)})
}

// merge is one action of the merge (the lifecycle's merge phases), and what its outcome means for
// a batch: a conflict that survives regeneration is bisected like a failed pipeline (never
// BLOCKED, which would hold the partition behind a change that will not merge); an MR a person
// must clear, or GitLab's own work that gives no answer, makes the batch BLOCKED.
func (r *run) merge(ctx context.Context) error {
	if moved, err := r.load(ctx); moved || err != nil { // the spec: a conflict regenerates from it
		return err
	}
	b := r.batch
	o, err := r.s.mr.Merge(ctx, r.r.Run, r.spec, b.MRIID, change.MergePhase(r.r.Step.Name), &r.r.Memo)
	if err != nil {
		return err
	}
	if moved := o.MR.SHA != "" && o.MR.SHA != b.HeadSHA && o.Result != change.Merged; moved {
		// A rebase or a regeneration gave the branch a new head: it is what the cars behind
		// must be built on now, and nothing of it is tested yet.
		return r.headMoved(ctx, o)
	}
	m := change.MergeMeaning(o)
	switch m.Class {
	case change.MergeLanded:
		if r.r.Memo.Merge != 0 {
			r.s.rec.Since("bindery_batch_merge_seconds", time.UnixMilli(r.r.Memo.Merge), "project", b.Project)
		}
		return r.settleMerged(ctx, fmt.Sprintf("MR !%d merged", b.MRIID), o.MR)
	case change.MergeFails:
		switch o.Result {
		case change.Closed:
			return r.decide(ctx, m.Failure.With(fmt.Sprintf("MR !%d was closed outside bindery", b.MRIID)))
		case change.Expired:
			reason := o.Reason
			if reason == "" {
				reason = b.Note
			}
			return r.decide(ctx, m.Failure.With(fmt.Sprintf("%s, and nobody did within batch.blockedTimeout (%s)", reason, r.s.cfg.Current().BatchBlockedTimeout())))
		}
		// A conflict that survives regeneration, or a pipeline failing for good: a property of
		// the member set, bisected (never BLOCKED, which would hold the partition behind a
		// change that will not merge).
		return r.deterministic(ctx, m.Failure.With(o.Note))
	case change.MergeAgain:
		return r.next(ctx, r.r.To(Step(o.Phase)), store.BatchStep{Change: store.BatchChange{Note: o.Note}})
	case change.MergeBlocks:
		return r.blockOnMR(ctx, o.Reason)
	case change.MergeHolds:
		return r.block(ctx, m.Steps, o.Reason+"; an operator can resume the batch")
	case change.MergeResumes:
		return r.next(ctx, r.r.To(Step(o.Phase)), store.BatchStep{
			Change: store.BatchChange{Status: state.BatchRunning, Note: o.Note}, Moves: resumed(o.Note)})
	}
	if o.Result == change.Waiting {
		return r.r.Next(ctx, o.Next, nil)
	}
	// Moved: progress is worth a step (the request view shows it).
	if tested := r.testedNow(o.MR.SHA); tested != nil {
		// The pipeline of the head a rebase or a regeneration gave it passed: recorded like a
		// pass at the pipeline step, so the cars built on this head find it tested (a failure
		// of theirs held behind it is now theirs to decide).
		note := o.Note
		if note == "" {
			note = fmt.Sprintf("the pipeline of MR !%d's new head %s passed", b.MRIID, short(*tested))
		}
		if err := r.next(ctx, o.Next, store.BatchStep{Change: store.BatchChange{Note: note, Tested: tested}}); err != nil {
			return err
		}
		r.s.wakeBehind(ctx, r.batch)
		return nil
	}
	if o.Event == "" {
		return r.r.Next(ctx, o.Next, nil)
	}
	return r.next(ctx, o.Next, store.BatchStep{Change: store.BatchChange{Note: o.Note}, Moves: handling(state.StepHandleStarted, o.Note)})
}

// testedNow is head when the merge phase's pipeline passed for it (the memo's tested head) and
// the batch has not recorded it yet; nil otherwise.
func (r *run) testedNow(head string) *string {
	if t := r.r.Memo.Tested; t != "" && t == head && t != r.batch.TestedSHA {
		return &t
	}
	return nil
}

// headMoved records the branch's new head (a rebase or a regeneration in the merge) with the
// merge action's own outcome, and wakes the cars behind: they were built on the old one.
func (r *run) headMoved(ctx context.Context, o change.Outcome) error {
	n := o.Next
	switch o.Result {
	case change.Waiting, change.Moved:
	default:
		// Anything else is decided on the next look, with the new head recorded.
		n = store.TaskNext{Wait: store.WaitStart}
	}
	note := o.Note
	if note == "" {
		note = fmt.Sprintf("MR !%d has a new head %s", r.batch.MRIID, short(o.MR.SHA))
	}
	err := r.next(ctx, n, store.BatchStep{Change: store.BatchChange{Note: note, Built: &store.Build{HeadSHA: o.MR.SHA}, Tested: r.testedNow(o.MR.SHA)},
		Moves: handling(state.StepHandleStarted, note)})
	if err != nil {
		return err
	}
	r.s.wakeBehind(ctx, r.batch)
	return nil
}

// blockOnMR: something on the MR that bindery's accounts cannot clear keeps GitLab from merging
// it. The batch is BLOCKED with its MR left open and keeps looking (a webhook wakes it sooner):
// once a person clears it, the merge goes on by itself; nobody does within batch.blockedTimeout,
// it fails. Its members show WAIT_MANUAL with the reason.
func (r *run) blockOnMR(ctx context.Context, reason string) error {
	n := r.r.To(stepMergeBlocked)
	n.Note = "BLOCKED: " + reason
	if err := r.next(ctx, n, store.BatchStep{Change: store.BatchChange{Status: state.BatchBlocked, Note: reason},
		Moves: stopped(change.MRBlocked, reason)}); err != nil {
		return err
	}
	r.s.rec.Inc("bindery_batches_blocked_total", "project", r.batch.Project)
	r.s.log.Warn("batch blocked on its MR", "batch", r.batch.ID, "mr", r.batch.MRIID, "why", reason)
	return nil
}

// block stops the batch at a step the same MR can resume from: BLOCKED keeps the partition's slot
// for batch.blockedTimeout (the task's next run, which then settles it); its members show
// WAIT_MANUAL.
func (r *run) block(ctx context.Context, at change.Steps, note string) error {
	n := r.r.To(stepBlocked)
	n.In, n.Note = r.s.cfg.Current().BatchBlockedTimeout(), "BLOCKED: "+note
	if err := r.next(ctx, n, store.BatchStep{
		Change: store.BatchChange{Status: state.BatchBlocked, Note: note},
		Moves:  stopped(at, note),
	}); err != nil {
		return err
	}
	r.s.rec.Inc("bindery_batches_blocked_total", "project", r.batch.Project)
	r.s.log.Warn("batch blocked", "batch", r.batch.ID, "why", note)
	return nil
}

// expireBlocked: nobody resolved the BLOCKED batch within batch.blockedTimeout; its failure is
// decided and settled.
func (r *run) expireBlocked(ctx context.Context) error {
	if r.batch.Failing != "" {
		return r.settle(ctx)
	}
	if r.batch.Status != state.BatchBlocked {
		// Resumed by an operator without a new task step (an older version): go on.
		return r.r.Next(ctx, r.r.To(stepOpen), nil)
	}
	return r.decide(ctx, abandoned.With(fmt.Sprintf("BLOCKED for longer than batch.blockedTimeout (%s); settled by the sweep", r.s.cfg.Current().BatchBlockedTimeout())))
}

// decide records the batch's failure before anything is done about it (write-ahead): the settle
// step carries it out — closes the MR, then fails the members with this cause — on whichever
// instance runs it, after a crash too.
func (r *run) decide(ctx context.Context, f change.Failure) error {
	return r.decideAs(ctx, f, "")
}

// decideAs is decide, naming the culprit a bisection isolated ("": none).
func (r *run) decideAs(ctx context.Context, f change.Failure, culprit string) error {
	enc := encodeFailure(f)
	c := store.BatchChange{Failing: &enc, Note: "failed: " + f.Note + "; settling"}
	if culprit != "" {
		c.Culprit = &culprit
	}
	return r.next(ctx, r.r.To(stepSettle), store.BatchStep{Change: c})
}

// settle carries out the decided failure: if the MR is still open, close it, then read it again
// — merged means the batch succeeded after all (the merge wins the race with the close); locked
// (GitLab is merging right now) is undecided and read again shortly; closed, or no MR → FAILED
// with the decided cause, the members' processing rows removed in the same transaction. A batch
// whose MR was never recorded looks for one on its branch (created by an attempt whose answer
// was lost) and closes it, or adopts it when it merged. A settlement GitLab or the database does
// not let through is tried again with backoff, and the batch says why (last_error).
func (r *run) settle(ctx context.Context) error {
	b := r.batch
	f := decodeFailure(b.Failing)
	if b.Failing == "" {
		f = abandoned.With("settled")
	}
	wasMerged, iid, err := r.s.closeMR(ctx, b)
	switch {
	case errors.Is(err, change.ErrLocked):
		return r.r.Next(ctx, store.TaskNext{Step: string(stepSettle), In: r.s.short(), Note: "the MR is being merged right now; looking again"}, nil)
	case err != nil:
		// Transient or not, the decided failure stands: the batch stays active and says why
		// (an MR bindery cannot close must not be left to merge after its members failed).
		short, _, long, _ := r.s.cfg.Current().PollStages()
		wait, _ := engine.Backoff(short, long)(r.r.Run, err)
		msg := engine.Public(err)
		r.s.rec.Inc("bindery_batch_settle_failures_total", "project", b.Project)
		r.s.log.Warn("batch settlement did not go through; retrying", "batch", b.ID, "failure", f.Note, "error", err, "wait", wait)
		return r.next(ctx, store.TaskNext{Step: string(stepSettle), In: max(wait, outbound.RetryAfterOf(err)), Failures: r.r.Task.Failures + 1, Note: "settling did not go through: " + msg},
			store.BatchStep{Change: store.BatchChange{LastError: &msg, Note: fmt.Sprintf("failed (%s), but settling it did not go through: %s; retrying", f.Note, msg)}})
	case wasMerged:
		mr, err := r.s.mr.GitLab.GetMergeRequest(ctx, b.Project, iid)
		if err != nil {
			return fmt.Errorf("read the merged MR !%d: %w", iid, err)
		}
		return r.settleMerged(ctx, fmt.Sprintf("MR !%d turned out merged: the merge wins over the close", iid), mr)
	}
	return r.settleAs(ctx, state.BatchFailed, f.Note, failing(f, nil))
}

// settleMerged settles the batch as merged by mr (as GitLab gave it after the merge), recording
// where it landed in the project's merge order.
func (r *run) settleMerged(ctx context.Context, note string, mr gitlab.MergeRequest) error {
	s := store.Settlement{Status: state.BatchSucceeded, Note: note, Moves: merged(mr.IID, note), Merge: change.Landed(r.batch.Project, mr)}
	if tested := r.testedNow(mr.SHA); tested != nil {
		s.Tested = *tested // passed and merged in one action of the merge phase
	}
	if r.r.Step.Name.merging() {
		s.MergedOn = r.r.Memo.On // the target the merge call went onto, as last read (batch.builtOn)
	}
	return r.settleWith(ctx, s)
}

// settleAbsent ends a batch whose only member deletes a file already gone: the change is in
// effect. An MR left from a larger member set is closed first (merge wins there too).
func (r *run) settleAbsent(ctx context.Context) error {
	if _, _, err := r.s.closeMR(ctx, r.batch); err != nil {
		return err
	}
	return r.settleAs(ctx, state.BatchSucceeded, "the file is already absent", merged(0, "the file is already absent"))
}

// settleAs ends the batch: the task finished under its fence, then the guarded settlement in the
// same transaction (a second settler fails at once); the outcome is emitted after the commit.
func (r *run) settleAs(ctx context.Context, status state.BatchStatus, note string, moves []store.MemberMove) error {
	return r.settleWith(ctx, store.Settlement{Status: status, Note: note, Moves: moves})
}

func (r *run) settleWith(ctx context.Context, s store.Settlement) error {
	b := r.batch
	s.BatchID, s.Version = b.ID, b.Version
	status, note := s.Status, s.Note
	var res store.Settled
	err := r.r.Finish(ctx, func(tx *store.Tx) error {
		var err error
		res, err = tx.Settle(ctx, s)
		return err
	})
	if err != nil {
		return fmt.Errorf("settle batch %d: %w", b.ID, err)
	}
	r.s.rec.Inc("bindery_batches_settled_total", "project", b.Project, "status", string(status))
	r.s.log.Info("batch settled", "batch", b.ID, "status", status, "members", len(res.Members), "moved", len(res.Flipped), "note", note)
	if m := s.Merge; status == state.BatchSucceeded && m != nil && m.MRIID != 0 && r.s.afterMerge != nil {
		r.s.afterMerge(ctx, b.Project, m.MRIID)
	}
	// The cars behind it go on: their turn, or a rebuild without it. (Its place in the train is
	// free for the next round.)
	r.s.wakeBehind(ctx, b)
	return nil
}

// publicNote is what members and operators may read of a failure: our own validation's words,
// the known outcomes of a merge, the classified cause of an outbound failure; never raw upstream
// text, panic text or internals (those go to the log).
func publicNote(err error) string {
	for _, known := range []error{change.ErrInvalidChange, change.ErrConflict, change.ErrMRClosed, change.ErrPipelineFailed, change.ErrNothingToChange} {
		if errors.Is(err, known) {
			return err.Error()
		}
	}
	return engine.Public(err)
}

// Repair is the task an active batch found without one gets (the repair sweep — never the
// product's own writes): a RUNNING batch starts over at its open step, which reads everything
// from GitLab; a BLOCKED one gets its operators' window again.
func (s *Service) Repair(b store.Batch) store.TaskSpec {
	if b.Status == state.BatchBlocked {
		return s.def().Spec(ref(b.ID), stepBlocked, s.cfg.Current().BatchBlockedTimeout(), memo{})
	}
	return s.task(b.ID, stepOpen, memo{})
}
