package sim

import (
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"bindery/internal/platform/config"
)

// GitLabFaults are the simulated GitLab's knobs; the same struct the sim.gitlab.* keys fill.
type GitLabFaults = config.SimGitLab

// User is an account of the simulated GitLab.
type User struct {
	ID       int64
	Username string
	Name     string
	Token    string
	CanPush  bool // may create branches and commits, and rebase
	CanMerge bool // may merge
	// AccessLevel is the account's role in every project (Developer, Maintainer, …); 0: from the
	// flags (Maintainer with CanMerge, Developer with CanPush).
	AccessLevel  int
	Scopes       []string // the token's scopes; nil: api
	TokenExpires string   // the token's expires_at (YYYY-MM-DD); "": never
}

// Usernames of the accounts made from the configuration: gitlab.botToken is BotUsername,
// gitlab.reviewerTokens[i] is ReviewerUsername(i).
const BotUsername = "bindery-bot"

// ReviewerUsername is the simulated username of gitlab.reviewerTokens[i].
func ReviewerUsername(i int) string { return fmt.Sprintf("reviewer-%d", i+1) }

// GitLab simulates the GitLab REST subset bindery uses. All state is in memory, guarded by one
// mutex: the simulator favours being obviously right over being fast.
type GitLab struct {
	opts  Options
	cfg   *config.Source
	clock Clock
	log   *slog.Logger
	gate  *gate
	hooks *hooks

	mu             sync.Mutex
	override       *GitLabFaults
	checklists     map[string][]string // project path → required checklist (overrides sim.gitlab.checklist)
	users          []User              // added with AddUser; looked up before the configured ones
	projects       map[string]*project // by path
	projectsByID   map[int64]*project
	nextProjectID  int64
	nextMRID       int64
	nextPipelineID int64
	nextJobID      int64
	nextUserID     int64
	nextNoteID     int64
	seq            int64 // commit id salt
	failNext       int   // the next pipelines that fail whatever the knobs say (FailNextPipelines)
	stickNext      int   // the next pipelines that never finish (StickNextPipelines)
	active         []*pipeline
	rebasing       []*mergeRequest
	locking        []*mergeRequest // merges GitLab is carrying out (sim.gitlab.mergeDuration)
	onMerge        []func(MergeInfo)
	merges         []MergeRecord // every merge, in order (gitlab_history.go)
}

// MergeInfo describes a merge, for the deploy pipeline.
type MergeInfo struct {
	Project string
	IID     int64
	SHA     string // what the merge put on the target (its merge commit, or the head it fast-forwarded to): what a deploy ships
	// OperationIDs are the operationId values of the YAML files the merge added, changed or
	// deleted (bindery's rendered binding files carry one each), sorted.
	OperationIDs []string
	// What the branch pipeline of the merge runs with (deploy_job.go): the target branch, the
	// project's id and default branch, its .gitlab-ci.yml at SHA ("" when it has none), its
	// CI/CD variables and the instance's URL.
	Branch, DefaultBranch string
	ProjectID             int64
	CIConfig              string
	Variables             map[string]string
	InstanceURL           string
}

func newGitLab(o Options) *GitLab {
	g := &GitLab{
		opts: o, cfg: o.Config, clock: o.Clock, log: o.Log, gate: newGate(),
		checklists: map[string][]string{}, projects: map[string]*project{}, projectsByID: map[int64]*project{},
		nextUserID: 100,
	}
	g.hooks = newHooks(g)
	if o.AdminToken != "" {
		g.users = append(g.users, User{ID: g.nextUserID, Username: AdminUsername, Name: "Administrator", Token: o.AdminToken,
			CanPush: true, CanMerge: true, AccessLevel: Owner})
		g.nextUserID++
	}
	return g
}

// SetFaults pins the knobs for a test, instead of the sim.gitlab.* configuration.
func (g *GitLab) SetFaults(f GitLabFaults) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.override = &f
}

// ResetFaults returns to the sim.gitlab.* configuration.
func (g *GitLab) ResetFaults() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.override = nil
}

// FailNextPipelines makes the next n new pipelines fail, whatever the knobs say: a flaky CI run
// that a retry of the same commit gets past.
func (g *GitLab) FailNextPipelines(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.failNext = max(n, 0)
}

// StickNextPipelines makes the next n new pipelines never finish, whatever the knobs say: a
// hung runner that a new pipeline on the same commit gets past.
func (g *GitLab) StickNextPipelines(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stickNext = max(n, 0)
}

// Faults are the knobs in force.
func (g *GitLab) Faults() GitLabFaults {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.faults()
}

func (g *GitLab) faults() GitLabFaults { // holds g.mu
	if g.override != nil {
		return *g.override
	}
	return g.cfg.Current().SimGitLab()
}

