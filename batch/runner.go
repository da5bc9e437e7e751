package batch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"bindery/change"
	"bindery/config"
	"bindery/engine"
	"bindery/explain"
	"bindery/gitlab"
	"bindery/outbound"
	"bindery/state"
	"bindery/store"
)

// A batch is one task of the engine (kind store.TaskBatch, ref = the batch id): each run of it
// is one bounded action of its current step — open the MR, one look at the pipeline, approve,
// one merge action, settle — and records the outcome and the next due time in one transaction
// fenced on the task's epoch, whose next statement is the batch's own guarded write (I6). Every
// step reads the remote state first, so any instance resumes a batch after a crash, an operator's
// resume or a lost claim. The steps (stored as the task's step; never rename one):
const (
	stepOpen     = "open"     // members rendered, branch + commit + MR (or the branch regenerated)
	stepPipeline = "pipeline" // the MR's pipeline, one look per run (flaky retries, bisection)
	stepApprove  = "approve"  // both reviewer accounts approve the head
	// change.MergeAttempt, MergeRebasing, MergePipeline, MergeChecking, MergeBlocked: the merge,
	// one action per run; in MergeBlocked the batch is BLOCKED until a person clears the MR
	stepSettle  = "settle"  // the decided failure (merge_batch.failing) is carried out: MR closed, members failed
	stepBlocked = "blocked" // BLOCKED: operators' window; when it ends, settled as failed
)

// memo is what a batch remembers between its runs (the task's memo).
type memo struct {
	Flaky   int   `json:"flaky,omitempty"`   // flaky retries used on the current branch
	Restart bool  `json:"restart,omitempty"` // an operator resumed it: replace a pipeline still running
	Hung    int   `json:"hung,omitempty"`    // pipelines replaced because they gave no answer in time
	Regen   bool  `json:"regen,omitempty"`   // the merge regenerated the branch once already
	Refused int   `json:"refused,omitempty"` // merges GitLab refused in a row
	CI      int64 `json:"ci,omitempty"`      // when the current pipeline wait started (unix ms, for the metric)
	Merge   int64 `json:"merge,omitempty"`   // when the merge phase started (unix ms)
	// Tested: the head whose pipeline passed (the only sha merged); Approved: the head the
	// reviewer accounts approved.
	Tested   string `json:"tested,omitempty"`
	Approved string `json:"approved,omitempty"`
}

func decodeMemo(s string) memo {
	var m memo
	_ = json.Unmarshal([]byte(s), &m) // an unreadable memo is an empty one: the steps re-read
	return m
}

func (m memo) encode() *string {
	b, _ := json.Marshal(m)
	s := string(b)
	return &s
}

