package sim

import (
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
)

// The repository model: commits hold a full snapshot of their files (small repositories,
// simple and obviously right), branches point at commits.

type project struct {
	id            int64
	path          string
	defaultBranch string
	branches      map[string]string // name → commit id
	commits       map[string]*commit
	order         []string        // commit ids in creation order (parents first), for saving
	mrs           []*mergeRequest // index iid-1: iids grow by one per project
	pipelines     []*pipeline     // in creation order
	nextPipeIID   int64
	// What a maintainer sets up (gitlab_admin.go): webhooks, branch protection, CI/CD variables.
	hooks     []*projectHook
	protected map[string]*protection // by branch name
	variables map[string]string
	members   map[int64]bool              // accounts added with POST /projects/:id/members
	reads     map[int64]map[string]string // user → branch → the head that user last read (the merge history's "seen")
}

type fileEntry struct {
	content string
	commit  string // last commit that changed the file (what last_commit_id is checked against)
}

type tree map[string]fileEntry

type commit struct {
	id      string
	parents []string
	title   string
	message string
	author  string
	files   tree
	at      time.Time
	stats   commitStats
	// listings caches the tree listings read of this commit (a commit never changes once
	// made), by path and recursion: a tree read page by page builds and hashes the tree once,
	// not once per page.
	listings map[string][]treeEntryJSON
}

type commitStats struct {
	Additions int `json:"additions"`
	Deletions int `json:"deletions"`
	Total     int `json:"total"`
}

func (p *project) mr(iid int64) *mergeRequest {
	if iid < 1 || iid > int64(len(p.mrs)) {
		return nil
	}
	return p.mrs[iid-1]
}

func (g *GitLab) newCommit(p *project, parents []string, message string, files tree, now time.Time) *commit { // holds g.mu
	g.seq++
	h := sha1.New()
	fmt.Fprintf(h, "%s\x00%v\x00%s\x00%d\x00%d", p.path, parents, message, now.UnixNano(), g.seq)
	title, _, _ := strings.Cut(message, "\n")
	c := &commit{id: hex.EncodeToString(h.Sum(nil)), parents: parents, title: title, message: message, files: files, at: now}
	p.commits[c.id] = c
	p.order = append(p.order, c.id)
	return c
}

// pushFile commits one file directly on branch (another team's change).
func (g *GitLab) pushFile(p *project, branch, path, content, message string, now time.Time) string { // holds g.mu
	head := p.commits[p.branches[branch]]
	files := head.files.clone()
	c := g.newCommit(p, []string{head.id}, message, files, now)
	files[path] = fileEntry{content: content, commit: c.id}
	p.branches[branch] = c.id
	return c.id
}

func (t tree) clone() tree {
	out := make(tree, len(t))
	for k, v := range t {
		out[k] = v
	}
	return out
}

// isDir reports whether path is a directory of t (some file lies below it).
func (t tree) isDir(path string) bool {
	prefix := path + "/"
	for k := range t {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}

// ancestors is the set of commits reachable from id, itself included.
func (p *project) ancestors(id string) map[string]bool {
	seen := map[string]bool{}
	stack := []string{id}
	for len(stack) > 0 {
		c := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if c == "" || seen[c] {
			continue
		}
		seen[c] = true
		if cm := p.commits[c]; cm != nil {
			stack = append(stack, cm.parents...)
		}
	}
	return seen
}

// isAncestor reports whether commit a is in the history of b (a commit is in its own), as
// git merge-base --is-ancestor does.
func (p *project) isAncestor(a, b string) bool {
	return a != "" && p.ancestors(b)[a]
}

// mergeBase is git merge-base a others...: a best common ancestor of a and any of others, one
// that no other common ancestor descends from, or "" when they share no history. The nearest
// common commit by distance is not enough: from a merge commit (parents: the old target, a
// branch) the old target is one step away, yet the branch's head is the better base of a branch
// built on that branch.
func (p *project) mergeBase(a string, others ...string) string {
	ofA := p.ancestors(a)
	// Walking back from others and stopping at common commits finds every best base: a path to
	// one that passed another common commit would make it that commit's ancestor.
	var found []string
	seen := map[string]bool{}
	queue := append([]string(nil), others...)
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		if c == "" || seen[c] {
			continue
		}
		seen[c] = true
		if ofA[c] {
			found = append(found, c)
			continue
		}
		if cm := p.commits[c]; cm != nil {
			queue = append(queue, cm.parents...)
		}
	}
	dominated := map[string]bool{}
	if len(found) > 1 {
		for _, f := range found {
			for anc := range p.ancestors(f) {
				dominated[anc] = dominated[anc] || anc != f
			}
		}
	}
	// Several best bases (criss-cross merges, which bindery never makes): git picks one; here the
	// newest, for a stable answer.
	best := ""
	for _, f := range found {
		if dominated[f] {
			continue
		}
		if best == "" || p.commits[f].at.After(p.commits[best].at) || (p.commits[f].at.Equal(p.commits[best].at) && f > best) {
			best = f
		}
	}
	return best
}

// merged is git's merge of commit theirs into commit ours against their merge base: the merged
// tree and the paths that conflict (none: it merges cleanly). ok is false when either is unknown.
func (p *project) merged(ours, theirs string) (files tree, conflicts []string, ok bool) {
	o, t := p.commits[ours], p.commits[theirs]
	if o == nil || t == nil {
		return nil, nil, false
	}
	var base tree
	if b := p.commits[p.mergeBase(o.id, t.id)]; b != nil {
		base = b.files
	}
	files, conflicts = merge3(base, o.files, t.files)
	return files, conflicts, true
}