// Inject makes the next times calls of endpoint (e.g. "approve", "get_approvals", "merge")
// misbehave as f, ahead of the configured rates.
func (g *GitLab) Inject(endpoint string, f Fault, times int) { g.gate.inject(endpoint, f, times) }

// Calls is how many calls of endpoint reached the simulator.
func (g *GitLab) Calls(endpoint string) int { return g.gate.count(endpoint) }

// Usage is what the simulated GitLab has served and holds: the calls per endpoint that reached
// it (faulted or not) and the merge requests and pipelines of every project. The benchmarks
// report them per request.
type Usage struct {
	Calls         map[string]int
	MergeRequests int
	Pipelines     int
}

// TotalCalls is the number of calls of every endpoint.
func (u Usage) TotalCalls() int {
	n := 0
	for _, c := range u.Calls {
		n += c
	}
	return n
}

// Usage counts the calls so far and the merge requests and pipelines that exist.
func (g *GitLab) Usage() Usage {
	u := Usage{Calls: g.gate.counts()}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range g.projects {
		u.MergeRequests += len(p.mrs)
		u.Pipelines += len(p.pipelines)
	}
	return u
}

// SetChecklist sets the approval checklist project requires (nil: back to sim.gitlab.checklist).
// Changing it makes requests built from an older list fail with 422 and the new list.
func (g *GitLab) SetChecklist(project string, titles []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if titles == nil {
		delete(g.checklists, project)
		return
	}
	g.checklists[project] = append([]string(nil), titles...)
}

// AddUser adds an account (its ID is assigned when zero) and returns it.
func (g *GitLab) AddUser(u User) User {
	g.mu.Lock()
	defer g.mu.Unlock()
	if u.ID == 0 {
		u.ID = g.nextUserID
		g.nextUserID++
	}
	if u.Name == "" {
		u.Name = u.Username
	}
	g.users = append(g.users, u)
	return u
}

// OnMerge registers fn to run after each merge (the deploy pipeline listens here). fn runs
// with the simulator locked: it must not call back into it.
func (g *GitLab) OnMerge(fn func(MergeInfo)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.onMerge = append(g.onMerge, fn)
}

// CreateProject creates a project with one initial commit on defaultBranch; an existing
// project is returned as is. It returns the project id.
func (g *GitLab) CreateProject(path, defaultBranch string) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.createProject(path, defaultBranch, g.clock.Now()).id
}

// BranchHead is the commit id branch points at ("" when the project or branch is unknown).
func (g *GitLab) BranchHead(projectPath, branch string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p := g.projects[projectPath]; p != nil {
		return p.branches[branch]
	}
	return ""
}

// File returns the content of path on branch, and whether it exists.
func (g *GitLab) File(projectPath, branch, path string) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.projects[projectPath]
	if p == nil {
		return "", false
	}
	c := p.commits[p.branches[branch]]
	if c == nil {
		return "", false
	}
	f, ok := c.files[path]
	return f.content, ok
}

