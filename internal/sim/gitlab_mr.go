package sim

import (
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"bindery/internal/platform/config"
)

// Merge requests, their pipelines, approvals, rebase and merge. The project merges by the method
// of sim.gitlab.mergeMethod (docs/gitlab.md): a merge commit of the three-way merge (merge), the
// same only on top of the target's head (rebase_merge, semi-linear history: an MR whose head does
// not contain the target's head needs a rebase, GitLab's detailed_merge_status "need_rebase"), or
// a fast-forward of the target to the head under the same rule (ff).

type mergeRequest struct {
	project      *project
	id, iid      int64
	title        string
	description  string
	source       string
	target       string
	authorID     int64
	state        string // opened, closed, merged
	createdAt    time.Time
	updatedAt    time.Time
	mergedAt     *time.Time
	closedAt     *time.Time
	mergeUserID  int64
	closedByID   int64
	mergeCommit  string
	mergeError   string
	removeSource bool
	headSHA      string // the source head last seen; kept when the branch is deleted by a merge
	approvals    []mrApproval
	checking     bool      // the next read answers "checking" (GitLab recomputes mergeability lazily)
	checkingTill time.Time // with sim.gitlab.checkingFor: every read answers "checking" until then
	blocker      string    // a detailed_merge_status held until cleared (sim.gitlab.mergeBlocker)
	rebase       *rebaseJob
	locking      *lockedMerge // set while the MR is "locked": GitLab is merging it
	autoMerge    *autoMerge
	notes        []*mrNote
	labels       []string
}

type mrApproval struct {
	userID int64
	at     time.Time
}

type rebaseJob struct {
	until    time.Time
	conflict bool
}

type lockedMerge struct {
	until        time.Time
	userID       int64
	removeSource bool
}

type autoMerge struct {
	userID       int64
	removeSource bool
}

type pipeline struct {
	project   *project
	id, iid   int64
	sha, ref  string
	head      string // the MR head it tests: sha, or for a merged-results pipeline the merge commit's second parent
	source    string // merge_request_event, push or api
	mrIID     int64  // the MR it belongs to (a branch pipeline: the open MR of its branch; 0: none)
	userID    int64
	createdAt time.Time
	updatedAt time.Time
	dur       time.Duration
	outcome   string // success, failed, or stuck (stays running)
	reported  string // the last status a webhook went out for
	// jobs are the runs of its one job, "test", oldest first: the last is the current run, the
	// others were retried (a retry runs the failed job again under a new id, as GitLab does).
	jobs []simJob
}

// simJob is one run of a pipeline's job.
type simJob struct {
	ID        int64     `json:"id"`
	CreatedAt time.Time `json:"createdAt"`
}

// pipeline statuses bindery sees from the simulator.
const (
	pipeCreated = "created"
	pipePending = "pending"
	pipeRunning = "running"
	pipeSuccess = "success"
	pipeFailed  = "failed"
)

func (pl *pipeline) status(now time.Time) string {
	e := now.Sub(pl.createdAt)
	switch {
	case pl.dur > 0 && e < pl.dur/10:
		return pipeCreated
	case pl.dur > 0 && e < pl.dur/4:
		return pipePending
	case (pl.dur > 0 && e < pl.dur) || pl.outcome == "stuck":
		return pipeRunning
	}
	return pl.outcome
}

func (pl *pipeline) finishedAt(now time.Time) *time.Time {
	if st := pl.status(now); st == pipeSuccess || st == pipeFailed {
		t := pl.createdAt.Add(pl.dur)
		return &t
	}
	return nil
}

func (mr *mergeRequest) head() string {
	if h := mr.project.branches[mr.source]; h != "" && mr.state == "opened" {
		return h
	}
	return mr.headSHA
}

// Pipeline sources as GitLab reports them.
const (
	sourceMergeRequest = "merge_request_event"
	sourcePush         = "push"
	sourceAPI          = "api"
)

// headPipeline is the newest pipeline of the MR for its current head (by sha, or for a
// merged-results pipeline by the head it merged), or nil.
func (mr *mergeRequest) headPipeline() *pipeline {
	head := mr.head()
	for i := len(mr.project.pipelines) - 1; i >= 0; i-- {
		if pl := mr.project.pipelines[i]; pl.mrIID == mr.iid && pl.head == head {
			return pl
		}
	}
	return nil
}

