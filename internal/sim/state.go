package sim

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// The simulators' state survives a restart when Options.StateFile is set (the demo keeps it in
// its data directory). It matters beyond comfort: MR numbers must keep growing per project, or
// a deploy callback of an old MR would name a new one that reused its number. Pending approval decisions are kept too, and a
// decision whose callback never got through is sent again after the restart.
//
// Saved: projects (commits as changes against their first parent), MRs, pipelines, counters,
// what maintainers set up (webhooks with their secret tokens, branch protections, CI/CD
// variables, members and their roles), approval tickets. Not saved: webhooks in flight, deploys
// not yet called back (reconciliation covers a lost deploy callback), test overrides.

const stateVersion = 1

type savedState struct {
	Version  int           `json:"version"`
	GitLab   savedGitLab   `json:"gitlab"`
	Approval savedApproval `json:"approval"`
}

type savedGitLab struct {
	NextProjectID  int64          `json:"nextProjectId"`
	NextMRID       int64          `json:"nextMrId"`
	NextPipelineID int64          `json:"nextPipelineId"`
	NextJobID      int64          `json:"nextJobId,omitempty"`
	Seq            int64          `json:"seq"`
	Projects       []savedProject `json:"projects"`
	// Roles are the accounts' roles set through POST /projects/:id/members, by account id.
	Roles map[int64]int `json:"roles,omitempty"`
}

type savedProject struct {
	ID            int64             `json:"id"`
	Path          string            `json:"path"`
	DefaultBranch string            `json:"defaultBranch"`
	Branches      map[string]string `json:"branches"`
	Commits       []savedCommit     `json:"commits"`
	MRs           []savedMR         `json:"mrs"`
	Pipelines     []savedPipeline   `json:"pipelines"`
	NextPipeIID   int64             `json:"nextPipelineIid"`
	Hooks         []savedHook       `json:"hooks,omitempty"`
	// Protected is every protected branch; nil (a state saved before protections were kept):
	// GitLab's default protection of the default branch.
	Protected *[]savedProtection `json:"protected,omitempty"`
	Variables map[string]string  `json:"variables,omitempty"`
	Members   []int64            `json:"members,omitempty"`
}

type savedHook struct {
	projectHook
	Token string `json:"token,omitempty"` // the secret GitLab sends with each delivery
}

type savedProtection struct {
	Branch    string  `json:"branch"`
	ID        int64   `json:"id"`
	Push      int     `json:"push"`
	Merge     int     `json:"merge"`
	PushUsers []int64 `json:"pushUsers,omitempty"`
	MergeSet  []int64 `json:"mergeUsers,omitempty"`
	ForcePush bool    `json:"allowForcePush,omitempty"`
}

type savedFile struct {
	Content string `json:"content"`
	Commit  string `json:"commit"`
}

type savedCommit struct {
	ID      string                `json:"id"`
	Parents []string              `json:"parents"`
	Message string                `json:"message"`
	Author  string                `json:"author"`
	At      time.Time             `json:"at"`
	Stats   commitStats           `json:"stats"`
	Changes map[string]*savedFile `json:"changes"` // against the first parent; nil: deleted
}

type savedMR struct {
	ID           int64          `json:"id"`
	IID          int64          `json:"iid"`
	Title        string         `json:"title"`
	Description  string         `json:"description"`
	Source       string         `json:"source"`
	Target       string         `json:"target"`
	AuthorID     int64          `json:"authorId"`
	State        string         `json:"state"`
	CreatedAt    time.Time      `json:"createdAt"`
	UpdatedAt    time.Time      `json:"updatedAt"`
	MergedAt     *time.Time     `json:"mergedAt"`
	ClosedAt     *time.Time     `json:"closedAt"`
	MergeUserID  int64          `json:"mergeUserId"`
	ClosedByID   int64          `json:"closedById"`
	MergeCommit  string         `json:"mergeCommit"`
	MergeError   string         `json:"mergeError"`
	RemoveSource bool           `json:"removeSource"`
	HeadSHA      string         `json:"headSha"`
	Approvals    []savedApprove `json:"approvals"`
	RebaseUntil  *time.Time     `json:"rebaseUntil"`
	RebaseFails  bool           `json:"rebaseFails"`
	AutoMerge    *autoMergeJSON `json:"autoMerge"`
	Labels       []string       `json:"labels"`
	Blocker      string         `json:"blocker,omitempty"`
	CheckingTill *time.Time     `json:"checkingUntil,omitempty"`
}