// Paths lists every file path in any commit of the project, on any branch, sorted: what
// bindery ever wrote there, for tests that check where its files land.
func (g *GitLab) Paths(projectPath string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.projects[projectPath]
	if p == nil {
		return nil
	}
	seen := map[string]bool{}
	for _, c := range p.commits {
		for path := range c.files {
			seen[path] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// PersonName is the author of the commits PushToBranch makes: a person outside bindery.
const PersonName = "A. Person"

// PushToBranch commits content at path directly on branch, as another team's change would:
// it moves the branch so open MRs targeting it may need a rebase or conflict.
func (g *GitLab) PushToBranch(projectPath, branch, path, content string) (string, error) {
	return g.personCommit(projectPath, branch, func(files tree) (string, map[string]string, error) {
		return "Concurrent change to " + path, map[string]string{path: content}, nil
	})
}

// PushFilesToBranch commits files (path → content) directly on branch in one commit by
// PersonName: a repository that holds thousands of files already, seeded in one step.
func (g *GitLab) PushFilesToBranch(projectPath, branch string, files map[string]string) (string, error) {
	return g.personCommit(projectPath, branch, func(tree) (string, map[string]string, error) {
		return fmt.Sprintf("Add %d files", len(files)), files, nil
	})
}

// RemoveFromBranch deletes path on branch in a commit of its own by PersonName, as a person's
// clean-up outside bindery would. An error when the branch or the file does not exist.
func (g *GitLab) RemoveFromBranch(projectPath, branch, path string) (string, error) {
	return g.personCommit(projectPath, branch, func(files tree) (string, map[string]string, error) {
		if _, ok := files[path]; !ok {
			return "", nil, fmt.Errorf("no file %s on %s of %s", path, branch, projectPath)
		}
		delete(files, path)
		return "Remove " + path, nil, nil
	})
}

// personCommit commits on branch, as PersonName, what edit makes of a copy of the head's files
// (it may delete from it) plus the files it returns to write, with its message; an error from
// edit leaves the branch as it was. The branch moves as a person's push moves it.
func (g *GitLab) personCommit(projectPath, branch string, edit func(files tree) (message string, write map[string]string, err error)) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.projects[projectPath]
	if p == nil || p.branches[branch] == "" {
		return "", fmt.Errorf("no branch %s in %s", branch, projectPath)
	}
	head := p.commits[p.branches[branch]]
	files := head.files.clone()
	message, write, err := edit(files)
	if err != nil {
		return "", err
	}
	now := g.clock.Now()
	c := g.newCommit(p, []string{head.id}, message, files, now)
	for path, content := range write {
		files[path] = fileEntry{content: content, commit: c.id}
	}
	c.author = PersonName
	p.branches[branch] = c.id
	g.headMoved(p, branch, 0, now)
	return c.id, nil
}

// servePush answers POST /sim/gitlab/push?project=<path>&branch=<name>&path=<file>&content=<text>:
// a person's commit pushed straight to a branch (PushToBranch; with delete=true, RemoveFromBranch),
// for a test that runs the simulator in another process.
func (g *GitLab) servePush(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "POST only"})
		return
	}
	_ = r.ParseForm()
	project, branch, path := r.Form.Get("project"), r.Form.Get("branch"), r.Form.Get("path")
	if project == "" || branch == "" || path == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "project, branch and path are required"})
		return
	}
	push := g.PushToBranch
	if del, _ := strconv.ParseBool(r.Form.Get("delete")); del {
		push = func(project, branch, path, _ string) (string, error) {
			return g.RemoveFromBranch(project, branch, path)
		}
	}
	sha, err := push(project, branch, path, r.Form.Get("content"))
	if err != nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusCreated, map[string]string{"sha": sha})
}

// MergeRequestState is the state ("opened", "closed", "merged") of an MR, or "" when unknown.
func (g *GitLab) MergeRequestState(projectPath string, iid int64) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p := g.projects[projectPath]; p != nil {
		if mr := p.mr(iid); mr != nil {
			return mr.state
		}
	}
	return ""
}

// SetBlocker holds an open MR at detailed_merge_status blocker (one of config.MergeBlockers;
// "" clears it), as a person on GitLab would (a draft, an unresolved discussion, a required
// approval). Clearing sends the MR's "update" webhook. It reports whether the MR exists.
func (g *GitLab) SetBlocker(projectPath string, iid int64, blocker string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.setBlocker(projectPath, iid, blocker)
}

func (g *GitLab) setBlocker(projectPath string, iid int64, blocker string) bool { // holds g.mu
	p := g.projects[projectPath]
	if p == nil || p.mr(iid) == nil || (blocker != "" && !slices.Contains(config.MergeBlockers, blocker)) {
		return false
	}
	mr := p.mr(iid)
	if mr.blocker == blocker || mr.state != "opened" {
		return true
	}
	now := g.clock.Now()
	mr.blocker, mr.updatedAt = blocker, now
	g.mrHook(mr, "update", mr.authorID, "", now)
	return true
}

// Approvers lists the usernames that approved an MR.
func (g *GitLab) Approvers(projectPath string, iid int64) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	if p := g.projects[projectPath]; p != nil {
		if mr := p.mr(iid); mr != nil {
			for _, a := range mr.approvals {
				out = append(out, g.userByID(a.userID).Username)
			}
		}
	}
	return out
}

// Sync brings every pipeline, rebase and auto-merge up to the clock's time now and queues the
// webhooks that follows. Reads do this too; tests with a clock of their own (testkit.Clock) call it after Advance.
func (g *GitLab) Sync() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.advance(g.clock.Now())
}

// ---- accounts ----

func (g *GitLab) configUsers() []User {
	snap := g.cfg.Current()
	var out []User
	if t := snap.GitLabBotToken(); t != "" {
		out = append(out, User{ID: 1, Username: BotUsername, Name: "bindery bot", Token: t, CanPush: true, CanMerge: true})
	}
	for i, t := range snap.GitLabReviewerTokens() {
		out = append(out, User{ID: int64(2 + i), Username: ReviewerUsername(i), Name: fmt.Sprintf("Reviewer %d", i+1), Token: t, CanPush: true, CanMerge: true})
	}
	return out
}

