package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"bindery/internal/platform/config"
)

// The REST surface of the simulated GitLab, under /sim/gitlab/api/v4. Status codes, error
// bodies and pagination headers are GitLab's own (lib/api/ and app/services/ of its source);
// what bindery relies on is in docs/gitlab.md.

type gitlabRoute struct {
	method   string
	endpoint string // fault and call-count name
	pattern  []string
	handle   func(c *call)
}

var gitlabRoutes = []gitlabRoute{
	{"GET", "current_user", path("user"), (*call).currentUser},
	{"GET", "get_project", path("projects/:id"), (*call).getProject},
	{"GET", "get_commit", path("projects/:id/repository/commits/:sha"), (*call).getCommit},
	{"GET", "merge_base", path("projects/:id/repository/merge_base"), (*call).mergeBase},
	{"POST", "create_branch", path("projects/:id/repository/branches"), (*call).createBranch},
	{"GET", "get_branch", path("projects/:id/repository/branches/:branch"), (*call).getBranch},
	{"DELETE", "delete_branch", path("projects/:id/repository/branches/:branch"), (*call).deleteBranch},
	{"POST", "create_commit", path("projects/:id/repository/commits"), (*call).createCommit},
	{"GET", "list_commits", path("projects/:id/repository/commits"), (*call).listCommits},
	{"GET", "list_tree", path("projects/:id/repository/tree"), (*call).listTree},
	{"GET", "get_file_raw", path("projects/:id/repository/files/:file_path/raw"), (*call).getFileRaw},
	{"POST", "create_mr", path("projects/:id/merge_requests"), (*call).createMR},
	{"GET", "list_mrs", path("projects/:id/merge_requests"), (*call).listMRs},
	{"GET", "get_mr", path("projects/:id/merge_requests/:iid"), (*call).getMR},
	{"PUT", "update_mr", path("projects/:id/merge_requests/:iid"), (*call).updateMR},
	{"GET", "mr_pipelines", path("projects/:id/merge_requests/:iid/pipelines"), (*call).listMRPipelines},
	{"POST", "create_mr_pipeline", path("projects/:id/merge_requests/:iid/pipelines"), (*call).createMRPipeline},
	{"GET", "get_approvals", path("projects/:id/merge_requests/:iid/approvals"), (*call).getApprovals},
	{"POST", "create_note", path("projects/:id/merge_requests/:iid/notes"), (*call).createNote},
	{"GET", "list_notes", path("projects/:id/merge_requests/:iid/notes"), (*call).listNotes},
	{"PUT", "update_note", path("projects/:id/merge_requests/:iid/notes/:note_id"), (*call).updateNote},
	{"POST", "approve", path("projects/:id/merge_requests/:iid/approve"), (*call).approve},
	{"POST", "unapprove", path("projects/:id/merge_requests/:iid/unapprove"), (*call).unapprove},
	{"PUT", "merge", path("projects/:id/merge_requests/:iid/merge"), (*call).merge},
	{"PUT", "rebase", path("projects/:id/merge_requests/:iid/rebase"), (*call).rebase},
	{"GET", "get_pipeline", path("projects/:id/pipelines/:pipeline_id"), (*call).getPipeline},
	{"POST", "retry_pipeline", path("projects/:id/pipelines/:pipeline_id/retry"), (*call).retryPipeline},
	{"GET", "pipeline_jobs", path("projects/:id/pipelines/:pipeline_id/jobs"), (*call).listPipelineJobs},
	{"POST", "create_pipeline", path("projects/:id/pipeline"), (*call).createPipeline},
	// Not a GitLab endpoint today: the upstream approve-API change adds a required checklist to
	// approve, read from here. See internal/remote/gitlab/approve.go.
	{"GET", "checklist", path("projects/:id/approval_checklist"), (*call).checklist},
}

func path(p string) []string { return strings.Split(p, "/") }

// call is one API request being served, with the simulator locked.
type call struct {
	g    *GitLab
	w    http.ResponseWriter
	r    *http.Request
	user *User
	in   params
	vars map[string]string
	p    *project
	now  time.Time
	base string // instance URL for web_url fields
}

func (g *GitLab) serveAPI(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/sim/gitlab/api/v4/")
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "404 Not Found"})
		return
	}
	// Split the escaped path, then decode each segment: a project path arrives as one
	// segment ("grp%2Fproj") and so do branch names ("feat%2Fx%2Ey").
	segs := strings.Split(rest, "/")
	for i, s := range segs {
		d, err := url.PathUnescape(s)
		if err != nil {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "404 Not Found"})
			return
		}
		segs[i] = d
	}
	var rt *gitlabRoute
	var vars map[string]string
	pathMatched := false
	for i := range gitlabRoutes {
		if v, ok := match(gitlabRoutes[i].pattern, segs); ok {
			pathMatched = true
			if gitlabRoutes[i].method == r.Method {
				rt, vars = &gitlabRoutes[i], v
				break
			}
		}
	}
	switch {
	case rt == nil && pathMatched:
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "405 Not Allowed"})
		return
	case rt == nil:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "404 Not Found"})
		return
	}
	f := g.Faults()
	g.gate.serve(w, r, rt.endpoint, f.SimTransport, messageBody, func(w http.ResponseWriter) {
		if chance(f.RateLimitRate) {
			g.gate.faults.add("rate_limited")
			rateLimited(w, g.clock.Now())
			return
		}
		g.handle(w, r, rt, vars)
	})
}