// merge3 merges whole files as git's three-way merge does: a path changed (added, edited or
// deleted) on one side since base takes that side; changed on both to the same result (the same
// content added, or deleted on both) takes it; changed on both differently is a conflict, and so
// is a file where the merged tree has a directory. Unlike git it does not merge edits to
// different lines of one file: bindery writes one file per binding and never edits one file from
// two branches, so such a merge would mean a bug worth seeing. The result keeps each file's last
// commit (what last_commit_id is checked against).
func merge3(base, ours, theirs tree) (tree, []string) {
	out := ours.clone()
	mine := changes(base, ours)
	var conflicts []string
	touched := maps.Clone(mine)
	for path := range changes(base, theirs) {
		o, inOurs := ours[path]
		t, inTheirs := theirs[path]
		switch {
		case !mine[path]:
			if inTheirs {
				out[path] = t
			} else {
				delete(out, path)
			}
		case inOurs != inTheirs || o.content != t.content:
			conflicts = append(conflicts, path)
		}
		touched[path] = true
	}
	for path := range touched {
		if _, ok := out[path]; !ok {
			continue
		}
		for dir := path; ; {
			i := strings.LastIndex(dir, "/")
			if i < 0 {
				break
			}
			dir = dir[:i]
			if _, file := out[dir]; file {
				conflicts = append(conflicts, path)
				break
			}
		}
	}
	sort.Strings(conflicts)
	return out, slices.Compact(conflicts)
}

// changes are the paths whose content differs between two trees (added, changed or removed).
func changes(from, to tree) map[string]bool {
	out := map[string]bool{}
	for k, v := range to {
		if old, ok := from[k]; !ok || old.content != v.content {
			out[k] = true
		}
	}
	for k := range from {
		if _, ok := to[k]; !ok {
			out[k] = true
		}
	}
	return out
}

// action is one file action of a commit request, as sent.
type action struct {
	Action       string
	FilePath     string
	PreviousPath string
	Content      string
	HasContent   bool
	Encoding     string
	LastCommitID string
}

var validActions = map[string]bool{"create": true, "update": true, "delete": true, "move": true, "chmod": true}

// apply runs actions on a copy of base for commit id. It is all-or-nothing: the first failing
// action returns GitLab's message and nothing is kept.
func apply(base tree, actions []action, id string) (tree, commitStats, string) {
	files := base.clone()
	var st commitStats
	for _, a := range actions {
		content := a.Content
		if a.Encoding == "base64" {
			raw, err := base64.StdEncoding.DecodeString(a.Content)
			if err != nil {
				return nil, st, "Invalid base64 content for " + a.FilePath
			}
			content = string(raw)
		}
		cur, exists := files[a.FilePath]
		stale := func(path string) bool {
			return a.LastCommitID != "" && files[path].commit != a.LastCommitID
		}
		switch a.Action {
		case "create":
			if exists {
				return nil, st, "A file with this name already exists"
			}
			if files.isDir(a.FilePath) {
				return nil, st, "A directory with this name already exists"
			}
			files[a.FilePath] = fileEntry{content: content, commit: id}
			st.Additions += lines(content)
		case "update":
			if !exists {
				return nil, st, "A file with this name doesn't exist"
			}
			if stale(a.FilePath) {
				return nil, st, "The file has changed since you started editing it: " + a.FilePath
			}
			files[a.FilePath] = fileEntry{content: content, commit: id}
			st.Deletions += lines(cur.content)
			st.Additions += lines(content)
		case "delete":
			if !exists {
				return nil, st, "A file with this name doesn't exist"
			}
			if stale(a.FilePath) {
				return nil, st, "The file has changed since you started editing it: " + a.FilePath
			}
			delete(files, a.FilePath)
			st.Deletions += lines(cur.content)
		case "move":
			prev, ok := files[a.PreviousPath]
			if !ok {
				return nil, st, "A file with this name doesn't exist"
			}
			if exists {
				return nil, st, "A file with this name already exists"
			}
			if stale(a.PreviousPath) {
				return nil, st, "The file has changed since you started editing it: " + a.PreviousPath
			}
			if !a.HasContent {
				content = prev.content
			}
			delete(files, a.PreviousPath)
			files[a.FilePath] = fileEntry{content: content, commit: id}
			st.Deletions += lines(prev.content)
			st.Additions += lines(content)
		case "chmod":
			if !exists {
				return nil, st, "A file with this name doesn't exist"
			}
			files[a.FilePath] = fileEntry{content: cur.content, commit: id}
		}
	}
	st.Total = st.Additions + st.Deletions
	return files, st, ""
}

func lines(s string) int {
	if s == "" {
		return 0
	}
	n := strings.Count(s, "\n")
	if !strings.HasSuffix(s, "\n") {
		n++
	}
	return n
}

// validBranchName follows git check-ref-format closely enough for bindery's branch names.
func validBranchName(name string) bool {
	if name == "" || name == "HEAD" || strings.HasPrefix(name, "-") || strings.HasPrefix(name, "/") ||
		strings.HasSuffix(name, "/") || strings.HasSuffix(name, ".") || strings.HasSuffix(name, ".lock") ||
		strings.Contains(name, "..") || strings.Contains(name, "//") || strings.Contains(name, "@{") {
		return false
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f || strings.ContainsRune(" ~^:?*[\\", r) {
			return false
		}
	}
	return true
}