type savedApprove struct {
	UserID int64     `json:"userId"`
	At     time.Time `json:"at"`
}

type autoMergeJSON struct {
	UserID       int64 `json:"userId"`
	RemoveSource bool  `json:"removeSource"`
}

type savedPipeline struct {
	ID        int64         `json:"id"`
	IID       int64         `json:"iid"`
	SHA       string        `json:"sha"`
	Ref       string        `json:"ref"`
	MRIID     int64         `json:"mrIid"`
	UserID    int64         `json:"userId"`
	CreatedAt time.Time     `json:"createdAt"`
	UpdatedAt time.Time     `json:"updatedAt"`
	Dur       time.Duration `json:"durationNs"`
	Outcome   string        `json:"outcome"`
	Reported  string        `json:"reported"`
	Head      string        `json:"head,omitempty"`   // "": sha (saved before merged-results pipelines)
	Source    string        `json:"source,omitempty"` // "": merge_request_event
	Jobs      []simJob      `json:"jobs,omitempty"`   // none: saved before pipelines had jobs
}

type savedApproval struct {
	NextID  int           `json:"nextId"`
	NextCB  int           `json:"nextCallback"`
	Tickets []savedTicket `json:"tickets"`
}

type savedTicket struct {
	Ticket
	Title       string            `json:"title"`
	CallbackURL string            `json:"callbackUrl"`
	Ext         map[string]string `json:"ext"`
	CallbackID  string            `json:"callbackId"`
	Delivered   bool              `json:"delivered"`
}

// ---- GitLab ----

