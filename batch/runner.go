package batch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"time"

	"bindery/change"
	"bindery/config"
	"bindery/gitlab"
	"bindery/outbound"
	"bindery/store"
)

// run drives one batch — one pool task — from its claim to SUCCEEDED, FAILED or BLOCKED. Every
// step reads the remote state first (change.Runner), so the same code resumes a batch after a
// crash, a takeover by the sweep or an operator's retry.
type run struct {
	s       *Service
	batch   store.Batch // as last written: its version guards the next write
	members []member    // what the batch holds, rendered, in claim order
	spec    change.Spec
	mr      gitlab.MergeRequest
	wake    chan struct{}

	phase      failure // the declared failure of the step running now
	flaky      int     // flaky retries used on the current branch
	ciStart    time.Time
	mergeStart time.Time
	event      change.Event // the last progress event of the merge
	lost       error        // a progress write found the batch moved on
	cancel     context.CancelFunc
	stopLease  func()

	// restartStuck: an operator resumed the batch; the first pipeline wait replaces a head
	// pipeline that is still running (see pipeline).
	restartStuck bool
}

type member struct {
	op     store.Operation
	action store.Action
	file   change.FileAction
}

// The runner's states.
const (
	stBranch = iota
	stPipeline
	stApprove
	stMerge
	stDone
)

func (s *Service) run(ctx context.Context, id int64, restartStuck bool) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rb := s.claimRunner(id, cancel)
	defer s.releaseRunner(id, rb)
	b, err := s.db.Batch(ctx, id)
	if err != nil {
		s.log.Warn("batch runner cannot read its batch; the sweep resumes it after its lease", "batch", id, "error", err)
		return
	}
	if b.Status != store.BatchRunning || b.LeaseOwner != s.instance {
		s.log.Info("batch is not this instance's to run", "batch", id, "status", b.Status, "owner", b.LeaseOwner)
		return
	}
	// Renewed before anything else: a hand-off that waited in the queue past its lease may have
	// been taken over meanwhile, and then this runner must not touch GitLab at all.
	switch err := s.db.RenewBatchLease(ctx, id, s.instance, s.cfg.Current().BatchLeaseTTL()); {
	case errors.Is(err, store.ErrPreempted):
		s.log.Info("batch taken over before its runner started; this runner stops", "batch", id)
		return
	case err != nil:
		s.log.Warn("batch runner cannot renew its lease; the sweep resumes it after its lease", "batch", id, "error", err)
		return
	}
	r := &run{s: s, batch: b, wake: make(chan struct{}, 1), phase: failedCreate, cancel: cancel, restartStuck: restartStuck}
	r.stopLease = s.keepLease(ctx, cancel, id)
	defer r.stopLease()
	defer r.unlisten()
	// The step wrapper: a panic the runner did not handle ends in the declared failure of the
	// step it was in, never in a batch that looks busy forever.
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("CRITICAL: batch runner panicked", "batch", id, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			r.finish(ctx, fmt.Errorf("internal error: %v", p))
		}
	}()
	r.finish(ctx, r.drive(ctx))
}