// recheck makes GitLab recompute the MR's mergeability: "checking" for the next read, or for
// sim.gitlab.checkingFor.
func (g *GitLab) recheck(mr *mergeRequest, now time.Time) { // holds g.mu
	d := scaled(g.cfg, g.faults().CheckingFor)
	mr.checking, mr.checkingTill = d == 0, now.Add(d)
}

// isChecking: GitLab is still computing the MR's mergeability. A poll (GET of the MR) settles
// the one-read "checking" for the next read; sim.gitlab.checkingFor holds it for its duration.
func (g *GitLab) isChecking(mr *mergeRequest, now time.Time, poll bool) bool { // holds g.mu
	if now.Before(mr.checkingTill) {
		return true
	}
	if mr.checking && poll {
		mr.checking = false
		return true
	}
	return false
}

func (mr *mergeRequest) approvedBy(userID int64) bool {
	for _, a := range mr.approvals {
		if a.userID == userID {
			return true
		}
	}
	return false
}

// behind: the MR's head does not contain the target's head (a fast-forward is not possible).
func (mr *mergeRequest) behind() bool {
	p := mr.project
	return !p.isAncestor(p.branches[mr.target], mr.head())
}

// needsRebase is GitLab's MergeRequest#should_be_rebased?: the merge method needs a fast-forward
// to be possible (rebase_merge, ff) and it is not.
func (mr *mergeRequest) needsRebase(method string) bool {
	return method != config.MergeMethodMerge && mr.behind()
}

// conflicts: merging the head into the target's head conflicts (see merge3).
func (mr *mergeRequest) conflicts() bool {
	_, conflicts, ok := mr.project.merged(mr.project.branches[mr.target], mr.head())
	return ok && len(conflicts) > 0
}

// mergeMethod is sim.gitlab.mergeMethod in force (blank in a test's own knobs: the default).
func (g *GitLab) mergeMethod() string { // holds g.mu
	if m := g.faults().MergeMethod; m == config.MergeMethodMerge || m == config.MergeMethodFF {
		return m
	}
	return config.MergeMethodRebaseMerge
}

// detailedStatus is detailed_merge_status, in GitLab's order: while mergeability is being
// computed "checking" (see isChecking); then the first failing check — the state checks (a held
// blocker, draft, approvals), then the git checks (conflict, need_rebase) — and the CI check
// only when every other one passes. Everything but a poll sees the settled status.
func (g *GitLab) detailedStatus(mr *mergeRequest, now time.Time, poll bool) string {
	if mr.state != "opened" {
		return "not_open"
	}
	if g.isChecking(mr, now, poll) {
		return "checking"
	}
	if st := g.stateCheck(mr); st != "" {
		return st
	}
	if st := g.gitCheck(mr); st != "" {
		return st
	}
	if st := g.ciCheck(mr, now); st != "" {
		return st
	}
	return "mergeable"
}

// stateCheck is the first failing state check of an open MR, or "".
func (g *GitLab) stateCheck(mr *mergeRequest) string { // holds g.mu
	switch {
	case mr.blocker != "":
		return mr.blocker
	case mr.draft():
		return "draft_status"
	case len(mr.approvals) < g.faults().ApprovalsRequired:
		return "not_approved"
	}
	return ""
}

func (mr *mergeRequest) draft() bool {
	return strings.HasPrefix(strings.ToLower(mr.title), "draft:") || mr.blocker == "draft_status"
}

// gitCheck is what keeps git from merging the MR: "conflict", "need_rebase" (by the merge
// method) or "".
func (g *GitLab) gitCheck(mr *mergeRequest) string { // holds g.mu
	switch {
	case mr.conflicts():
		return "conflict"
	case mr.needsRebase(g.mergeMethod()):
		return "need_rebase"
	}
	return ""
}

// ciCheck is the CI check of the MR's head: "ci_must_pass" (no pipeline, or it failed),
// "ci_still_running" or "" — always "" when the project does not require pipelines to succeed
// (sim.gitlab.pipelineMustSucceed false), as GitLab skips the check then.
func (g *GitLab) ciCheck(mr *mergeRequest, now time.Time) string { // holds g.mu
	if !g.faults().PipelineMustSucceed {
		return ""
	}
	pl := mr.headPipeline()
	if pl == nil {
		return "ci_must_pass"
	}
	switch pl.status(now) {
	case pipeSuccess:
		return ""
	case pipeFailed:
		return "ci_must_pass"
	}
	return "ci_still_running"
}

func mergeStatus(detailed string, hasConflicts bool) string {
	switch {
	case detailed == "checking":
		return "checking"
	case hasConflicts:
		return "cannot_be_merged"
	}
	return "can_be_merged"
}