func (g *GitLab) save() savedGitLab { // holds g.mu
	out := savedGitLab{NextProjectID: g.nextProjectID, NextMRID: g.nextMRID, NextPipelineID: g.nextPipelineID, NextJobID: g.nextJobID, Seq: g.seq}
	for id := int64(1); id <= g.nextProjectID; id++ {
		p := g.projectsByID[id]
		if p == nil {
			continue
		}
		// Maps the simulator goes on changing are copied: the snapshot is encoded after the lock
		// is released (a live map read by the encoder raced with a merge moving a branch).
		sp := savedProject{ID: p.id, Path: p.path, DefaultBranch: p.defaultBranch, Branches: maps.Clone(p.branches), NextPipeIID: p.nextPipeIID}
		for _, cid := range p.order {
			c := p.commits[cid]
			var parent tree
			if len(c.parents) > 0 {
				parent = p.commits[c.parents[0]].files
			}
			sc := savedCommit{ID: c.id, Parents: c.parents, Message: c.message, Author: c.author, At: c.at, Stats: c.stats, Changes: map[string]*savedFile{}}
			for path := range changes(parent, c.files) {
				if f, ok := c.files[path]; ok {
					sc.Changes[path] = &savedFile{Content: f.content, Commit: f.commit}
				} else {
					sc.Changes[path] = nil
				}
			}
			// chmod and a move onto identical content change only the last commit id.
			for path, f := range c.files {
				if pf, ok := parent[path]; ok && pf.content == f.content && pf.commit != f.commit {
					sc.Changes[path] = &savedFile{Content: f.content, Commit: f.commit}
				}
			}
			sp.Commits = append(sp.Commits, sc)
		}
		for _, mr := range p.mrs {
			sm := savedMR{
				ID: mr.id, IID: mr.iid, Title: mr.title, Description: mr.description, Source: mr.source, Target: mr.target,
				AuthorID: mr.authorID, State: mr.state, CreatedAt: mr.createdAt, UpdatedAt: mr.updatedAt, MergedAt: mr.mergedAt,
				ClosedAt: mr.closedAt, MergeUserID: mr.mergeUserID, ClosedByID: mr.closedByID, MergeCommit: mr.mergeCommit,
				MergeError: mr.mergeError, RemoveSource: mr.removeSource, HeadSHA: mr.headSHA, Labels: mr.labels,
			}
			for _, a := range mr.approvals {
				sm.Approvals = append(sm.Approvals, savedApprove{UserID: a.userID, At: a.at})
			}
			if mr.rebase != nil {
				until := mr.rebase.until
				sm.RebaseUntil, sm.RebaseFails = &until, mr.rebase.conflict
			}
			if mr.autoMerge != nil {
				sm.AutoMerge = &autoMergeJSON{UserID: mr.autoMerge.userID, RemoveSource: mr.autoMerge.removeSource}
			}
			sm.Blocker = mr.blocker
			if !mr.checkingTill.IsZero() {
				till := mr.checkingTill
				sm.CheckingTill = &till
			}
			sp.MRs = append(sp.MRs, sm)
		}
		for _, pl := range p.pipelines {
			sp.Pipelines = append(sp.Pipelines, savedPipeline{ID: pl.id, IID: pl.iid, SHA: pl.sha, Ref: pl.ref, MRIID: pl.mrIID,
				UserID: pl.userID, CreatedAt: pl.createdAt, UpdatedAt: pl.updatedAt, Dur: pl.dur, Outcome: pl.outcome, Reported: pl.reported,
				Head: pl.head, Source: pl.source, Jobs: pl.jobs})
		}
		saveSetup(p, &sp)
		out.Projects = append(out.Projects, sp)
	}
	for _, u := range g.users {
		if u.AccessLevel != 0 && u.Username != AdminUsername {
			if out.Roles == nil {
				out.Roles = map[int64]int{}
			}
			out.Roles[u.ID] = u.AccessLevel
		}
	}
	return out
}

// saveSetup records what a project's maintainers set up.
func saveSetup(p *project, sp *savedProject) {
	for _, h := range p.hooks {
		sp.Hooks = append(sp.Hooks, savedHook{projectHook: *h, Token: h.token})
	}
	branches := make([]string, 0, len(p.protected))
	for b := range p.protected {
		branches = append(branches, b)
	}
	slices.Sort(branches)
	protected := []savedProtection{}
	for _, b := range branches {
		pr := p.protected[b]
		protected = append(protected, savedProtection{Branch: b, ID: pr.id, Push: pr.push, Merge: pr.merge, PushUsers: pr.pushUsers, MergeSet: pr.mergeSet, ForcePush: pr.forcePush})
	}
	sp.Protected = &protected
	sp.Variables = maps.Clone(p.variables)
	for id := range p.members {
		sp.Members = append(sp.Members, id)
	}
	slices.Sort(sp.Members)
}

// restoreSetup puts back what a project's maintainers set up.
func (g *GitLab) restoreSetup(p *project, sp savedProject) { // holds g.mu
	for _, h := range sp.Hooks {
		hook := h.projectHook
		hook.token = h.Token
		p.hooks = append(p.hooks, &hook)
	}
	if sp.Protected == nil {
		p.protect(p.defaultBranch, &protection{id: g.nextID(), push: Maintainer, merge: Maintainer})
	} else {
		for _, pr := range *sp.Protected {
			p.protect(pr.Branch, &protection{id: pr.ID, push: pr.Push, merge: pr.Merge, pushUsers: pr.PushUsers, mergeSet: pr.MergeSet, forcePush: pr.ForcePush})
		}
	}
	p.variables = sp.Variables
	for _, id := range sp.Members {
		if p.members == nil {
			p.members = map[int64]bool{}
		}
		p.members[id] = true
	}
}