func (g *GitLab) userByToken(token string) *User { // holds g.mu
	if token == "" {
		return nil
	}
	for _, u := range g.users {
		if u.Token == token {
			return &u
		}
	}
	for _, u := range g.configUsers() {
		if u.Token == token {
			return &u
		}
	}
	return nil
}

func (g *GitLab) userByID(id int64) User { // holds g.mu
	for _, u := range g.users {
		if u.ID == id {
			return u
		}
	}
	for _, u := range g.configUsers() {
		if u.ID == id {
			return u
		}
	}
	return User{ID: id, Username: fmt.Sprintf("user-%d", id), Name: fmt.Sprintf("User %d", id)}
}

// ---- projects ----

// lookupProject finds a project by numeric id or path. A project of the catalog (targets in
// the configuration) exists from its first mention, with every branch the catalog names.
func (g *GitLab) lookupProject(id string, now time.Time) *project { // holds g.mu
	if p := g.projects[id]; p != nil {
		return p
	}
	var n int64
	if _, err := fmt.Sscanf(id, "%d", &n); err == nil && fmt.Sprint(n) == id {
		return g.projectsByID[n]
	}
	var branches []string
	for _, t := range g.cfg.Current().Targets() {
		if t.Project == id {
			branches = append(branches, t.Branch)
		}
	}
	if len(branches) == 0 {
		return nil
	}
	sort.Strings(branches)
	p := g.createProject(id, branches[0], now)
	for _, b := range branches[1:] {
		if p.branches[b] == "" {
			p.branches[b] = p.branches[p.defaultBranch]
		}
	}
	return p
}

func (g *GitLab) createProject(path, defaultBranch string, now time.Time) *project { // holds g.mu
	if p := g.projects[path]; p != nil {
		return p
	}
	if defaultBranch == "" {
		defaultBranch = "main"
	}
	g.nextProjectID++
	p := &project{id: g.nextProjectID, path: path, defaultBranch: defaultBranch, branches: map[string]string{}, commits: map[string]*commit{}}
	// A new project's default branch is protected as GitLab protects it: Maintainers push and merge.
	p.protect(defaultBranch, &protection{id: g.nextID(), push: Maintainer, merge: Maintainer})
	g.projects[path] = p
	g.projectsByID[p.id] = p
	c := g.newCommit(p, nil, "Initial commit", tree{}, now)
	c.files = tree{"README.md": {content: "# " + path + "\n", commit: c.id}}
	p.branches[defaultBranch] = c.id
	return p
}

var slugRE = regexp.MustCompile(`[^a-z0-9]+`)

// checklistFor is the checklist project requires: id (a slug of the title) and title.
func (g *GitLab) checklistFor(p *project) []checklistItem { // holds g.mu
	titles, ok := g.checklists[p.path]
	if !ok {
		titles = g.faults().Checklist
	}
	out := make([]checklistItem, 0, len(titles))
	for _, t := range titles {
		out = append(out, checklistItem{ID: strings.Trim(slugRE.ReplaceAllString(strings.ToLower(t), "-"), "-"), Title: t})
	}
	return out
}

type checklistItem struct {
	ID    string `json:"id"`
	Title string `json:"title"`
}

// ServeHTTP serves the API under /sim/gitlab/api/v4/ (gitlab_api.go), the MR and pipeline
// pages their web_url fields point at (gitlab_web.go) and the simulator's own controls:
// POST /sim/gitlab/blockers/clear?project=<path>&iid=<iid> (a person clears what holds an MR),
// POST /sim/gitlab/push (a person's commit straight to a branch) and GET /sim/gitlab/merges
// (the merge history, gitlab_history.go).
func (g *GitLab) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch p := r.URL.EscapedPath(); {
	case strings.HasPrefix(p, "/sim/gitlab/api/v4/"):
		g.serveAPI(w, r)
	case p == "/sim/gitlab/blockers/clear":
		g.serveClearBlocker(w, r)
	case p == "/sim/gitlab/merges":
		g.serveMerges(w, r)
	case p == "/sim/gitlab/push":
		g.servePush(w, r)
	default:
		g.serveWeb(w, r)
	}
}

func (g *GitLab) serveClearBlocker(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "POST only"})
		return
	}
	_ = r.ParseForm()
	project := r.Form.Get("project")
	iid, err := strconv.ParseInt(r.Form.Get("iid"), 10, 64)
	if err != nil || !g.SetBlocker(project, iid, "") {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such merge request"})
		return
	}
	if strings.Contains(r.Header.Get("Accept"), "text/html") {
		http.Redirect(w, r, "/sim/gitlab/"+project+"/-/merge_requests/"+itoa64(iid), http.StatusSeeOther)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"project": project, "iid": iid, "blocker": ""})
}