// mrPipeline starts the pipeline GitLab runs for an MR's head in the MR pipeline modes: on the
// head itself (refs/merge-requests/<iid>/head), or with sim.gitlab.pipelineSource merged_result
// on a merge commit of the head into the target (refs/merge-requests/<iid>/merge) — unless the
// two conflict, when GitLab falls back to a pipeline on the head.
func (g *GitLab) mrPipeline(mr *mergeRequest, userID int64, now time.Time) *pipeline { // holds g.mu
	head := mr.head()
	pl := &pipeline{sha: head, head: head, ref: "refs/merge-requests/" + itoa64(mr.iid) + "/head", source: sourceMergeRequest, mrIID: mr.iid}
	if g.faults().PipelineSource == config.PipelineMergedResult {
		if sha := g.mergeRef(mr, now); sha != "" {
			pl.sha, pl.ref = sha, "refs/merge-requests/"+itoa64(mr.iid)+"/merge"
		}
	}
	return g.startPipeline(mr.project, pl, mr.target, userID, now)
}

// branchPipeline starts a pipeline on a branch's head (a push pipeline, or one created through
// the API). It belongs to the branch's open MR, if any.
func (g *GitLab) branchPipeline(p *project, branch, source string, userID int64, now time.Time) *pipeline { // holds g.mu
	head := p.branches[branch]
	pl := &pipeline{sha: head, head: head, ref: branch, source: source}
	target := p.defaultBranch
	for _, mr := range p.mrs {
		if mr.state == "opened" && mr.source == branch {
			pl.mrIID, target = mr.iid, mr.target
		}
	}
	return g.startPipeline(p, pl, target, userID, now)
}

// mergeRef writes the merge commit of a merged-results pipeline: the MR's head merged into the
// target's head (parents: target, head), on no branch. "" when they conflict.
func (g *GitLab) mergeRef(mr *mergeRequest, now time.Time) string { // holds g.mu
	p := mr.project
	tgt, src := p.branches[mr.target], mr.head()
	files, conflicts, ok := p.merged(tgt, src)
	if !ok || len(conflicts) > 0 {
		return ""
	}
	return g.newCommit(p, []string{tgt, src}, "Merge branch '"+mr.source+"' into '"+mr.target+"'", files, now).id
}

// startPipeline numbers a new pipeline and draws its fate (success, failure, never finishing)
// from the knobs in force; target is the branch its changes are measured against.
func (g *GitLab) startPipeline(p *project, pl *pipeline, target string, userID int64, now time.Time) *pipeline { // holds g.mu
	g.nextPipelineID++
	p.nextPipeIID++
	pl.project, pl.id, pl.iid, pl.userID = p, g.nextPipelineID, p.nextPipeIID, userID
	g.runPipeline(pl, target, now)
	p.pipelines = append(p.pipelines, pl)
	return pl
}

// runPipeline (re)starts a pipeline now with a fate drawn from the knobs: a retry of a failed pipeline
// runs it again, same id.
func (g *GitLab) runPipeline(pl *pipeline, target string, now time.Time) { // holds g.mu
	f := g.faults()
	pl.createdAt, pl.updatedAt, pl.reported = now, now, ""
	pl.dur, pl.outcome = scaled(g.cfg, f.PipelineDuration), pipeSuccess
	g.nextJobID++
	pl.jobs = append(pl.jobs, simJob{ID: g.nextJobID, CreatedAt: now})
	switch {
	case g.failNext > 0:
		g.failNext--
		pl.outcome = pipeFailed
	case g.stickNext > 0:
		g.stickNext--
		pl.outcome = "stuck"
	case g.changesMatch(pl.project, target, pl.sha, f.PipelineFailOn):
		pl.outcome = pipeFailed
	case chance(f.PipelineStuckRate):
		pl.outcome = "stuck"
		g.gate.faults.add("pipeline_stuck")
	case chance(f.PipelineFailRate):
		pl.outcome = pipeFailed
		g.gate.faults.add("pipeline_failed")
	}
	if !slices.Contains(g.active, pl) {
		g.active = append(g.active, pl)
	}
}

// targetOf is the branch a pipeline's changes are measured against: its MR's target, else the
// project's default branch.
func (pl *pipeline) targetOf() string {
	if mr := pl.project.mr(pl.mrIID); mr != nil {
		return mr.target
	}
	return pl.project.defaultBranch
}