// rateLimited answers as GitLab's Rack::Attack throttle does: 429, Retry-After in seconds, the
// RateLimit-* headers and a plain-text body.
func rateLimited(w http.ResponseWriter, now time.Time) {
	h := w.Header()
	reset := now.Add(time.Second)
	h.Set("Retry-After", "1")
	h.Set("RateLimit-Name", "throttle_authenticated_api")
	h.Set("RateLimit-Limit", "2000")
	h.Set("RateLimit-Observed", "2001")
	h.Set("RateLimit-Remaining", "0")
	h.Set("RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
	h.Set("RateLimit-ResetTime", reset.UTC().Format(http.TimeFormat))
	h.Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = io.WriteString(w, "Retry later\n")
}

func messageBody(_ int, msg string) any { return map[string]any{"message": msg} }

func match(pattern, segs []string) (map[string]string, bool) {
	if len(pattern) != len(segs) {
		return nil, false
	}
	vars := map[string]string{}
	for i, p := range pattern {
		switch {
		case strings.HasPrefix(p, ":"):
			if segs[i] == "" {
				return nil, false
			}
			vars[p[1:]] = segs[i]
		case p != segs[i]:
			return nil, false
		}
	}
	return vars, true
}

func (g *GitLab) handle(w http.ResponseWriter, r *http.Request, rt *gitlabRoute, vars map[string]string) {
	token := r.Header.Get("Private-Token")
	if token == "" {
		token, _ = strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	if token == "" {
		token = r.URL.Query().Get("private_token")
	}
	in, err := readParams(r)
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.clock.Now()
	g.advance(now)
	c := &call{g: g, w: w, r: r, in: in, vars: vars, now: now, base: publicURL(g.opts, r) + "/gitlab"}
	g.hooks.base.Store(&c.base)
	if c.user = g.userByToken(token); c.user == nil {
		c.fail(http.StatusUnauthorized, "401 Unauthorized")
		return
	}
	if r.Method != http.MethodGet && !slices.Contains(c.user.scopes(), "api") {
		// A read_api (or read_user, …) token may not write: GitLab's 403 from Doorkeeper.
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "insufficient_scope",
			"error_description": "The request requires higher privileges than provided by the access token.", "scope": "api"})
		return
	}
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	if id, ok := vars["id"]; ok {
		if c.p = g.lookupProject(id, now); c.p == nil {
			c.fail(http.StatusNotFound, "404 Project Not Found")
			return
		}
	}
	rt.handle(c)
}

// ---- helpers ----

func (c *call) fail(status int, message any) {
	writeJSON(c.w, status, map[string]any{"message": message})
}

// missing answers Grape's 400 when a required parameter is absent or empty.
func (c *call) missing(names ...string) bool {
	var miss []string
	for _, n := range names {
		if v, ok := c.in[n]; !ok || v == nil || v == "" {
			miss = append(miss, n+" is missing")
		} else if l, ok := v.([]any); ok && len(l) == 0 {
			miss = append(miss, n+" is missing")
		}
	}
	if len(miss) == 0 {
		return false
	}
	writeJSON(c.w, http.StatusBadRequest, map[string]string{"error": strings.Join(miss, ", ")})
	return true
}

func (c *call) mr() *mergeRequest {
	iid, err := strconv.ParseInt(c.vars["iid"], 10, 64)
	if mr := c.p.mr(iid); err == nil && mr != nil {
		return mr
	}
	c.fail(http.StatusNotFound, "404 Merge Request Not Found")
	return nil
}

