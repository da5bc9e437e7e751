package sim

import (
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Merge requests, their pipelines, approvals, rebase and merge. The project merges with a merge
// commit and semi-linear history: an MR whose source branch does not contain the target's head
// needs a rebase before it can be merged (GitLab's detailed_merge_status "need_rebase").

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
	checking     bool // the next read answers "checking" (GitLab recomputes mergeability lazily)
	rebase       *rebaseJob
	locking      *lockedMerge // set while the MR is "locked": GitLab is merging it
	autoMerge    *autoMerge
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
	mrIID     int64
	userID    int64
	createdAt time.Time
	updatedAt time.Time
	dur       time.Duration
	outcome   string // success, failed, or stuck (stays running)
	reported  string // the last status a webhook went out for
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

// headPipeline is the newest pipeline of the MR for its current head, or nil.
func (mr *mergeRequest) headPipeline() *pipeline {
	head := mr.head()
	for i := len(mr.project.pipelines) - 1; i >= 0; i-- {
		if pl := mr.project.pipelines[i]; pl.mrIID == mr.iid && pl.sha == head {
			return pl
		}
	}
	return nil
}

func (mr *mergeRequest) approvedBy(userID int64) bool {
	for _, a := range mr.approvals {
		if a.userID == userID {
			return true
		}
	}
	return false
}

// needsRebase: the source branch does not contain the target's head.
func (mr *mergeRequest) needsRebase() bool {
	p := mr.project
	return !p.ancestors(mr.head())[p.branches[mr.target]]
}

// conflicts: both sides changed a file differently since they diverged.
func (mr *mergeRequest) conflicts() bool {
	p := mr.project
	src, tgt := p.commits[mr.head()], p.commits[p.branches[mr.target]]
	if src == nil || tgt == nil {
		return false
	}
	base := p.commits[p.mergeBase(src.id, tgt.id)]
	if base == nil {
		return false
	}
	ours, theirs := changes(base.files, src.files), changes(base.files, tgt.files)
	for path := range ours {
		if theirs[path] && src.files[path].content != tgt.files[path].content {
			return true
		}
	}
	return false
}

// detailedStatus is detailed_merge_status. GitLab recomputes mergeability lazily when an MR
// is polled: after a change, the first poll (poll=true) answers "checking" and the next the
// settled status. Everything else (merge, webhooks, other answers) sees the settled status.
func (g *GitLab) detailedStatus(mr *mergeRequest, now time.Time, poll bool) string {
	if mr.state != "opened" {
		return "not_open"
	}
	if mr.checking && poll {
		mr.checking = false
		return "checking"
	}
	if strings.HasPrefix(strings.ToLower(mr.title), "draft:") {
		return "draft_status"
	}
	if mr.conflicts() {
		return "conflict"
	}
	if mr.needsRebase() {
		return "need_rebase"
	}
	if pl := mr.headPipeline(); pl == nil {
		return "ci_must_pass"
	} else if st := pl.status(now); st != pipeSuccess {
		if st == pipeFailed {
			return "ci_must_pass"
		}
		return "ci_still_running"
	}
	if len(mr.approvals) < g.faults().ApprovalsRequired {
		return "not_approved"
	}
	return "mergeable"
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

// newPipeline starts an MR pipeline for sha. Its fate (success, failure, never finishing) is
// drawn now from the knobs in force.
func (g *GitLab) newPipeline(mr *mergeRequest, sha string, userID int64, now time.Time) *pipeline { // holds g.mu
	p := mr.project
	f := g.faults()
	g.nextPipelineID++
	p.nextPipeIID++
	pl := &pipeline{
		project: p, id: g.nextPipelineID, iid: p.nextPipeIID, sha: sha,
		ref:   "refs/merge-requests/" + itoa64(mr.iid) + "/head",
		mrIID: mr.iid, userID: userID, createdAt: now, updatedAt: now,
		dur: scaled(g.cfg, f.PipelineDuration), outcome: pipeSuccess,
	}
	switch {
	case g.failNext > 0:
		g.failNext--
		pl.outcome = pipeFailed
	case g.changesMatch(mr, sha, f.PipelineFailOn):
		pl.outcome = pipeFailed
	case chance(f.PipelineStuckRate):
		pl.outcome = "stuck"
		g.gate.faults.add("pipeline_stuck")
	case chance(f.PipelineFailRate):
		pl.outcome = pipeFailed
		g.gate.faults.add("pipeline_failed")
	}
	p.pipelines = append(p.pipelines, pl)
	g.active = append(g.active, pl)
	return pl
}

// changesMatch reports whether a file that sha changes against the MR's target (since their
// merge base) has one of texts in its path or content: the pipeline of a bad change fails every
// time, whatever else the commit carries.
func (g *GitLab) changesMatch(mr *mergeRequest, sha string, texts []string) bool { // holds g.mu
	if len(texts) == 0 {
		return false
	}
	p := mr.project
	src, tgt := p.commits[sha], p.commits[p.branches[mr.target]]
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

// headMoved reacts to a branch moving: open MRs from it get a pipeline and are re-checked; open
// MRs into it are re-checked (they may now need a rebase or conflict).
func (g *GitLab) headMoved(p *project, branch string, now time.Time) { // holds g.mu
	for _, mr := range p.mrs {
		if mr.state != "opened" {
			continue
		}
		if mr.source == branch {
			old := mr.headSHA
			mr.headSHA = p.branches[branch]
			mr.checking, mr.updatedAt = true, now
			g.newPipeline(mr, mr.headSHA, mr.authorID, now)
			g.mrHook(mr, "update", mr.authorID, old, now)
		} else if mr.target == branch {
			mr.checking = true
		}
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
			if mr := pl.project.mr(pl.mrIID); mr != nil && mr.autoMerge != nil && st == pipeSuccess && mr.head() == pl.sha {
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
	if !mr.needsRebase() {
		return // already on top of the target: nothing to do, the sha stays
	}
	p := mr.project
	src, tgt := p.commits[mr.head()], p.commits[p.branches[mr.target]]
	base := p.commits[p.mergeBase(src.id, tgt.id)]
	files := tgt.files.clone()
	c := g.newCommit(p, []string{tgt.id}, src.message, files, now)
	for path := range changes(base.files, src.files) {
		if e, ok := src.files[path]; ok {
			files[path] = fileEntry{content: e.content, commit: c.id}
		} else {
			delete(files, path)
		}
	}
	p.branches[mr.source] = c.id
	g.headMoved(p, mr.source, now)
}

// doMerge merges an MR that is mergeable: a merge commit on the target, the source branch
// removed if asked, a "merge" webhook and the deploy pipeline told.
func (g *GitLab) doMerge(mr *mergeRequest, userID int64, removeSource bool, now time.Time) { // holds g.mu
	p := mr.project
	tgtBefore := p.commits[p.branches[mr.target]]
	src := p.commits[mr.head()]
	c := g.newCommit(p, []string{tgtBefore.id, src.id}, "Merge branch '"+mr.source+"' into '"+mr.target+"'\n\n"+mr.title, src.files.clone(), now)
	p.branches[mr.target] = c.id
	mr.headSHA = src.id
	mr.state, mr.mergedAt, mr.mergeUserID, mr.mergeCommit, mr.updatedAt = "merged", &now, userID, c.id, now
	mr.autoMerge, mr.mergeError = nil, ""
	if removeSource || mr.removeSource {
		delete(p.branches, mr.source)
	}
	g.mrHook(mr, "merge", userID, "", now)
	g.headMoved(p, mr.target, now)
	info := MergeInfo{Project: p.path, IID: mr.iid, OperationIDs: operationIDs(tgtBefore.files, c.files)}
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
	g.headMoved(p, mr.target, now)
}