// changesMatch reports whether a file that sha's tree changes over its merge base with target
// (added, changed or deleted) has one of texts in its path or content: the pipeline of a bad
// change fails every time, whatever else the commit carries — and so does the pipeline of a
// branch built on top of it, until the bad change is merged into target or left out.
func (g *GitLab) changesMatch(p *project, target, sha string, texts []string) bool { // holds g.mu
	if len(texts) == 0 {
		return false
	}
	src, tgt := p.commits[sha], p.commits[p.branches[target]]
	if src == nil || tgt == nil {
		return false
	}
	base := p.commits[p.mergeBase(src.id, tgt.id)]
	if base == nil {
		return false
	}
	for path := range changes(base.files, src.files) {
		content := src.files[path].content
		if _, ok := src.files[path]; !ok {
			content = base.files[path].content
		}
		for _, t := range texts {
			if t != "" && (strings.Contains(path, t) || strings.Contains(content, t)) {
				return true
			}
		}
	}
	return false
}

// headMoved reacts to a push to branch: open MRs from it get a pipeline and are re-checked; open
// MRs into it are re-checked (they may now need a rebase or conflict). With branch pipelines
// (sim.gitlab.pipelineSource push) the push itself gets the pipeline, once, unless the branch is
// the default branch or an MR's target (the simulator runs no CI there).
func (g *GitLab) headMoved(p *project, branch string, userID int64, now time.Time) { // holds g.mu
	push := g.faults().PipelineSource == config.PipelinePush
	target := branch == p.defaultBranch
	for _, mr := range p.mrs {
		if mr.state != "opened" {
			continue
		}
		if mr.source == branch {
			old := mr.headSHA
			mr.headSHA, mr.updatedAt = p.branches[branch], now
			g.recheck(mr, now)
			if !push {
				g.mrPipeline(mr, mr.authorID, now)
			}
			g.mrHook(mr, "update", mr.authorID, old, now)
		} else if mr.target == branch {
			target = true
			g.recheck(mr, now)
		}
	}
	if push && !target && p.branches[branch] != "" {
		g.branchPipeline(p, branch, sourcePush, userID, now)
	}
}

// advance brings time-driven state up to now: finished rebases, pipeline status changes (with
// their webhooks) and auto-merges whose pipeline passed.
func (g *GitLab) advance(now time.Time) { // holds g.mu
	locking := g.locking[:0]
	for _, mr := range g.locking {
		switch {
		case mr.locking == nil:
		case now.Before(mr.locking.until):
			locking = append(locking, mr)
		default:
			lm := mr.locking
			mr.locking = nil
			g.doMerge(mr, lm.userID, lm.removeSource, now)
		}
	}
	g.locking = locking
	rebasing := g.rebasing[:0]
	for _, mr := range g.rebasing {
		if mr.rebase == nil {
			continue
		}
		if now.Before(mr.rebase.until) {
			rebasing = append(rebasing, mr)
			continue
		}
		g.finishRebase(mr, now)
	}
	g.rebasing = rebasing
	active := g.active[:0]
	for _, pl := range g.active {
		st := pl.status(now)
		if st != pl.reported {
			pl.reported = st
			pl.updatedAt = now
			g.pipelineHook(pl, now)
		}
		if st == pipeSuccess || st == pipeFailed {
			if mr := pl.project.mr(pl.mrIID); mr != nil && mr.autoMerge != nil && st == pipeSuccess && mr.head() == pl.head {
				am := mr.autoMerge
				if g.detailedStatus(mr, now, false) == "mergeable" {
					g.doMerge(mr, am.userID, am.removeSource, now)
				}
			}
			continue
		}
		active = append(active, pl)
	}
	g.active = active
}

// startRebase queues a rebase; its outcome is drawn now (a real conflict, or the knob).
func (g *GitLab) startRebase(mr *mergeRequest, now time.Time) { // holds g.mu
	f := g.faults()
	injected := !mr.conflicts() && chance(f.RebaseConflictRate)
	if injected {
		g.gate.faults.add("rebase_conflict")
	}
	mr.rebase = &rebaseJob{until: now.Add(scaled(g.cfg, f.RebaseDuration)), conflict: mr.conflicts() || injected}
	mr.mergeError = ""
	g.rebasing = append(g.rebasing, mr)
	g.advance(now) // a zero-length rebase is done before the 202 goes out
}