func (g *GitLab) restore(s savedGitLab) { // holds g.mu
	g.nextProjectID, g.nextMRID, g.nextPipelineID, g.nextJobID, g.seq = s.NextProjectID, s.NextMRID, s.NextPipelineID, s.NextJobID, s.Seq
	for _, sp := range s.Projects {
		p := &project{id: sp.ID, path: sp.Path, defaultBranch: sp.DefaultBranch, branches: sp.Branches, commits: map[string]*commit{}, nextPipeIID: sp.NextPipeIID}
		if p.branches == nil {
			p.branches = map[string]string{}
		}
		g.restoreSetup(p, sp)
		for _, sc := range sp.Commits {
			files := tree{}
			if len(sc.Parents) > 0 && p.commits[sc.Parents[0]] != nil {
				files = p.commits[sc.Parents[0]].files.clone()
			}
			for path, f := range sc.Changes {
				if f == nil {
					delete(files, path)
				} else {
					files[path] = fileEntry{content: f.Content, commit: f.Commit}
				}
			}
			c := &commit{id: sc.ID, parents: sc.Parents, message: sc.Message, author: sc.Author, at: sc.At, stats: sc.Stats, files: files}
			c.title = firstLine(sc.Message)
			p.commits[c.id] = c
			p.order = append(p.order, c.id)
		}
		for _, sm := range sp.MRs {
			mr := &mergeRequest{
				project: p, id: sm.ID, iid: sm.IID, title: sm.Title, description: sm.Description, source: sm.Source, target: sm.Target,
				authorID: sm.AuthorID, state: sm.State, createdAt: sm.CreatedAt, updatedAt: sm.UpdatedAt, mergedAt: sm.MergedAt,
				closedAt: sm.ClosedAt, mergeUserID: sm.MergeUserID, closedByID: sm.ClosedByID, mergeCommit: sm.MergeCommit,
				mergeError: sm.MergeError, removeSource: sm.RemoveSource, headSHA: sm.HeadSHA, labels: sm.Labels,
			}
			for _, a := range sm.Approvals {
				mr.approvals = append(mr.approvals, mrApproval{userID: a.UserID, at: a.At})
			}
			if sm.RebaseUntil != nil {
				mr.rebase = &rebaseJob{until: *sm.RebaseUntil, conflict: sm.RebaseFails}
				g.rebasing = append(g.rebasing, mr)
			}
			if sm.AutoMerge != nil {
				mr.autoMerge = &autoMerge{userID: sm.AutoMerge.UserID, removeSource: sm.AutoMerge.RemoveSource}
			}
			mr.blocker = sm.Blocker
			if sm.CheckingTill != nil {
				mr.checkingTill = *sm.CheckingTill
			}
			p.mrs = append(p.mrs, mr)
		}
		for _, sp := range sp.Pipelines {
			pl := &pipeline{project: p, id: sp.ID, iid: sp.IID, sha: sp.SHA, ref: sp.Ref, mrIID: sp.MRIID, userID: sp.UserID,
				createdAt: sp.CreatedAt, updatedAt: sp.UpdatedAt, dur: sp.Dur, outcome: sp.Outcome, reported: sp.Reported,
				head: sp.Head, source: sp.Source, jobs: sp.Jobs}
			if len(pl.jobs) == 0 { // saved before pipelines had jobs
				g.nextJobID++
				pl.jobs = []simJob{{ID: g.nextJobID, CreatedAt: pl.createdAt}}
			}
			if pl.head == "" {
				pl.head = pl.sha
			}
			if pl.source == "" {
				pl.source = sourceMergeRequest
			}
			p.pipelines = append(p.pipelines, pl)
			if pl.reported != pipeSuccess && pl.reported != pipeFailed {
				g.active = append(g.active, pl)
			}
		}
		g.projects[p.path] = p
		g.projectsByID[p.id] = p
	}
	// Hooks and protections keep their ids; new ones are numbered after them (nextID).
	for _, p := range g.projectsByID {
		for _, h := range p.hooks {
			g.nextUserID = max(g.nextUserID, h.ID-10000)
		}
		for _, pr := range p.protected {
			g.nextUserID = max(g.nextUserID, pr.id-10000)
		}
	}
	for id, level := range s.Roles {
		if u, ok := g.knownUser(id); ok {
			u.AccessLevel = level
			g.putUser(u)
		}
	}
}