// run is one run of a batch's task.
type run struct {
	s       *Service
	r       *engine.Run
	batch   store.Batch // as read at the start: its version guards the write
	memo    memo
	members []member // what the batch holds, rendered (loaded by steps that need them)
	spec    change.Spec
	phase   failure // the declared failure of the step running now
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

func (s *Service) kind() engine.Kind {
	return engine.Kind{
		Name:  state.TaskBatch,
		Run:   s.runBatch,
		Fail:  s.failBatch,
		Retry: s.retryBatch,
		Lease: func() time.Duration { return s.cfg.Current().BatchLeaseTTL() },
	}
}

// runBatch is one run of a batch's task.
func (s *Service) runBatch(ctx context.Context, er *engine.Run) error {
	id, err := strconv.ParseInt(er.Task.Ref, 10, 64)
	if err != nil {
		return er.Finish(ctx, nil) // not a batch id: nothing to run
	}
	b, err := s.db.Batch(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return er.Finish(ctx, nil)
	case err != nil:
		return engine.Unavailable(err)
	case !b.Status.Active():
		return er.Finish(ctx, nil) // settled elsewhere
	}
	r := &run{s: s, r: er, batch: b, memo: decodeMemo(er.Task.Memo), phase: failedCreate}
	er.State = r
	step := er.Task.Step
	if b.Failing != "" && step != stepBlocked {
		step = stepSettle // decided (write-ahead): carried out, never run again
	}
	switch step {
	case stepOpen:
		return r.open(ctx)
	case stepPipeline:
		return r.pipeline(ctx)
	case stepApprove:
		return r.approve(ctx)
	case string(change.MergeAttempt), string(change.MergeRebasing), string(change.MergePipeline),
		string(change.MergeChecking), string(change.MergeBlocked):
		return r.merge(ctx, change.MergePhase(step))
	case stepSettle:
		return r.settle(ctx)
	case stepBlocked:
		return r.expireBlocked(ctx)
	}
	return er.Park(ctx, fmt.Sprintf("no step %q of a batch here", step))
}

// failBatch is the declared failure of the step that failed: decided now, carried out by the
// settle step (write-ahead), whatever happens in between. A failure decided already is never
// replaced: the settle step goes on with it.
func (s *Service) failBatch(ctx context.Context, er *engine.Run, err error) error {
	r, ok := er.State.(*run)
	switch {
	case !ok: // failed before the batch was read
		return er.Next(ctx, store.TaskNext{In: s.short(), Note: "retrying after an internal error"}, nil)
	case r.batch.Failing != "":
		return er.Next(ctx, store.TaskNext{Step: stepSettle, In: s.short(), Note: "settling: " + publicNote(err)}, nil)
	}
	return r.decide(ctx, r.phase.with(publicNote(err)))
}

// retryBatch: a batch whose dependency does not answer tries again with backoff (poll.short
// doubling up to poll.long) — until it is older than batch.blockedTimeout: nothing stays in
// progress forever, it is then failed.
func (s *Service) retryBatch(er *engine.Run, err error) (time.Duration, bool) {
	snap := s.cfg.Current()
	short, _, long, _ := snap.PollStages()
	if er.Task.Age > snap.BatchBlockedTimeout() {
		return 0, false
	}
	wait, _ := engine.Backoff(short, long)(er, err)
	return wait, true
}

// next records the step's outcome with the batch's own write (step.Batch is filled in).
func (r *run) next(ctx context.Context, n store.TaskNext, step store.BatchStep) error {
	step.Batch = r.batch
	if step.Change.PipelineID == 0 {
		step.Change.PipelineID = r.failed
	}
	if n.Memo == nil {
		n.Memo = r.memo.encode()
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
// another member already changes, goes back to the waiting set for a later batch. Those writes
// are the outcome of this run (the caller's step runs again right after); members failing with
// the same reason share one statement. moved reports that it wrote them.
func (r *run) load(ctx context.Context) (moved bool, err error) {
	reqs, err := r.s.db.BatchRequests(ctx, r.batch.ID)
	if err != nil {
		return false, engine.Unavailable(err)
	}
	snap := r.s.cfg.Current()
	invalid := map[string][]string{} // reason → members
	var dropped, later []string
	branch := ""
	paths := map[string]bool{}
	for _, q := range reqs {
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
	if len(dropped)+len(later) > 0 {
		var moves []store.MemberMove
		for reason, ops := range invalid {
			moves = append(moves, failedInvalid.with(reason).moves(ops)...)
		}
		moves = append(moves, requeued(later, fmt.Sprintf("not in batch %d: another target branch or the same file as another member; next batch", r.batch.ID))...)
		note := fmt.Sprintf("%d members failed alone (not renderable), %d wait for a later batch", len(dropped), len(later))
		return true, r.next(ctx, store.TaskNext{}, store.BatchStep{Change: store.BatchChange{Note: note}, Drop: dropped, Requeue: later, Moves: moves})
	}
	if len(r.members) == 0 {
		return true, r.decide(ctx, failedCreate.with("no member left to change"))
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
		if q.Action == state.ActionAdd {
			fa.Action, fa.Content = "create", c.Content
		}
		return fa, c.Branch, nil
	}
	t, ok := snap.Target(q.Operation.TargetKey)
	switch {
	case !ok:
		return change.FileAction{}, "", fmt.Errorf("target %s is no longer in the catalog", q.Operation.TargetKey)
	case t.Project != r.batch.Project:
		return change.FileAction{}, "", fmt.Errorf("target %s moved to project %s", t.Key, t.Project)
	}
	fa, err := RenderChange(t, q.Operation, q.Action)
	return fa, t.Branch, err
}

func branchName(id int64) string { return fmt.Sprintf("bindery/batch-%d", id) }

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

func (r *run) stages() engine.Stages {
	short, n, long, timeout := r.s.cfg.Current().PollStages()
	return engine.Stages{Short: short, ShortCount: n, Long: long, Timeout: timeout}
}

// waitFor is the outcome "go to step and wait for GitLab there", the wait starting now.
func (r *run) waitFor(step string) store.TaskNext {
	return store.TaskNext{Step: step, Wait: store.WaitStart} // the first look at once
}

// open makes sure the MR exists and its branch carries exactly the members held: a new batch gets
// its branch, one commit and its MR; a batch whose members changed since the branch was written
// (bisection, and a crash before the new commit) gets the branch regenerated from the target
// head; otherwise the recorded MR is read as it is. Then the pipeline wait starts. An MR created
// by an attempt whose answer was lost is found by its branch (GitLab's 409 names it).
func (r *run) open(ctx context.Context) error {
	r.phase = failedCreate
	if moved, err := r.load(ctx); moved || err != nil {
		return err
	}
	digest := r.digest()
	b := r.batch
	rewrite := b.MRIID == 0 || b.BranchDigest != digest
	mr, err := r.s.change.Open(ctx, r.spec, b.MRIID)
	if err == nil && b.MRIID != 0 && rewrite && mr.Open() {
		err = r.s.change.Regenerate(ctx, r.spec)
	}
	switch {
	case errors.Is(err, change.ErrNothingToChange):
		// The only member deletes a file that is already gone: its change is in effect.
		return r.settleAbsent(ctx)
	case err != nil && commitRefused(err):
		return r.deterministic(ctx, failedCreate.with("GitLab refused the batch's commit: "+publicNote(err)))
	case err != nil:
		return err
	}
	restart := r.memo.Restart && !rewrite
	r.memo.Restart = false
	if restart {
		started, err := r.s.change.RestartStuckPipeline(ctx, b.Project, mr.IID)
		if err != nil {
			r.memo.Restart = true // still to do when the step is tried again
			return err
		}
		if started {
			r.s.log.Info("batch resumed: a new pipeline replaces one still running", "batch", b.ID, "mr", mr.IID)
			r.memo.CI = time.Now().UnixMilli()
			return r.next(ctx, r.waitFor(stepPipeline), store.BatchStep{Change: store.BatchChange{
				Note: fmt.Sprintf("resumed: MR !%d's pipeline was still running; a new pipeline was started on the same commit", mr.IID)}})
		}
	}
	c := store.BatchChange{}
	var moves []store.MemberMove
	if rewrite {
		c = store.BatchChange{MRIID: mr.IID, BranchDigest: &digest, Note: fmt.Sprintf("MR !%d carries %d changes", mr.IID, len(r.members))}
		if b.MRIID != mr.IID {
			moves = mrOpened(mr.IID, fmt.Sprintf("batch %d, MR !%d: waiting for its pipeline", b.ID, mr.IID))
		}
		r.memo.Flaky, r.memo.Hung, r.memo.CI = 0, 0, time.Now().UnixMilli()
	}
	if r.memo.CI == 0 {
		r.memo.CI = time.Now().UnixMilli()
	}
	return r.next(ctx, r.waitFor(stepPipeline), store.BatchStep{Change: c, Moves: moves})
}

// commitRefused: GitLab refused the commit for what it contains (a file to create exists, one
// to delete is gone, two members touch one path) — a property of the member set, not of the
// moment, so a multi-member batch is bisected like a failed pipeline.
func commitRefused(err error) bool {
	return errors.Is(err, change.ErrInvalidChange) || errors.Is(err, gitlab.ErrFileExists) ||
		errors.Is(err, gitlab.ErrFileMissing) || errors.Is(err, gitlab.ErrFileChanged)
}

// pipeline is one look at the head's pipeline: pending → the next look by the staged schedule
// (poll.timeout after the wait started: BLOCKED for operators); passed → approve; failed →
// a new run on the same commit while batch.flakyRetries allow, then deterministic.
func (r *run) pipeline(ctx context.Context) error {
	r.phase = failedCreate
	b := r.batch
	look, err := r.s.change.LookAtPipeline(ctx, b.Project, b.MRIID, r.s.cfg.Current().BatchFlakyRetries()-r.memo.Flaky)
	switch {
	case errors.Is(err, change.ErrMRClosed):
		return r.decide(ctx, failedMRClosed.with(fmt.Sprintf("MR !%d was closed outside bindery", b.MRIID)))
	case err != nil:
		return err
	}
	var pipeline int64
	link := "the pipeline"
	if look.Pipeline != nil {
		pipeline, link = look.Pipeline.ID, fmt.Sprintf("pipeline %d (%s)", look.Pipeline.ID, look.Pipeline.WebURL)
	}
	switch {
	case look.Retried:
		r.memo.Flaky++
		r.memo.CI = time.Now().UnixMilli()
		return r.next(ctx, r.waitFor(stepPipeline), store.BatchStep{Change: store.BatchChange{PipelineID: pipeline,
			Note: fmt.Sprintf("%s failed; new run %d on the same commit (batch.flakyRetries)", link, r.memo.Flaky)}})
	case look.Outcome == change.Passed && look.MR.Merged():
		return r.settleMerged(ctx, fmt.Sprintf("MR !%d found merged", b.MRIID), look.MR)
	case look.Outcome == change.Passed:
		note := link + " passed"
		r.s.rec.Since("bindery_batch_ci_seconds", time.UnixMilli(r.memo.CI), "project", b.Project)
		r.memo.CI = 0
		r.memo.Tested = look.MR.SHA
		return r.next(ctx, store.TaskNext{Step: stepApprove}, store.BatchStep{Change: store.BatchChange{PipelineID: pipeline, Note: note}, Moves: pipelinePassed(pipeline, note)})
	case look.Outcome == change.Failed:
		r.failed = pipeline
		if look.Pipeline != nil {
			r.failedURL = look.Pipeline.WebURL
		}
		r.s.change.KeepFailedJob(ctx, r.s.db, r.batch.Project, pipeline)
		return r.deterministic(ctx, failedPipeline.with(link+" failed"))
	}
	next, timedOut := r.r.Poll(r.stages(), "waiting for "+link)
	if timedOut {
		return r.hung(ctx, stepPipeline, link)
	}
	if pipeline != 0 && pipeline != b.PipelineID {
		return r.next(ctx, next, store.BatchStep{Change: store.BatchChange{PipelineID: pipeline}})
	}
	next.Memo = r.memo.encode()
	return r.r.Next(ctx, next, nil)
}

// deterministic handles a failure that is a property of the member set (SPEC §11.17): a batch
// of several members is bisected, a single member fails with it — named the culprit when a
// bisection led to it.
func (r *run) deterministic(ctx context.Context, f failure) error {
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
	found := fmt.Sprintf("batch %d isolated the culprit %s after %d %s", b.ID, culprit, b.Bisections, plural(b.Bisections, "bisection"))
	if b.BisectOf != 0 {
		found += fmt.Sprintf(" (bisection of batch %d)", b.BisectOf)
	}
	r.s.log.Info("culprit isolated", "batch", b.ID, "culprit", culprit, "bisections", b.Bisections, "bisection_of", b.BisectionRoot())
	return r.decideAs(ctx, f.with(found+": "+f.note), culprit)
}

// failedLink is the web address of the pipeline this step saw fail, for the members' words.
func (r *run) failedLink(kind string, id int64) string {
	if kind == "pipeline" && id == r.failed {
		return r.failedURL
	}
	return ""
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// bisect keeps the first half in this batch (the branch is regenerated with only their files,
// same MR, new pipeline: the open step, next) and returns the second half to the waiting set as
// one suspect group: the claim takes it alone, before anything else of the partition, so the
// culprit — if it is there — fails no newcomer, and a culprit is isolated in ⌈log₂ n⌉
// bisections. The stale branch digest makes the open step regenerate, after a crash too.
func (r *run) bisect(ctx context.Context, f failure) error {
	why := f.note
	keep := (len(r.members) + 1) / 2
	back := operationIDs(r.members[keep:])
	b := r.batch
	round := b.Bisections + 1
	note := fmt.Sprintf("%s: bisection %d of batch %d's members: %d stay in batch %d, %d return to the waiting set to be retried on their own before any newcomer",
		why, round, b.BisectionRoot(), keep, b.ID, len(back))
	stale := ""
	r.memo = memo{}
	if err := r.next(ctx, store.TaskNext{Step: stepOpen}, store.BatchStep{
		Change: store.BatchChange{Note: note, BranchDigest: &stale}, Requeue: back, Bisect: true,
		// The members read why in the words of the failure's step (the cause stays in the
		// batch's note, for operators).
		Moves: requeued(back, fmt.Sprintf("returned to the waiting set: batch %d is bisected; retried with its half only, before any newcomer. %s", b.ID, explain.Told(f.create, why, r.failedLink))),
	}); err != nil {
		return err
	}
	r.s.rec.Inc("bindery_batch_bisections_total", "project", b.Project)
	r.s.log.Info("batch bisected", "batch", b.ID, "round", round, "bisection_of", b.BisectionRoot(), "kept", keep, "returned", len(back), "why", why)
	return nil
}

// approve has both reviewer accounts approve the MR's head.
func (r *run) approve(ctx context.Context) error {
	r.phase = failedApprove
	b := r.batch
	mr, err := r.s.change.Approve(ctx, b.Project, b.MRIID)
	switch {
	case errors.Is(err, change.ErrMRClosed):
		return r.decide(ctx, failedMRClosed.with(fmt.Sprintf("MR !%d was closed outside bindery", b.MRIID)))
	case err != nil:
		return err
	case mr.Merged(): // remote state first: someone merged it, finish as merged
		return r.settleMerged(ctx, fmt.Sprintf("MR !%d found merged", b.MRIID), mr)
	}
	note := fmt.Sprintf("MR !%d approved by the reviewer accounts", b.MRIID)
	r.memo.Merge, r.memo.Regen, r.memo.Refused, r.memo.Approved = time.Now().UnixMilli(), false, 0, mr.SHA
	return r.next(ctx, store.TaskNext{Step: string(change.MergeAttempt)}, store.BatchStep{Change: store.BatchChange{Note: note}, Moves: handling(state.StepHandleApproved, note)})
}

var eventNotes = map[change.Event]string{
	change.EventRebasing:     "rebasing onto the target branch",
	change.EventRegenerating: "the rebase conflicts: regenerating the branch from the target head",
	change.EventPipeline:     "the branch moved: waiting for the new head's pipeline",
}

// merge is one action of the merge: rebase and retry, regenerate on a conflict, then BLOCKED.
func (r *run) merge(ctx context.Context, phase change.MergePhase) error {
	r.phase = failedMerge
	if moved, err := r.load(ctx); moved || err != nil { // the spec: a conflict regenerates from it
		return err
	}
	b := r.batch
	res, err := r.s.change.MergeStep(ctx, r.spec, b.MRIID, change.MergeState{Phase: phase, Regenerated: r.memo.Regen,
		Refused: r.memo.Refused, Tested: r.memo.Tested, Approved: r.memo.Approved})
	r.memo.Regen, r.memo.Refused = res.State.Regenerated, res.State.Refused
	r.memo.Tested, r.memo.Approved = res.State.Tested, res.State.Approved
	switch {
	case err == nil && res.Merged:
		if r.memo.Merge != 0 {
			r.s.rec.Since("bindery_batch_merge_seconds", time.UnixMilli(r.memo.Merge), "project", b.Project)
		}
		return r.settleMerged(ctx, fmt.Sprintf("MR !%d merged", b.MRIID), res.MR)
	case errors.Is(err, change.ErrMRClosed):
		return r.decide(ctx, failedMRClosed.with(fmt.Sprintf("MR !%d was closed outside bindery", b.MRIID)))
	case errors.Is(err, change.ErrConflict):
		// A property of the member set, not of the moment: bisected like a failed pipeline (the
		// others land), a single member fails with it — never BLOCKED, which would hold the
		// partition for batch.blockedTimeout behind a change that will not merge.
		return r.deterministic(ctx, failedConflict.with("the rebase conflicts even after regenerating the branch from the target head"))
	case errors.Is(err, change.ErrPipelineFailed):
		return r.mergePipelineFailed(ctx, res)
	case err != nil:
		return err
	case res.Wait:
		return r.mergeWait(ctx, phase, res)
	case res.State.Phase == change.MergeBlocked:
		return r.blockOnMR(ctx, res.Blocked)
	case res.Unblocked:
		note := fmt.Sprintf("MR !%d is no longer blocked; the merge goes on", b.MRIID)
		return r.next(ctx, store.TaskNext{Step: string(res.State.Phase)}, store.BatchStep{
			Change: store.BatchChange{Status: state.BatchRunning, Note: note}, Moves: resumed(note)})
	}
	n := store.TaskNext{Step: string(res.State.Phase)}
	if res.Pause {
		n.In = r.s.short()
	}
	if res.State.Phase.Polls() && res.State.Phase != phase {
		n = r.waitFor(string(res.State.Phase))
	}
	if res.Event == "" {
		n.Memo = r.memo.encode()
		return r.r.Next(ctx, n, nil)
	}
	// Progress is worth a step (the request view shows it).
	note := eventNotes[res.Event]
	return r.next(ctx, n, store.BatchStep{Change: store.BatchChange{Note: note}, Moves: handling(state.StepHandleStarted, note)})
}

// mergeWait is a merge phase that found nothing decided yet: the same wait's next look, up to
// its limit — poll.timeout for GitLab's own work (then BLOCKED for operators to resume), and
// batch.blockedTimeout for a person to clear the MR (then the batch fails).
func (r *run) mergeWait(ctx context.Context, phase change.MergePhase, res change.MergeResult) error {
	st := r.stages()
	if phase == change.MergeBlocked {
		st.Timeout = r.s.cfg.Current().BatchBlockedTimeout()
	}
	next, timedOut := r.r.Poll(st, waitNotes[phase])
	switch {
	case !timedOut:
		next.Memo = r.memo.encode()
		return r.r.Next(ctx, next, nil)
	case phase == change.MergeRebasing:
		return r.block(ctx, rebasePending, "the rebase gave no answer within poll.timeout; an operator can resume the batch")
	case phase == change.MergeChecking:
		return r.blockOnMR(ctx, fmt.Sprintf("GitLab kept computing whether MR !%d can be merged for longer than poll.timeout", r.batch.MRIID))
	case phase == change.MergeBlocked:
		if res.Blocked == "" {
			res.Blocked = r.batch.Note
		}
		return r.decide(ctx, failedMerge.with(fmt.Sprintf("%s, and nobody did within batch.blockedTimeout (%s)", res.Blocked, r.s.cfg.Current().BatchBlockedTimeout())))
	}
	return r.hung(ctx, string(change.MergePipeline), "the new head's pipeline")
}

// hung: the pipeline gave no answer within poll.timeout. A hung runner or a job waiting for
// nobody is specific to that pipeline, so the first time a new pipeline is started on the same
// commit and waited for; a second silence means the project's CI is not answering — no other
// batch of the partition could pass it either — and the batch is BLOCKED for operators.
func (r *run) hung(ctx context.Context, step, link string) error {
	b := r.batch
	if r.memo.Hung < maxHungRestarts {
		started, err := r.s.change.RestartStuckPipeline(ctx, b.Project, b.MRIID)
		if err != nil {
			return err
		}
		r.memo.CI = time.Now().UnixMilli()
		if !started {
			// It finished meanwhile (or a rebase moved the head): look again at once.
			n := r.waitFor(step)
			n.Memo = r.memo.encode()
			return r.r.Next(ctx, n, nil)
		}
		r.memo.Hung++
		return r.next(ctx, r.waitFor(step), store.BatchStep{Change: store.BatchChange{
			Note: fmt.Sprintf("%s gave no answer within poll.timeout; a new pipeline was started on the same commit", link)}})
	}
	return r.block(ctx, pipelinePending, link+" gave no answer within poll.timeout, nor did a new one; an operator can resume the batch")
}

// maxHungRestarts is how many pipelines that gave no answer are replaced before the batch blocks.
const maxHungRestarts = 1

// waitNotes say what each merge phase waits for.
var waitNotes = map[change.MergePhase]string{
	change.MergeRebasing: eventNotes[change.EventRebasing],
	change.MergePipeline: eventNotes[change.EventPipeline],
	change.MergeChecking: "GitLab is computing whether the MR can be merged",
	change.MergeBlocked:  "waiting for a person to clear the MR in GitLab",
}

// blockOnMR: something on the MR that bindery's accounts cannot clear keeps GitLab from merging
// it. The batch is BLOCKED with its MR left open and keeps looking (a webhook wakes it sooner):
// once a person clears it, the merge goes on by itself; nobody does within batch.blockedTimeout,
// it fails. Its members show WAIT_MANUAL with the reason.
func (r *run) blockOnMR(ctx context.Context, reason string) error {
	n := r.waitFor(string(change.MergeBlocked))
	n.Note = "BLOCKED: " + reason
	if err := r.next(ctx, n, store.BatchStep{Change: store.BatchChange{Status: state.BatchBlocked, Note: reason},
		Moves: mrBlocked.with(reason)}); err != nil {
		return err
	}
	r.s.rec.Inc("bindery_batches_blocked_total", "project", r.batch.Project)
	r.s.log.Warn("batch blocked on its MR", "batch", r.batch.ID, "mr", r.batch.MRIID, "why", reason)
	return nil
}

// mergePipelineFailed: the pipeline of a head the merge moved failed. Like the first pipeline,
// it gets batch.flakyRetries new runs, then bisection or the failure.
func (r *run) mergePipelineFailed(ctx context.Context, res change.MergeResult) error {
	b := r.batch
	if r.memo.Flaky < r.s.cfg.Current().BatchFlakyRetries() {
		if err := r.s.change.RetryPipeline(ctx, b.Project, res.MR, res.Pipeline); err != nil {
			return err
		}
		r.memo.Flaky++
		return r.next(ctx, r.waitFor(string(change.MergePipeline)), store.BatchStep{Change: store.BatchChange{
			Note: fmt.Sprintf("the pipeline of the rebased head failed; new run %d on the same commit (batch.flakyRetries)", r.memo.Flaky)}})
	}
	return r.deterministic(ctx, failedPipeline.with("the pipeline of the rebased head failed"))
}

// block stops the batch at a step the same MR can resume from: BLOCKED keeps the partition's slot
// for batch.blockedTimeout (the task's next run, which then settles it); its members show
// WAIT_MANUAL.
func (r *run) block(ctx context.Context, at stopAt, note string) error {
	if err := r.next(ctx, store.TaskNext{Step: stepBlocked, In: r.s.cfg.Current().BatchBlockedTimeout(), Note: "BLOCKED: " + note}, store.BatchStep{
		Change: store.BatchChange{Status: state.BatchBlocked, Note: note},
		Moves:  at.with(note),
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
	if r.batch.Status != state.BatchBlocked {
		// Resumed by an operator without a new task step (an older version): go on.
		return r.r.Next(ctx, store.TaskNext{Step: stepOpen}, nil)
	}
	return r.decide(ctx, failedCreate.with(fmt.Sprintf("BLOCKED for longer than batch.blockedTimeout (%s); settled by the sweep", r.s.cfg.Current().BatchBlockedTimeout())))
}

// decide records the batch's failure before anything is done about it (write-ahead): the settle
// step carries it out — closes the MR, then fails the members with this cause — on whichever
// instance runs it, after a crash too.
func (r *run) decide(ctx context.Context, f failure) error {
	return r.decideAs(ctx, f, "")
}

// decideAs is decide, naming the culprit a bisection isolated ("": none).
func (r *run) decideAs(ctx context.Context, f failure, culprit string) error {
	enc := f.encode()
	c := store.BatchChange{Failing: &enc, Note: "failed: " + f.note + "; settling"}
	if culprit != "" {
		c.Culprit = &culprit
	}
	return r.next(ctx, store.TaskNext{Step: stepSettle}, store.BatchStep{Change: c})
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
		f = failedCreate.with("settled")
	}
	wasMerged, iid, err := r.s.closeMR(ctx, b)
	switch {
	case errors.Is(err, change.ErrLocked):
		return r.r.Next(ctx, store.TaskNext{In: r.s.short(), Note: "the MR is being merged right now; looking again"}, nil)
	case err != nil:
		// Transient or not, the decided failure stands: the batch stays active and says why
		// (an MR bindery cannot close must not be left to merge after its members failed).
		short, _, long, _ := r.s.cfg.Current().PollStages()
		wait, _ := engine.Backoff(short, long)(r.r, err)
		msg := engine.Public(err)
		r.s.rec.Inc("bindery_batch_settle_failures_total", "project", b.Project)
		r.s.log.Warn("batch settlement did not go through; retrying", "batch", b.ID, "failure", f.note, "error", err, "wait", wait)
		return r.next(ctx, store.TaskNext{In: max(wait, outbound.RetryAfterOf(err)), Failures: r.r.Task.Failures + 1, Note: "settling did not go through: " + msg},
			store.BatchStep{Change: store.BatchChange{LastError: &msg, Note: fmt.Sprintf("failed (%s), but settling it did not go through: %s; retrying", f.note, msg)}})
	case wasMerged:
		mr, err := r.s.change.GitLab.GetMergeRequest(ctx, b.Project, iid)
		if err != nil {
			return fmt.Errorf("read the merged MR !%d: %w", iid, err)
		}
		note := fmt.Sprintf("MR !%d turned out merged: the merge wins over the close", iid)
		return r.settleMerged(ctx, note, mr)
	}
	return r.settleAs(ctx, state.BatchFailed, f.note, f.moves(nil))
}

// settleMerged settles the batch as merged by mr (as GitLab gave it after the merge), recording
// where it landed in the project's merge order.
func (r *run) settleMerged(ctx context.Context, note string, mr gitlab.MergeRequest) error {
	return r.settleWith(ctx, store.Settlement{Status: state.BatchSucceeded, Note: note, Moves: merged(mr.IID, note), Merge: change.Landed(r.batch.Project, mr)})
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