func (g *GitLab) finishRebase(mr *mergeRequest, now time.Time) { // holds g.mu
	job := mr.rebase
	mr.rebase = nil
	if mr.state != "opened" {
		return
	}
	if job.conflict {
		mr.mergeError = "Rebase failed. Please rebase locally"
		return
	}
	if !mr.behind() {
		return // already on top of the target: nothing to do, the sha stays
	}
	p := mr.project
	src, tgt := p.commits[mr.head()], p.commits[p.branches[mr.target]]
	base := p.commits[p.mergeBase(src.id, tgt.id)]
	files := tgt.files.clone()
	c := g.newCommit(p, []string{tgt.id}, src.message, files, now)
	c.author = src.author // a rebase keeps the commit's author
	for path := range changes(base.files, src.files) {
		if e, ok := src.files[path]; ok {
			files[path] = fileEntry{content: e.content, commit: c.id}
		} else {
			delete(files, path)
		}
	}
	p.branches[mr.source] = c.id
	g.headMoved(p, mr.source, mr.authorID, now)
}

// doMerge carries out the merge of an MR found mergeable, by the merge method: a merge commit of
// the three-way merge on the target (merge, rebase_merge), or the target moved to the head (ff);
// then the source branch removed if asked, a "merge" webhook and the deploy pipeline told. The
// target may have moved since the MR was found mergeable (a merge GitLab carries out in the
// background): what git can no longer do fails the merge as GitLab's does, the MR open again
// with merge_error.
func (g *GitLab) doMerge(mr *mergeRequest, userID int64, removeSource bool, now time.Time) { // holds g.mu
	p := mr.project
	tgtBefore := p.commits[p.branches[mr.target]]
	src := p.commits[mr.head()]
	method := g.mergeMethod()
	files, conflicts, _ := p.merged(tgtBefore.id, src.id)
	switch {
	case mr.needsRebase(method):
		mr.state, mr.mergeError, mr.updatedAt = "opened", "Only fast-forward merge is allowed for your project. Please update your source branch", now
		return
	case len(conflicts) > 0:
		mr.state, mr.mergeError, mr.updatedAt = "opened", "Conflicts detected during merge", now
		return
	}
	landed, mergeCommit := src.id, ""
	if method != config.MergeMethodFF {
		c := g.newCommit(p, []string{tgtBefore.id, src.id}, "Merge branch '"+mr.source+"' into '"+mr.target+"'\n\n"+mr.title, files, now)
		c.author = g.userByID(userID).Name // GitLab's merge commit is the merging account's
		landed, mergeCommit = c.id, c.id
	}
	p.branches[mr.target] = landed
	mr.headSHA = src.id
	g.recordMerge(mr, userID, tgtBefore.id, landed, now)
	mr.state, mr.mergedAt, mr.mergeUserID, mr.mergeCommit, mr.updatedAt = "merged", &now, userID, mergeCommit, now
	mr.autoMerge, mr.mergeError = nil, ""
	if removeSource || mr.removeSource {
		delete(p.branches, mr.source)
	}
	g.mrHook(mr, "merge", userID, "", now)
	g.headMoved(p, mr.target, userID, now)
	info := MergeInfo{Project: p.path, IID: mr.iid, SHA: landed, OperationIDs: operationIDs(tgtBefore.files, p.commits[landed].files),
		Branch: mr.target, DefaultBranch: p.defaultBranch, ProjectID: p.id, CIConfig: p.commits[landed].files[ciConfigPath].content,
		Variables: maps.Clone(p.variables), InstanceURL: g.hooks.instance()}
	for _, fn := range g.onMerge {
		fn(info)
	}
}

// operationIDs reads the operationId of every YAML file that differs between two trees (the
// new content, or the removed one for a deletion).
func operationIDs(before, after tree) []string {
	seen := map[string]bool{}
	for path := range changes(before, after) {
		content := after[path].content
		if _, ok := after[path]; !ok {
			content = before[path].content
		}
		var doc map[string]any
		if yaml.Unmarshal([]byte(content), &doc) != nil {
			continue
		}
		if id, ok := doc["operationId"].(string); ok && id != "" {
			seen[id] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// moveTargetForward simulates another merge landing first: an unrelated commit on the target.
func (g *GitLab) moveTargetForward(mr *mergeRequest, now time.Time) { // holds g.mu
	p := mr.project
	path := ".sim/concurrent-" + itoa64(rand.Int64N(1<<40)) + ".txt"
	g.pushFile(p, mr.target, path, "another change landed first\n", "Concurrent change", now)
	g.headMoved(p, mr.target, 0, now)
}