// finish decides what an error the runner did not handle means.
func (r *run) finish(ctx context.Context, err error) {
	s, id := r.s, r.batch.ID
	switch {
	case err == nil:
		return
	case errors.As(err, new(errSettlePending)):
		return // recorded on the batch and logged by settlePending; the sweep settles it
	case ctx.Err() != nil:
		// Shutdown, a lost lease or a newer runner of this batch: write nothing. The lease
		// expires and the sweep resumes the batch from the remote state on any instance.
		s.log.Info("batch runner stopped; the batch resumes elsewhere or after its lease", "batch", id, "error", err)
		return
	case errors.Is(err, store.ErrPreempted):
		s.log.Info("batch moved on elsewhere (taken over, resumed or settled); this runner stops", "batch", id, "error", err)
		return
	case transient(err):
		s.log.Warn("batch runner gave up on an unavailable dependency; the sweep resumes it after its lease", "batch", id, "attempts", unavailableAttempts, "error", err)
		// Best effort: the ops console says why the batch is not moving.
		if b, _, nerr := s.db.AdvanceBatch(ctx, store.BatchStep{Batch: r.batch, Change: store.BatchChange{Note: "interrupted (" + err.Error() + "); resumed after the lease expires"}}); nerr == nil {
			r.batch = b
		}
		return
	}
	switch serr := r.settleFailed(ctx, r.phase.with(err.Error())); {
	case serr == nil:
		s.log.Error("batch failed", "batch", id, "error", err)
	case errors.Is(serr, store.ErrPreempted):
		// Taken over, resumed or settled elsewhere while this runner failed: its failure is of a
		// run that no longer counts.
		s.log.Info("batch moved on elsewhere before this runner's failure was settled", "batch", id, "error", err, "settle", serr)
	default:
		s.log.Error("batch failed; not settled yet", "batch", id, "error", err, "settle", serr)
	}
}

// dbError marks a failed store call: the database may be back in a moment, so the runner leaves
// the batch to the sweep instead of failing its members.
type dbError struct{ err error }

func (e dbError) Error() string { return "database: " + e.err.Error() }
func (e dbError) Unwrap() error { return e.err }

// transient reports errors that say nothing about the batch: a dependency that did not answer.
// A settlement recorded as pending is none, whatever failed it: the batch's failure is decided.
func transient(err error) bool {
	if errors.As(err, new(errSettlePending)) {
		return false
	}
	var oe *outbound.Error
	if errors.As(err, &oe) {
		return oe.Temporary()
	}
	var de dbError
	return errors.As(err, &de) && !errors.Is(err, store.ErrPreempted)
}

func (r *run) drive(ctx context.Context) error {
	if done, err := r.load(ctx); err != nil || done {
		return err
	}
	state, outages := stBranch, 0
	for state != stDone {
		var next int
		var err error
		switch state {
		case stBranch:
			next, err = r.branch(ctx)
		case stPipeline:
			next, err = r.pipeline(ctx)
		case stApprove:
			next, err = r.approve(ctx)
		case stMerge:
			next, err = r.merge(ctx)
		}
		switch {
		case err == nil:
			state, outages = next, 0
		case transient(err) && outages+1 < unavailableAttempts:
			outages++
			if werr := r.outage(ctx, err, outages); werr != nil {
				return werr
			}
		default:
			return err
		}
	}
	return nil
}

// unavailableAttempts bounds how often the runner runs a step against a dependency that does not
// answer (5xx, breaker open, timeout, the database) before it leaves the batch to the sweep.
const unavailableAttempts = 6

// outage waits before the attempt-th retry of a step whose dependency did not answer. The runner
// keeps the batch — its lease is renewed meanwhile, so no sweep takes it over — and the batch
// says why it is not moving. The wait starts at poll.short and doubles up to poll.long (by
// default 5s, 10s, 20s, 30s, 30s: GitLab gets a minute and a half to come back). Re-running the
// step is as safe as a sweep's resume: every step reads the remote state first.
func (r *run) outage(ctx context.Context, cause error, attempt int) error {
	short, _, long, _ := r.s.cfg.Current().PollStages()
	wait := short << (attempt - 1)
	if wait > long || wait <= 0 {
		wait = long
	}
	note := fmt.Sprintf("a dependency is unavailable (%s); retrying in %s (%d of %d)", publicError(cause), wait, attempt, unavailableAttempts-1)
	r.s.log.Info("batch step failed on an unavailable dependency; retrying", "batch", r.batch.ID, "attempt", attempt, "wait", wait, "error", cause)
	if err := r.advance(ctx, store.BatchStep{Change: store.BatchChange{Note: note}}); errors.Is(err, store.ErrPreempted) {
		return err // moved on elsewhere: this runner stops
	} // any other failure to write the note: the database is what is down; wait all the same
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return cause
	case <-t.C:
		return nil
	}
}