// commitIDRE is a full commit id, what GitLab accepts as start_sha (Gitlab::Git.commit_id?).
var commitIDRE = regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`)

// resolve turns a ref (branch name or commit id, full or at least 7 characters) into a commit.
func (p *project) resolve(ref string) string {
	if h := p.branches[ref]; h != "" {
		return h
	}
	if p.commits[ref] != nil {
		return ref
	}
	if len(ref) >= 7 {
		for id := range p.commits {
			if strings.HasPrefix(id, ref) {
				return id
			}
		}
	}
	return ""
}

// ---- users and branches ----

func (c *call) currentUser() { writeJSON(c.w, http.StatusOK, c.userJSON(*c.user)) }

func (c *call) getProject() { writeJSON(c.w, http.StatusOK, c.projectJSON()) }

// getCommit is GET /projects/:id/repository/commits/:sha: a commit (by id, short id or branch)
// with its parents and stats.
func (c *call) getCommit() {
	cm := c.p.commits[c.p.resolve(c.vars["sha"])]
	if cm == nil {
		c.fail(http.StatusNotFound, "404 Commit Not Found")
		return
	}
	writeJSON(c.w, http.StatusOK, c.commitJSON(cm, true))
}

// mergeBase is GET /projects/:id/repository/merge_base?refs[]=a&refs[]=b: the best common
// ancestor of the refs (branch names or commit ids; refs=a,b too), as git merge-base answers for
// the first ref against the others. A is in B's history exactly when the merge base of A and B
// is A. 400 for fewer than two refs or an unknown one, 404 when they share no history.
func (c *call) mergeBase() {
	q := c.r.URL.Query()
	var refs []string
	for _, v := range append(q["refs[]"], q["refs"]...) {
		for _, r := range strings.Split(v, ",") {
			if r = strings.TrimSpace(r); r != "" {
				refs = append(refs, r)
			}
		}
	}
	if len(refs) == 0 {
		writeJSON(c.w, http.StatusBadRequest, map[string]string{"error": "refs is missing"})
		return
	}
	if len(refs) < 2 {
		c.fail(http.StatusBadRequest, "Provide at least 2 refs")
		return
	}
	var ids, unknown []string
	for _, r := range refs {
		if id := c.p.resolve(r); id != "" {
			ids = append(ids, id)
		} else {
			unknown = append(unknown, r)
		}
	}
	switch {
	case len(unknown) == 1:
		c.fail(http.StatusBadRequest, "Could not find ref: "+unknown[0])
	case len(unknown) > 1:
		c.fail(http.StatusBadRequest, "Could not find refs: "+strings.Join(unknown, ", "))
	default:
		if base := c.p.mergeBase(ids[0], ids[1:]...); base != "" {
			writeJSON(c.w, http.StatusOK, c.commitJSON(c.p.commits[base], false))
		} else {
			c.fail(http.StatusNotFound, "404 Merge Base Not Found")
		}
	}
}

func (c *call) createBranch() {
	if c.missing("branch", "ref") {
		return
	}
	if !c.user.CanPush {
		c.fail(http.StatusForbidden, "403 Forbidden")
		return
	}
	name, _ := c.in.str("branch")
	ref, _ := c.in.str("ref")
	switch {
	case !validBranchName(name):
		c.fail(http.StatusBadRequest, "Branch name is invalid")
	case c.p.branches[name] != "":
		c.fail(http.StatusBadRequest, "Branch already exists")
	case c.p.resolve(ref) == "":
		c.fail(http.StatusBadRequest, fmt.Sprintf("Failed to create branch '%s': invalid reference name '%s'", name, ref))
	default:
		// A push like any other: a branch pipeline where the project runs them, and an open MR
		// from a branch of that name (deleted, made again) follows it.
		c.p.branches[name] = c.p.resolve(ref)
		c.g.headMoved(c.p, name, c.user.ID, c.now)
		writeJSON(c.w, http.StatusCreated, c.branchJSON(name))
	}
}

func (c *call) getBranch() {
	if c.p.branches[c.vars["branch"]] == "" {
		c.fail(http.StatusNotFound, "404 Branch Not Found")
		return
	}
	c.p.noteRead(c.user.ID, c.vars["branch"])
	writeJSON(c.w, http.StatusOK, c.branchJSON(c.vars["branch"]))
}

func (c *call) deleteBranch() {
	name := c.vars["branch"]
	switch {
	case !c.user.CanPush:
		c.fail(http.StatusForbidden, "403 Forbidden")
	case c.p.branches[name] == "":
		c.fail(http.StatusNotFound, "404 Branch Not Found")
	default:
		delete(c.p.branches, name)
		c.w.WriteHeader(http.StatusNoContent)
	}
}

// getFileRaw answers a file's content at ref (default: the project's default branch) as
// text/plain, as GitLab's raw file endpoint does; tests read what the merges left on a branch.
func (c *call) getFileRaw() {
	ref, _ := c.in["ref"].(string)
	if ref == "" {
		ref = c.p.defaultBranch
	}
	cm := c.p.commits[c.p.resolve(ref)]
	if cm == nil {
		c.fail(http.StatusNotFound, "404 Commit Not Found")
		return
	}
	f, ok := cm.files[c.vars["file_path"]]
	if !ok {
		c.fail(http.StatusNotFound, "404 File Not Found")
		return
	}
	c.w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	c.w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(c.w, f.content)
}

// ---- commits ----

func (c *call) createCommit() {
	if c.missing("branch", "commit_message", "actions") {
		return
	}
	startBranch, hasSB := c.in.str("start_branch")
	startSHA, hasSS := c.in.str("start_sha")
	if hasSB && hasSS {
		writeJSON(c.w, http.StatusBadRequest, map[string]string{"error": "start_branch, start_sha are mutually exclusive"})
		return
	}
	actions, bad := c.in.actions()
	if bad != "" {
		writeJSON(c.w, http.StatusBadRequest, map[string]string{"error": bad})
		return
	}
	if !c.user.CanPush {
		c.fail(http.StatusForbidden, "403 Forbidden")
		return
	}
	branch, _ := c.in.str("branch")
	message, _ := c.in.str("commit_message")
	// GitLab's Commits::CreateService: without a start the commit goes on branch itself (its
	// start_branch defaults to branch); a start elsewhere makes (or with force, remakes) branch
	// from it.
	if !hasSB && !hasSS {
		startBranch, hasSB = branch, true
	}
	elsewhere := startBranch != branch || hasSS
	var parent string
	switch {
	case hasSS && !commitIDRE.MatchString(startSHA):
		c.fail(http.StatusBadRequest, fmt.Sprintf("Invalid start_sha '%s'", startSHA))
		return
	case hasSS && c.p.commits[startSHA] == nil:
		c.fail(http.StatusBadRequest, fmt.Sprintf("Cannot find start_sha '%s'", startSHA))
		return
	case hasSS:
		parent = startSHA
	case c.p.branches[startBranch] == "":
		c.fail(http.StatusBadRequest, "You can only create or edit files when you are on a branch")
		return
	default:
		parent = c.p.branches[startBranch]
	}
	if elsewhere && c.p.branches[branch] != "" && !c.in.flag("force") {
		c.fail(http.StatusBadRequest, fmt.Sprintf("A branch called '%s' already exists. Switch to that branch in order to make changes", branch))
		return
	}
	if elsewhere && !validBranchName(branch) {
		c.fail(http.StatusBadRequest, fmt.Sprintf("Something went wrong when we tried to create '%s' for you: Branch name is invalid", branch))
		return
	}
	cm := c.g.newCommit(c.p, []string{parent}, message, nil, c.now)
	files, stats, msg := apply(c.p.commits[parent].files, actions, cm.id)
	if msg != "" {
		delete(c.p.commits, cm.id) // all or nothing: the failed commit never existed
		c.p.order = c.p.order[:len(c.p.order)-1]
		c.fail(http.StatusBadRequest, msg)
		return
	}
	cm.files, cm.stats, cm.author = files, stats, c.user.Name
	c.p.branches[branch] = cm.id
	c.g.headMoved(c.p, branch, c.user.ID, c.now)
	writeJSON(c.w, http.StatusCreated, c.commitJSON(cm, true))
}

// ---- merge requests ----

func (c *call) createMR() {
	if c.missing("source_branch", "target_branch", "title") {
		return
	}
	if !c.user.CanPush {
		c.fail(http.StatusForbidden, "403 Forbidden")
		return
	}
	src, _ := c.in.str("source_branch")
	tgt, _ := c.in.str("target_branch")
	title, _ := c.in.str("title")
	switch {
	case src == tgt:
		c.fail(http.StatusUnprocessableEntity, []string{"You can't use same project/branch for source and target"})
		return
	case c.p.branches[src] == "":
		c.fail(http.StatusUnprocessableEntity, []string{fmt.Sprintf("Source branch \"%s\" does not exist", src)})
		return
	case c.p.branches[tgt] == "":
		c.fail(http.StatusUnprocessableEntity, []string{fmt.Sprintf("Target branch \"%s\" does not exist", tgt)})
		return
	}
	for _, mr := range c.p.mrs {
		if mr.state == "opened" && mr.source == src && mr.target == tgt {
			c.fail(http.StatusConflict, []string{fmt.Sprintf("Another open merge request already exists for this source branch: !%d", mr.iid)})
			return
		}
	}
	c.g.nextMRID++
	mr := &mergeRequest{
		project: c.p, id: c.g.nextMRID, iid: int64(len(c.p.mrs) + 1), title: title, source: src, target: tgt,
		authorID: c.user.ID, state: "opened", createdAt: c.now, updatedAt: c.now,
		headSHA: c.p.branches[src], removeSource: c.in.flag("remove_source_branch"), labels: c.in.strings("labels"),
		blocker: c.g.faults().MergeBlocker,
	}
	mr.description, _ = c.in.str("description")
	c.g.recheck(mr, c.now)
	c.p.mrs = append(c.p.mrs, mr)
	if c.g.faults().PipelineSource == config.PipelinePush {
		// Branch pipelines: the push already ran one; it now shows on the MR.
		for _, pl := range c.p.pipelines {
			if pl.mrIID == 0 && pl.ref == src && pl.head == mr.headSHA {
				pl.mrIID = mr.iid
			}
		}
	} else {
		c.g.mrPipeline(mr, c.user.ID, c.now)
	}
	c.g.mrHook(mr, "open", c.user.ID, "", c.now)
	c.g.advance(c.now)
	writeJSON(c.w, http.StatusCreated, c.mrJSON(mr, false, false))
}

// listMRs is GET /projects/:id/merge_requests: filtered by state (opened, closed, merged, locked,
// all; default all) and source_branch, newest first (GitLab's default order), paginated.
func (c *call) listMRs() {
	state, _ := c.in.str("state")
	if state == "" {
		state = "all"
	}
	source, bySource := c.in.str("source_branch")
	var list []mrJSON
	for i := len(c.p.mrs) - 1; i >= 0; i-- {
		mr := c.p.mrs[i]
		if (state == "all" || mr.state == state) && (!bySource || mr.source == source) {
			list = append(list, c.mrJSON(mr, false, false))
		}
	}
	if list == nil {
		list = []mrJSON{}
	}
	writeJSON(c.w, http.StatusOK, paginate(c, list))
}

func (c *call) getMR() {
	if mr := c.mr(); mr != nil {
		writeJSON(c.w, http.StatusOK, c.mrJSON(mr, c.in.flag("include_rebase_in_progress"), true))
	}
}

var updateFields = []string{"assignee_id", "assignee_ids", "description", "discussion_locked", "labels", "milestone_id",
	"remove_source_branch", "reviewer_ids", "squash", "state_event", "target_branch", "title"}

func (c *call) updateMR() {
	mr := c.mr()
	if mr == nil {
		return
	}
	if !slices.ContainsFunc(updateFields, func(f string) bool { _, ok := c.in[f]; return ok }) {
		writeJSON(c.w, http.StatusBadRequest, map[string]string{"error": strings.Join(updateFields, ", ") + " are missing, at least one parameter must be provided"})
		return
	}
	event, hasEvent := c.in.str("state_event")
	if hasEvent && event != "close" && event != "reopen" {
		writeJSON(c.w, http.StatusBadRequest, map[string]string{"error": "state_event does not have a valid value"})
		return
	}
	if !c.user.CanPush {
		c.fail(http.StatusForbidden, "403 Forbidden")
		return
	}
	if t, ok := c.in.str("title"); ok && t != "" {
		mr.title = t
	}
	if d, ok := c.in.str("description"); ok {
		mr.description = d
	}
	if _, ok := c.in["remove_source_branch"]; ok {
		mr.removeSource = c.in.flag("remove_source_branch")
	}
	if _, ok := c.in["labels"]; ok {
		mr.labels = c.in.strings("labels")
	}
	mr.updatedAt = c.now
	// The state machine only moves to closed from opened; anything else is a silent no-op 200
	// (closing a merged MR returns it, still merged, without a webhook).
	switch {
	case event == "close" && mr.state == "opened":
		mr.state, mr.closedAt, mr.closedByID, mr.autoMerge = "closed", &c.now, c.user.ID, nil
		mr.headSHA = mr.project.branches[mr.source]
		c.g.mrHook(mr, "close", c.user.ID, "", c.now)
	case event == "reopen" && mr.state == "closed" && c.p.branches[mr.source] != "":
		mr.state, mr.closedAt = "opened", nil
		c.g.recheck(mr, c.now)
		c.g.mrHook(mr, "reopen", c.user.ID, "", c.now)
	}
	writeJSON(c.w, http.StatusOK, c.mrJSON(mr, false, false))
}

func (c *call) listMRPipelines() {
	mr := c.mr()
	if mr == nil {
		return
	}
	var list []pipelineInfoJSON
	for i := len(c.p.pipelines) - 1; i >= 0; i-- {
		if pl := c.p.pipelines[i]; pl.mrIID == mr.iid {
			list = append(list, c.pipelineInfo(pl))
		}
	}
	writeJSON(c.w, http.StatusOK, paginate(c, list))
}

// createMRPipeline answers 200 (not 201) with the new pipeline, as GitLab does. With branch
// pipelines only (sim.gitlab.pipelineSource push) the CI configuration has no merge request
// jobs, and GitLab's answer is a 400 validation error.
func (c *call) createMRPipeline() {
	mr := c.mr()
	if mr == nil {
		return
	}
	switch {
	case mr.state != "opened":
		c.fail(http.StatusBadRequest, "Cannot create a pipeline for a merge request that is not open")
		return
	case c.g.faults().PipelineSource == config.PipelinePush:
		c.fail(http.StatusBadRequest, map[string][]string{"base": {"No stages / jobs for this pipeline."}})
		return
	}
	pl := c.g.mrPipeline(mr, c.user.ID, c.now)
	c.g.advance(c.now)
	writeJSON(c.w, http.StatusOK, c.pipelineInfo(pl))
}

// createPipeline is POST /projects/:id/pipeline: a pipeline on a branch's head (source api).
func (c *call) createPipeline() {
	if c.missing("ref") {
		return
	}
	if !c.user.CanPush {
		c.fail(http.StatusForbidden, "403 Forbidden")
		return
	}
	ref, _ := c.in.str("ref")
	if c.p.branches[ref] == "" {
		c.fail(http.StatusBadRequest, map[string][]string{"base": {"Reference not found"}})
		return
	}
	pl := c.g.branchPipeline(c.p, ref, sourceAPI, c.user.ID, c.now)
	c.g.advance(c.now)
	writeJSON(c.w, http.StatusCreated, c.pipelineJSON(pl))
}

func (c *call) pipeline() *pipeline {
	id, _ := strconv.ParseInt(c.vars["pipeline_id"], 10, 64)
	for _, pl := range c.p.pipelines {
		if pl.id == id {
			return pl
		}
	}
	c.fail(http.StatusNotFound, "404 Not found")
	return nil
}

func (c *call) getPipeline() {
	if pl := c.pipeline(); pl != nil {
		writeJSON(c.w, http.StatusOK, c.pipelineJSON(pl))
	}
}

// jobScopes are the statuses GitLab accepts in scope / scope[] of a job list.
var jobScopes = []string{"created", "pending", "running", "failed", "success", "canceled", "skipped",
	"waiting_for_resource", "manual", "scheduled", "preparing", "canceling"}

// listPipelineJobs is GET /projects/:id/pipelines/:pipeline_id/jobs: the pipeline's jobs, newest
// first, filtered by scope (one status or scope[] several; an unknown one is Grape's 400),
// retried runs only with include_retried, one page at a time.
func (c *call) listPipelineJobs() {
	q := c.r.URL.Query()
	scope := append(q["scope[]"], q["scope"]...)
	for _, s := range scope {
		if !slices.Contains(jobScopes, s) {
			writeJSON(c.w, http.StatusBadRequest, map[string]string{"error": "scope does not have a valid value"})
			return
		}
	}
	pl := c.pipeline()
	if pl == nil {
		return
	}
	list := []jobJSON{}
	for i := len(pl.jobs) - 1; i >= 0; i-- {
		if i < len(pl.jobs)-1 && !c.in.flag("include_retried") {
			break
		}
		if j := c.jobJSON(pl, i); len(scope) == 0 || slices.Contains(scope, j.Status) {
			list = append(list, j)
		}
	}
	writeJSON(c.w, http.StatusOK, paginate(c, list))
}

// retryPipeline is POST /projects/:id/pipelines/:pipeline_id/retry: a failed pipeline runs its
// jobs again, same pipeline id (its fate drawn anew); any other is answered as it is. 201.
func (c *call) retryPipeline() {
	pl := c.pipeline()
	if pl == nil {
		return
	}
	if !c.user.CanPush {
		c.fail(http.StatusForbidden, "403 Forbidden")
		return
	}
	if pl.status(c.now) == pipeFailed {
		c.g.runPipeline(pl, pl.targetOf(), c.now)
		c.g.advance(c.now)
	}
	writeJSON(c.w, http.StatusCreated, c.pipelineJSON(pl))
}

// ---- approvals ----

func (c *call) getApprovals() {
	if mr := c.mr(); mr != nil {
		writeJSON(c.w, http.StatusOK, c.approvalsJSON(mr))
	}
}

func (c *call) approve() {
	mr := c.mr()
	if mr == nil {
		return
	}
	f := c.g.faults()
	if slices.Contains(f.DeniedApprovers, c.user.Username) {
		if f.DeniedApproveStatus == http.StatusUnauthorized {
			c.fail(http.StatusUnauthorized, "401 Unauthorized")
		} else {
			c.fail(http.StatusForbidden, "403 Forbidden")
		}
		return
	}
	if sha, ok := c.in.str("sha"); ok && sha != "" && sha != mr.head() {
		c.fail(http.StatusConflict, "SHA does not match HEAD of source branch: "+mr.head())
		return
	}
	if mr.approvedBy(c.user.ID) {
		// Older GitLab let the approval service refuse (401); newer GitLab checks for an
		// existing approval first and answers 304 with no body.
		if f.RepeatApprove == http.StatusNotModified {
			c.w.WriteHeader(http.StatusNotModified)
		} else {
			c.fail(http.StatusUnauthorized, "401 Unauthorized")
		}
		return
	}
	if c.user.ID == mr.authorID || mr.state != "opened" {
		c.fail(http.StatusUnauthorized, "401 Unauthorized")
		return
	}
	if want := c.g.checklistFor(c.p); len(want) > 0 && !c.in.checklistMatches(want) {
		writeJSON(c.w, http.StatusUnprocessableEntity, map[string]any{
			"message":   "Approval checklist does not match the project's current checklist",
			"checklist": want,
		})
		return
	}
	mr.approvals = append(mr.approvals, mrApproval{userID: c.user.ID, at: c.now})
	mr.updatedAt = c.now
	c.g.mrHook(mr, "approval", c.user.ID, "", c.now)
	if len(mr.approvals) == f.ApprovalsRequired {
		c.g.mrHook(mr, "approved", c.user.ID, "", c.now)
	}
	writeJSON(c.w, http.StatusCreated, c.approvalsJSON(mr))
}

func (c *call) unapprove() {
	mr := c.mr()
	if mr == nil {
		return
	}
	if !mr.approvedBy(c.user.ID) {
		if c.g.faults().RepeatApprove == http.StatusNotModified {
			c.w.WriteHeader(http.StatusNotModified)
		} else {
			c.fail(http.StatusNotFound, "404 Not Found")
		}
		return
	}
	mr.approvals = slices.DeleteFunc(mr.approvals, func(a mrApproval) bool { return a.userID == c.user.ID })
	c.g.mrHook(mr, "unapproval", c.user.ID, "", c.now)
	writeJSON(c.w, http.StatusCreated, c.approvalsJSON(mr))
}

func (c *call) checklist() { writeJSON(c.w, http.StatusOK, c.g.checklistFor(c.p)) }

// ---- merge and rebase ----

func (c *call) merge() {
	mr := c.mr()
	if mr == nil {
		return
	}
	if !c.user.CanMerge || !c.p.mayMerge(mr.target, *c.user) {
		c.fail(http.StatusUnauthorized, "401 Unauthorized")
		return
	}
	if mr.state == "opened" && !mr.needsRebase(c.g.mergeMethod()) && chance(c.g.faults().NeedRebaseRate) {
		c.g.gate.faults.add("merge_needs_rebase")
		c.g.moveTargetForward(mr, c.now)
	}
	// GitLab's order: 405 unless the state checks pass (CI too, unless merging when it
	// succeeds); then git's own check, whose status changed between versions; then the sha.
	auto := c.in.flag("auto_merge") || c.in.flag("merge_when_pipeline_succeeds")
	ci := c.g.ciCheck(mr, c.now)
	waitsForCI := auto && ci == "ci_still_running"
	if mr.state != "opened" || c.g.stateCheck(mr) != "" || (ci != "" && !waitsForCI) {
		c.fail(http.StatusMethodNotAllowed, "405 Method Not Allowed")
		return
	}
	if c.g.isChecking(mr, c.now, false) || c.g.gitCheck(mr) != "" {
		c.gitRefusal()
		return
	}
	if sha, ok := c.in.str("sha"); ok && sha != "" && sha != mr.head() {
		c.fail(http.StatusConflict, "SHA does not match HEAD of source branch: "+mr.head())
		return
	}
	remove := c.in.flag("should_remove_source_branch")
	switch d := scaled(c.g.cfg, c.g.faults().MergeDuration); {
	case waitsForCI:
		mr.autoMerge = &autoMerge{userID: c.user.ID, removeSource: remove}
		mr.updatedAt = c.now
	case d > 0:
		// GitLab carries the merge out in the background: the MR is "locked" until it is done.
		mr.state, mr.updatedAt = "locked", c.now
		mr.locking = &lockedMerge{until: c.now.Add(d), userID: c.user.ID, removeSource: remove}
		c.g.locking = append(c.g.locking, mr)
	default:
		c.g.doMerge(mr, c.user.ID, remove, c.now)
	}
	writeJSON(c.w, http.StatusOK, c.mrJSON(mr, false, false))
}

// gitRefusal is the merge endpoint's answer when git cannot merge the MR (it needs a rebase,
// conflicts, or its mergeability is still being computed): 422 on GitLab 17, 405 on 16, 406
// before.
func (c *call) gitRefusal() {
	switch c.g.faults().Version {
	case "16":
		c.fail(http.StatusMethodNotAllowed, "405 Method Not Allowed")
	case "15", "15.5":
		c.fail(http.StatusNotAcceptable, "Branch cannot be merged")
	default:
		c.fail(http.StatusUnprocessableEntity, "Branch cannot be merged")
	}
}

func (c *call) rebase() {
	mr := c.mr()
	if mr == nil {
		return
	}
	switch {
	case !c.user.CanPush:
		c.fail(http.StatusForbidden, "403 Forbidden - Cannot push to source branch")
	case mr.state != "opened" || c.p.branches[mr.source] == "":
		c.fail(http.StatusForbidden, "403 Forbidden - Source branch does not exist")
	case mr.rebase != nil:
		c.fail(http.StatusConflict, "Failed to enqueue the rebase operation, possibly due to a long-lived transaction. Try again later.")
	default:
		c.g.startRebase(mr, c.now)
		writeJSON(c.w, http.StatusAccepted, map[string]bool{"rebase_in_progress": true})
	}
}

// ---- pagination ----

// paginate answers one page of items with GitLab's offset-pagination headers.
func paginate[T any](c *call, items []T) []T {
	page, per := int(c.in.intOr("page", 1)), int(c.in.intOr("per_page", 20))
	if page < 1 {
		page = 1
	}
	if per < 1 {
		per = 20
	}
	if per > 100 {
		per = 100
	}
	total := len(items)
	pages := max(1, (total+per-1)/per)
	h := c.w.Header()
	h.Set("X-Page", strconv.Itoa(page))
	h.Set("X-Per-Page", strconv.Itoa(per))
	h.Set("X-Total", strconv.Itoa(total))
	h.Set("X-Total-Pages", strconv.Itoa(pages))
	h.Set("X-Next-Page", "")
	h.Set("X-Prev-Page", "")
	link := func(n int, rel string) string {
		q := c.r.URL.Query()
		q.Set("page", strconv.Itoa(n))
		q.Set("per_page", strconv.Itoa(per))
		return fmt.Sprintf(`<%s%s?%s>; rel="%s"`, strings.TrimSuffix(c.base, "/sim/gitlab"), c.r.URL.EscapedPath(), q.Encode(), rel)
	}
	var links []string
	if page > 1 {
		h.Set("X-Prev-Page", strconv.Itoa(min(page-1, pages)))
		links = append(links, link(min(page-1, pages), "prev"))
	}
	if page < pages {
		h.Set("X-Next-Page", strconv.Itoa(page+1))
		links = append(links, link(page+1, "next"))
	}
	links = append(links, link(1, "first"), link(pages, "last"))
	h.Set("Link", strings.Join(links, ", "))
	from := min((page-1)*per, total)
	out := items[from:min(from+per, total)]
	if out == nil {
		out = []T{}
	}
	return out
}

// ---- parameters ----

// params are a request's parameters: the query string, overlaid by a JSON or form body
// (GitLab accepts all three).
type params map[string]any

func readParams(r *http.Request) (params, error) {
	in := params{}
	for k, v := range r.URL.Query() {
		in[k] = v[len(v)-1]
	}
	if r.Body == nil {
		return in, nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil || len(bytes.TrimSpace(body)) == 0 {
		return in, nil
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct == "application/x-www-form-urlencoded" {
		return in, in.readForm(string(body))
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return in, fmt.Errorf("body is not a JSON object")
	}
	for k, v := range m {
		in[k] = v
	}
	return in, nil
}

// readForm reads a form body in order, so that Rails-style arrays of objects
// (actions[][action]=create&actions[][file_path]=a&actions[][action]=…) come out as a list.
func (p params) readForm(body string) error {
	for _, pair := range strings.Split(body, "&") {
		if pair == "" {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		key, err1 := url.QueryUnescape(k)
		val, err2 := url.QueryUnescape(v)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("malformed form body")
		}
		if name, field, ok := arrayField(key); ok {
			list, _ := p[name].([]any)
			if len(list) == 0 || hasField(list[len(list)-1], field) {
				list = append(list, map[string]any{})
			}
			list[len(list)-1].(map[string]any)[field] = val
			p[name] = list
			continue
		}
		if name, ok := strings.CutSuffix(key, "[]"); ok {
			list, _ := p[name].([]any)
			p[name] = append(list, val)
			continue
		}
		p[key] = val
	}
	return nil
}

func arrayField(key string) (name, field string, ok bool) {
	name, rest, ok := strings.Cut(key, "[][")
	if !ok || !strings.HasSuffix(rest, "]") {
		return "", "", false
	}
	return name, strings.TrimSuffix(rest, "]"), true
}

func hasField(item any, field string) bool {
	m, _ := item.(map[string]any)
	_, ok := m[field]
	return ok
}

func (p params) str(k string) (string, bool) {
	switch v := p[k].(type) {
	case string:
		return v, true
	case json.Number:
		return v.String(), true
	case bool:
		return strconv.FormatBool(v), true
	}
	return "", false
}

// flag reads a boolean as Grape does (dry-types Params::Bool): true, True, 1, yes, y, on, t…;
// anything else is false.
func (p params) flag(k string) bool {
	v, _ := p.boolean(k, false)
	return v
}

// boolean reads an optional Boolean parameter as Grape coerces one (dry-types Params::Bool):
// missing is def; a value that is neither true nor false is not ok (GitLab's 400 "k is invalid").
func (p params) boolean(k string, def bool) (value, ok bool) {
	s, present := p.str(k)
	if !present {
		return def, p[k] == nil
	}
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "t", "1", "yes", "y", "on":
		return true, true
	case "false", "f", "0", "no", "n", "off":
		return false, true
	}
	return false, false
}

func (p params) intOr(k string, def int64) int64 {
	s, ok := p.str(k)
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return def
	}
	return n
}

// strings reads a list given as a JSON array or as one comma-separated string.
func (p params) strings(k string) []string {
	var out []string
	switch v := p[k].(type) {
	case string:
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	case []any:
		for _, s := range v {
			if s, ok := s.(string); ok && s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

// actions reads the actions of a commit request, or Grape's message for the first bad one.
func (p params) actions() ([]action, string) {
	list, _ := p["actions"].([]any)
	out := make([]action, 0, len(list))
	for i, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Sprintf("actions[%d] is invalid", i)
		}
		a := params(m)
		var act action
		act.Action, _ = a.str("action")
		if !validActions[act.Action] {
			return nil, fmt.Sprintf("actions[%d][action] does not have a valid value", i)
		}
		if act.FilePath, _ = a.str("file_path"); act.FilePath == "" {
			return nil, fmt.Sprintf("actions[%d][file_path] is missing", i)
		}
		act.PreviousPath, _ = a.str("previous_path")
		act.Content, act.HasContent = a.str("content")
		act.Encoding, _ = a.str("encoding")
		act.LastCommitID, _ = a.str("last_commit_id")
		if act.Action == "move" && act.PreviousPath == "" {
			return nil, fmt.Sprintf("actions[%d][previous_path] is missing", i)
		}
		out = append(out, act)
	}
	return out, ""
}

// checklistMatches: the request confirms exactly the required items, each checked.
func (p params) checklistMatches(want []checklistItem) bool {
	list, _ := p["checklist"].([]any)
	if len(list) != len(want) {
		return false
	}
	got := map[string]bool{}
	for _, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			return false
		}
		id, _ := params(m).str("id")
		if !params(m).flag("checked") {
			return false
		}
		got[id] = true
	}
	for _, w := range want {
		if !got[w.ID] {
			return false
		}
	}
	return true
}

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }
