package sim

import (
	"net/http"
	"slices"
	"strconv"
	"time"
)

// What a project's maintainers set up and bindery doctor reads: the token in use
// (GET /personal_access_tokens/self), accounts by username (GET /users?username=), membership
// (GET /projects/:id/members/all/:user_id, POST /projects/:id/members), branch
// protection (GET/POST/DELETE /projects/:id/protected_branches), project webhooks
// (GET/POST/DELETE /projects/:id/hooks) and CI/CD variables (GET/POST /projects/:id/variables).
// Bodies and status codes as GitLab's (lib/api/personal_access_tokens.rb, members.rb,
// protected_branches.rb, project_hooks.rb, ci/variables.rb). Writes need the Maintainer role.

// GitLab's access levels (Gitlab::Access).
const (
	NoAccess   = 0
	Reporter   = 20
	Developer  = 30
	Maintainer = 40
	Owner      = 50
)

// AdminUsername is the administrator account of Options.AdminToken: the operator who sets the
// projects up (docs/install.md, 'GitLab'), Owner of every project.
const AdminUsername = "root"

var adminRoutes = []gitlabRoute{
	{"GET", "token_self", path("personal_access_tokens/self"), (*call).tokenSelf},
	{"GET", "member", path("projects/:id/members/all/:user_id"), (*call).member},
	{"POST", "add_member", path("projects/:id/members"), (*call).addMember},
	{"GET", "users", path("users"), (*call).listUsers},
	{"GET", "protected_branches", path("projects/:id/protected_branches"), (*call).listProtected},
	{"GET", "protected_branch", path("projects/:id/protected_branches/:name"), (*call).getProtected},
	{"POST", "protect_branch", path("projects/:id/protected_branches"), (*call).protectBranch},
	{"DELETE", "unprotect_branch", path("projects/:id/protected_branches/:name"), (*call).unprotectBranch},
	{"GET", "project_hooks", path("projects/:id/hooks"), (*call).listHooks},
	{"POST", "add_project_hook", path("projects/:id/hooks"), (*call).addHook},
	{"DELETE", "delete_project_hook", path("projects/:id/hooks/:hook_id"), (*call).deleteHook},
	{"GET", "variables", path("projects/:id/variables"), (*call).listVariables},
	{"POST", "create_variable", path("projects/:id/variables"), (*call).createVariable},
}

func init() { gitlabRoutes = append(gitlabRoutes, adminRoutes...) }

// level is the user's role in every project: AccessLevel, or from the old flags (merge rights
// came with Maintainer in the simulator, pushing with Developer).
func (u User) level() int {
	switch {
	case u.AccessLevel != 0:
		return u.AccessLevel
	case u.CanMerge:
		return Maintainer
	case u.CanPush:
		return Developer
	}
	return Reporter
}

// scopes are the token's scopes (nil: api, what bindery's accounts need).
func (u User) scopes() []string {
	if u.Scopes == nil {
		return []string{"api"}
	}
	return u.Scopes
}

// SetUser changes the account with username (its token, scopes, role), for a test or a fault;
// an account made from the configuration becomes an added one with the same id.
func (g *GitLab) SetUser(username string, change func(*User)) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range g.users {
		if g.users[i].Username == username {
			change(&g.users[i])
			return true
		}
	}
	for _, u := range g.configUsers() {
		if u.Username == username {
			change(&u)
			g.users = append(g.users, u)
			return true
		}
	}
	return false
}

// ---- tokens and members ----

func (c *call) tokenSelf() {
	u := c.user
	writeJSON(c.w, http.StatusOK, map[string]any{
		"id": u.ID, "name": u.Username + "-token", "revoked": false, "created_at": c.now.Add(-24 * time.Hour).UTC().Format(time.RFC3339),
		"scopes": u.scopes(), "user_id": u.ID, "last_used_at": c.now.UTC().Format(time.RFC3339), "active": true,
		"expires_at": optString(u.TokenExpires),
	})
}

func (c *call) member() {
	id, err := strconv.ParseInt(c.vars["user_id"], 10, 64)
	if err != nil {
		c.fail(http.StatusNotFound, "404 Member Not Found")
		return
	}
	u, ok := c.g.knownUser(id)
	if !ok || u.level() < Reporter {
		c.fail(http.StatusNotFound, "404 Member Not Found")
		return
	}
	writeJSON(c.w, http.StatusOK, map[string]any{
		"id": u.ID, "username": u.Username, "name": u.Name, "state": "active", "access_level": u.level(),
		"web_url": c.base + "/" + u.Username, "created_at": c.now.UTC().Format(time.RFC3339), "expires_at": nil,
	})
}

func (g *GitLab) knownUser(id int64) (User, bool) { // holds g.mu
	for _, u := range g.users {
		if u.ID == id {
			return u, true
		}
	}
	for _, u := range g.configUsers() {
		if u.ID == id {
			return u, true
		}
	}
	return User{}, false
}

// listUsers is GET /users?username=NAME: the account with that username, as a list of one (an
// empty list when there is none). Without username it lists every account the simulator knows.
func (c *call) listUsers() {
	want, _ := c.in.str("username")
	out := []userJSON{}
	seen := map[int64]bool{}
	for _, u := range append(append([]User(nil), c.g.users...), c.g.configUsers()...) {
		if !seen[u.ID] && (want == "" || u.Username == want) {
			seen[u.ID] = true
			out = append(out, c.userJSON(u))
		}
	}
	writeJSON(c.w, http.StatusOK, paginate(c, out))
}

// addMember is POST /projects/:id/members (user_id, access_level): 409 when the account was
// added to the project before. The simulator's roles are per account, not per project: the
// level given becomes the account's role everywhere (every catalog project is set up alike).
func (c *call) addMember() {
	if !c.maintainer() || c.missing("user_id") || c.missing("access_level") {
		return
	}
	id, level := c.in.intOr("user_id", 0), int(c.in.intOr("access_level", 0))
	if !slices.Contains([]int{10, Reporter, Developer, Maintainer, Owner}, level) {
		writeJSON(c.w, http.StatusBadRequest, map[string]string{"error": "access_level does not have a valid value"})
		return
	}
	u, ok := c.g.knownUser(id)
	if !ok {
		c.fail(http.StatusNotFound, "404 User Not Found")
		return
	}
	if c.p.members[id] {
		c.fail(http.StatusConflict, "Member already exists")
		return
	}
	if c.p.members == nil {
		c.p.members = map[int64]bool{}
	}
	c.p.members[id] = true
	u.AccessLevel = level
	c.g.putUser(u)
	writeJSON(c.w, http.StatusCreated, map[string]any{
		"id": u.ID, "username": u.Username, "name": u.Name, "state": "active", "access_level": level,
		"web_url": c.base + "/" + u.Username, "created_at": c.now.UTC().Format(time.RFC3339), "expires_at": nil,
	})
}

// putUser replaces the account with u's id, or adds it (an account made from the configuration
// becomes an added one with the same id).
func (g *GitLab) putUser(u User) { // holds g.mu
	for i := range g.users {
		if g.users[i].ID == u.ID {
			g.users[i] = u
			return
		}
	}
	g.users = append(g.users, u)
}

// ---- protected branches ----

// protection is a protected branch: who may push to it and who may merge into it, each a role
// (the lowest level allowed; NoAccess: nobody) and users allowed by id, and whether those who
// may push may also force-push (allow_force_push).
type protection struct {
	id                  int64
	push, merge         int
	pushUsers, mergeSet []int64
	forcePush           bool
}

// allows reports whether u may do what levels and users guard.
func allows(level int, users []int64, u User) bool {
	return slices.Contains(users, u.ID) || (level != NoAccess && u.level() >= level)
}

func accessDescription(level int) string {
	switch level {
	case NoAccess:
		return "No one"
	case Developer:
		return "Developers + Maintainers"
	case Maintainer:
		return "Maintainers"
	}
	return "Admins"
}

func (c *call) protectionJSON(name string, pr *protection) map[string]any {
	levels := func(level int, users []int64) []map[string]any {
		out := []map[string]any{{"id": pr.id*10 + 1, "access_level": level, "access_level_description": accessDescription(level), "user_id": nil, "group_id": nil}}
		for i, id := range users {
			u := c.g.userByID(id)
			out = append(out, map[string]any{"id": pr.id*10 + 2 + int64(i), "access_level": Maintainer, "access_level_description": u.Name, "user_id": id, "group_id": nil})
		}
		return out
	}
	return map[string]any{
		"id": pr.id, "name": name, "push_access_levels": levels(pr.push, pr.pushUsers), "merge_access_levels": levels(pr.merge, pr.mergeSet),
		"unprotect_access_levels": []any{}, "allow_force_push": pr.forcePush, "code_owner_approval_required": false,
	}
}

func (c *call) listProtected() {
	names := make([]string, 0, len(c.p.protected))
	for n := range c.p.protected {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]map[string]any, 0, len(names))
	for _, n := range names {
		out = append(out, c.protectionJSON(n, c.p.protected[n]))
	}
	writeJSON(c.w, http.StatusOK, paginate(c, out))
}

func (c *call) getProtected() {
	name := c.vars["name"]
	pr := c.p.protected[name]
	if pr == nil {
		c.fail(http.StatusNotFound, "404 Not found")
		return
	}
	writeJSON(c.w, http.StatusOK, c.protectionJSON(name, pr))
}

// maintainer refuses a write by anyone below Maintainer, as GitLab's authorize_admin_project.
func (c *call) maintainer() bool {
	if c.user.level() < Maintainer {
		c.fail(http.StatusForbidden, "403 Forbidden")
		return false
	}
	return true
}

// protectBranch is POST /projects/:id/protected_branches (name; push_access_level and
// merge_access_level default to Maintainer; allowed_to_push/allowed_to_merge as user_id lists;
// allow_force_push defaults to false).
func (c *call) protectBranch() {
	if !c.maintainer() || c.missing("name") {
		return
	}
	name, _ := c.in.str("name")
	if c.p.protected[name] != nil {
		c.fail(http.StatusConflict, "Protected branch '"+name+"' already exists")
		return
	}
	force, ok := c.in.boolean("allow_force_push", false)
	if !ok {
		writeJSON(c.w, http.StatusBadRequest, map[string]string{"error": "allow_force_push is invalid"})
		return
	}
	pr := &protection{id: c.g.nextID(), push: int(c.in.intOr("push_access_level", Maintainer)), merge: int(c.in.intOr("merge_access_level", Maintainer)), forcePush: force}
	for _, l := range []int{pr.push, pr.merge} {
		if !slices.Contains([]int{NoAccess, Developer, Maintainer, 60}, l) {
			writeJSON(c.w, http.StatusBadRequest, map[string]string{"error": "push_access_level, merge_access_level does not have a valid value"})
			return
		}
	}
	pr.pushUsers = c.userIDs("allowed_to_push")
	pr.mergeSet = c.userIDs("allowed_to_merge")
	c.p.protect(name, pr)
	writeJSON(c.w, http.StatusCreated, c.protectionJSON(name, pr))
}

// userIDs reads [{user_id: N}, …] from a list parameter.
func (c *call) userIDs(name string) []int64 {
	list, _ := c.in[name].([]any)
	var out []int64
	for _, item := range list {
		if m, ok := item.(map[string]any); ok {
			if id := params(m).intOr("user_id", 0); id > 0 {
				out = append(out, id)
			}
		}
	}
	return out
}

func (c *call) unprotectBranch() {
	if !c.maintainer() {
		return
	}
	if c.p.protected[c.vars["name"]] == nil {
		c.fail(http.StatusNotFound, "404 Not found")
		return
	}
	delete(c.p.protected, c.vars["name"])
	c.w.WriteHeader(http.StatusNoContent)
}

func (p *project) protect(branch string, pr *protection) {
	if p.protected == nil {
		p.protected = map[string]*protection{}
	}
	p.protected[branch] = pr
}

// mayMerge reports whether u may merge into branch: anyone with merge rights on an unprotected
// branch, else what the protection allows.
func (p *project) mayMerge(branch string, u User) bool {
	pr := p.protected[branch]
	return pr == nil || allows(pr.merge, pr.mergeSet, u)
}

// Protect protects branch of project (created as the catalog would when unknown): push and
// merge are the lowest roles allowed (NoAccess: nobody), plus the named users.
func (g *GitLab) Protect(projectPath, branch string, push, merge int, pushUsers, mergeUsers []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.lookupProject(projectPath, g.clock.Now())
	if p == nil {
		return
	}
	ids := func(names []string) []int64 {
		var out []int64
		for _, n := range names {
			for _, u := range append(append([]User(nil), g.users...), g.configUsers()...) {
				if u.Username == n {
					out = append(out, u.ID)
					break
				}
			}
		}
		return out
	}
	p.protect(branch, &protection{id: g.nextID(), push: push, merge: merge, pushUsers: ids(pushUsers), mergeSet: ids(mergeUsers)})
}

// AllowForcePush sets allow_force_push of branch's protection (as GitLab's PATCH
// /projects/:id/protected_branches/:name does); an unprotected branch is left as it is.
func (g *GitLab) AllowForcePush(projectPath, branch string, allow bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p := g.lookupProject(projectPath, g.clock.Now()); p != nil && p.protected[branch] != nil {
		p.protected[branch].forcePush = allow
	}
}

// Unprotect removes the protection of branch.
func (g *GitLab) Unprotect(projectPath, branch string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p := g.lookupProject(projectPath, g.clock.Now()); p != nil {
		delete(p.protected, branch)
	}
}

func (g *GitLab) nextID() int64 { // holds g.mu
	g.nextUserID++ // one id sequence for the simulator's small objects
	return g.nextUserID + 10000
}

// ---- project hooks ----

// projectHook is a project webhook. GitLab never shows its token again once set.
type projectHook struct {
	ID                    int64     `json:"id"`
	URL                   string    `json:"url"`
	ProjectID             int64     `json:"project_id"`
	PushEvents            bool      `json:"push_events"`
	MergeRequestsEvents   bool      `json:"merge_requests_events"`
	PipelineEvents        bool      `json:"pipeline_events"`
	EnableSSLVerification bool      `json:"enable_ssl_verification"`
	CreatedAt             time.Time `json:"created_at"`
	token                 string
}

func (h *projectHook) wants(kind string) bool {
	switch kind {
	case "Merge Request Hook":
		return h.MergeRequestsEvents
	case "Pipeline Hook":
		return h.PipelineEvents
	}
	return false
}

func (c *call) listHooks() {
	if !c.maintainer() {
		return
	}
	out := make([]projectHook, 0, len(c.p.hooks))
	for _, h := range c.p.hooks {
		out = append(out, *h)
	}
	writeJSON(c.w, http.StatusOK, paginate(c, out))
}

// addHook is POST /projects/:id/hooks: url required; push_events defaults to true, the others
// to false, enable_ssl_verification to true; token is kept and never shown.
func (c *call) addHook() {
	if !c.maintainer() || c.missing("url") {
		return
	}
	u, _ := c.in.str("url")
	if _, err := http.NewRequest(http.MethodPost, u, nil); err != nil || !(len(u) > 7 && (u[:7] == "http://" || u[:8] == "https://")) {
		c.fail(http.StatusUnprocessableEntity, map[string][]string{"url": {"is blocked: Only allowed schemes are http, https"}})
		return
	}
	flag := func(name string, def bool) bool {
		if _, ok := c.in[name]; ok {
			return c.in.flag(name)
		}
		return def
	}
	token, _ := c.in.str("token")
	h := &projectHook{ID: c.g.nextID(), URL: u, ProjectID: c.p.id, PushEvents: flag("push_events", true),
		MergeRequestsEvents: flag("merge_requests_events", false), PipelineEvents: flag("pipeline_events", false),
		EnableSSLVerification: flag("enable_ssl_verification", true), CreatedAt: c.now.UTC(), token: token}
	c.p.hooks = append(c.p.hooks, h)
	writeJSON(c.w, http.StatusCreated, h)
}

func (c *call) deleteHook() {
	if !c.maintainer() {
		return
	}
	id, _ := strconv.ParseInt(c.vars["hook_id"], 10, 64)
	for i, h := range c.p.hooks {
		if h.ID == id {
			c.p.hooks = slices.Delete(c.p.hooks, i, i+1)
			c.w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	c.fail(http.StatusNotFound, "404 Not found")
}

// AddHook adds a project webhook as a maintainer would (url, secret token, merge request and
// pipeline events).
func (g *GitLab) AddHook(projectPath, url, token string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p := g.lookupProject(projectPath, g.clock.Now()); p != nil {
		p.hooks = append(p.hooks, &projectHook{ID: g.nextID(), URL: url, ProjectID: p.id, MergeRequestsEvents: true, PipelineEvents: true,
			EnableSSLVerification: true, CreatedAt: g.clock.Now().UTC(), token: token})
	}
}

// ---- CI/CD variables ----

func (c *call) listVariables() {
	if !c.maintainer() {
		return
	}
	keys := make([]string, 0, len(c.p.variables))
	for k := range c.p.variables {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]map[string]any, 0, len(keys))
	for _, k := range keys {
		out = append(out, variableJSON(k, c.p.variables[k]))
	}
	writeJSON(c.w, http.StatusOK, paginate(c, out))
}

func variableJSON(key, value string) map[string]any {
	return map[string]any{"variable_type": "env_var", "key": key, "value": value, "protected": false, "masked": false,
		"raw": false, "environment_scope": "*", "description": nil}
}

// createVariable is POST /projects/:id/variables (key, value): 400 when the key exists.
func (c *call) createVariable() {
	if !c.maintainer() || c.missing("key") {
		return
	}
	key, _ := c.in.str("key")
	value, _ := c.in.str("value")
	if _, dup := c.p.variables[key]; dup {
		c.fail(http.StatusBadRequest, map[string][]string{"key": {"(" + key + ") has already been taken"}})
		return
	}
	if c.p.variables == nil {
		c.p.variables = map[string]string{}
	}
	c.p.variables[key] = value
	writeJSON(c.w, http.StatusCreated, variableJSON(key, value))
}