func firstLine(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			return s[:i]
		}
	}
	return s
}

// ---- approval system ----

func (a *Approval) save() savedApproval { // holds a.mu
	out := savedApproval{NextID: a.nextID, NextCB: a.nextCB}
	for _, t := range a.tickets {
		out.Tickets = append(out.Tickets, savedTicket{Ticket: *t, Title: t.title, CallbackURL: t.callbackURL, Ext: maps.Clone(t.ext), CallbackID: t.callbackID, Delivered: t.delivered})
	}
	return out
}

// restore reloads the tickets.
func (a *Approval) restore(s savedApproval) { // holds a.mu
	a.nextID, a.nextCB = s.NextID, s.NextCB
	for _, st := range s.Tickets {
		t := st.Ticket
		t.title, t.callbackURL, t.ext, t.callbackID, t.delivered = st.Title, st.CallbackURL, st.Ext, st.CallbackID, st.Delivered
		a.tickets = append(a.tickets, &t)
		a.byOp[t.OperationID] = &t
	}
}

// resendUndelivered sends again the decisions bindery never acknowledged (their callback was
// in flight when the simulator stopped). They keep their callback id, so a decision that did
// arrive after all is answered DUPLICATE.
func (a *Approval) resendUndelivered() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, t := range a.tickets {
		if t.Status != TicketPending && !t.delivered && t.callbackID != "" {
			a.enqueue(t.callback())
		}
	}
}

// ---- file ----

// load reads the state file, if any. A missing file is a fresh start; an unreadable one is
// logged and set aside (renamed), never fatal: the simulators are a demo convenience.
func (s *Sims) load() {
	path := s.opts.StateFile
	if path == "" {
		return
	}
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return
	}
	var st savedState
	if err == nil {
		err = json.Unmarshal(data, &st)
	}
	if err == nil && st.Version != stateVersion {
		err = fmt.Errorf("state version %d, want %d", st.Version, stateVersion)
	}
	if err != nil {
		aside := path + ".broken-" + time.Now().Format("20060102-150405")
		_ = os.Rename(path, aside)
		s.opts.Log.Error("simulator state unreadable; starting empty", "file", path, "movedTo", aside, "err", err)
		return
	}
	s.GitLab.mu.Lock()
	s.GitLab.restore(st.GitLab)
	s.GitLab.mu.Unlock()
	s.Approval.mu.Lock()
	s.Approval.restore(st.Approval)
	s.Approval.mu.Unlock()
}

// save writes the state file when it changed since the last save (write, then rename, so a
// crash never leaves half a file).
func (s *Sims) save() {
	path := s.opts.StateFile
	if path == "" {
		return
	}
	st := savedState{Version: stateVersion}
	s.GitLab.mu.Lock()
	st.GitLab = s.GitLab.save()
	s.GitLab.mu.Unlock()
	s.Approval.mu.Lock()
	st.Approval = s.Approval.save()
	s.Approval.mu.Unlock()
	data, err := json.Marshal(st)
	if err != nil {
		s.opts.Log.Error("simulator state not saved", "err", err)
		return
	}
	sum := sha256.Sum256(data)
	if bytes.Equal(sum[:], s.savedSum[:]) {
		return
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		s.opts.Log.Error("simulator state not saved", "err", err)
		return
	}
	if err := os.Rename(tmp, path); err != nil {
		s.opts.Log.Error("simulator state not saved", "err", err)
		return
	}
	s.savedSum = sum
}