// load reads what the batch holds and renders every member's file. A member that cannot be
// rendered (its target left the catalog or moved project, its subject cannot be a path) fails
// alone and leaves the batch; one whose target branch differs from the batch's, or whose file
// another member already changes, goes back to the waiting set for a later batch. Those writes
// are one step; members failing with the same reason share one statement.
func (r *run) load(ctx context.Context) (done bool, err error) {
	reqs, err := r.s.db.BatchRequests(ctx, r.batch.ID)
	if err != nil {
		return false, dbError{err}
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
		if err := r.advance(ctx, store.BatchStep{Change: store.BatchChange{Note: note}, Drop: dropped, Requeue: later, Moves: moves}); err != nil {
			return false, err
		}
	}
	if len(r.members) == 0 {
		return true, r.settleFailed(ctx, failedCreate.with("no member left to change"))
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
		if q.Action == store.ActionAdd {
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

func (r *run) operationIDs(ms []member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.op.OperationID
	}
	return out
}

// advance writes one step of the batch (guarded on the version last written).
func (r *run) advance(ctx context.Context, step store.BatchStep) error {
	step.Batch = r.batch
	b, _, err := r.s.db.AdvanceBatch(ctx, step)
	if err != nil {
		return dbError{err}
	}
	r.batch = b
	return nil
}

// branch makes sure the MR exists and its branch carries exactly the members held: a new batch
// gets its branch, one commit and its MR; a batch whose members changed since the branch was
// written (bisection, and a crash before the new commit) gets the branch regenerated from the
// target head; otherwise the recorded MR is read as it is.
func (r *run) branch(ctx context.Context) (int, error) {
	r.phase = failedCreate
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
		return stDone, r.settleAbsent(ctx)
	case err != nil && commitRefused(err):
		return r.deterministic(ctx, failedCreate.with("GitLab refused the batch's commit: "+err.Error()))
	case err != nil:
		return 0, err
	}
	r.listen(mr)
	if rewrite {
		c := store.BatchChange{MRIID: mr.IID, BranchDigest: &digest, Note: fmt.Sprintf("MR !%d carries %d changes", mr.IID, len(r.members))}
		var moves []store.MemberMove
		if b.MRIID != mr.IID {
			moves = mrOpened(mr.IID, fmt.Sprintf("batch %d, MR !%d: waiting for its pipeline", b.ID, mr.IID))
		}
		if err := r.advance(ctx, store.BatchStep{Change: c, Moves: moves}); err != nil {
			return 0, err
		}
		r.flaky, r.ciStart = 0, time.Now()
	}
	return stPipeline, nil
}

// commitRefused: GitLab refused the commit for what it contains (a file to create exists, one
// to delete is gone, two members touch one path) — a property of the member set, not of the
// moment, so a multi-member batch is bisected like a failed pipeline.
func commitRefused(err error) bool {
	return errors.Is(err, change.ErrInvalidChange) || errors.Is(err, gitlab.ErrFileExists) ||
		errors.Is(err, gitlab.ErrFileMissing) || errors.Is(err, gitlab.ErrFileChanged)
}

func (r *run) listen(mr gitlab.MergeRequest) {
	if r.mr.IID != mr.IID {
		r.unlisten()
		r.s.listen(r.batch.Project, mr.IID, r.wake)
	}
	r.mr = mr
}

func (r *run) unlisten() {
	if r.mr.IID != 0 {
		r.s.unlisten(r.batch.Project, r.mr.IID, r.wake)
	}
}

func (r *run) stages() change.Stages {
	short, n, long, timeout := r.s.cfg.Current().PollStages()
	return change.Stages{Short: short, ShortCount: n, Long: long, Timeout: timeout}
}

// pipeline waits for the head's pipeline in stages.
func (r *run) pipeline(ctx context.Context) (int, error) {
	if r.restartStuck {
		if err := r.restartStuckPipeline(ctx); err != nil {
			return 0, err // still to do when the step is tried again
		}
		r.restartStuck = false
	}
	res, err := r.s.change.WaitPipeline(ctx, r.batch.Project, r.mr.IID, r.stages(), r.wake)
	switch {
	case errors.Is(err, change.ErrMRClosed):
		return stDone, r.settleFailed(ctx, failedMRClosed.with(fmt.Sprintf("MR !%d was closed outside bindery", r.mr.IID)))
	case err != nil:
		return 0, err
	}
	var pipeline int64
	link := "the pipeline"
	if res.Pipeline != nil {
		pipeline, link = res.Pipeline.ID, fmt.Sprintf("pipeline %d (%s)", res.Pipeline.ID, res.Pipeline.WebURL)
	}
	switch res.Outcome {
	case change.Passed:
		if res.MR.Merged() {
			return stDone, r.settleMerged(ctx, fmt.Sprintf("MR !%d found merged", r.mr.IID))
		}
		note := link + " passed"
		if err := r.advance(ctx, store.BatchStep{Change: store.BatchChange{PipelineID: pipeline, Note: note}, Moves: pipelinePassed(pipeline, note)}); err != nil {
			return 0, err
		}
		if !r.ciStart.IsZero() {
			r.s.rec.Since("bindery_batch_ci_seconds", r.ciStart, "project", r.batch.Project)
			r.ciStart = time.Time{}
		}
		return stApprove, nil
	case change.TimedOut:
		return stDone, r.block(ctx, pipelinePending, link+" gave no answer within poll.timeout; an operator can resume the batch")
	}
	return r.pipelineFailed(ctx, pipeline, link)
}

// restartStuckPipeline runs when an operator resumed the batch (it was BLOCKED because its
// pipeline gave no answer within poll.timeout, or an operator retries a batch that looks stuck):
// a head pipeline that finished meanwhile is taken as it is; one still running gets a new
// pipeline on the same commit, because waiting on it again may wait forever (a hung runner) and
// block the batch once more. A rebase in progress is left to finish.
func (r *run) restartStuckPipeline(ctx context.Context) error {
	mr, err := r.s.change.GitLab.GetMergeRequest(ctx, r.batch.Project, r.mr.IID)
	if err != nil || mr.RebaseInProgress || !mr.Open() {
		return err
	}
	if p := mr.HeadPipeline; p != nil && p.SHA == mr.SHA && p.Outcome() != gitlab.Running {
		return nil
	}
	if err := r.s.change.RetryPipeline(ctx, r.batch.Project, r.mr.IID); err != nil {
		return err
	}
	note := fmt.Sprintf("resumed: MR !%d's pipeline was still running; a new pipeline was started on the same commit", r.mr.IID)
	if err := r.advance(ctx, store.BatchStep{Change: store.BatchChange{Note: note}}); err != nil {
		return err
	}
	r.ciStart = time.Now()
	r.s.log.Info("batch resumed: a new pipeline replaces one still running", "batch", r.batch.ID, "mr", r.mr.IID)
	return nil
}

// pipelineFailed: a failed pipeline gets batch.flakyRetries new runs on the same commit; after
// that the failure is deterministic.
func (r *run) pipelineFailed(ctx context.Context, pipeline int64, link string) (int, error) {
	if r.flaky < r.s.cfg.Current().BatchFlakyRetries() {
		r.flaky++
		if err := r.s.change.RetryPipeline(ctx, r.batch.Project, r.mr.IID); err != nil {
			return 0, err
		}
		note := fmt.Sprintf("%s failed; new run %d on the same commit (batch.flakyRetries)", link, r.flaky)
		if err := r.advance(ctx, store.BatchStep{Change: store.BatchChange{PipelineID: pipeline, Note: note}}); err != nil {
			return 0, err
		}
		r.ciStart = time.Now()
		return stPipeline, nil
	}
	return r.deterministic(ctx, failedPipeline.with(link+" failed"))
}

// deterministic handles a failure that is a property of the member set (SPEC §11.17): a batch
// of several members is bisected, a single member fails with it.
func (r *run) deterministic(ctx context.Context, f failure) (int, error) {
	if len(r.members) > 1 {
		return stBranch, r.bisect(ctx, f.note)
	}
	return stDone, r.settleFailed(ctx, f)
}

// bisect keeps the first half in this batch (the branch is regenerated with only their files,
// same MR, new pipeline) and returns the second half to the waiting set, keeping their place in
// line so the next round takes them first. The step is written before the branch: a crash in
// between leaves a stale branch digest, and the resumed runner regenerates.
func (r *run) bisect(ctx context.Context, why string) error {
	keep := (len(r.members) + 1) / 2
	back := r.operationIDs(r.members[keep:])
	note := fmt.Sprintf("%s: bisecting, %d stay in batch %d and %d return to the waiting set", why, keep, r.batch.ID, len(back))
	stale := ""
	if err := r.advance(ctx, store.BatchStep{
		Change: store.BatchChange{Note: note, BranchDigest: &stale}, Requeue: back,
		Moves: requeued(back, fmt.Sprintf("returned to the waiting set: batch %d is bisected (%s)", r.batch.ID, why)),
	}); err != nil {
		return err
	}
	r.members = r.members[:keep]
	r.respec()
	r.s.rec.Inc("bindery_batch_bisections_total", "project", r.batch.Project)
	r.s.log.Info("batch bisected", "batch", r.batch.ID, "kept", keep, "returned", len(back), "why", why)
	return nil
}

// approve has both reviewer accounts approve the MR's head.
func (r *run) approve(ctx context.Context) (int, error) {
	r.phase = failedApprove
	mr, err := r.s.change.Approve(ctx, r.batch.Project, r.mr.IID)
	switch {
	case errors.Is(err, change.ErrMRClosed):
		return stDone, r.settleFailed(ctx, failedMRClosed.with(fmt.Sprintf("MR !%d was closed outside bindery", r.mr.IID)))
	case err != nil:
		return 0, err
	case mr.Merged(): // remote state first: someone merged it, finish as merged
		return stDone, r.settleMerged(ctx, fmt.Sprintf("MR !%d found merged", r.mr.IID))
	}
	note := fmt.Sprintf("MR !%d approved by the reviewer accounts", r.mr.IID)
	if err := r.advance(ctx, store.BatchStep{Change: store.BatchChange{Note: note}, Moves: handling(store.StepHandleApproved, note)}); err != nil {
		return 0, err
	}
	return stMerge, nil
}

var eventNotes = map[change.Event]string{
	change.EventRebasing:     "rebasing onto the target branch",
	change.EventRegenerating: "the rebase conflicts: regenerating the branch from the target head",
	change.EventPipeline:     "the branch moved: waiting for the new head's pipeline",
}

// merge merges the MR: rebase and retry, regenerate on a conflict, then BLOCKED.
func (r *run) merge(ctx context.Context) (int, error) {
	r.phase = failedMerge
	if r.mergeStart.IsZero() {
		r.mergeStart = time.Now()
	}
	mr, err := r.s.change.Merge(ctx, change.MergeInput{
		Spec: r.spec, IID: r.mr.IID, Stages: r.stages(), Wake: r.wake,
		Progress: func(ev change.Event) {
			r.event = ev
			note := eventNotes[ev]
			// Progress is worth a step (the request view shows it), not the merge: a failed write
			// is only logged, unless the batch moved on — then this runner stops.
			if err := r.advance(ctx, store.BatchStep{Change: store.BatchChange{Note: note}, Moves: handling(store.StepHandleStarted, note)}); err != nil {
				if errors.Is(err, store.ErrPreempted) {
					r.lost = err
					r.cancel()
					return
				}
				r.s.log.Warn("merge progress not recorded", "batch", r.batch.ID, "error", err)
			}
		},
	})
	if r.lost != nil {
		return 0, r.lost
	}
	switch {
	case err == nil && mr.Merged():
		if err := r.settleMerged(ctx, fmt.Sprintf("MR !%d merged", r.mr.IID)); err != nil {
			return 0, err
		}
		r.s.rec.Since("bindery_batch_merge_seconds", r.mergeStart, "project", r.batch.Project)
		return stDone, nil
	case errors.Is(err, change.ErrMRClosed):
		return stDone, r.settleFailed(ctx, failedMRClosed.with(fmt.Sprintf("MR !%d was closed outside bindery", r.mr.IID)))
	case errors.Is(err, change.ErrConflict):
		return stDone, r.block(ctx, rebaseConflict, "the rebase conflicts even after regenerating the branch from the target head")
	case errors.Is(err, change.ErrPending):
		if r.event == change.EventRebasing {
			return stDone, r.block(ctx, rebasePending, "the rebase gave no answer within poll.timeout; an operator can resume the batch")
		}
		return stDone, r.block(ctx, pipelinePending, "the new head's pipeline gave no answer within poll.timeout; an operator can resume the batch")
	case errors.Is(err, change.ErrPipelineFailed):
		return r.pipelineFailed(ctx, 0, "the pipeline of the rebased head")
	case err != nil:
		return 0, err
	}
	return 0, fmt.Errorf("merge of MR !%d returned it %s", r.mr.IID, mr.State)
}

// block stops the batch at a step the same MR can resume from: BLOCKED keeps the partition's slot
// for batch.blockedTimeout (then the sweep settles it); its members show WAIT_MANUAL.
func (r *run) block(ctx context.Context, at stopAt, note string) error {
	r.stopLease() // a blocked batch's lease is the operators' window: not renewed
	at.note = note
	if err := r.advance(ctx, store.BatchStep{
		Change: store.BatchChange{Status: store.BatchBlocked, Lease: r.s.cfg.Current().BatchBlockedTimeout(), Note: note},
		Moves:  at.moves(),
	}); err != nil {
		return err
	}
	r.s.rec.Inc("bindery_batches_blocked_total", "project", r.batch.Project)
	r.s.log.Warn("batch blocked", "batch", r.batch.ID, "why", note)
	return nil
}

func (r *run) settleMerged(ctx context.Context, note string) error {
	r.stopLease()
	return r.s.settleAs(ctx, r.batch, store.BatchSucceeded, note, merged(r.mr.IID, note))
}

// settleFailed settles the batch as failed with f. A settlement that fails (GitLab or the
// database) is recorded on the batch for the sweep to finish (settlePending), unless the batch
// moved on elsewhere or the runner was stopped (then its lease or its new holder decides).
func (r *run) settleFailed(ctx context.Context, f failure) error {
	r.stopLease()
	err := r.s.settle(ctx, r.batch, f)
	if err == nil || errors.Is(err, store.ErrPreempted) || ctx.Err() != nil {
		return err
	}
	r.s.settlePending(ctx, r.batch, f, err)
	return errSettlePending{err}
}

// settleAbsent ends a batch whose only member deletes a file already gone: the change is in
// effect. An MR left from a larger member set is closed first (merge wins there too).
func (r *run) settleAbsent(ctx context.Context) error {
	r.stopLease()
	if _, err := r.s.closeMR(ctx, r.batch); err != nil {
		return err
	}
	return r.s.settleAs(ctx, r.batch, store.BatchSucceeded, "the file is already absent", merged(0, "the file is already absent"))
}

// keepLease renews the batch's lease every third of batch.leaseTTL until stopped. A lease found
// taken (another instance's sweep, an operator's resume elsewhere) cancels the runner.
func (s *Service) keepLease(ctx context.Context, lost context.CancelFunc, id int64) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ttl := s.cfg.Current().BatchLeaseTTL()
			t := time.NewTimer(ttl / 3)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			err := s.db.RenewBatchLease(ctx, id, s.instance, ttl)
			switch {
			case ctx.Err() != nil:
				return
			case errors.Is(err, store.ErrPreempted):
				// A takeover (sweep, operator's resume) is recovery at work, not a fault.
				s.log.Info("batch lease lost to another holder; this runner stops", "batch", id)
				lost()
				return
			case err != nil:
				s.log.Warn("batch lease not renewed", "batch", id, "error", err)
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done }) }
}
