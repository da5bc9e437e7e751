package sim

import (
	"maps"
	"net/http"
	"slices"
	"time"
)

// The merge history: every merge the simulated GitLab carried out, with what it put on the target
// beside the merged head — the record a check of "never merged a tree no pipeline tested" reads
// (docs/gitlab.md, 'What a merge guarantees, per merge method'). GitLab's merge method `merge`
// merges a branch whose base is behind the target: the target then gets a tree the branch's
// pipelines never ran on — the branch's change beside target commits the branch does not hold.
// Each file where the target after the merge differs from the head's tree is recorded with the
// target commit that wrote it there, and whether the merging account had seen that commit (read
// the target branch at it or after it) before it asked for the merge.

// MergeRecord is one merge.
type MergeRecord struct {
	Project      string    `json:"project"`
	Target       string    `json:"target"`
	IID          int64     `json:"iid"`
	By           string    `json:"by"` // the merging account's username
	At           time.Time `json:"at"`
	Head         string    `json:"head"`         // the MR's head that was merged
	TargetBefore string    `json:"targetBefore"` // the target's head just before the merge
	Landed       string    `json:"landed"`       // what the merge put on the target
	// Untested are the files where the target after the merge differs from the head's tree (none:
	// the target got exactly the tree the head's pipelines ran on).
	Untested []UntestedFile `json:"untested,omitempty"`
}

// UntestedFile is a file the merge put on the target beside the merged head.
type UntestedFile struct {
	Path string `json:"path"`
	// Commit is the target commit that wrote the file as the target has it (or removed it), with
	// its title and author ("" : the simulator itself, e.g. its fault that moves the target
	// inside a merge call); "" when none is found.
	Commit string `json:"commit"`
	Title  string `json:"title"`
	Author string `json:"author"`
	// Seen: the merging account read the target branch (GET …/repository/branches/:branch) at
	// that commit or after it before the merge; false: it landed after that account's last look.
	Seen bool `json:"seen"`
}

// noteRead records the head of branch that user just read (getBranch).
func (p *project) noteRead(userID int64, branch string) { // holds g.mu
	if p.reads == nil {
		p.reads = map[int64]map[string]string{}
	}
	if p.reads[userID] == nil {
		p.reads[userID] = map[string]string{}
	}
	p.reads[userID][branch] = p.branches[branch]
}

// recordMerge appends the merge of mr by userID, which moved the target from before to landed.
func (g *GitLab) recordMerge(mr *mergeRequest, userID int64, before, landed string, now time.Time) { // holds g.mu
	p := mr.project
	rec := MergeRecord{Project: p.path, Target: mr.target, IID: mr.iid, By: g.userByID(userID).Username, At: now,
		Head: mr.headSHA, TargetBefore: before, Landed: landed}
	head, after := p.commits[mr.headSHA], p.commits[landed]
	if head != nil && after != nil {
		diff := changes(head.files, after.files)
		var beside map[string]bool // the target's commits the head does not hold, found once
		seen := p.ancestors(p.reads[userID][mr.target])
		for _, path := range slices.Sorted(maps.Keys(diff)) {
			id := after.files[path].commit
			if _, ok := after.files[path]; !ok {
				if beside == nil {
					beside = p.besideOf(before, mr.headSHA)
				}
				id = p.removedBy(beside, path)
			}
			f := UntestedFile{Path: path, Commit: id, Seen: seen[id]}
			if c := p.commits[id]; c != nil {
				f.Title, f.Author = c.title, c.author
			}
			rec.Untested = append(rec.Untested, f)
		}
	}
	g.merges = append(g.merges, rec)
}

// besideOf is the set of commits of target that head does not hold.
func (p *project) besideOf(target, head string) map[string]bool {
	out := p.ancestors(target)
	for id := range p.ancestors(head) {
		delete(out, id)
	}
	return out
}

// removedBy is the commit among candidates that removed path: one whose parent held it and that
// does not — a commit of its own before a merge commit that only carries the removal ("" : none).
func (p *project) removedBy(candidates map[string]bool, path string) string {
	found := ""
	for id := range candidates {
		c := p.commits[id]
		if _, still := c.files[path]; still {
			continue
		}
		for _, parent := range c.parents {
			if pc := p.commits[parent]; pc != nil {
				if _, had := pc.files[path]; had && (found == "" || len(c.parents) == 1) {
					found = id
				}
			}
		}
	}
	return found
}

// Merges returns every merge so far, in the order they happened.
func (g *GitLab) Merges() []MergeRecord {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.merges)
}

// serveMerges answers GET /sim/gitlab/merges: the merge history, for a test that runs the
// simulator in another process.
func (g *GitLab) serveMerges(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "GET only"})
		return
	}
	writeJSON(w, http.StatusOK, g.Merges())
}
