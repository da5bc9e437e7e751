package sim

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// Reading a repository as bindery's drift check does (docs/gitlab.md, 'Reading the
// repository'): the tree of a branch, and the commits that touched a path.

type treeEntryJSON struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Type string `json:"type"` // "tree" or "blob"
	Path string `json:"path"`
	Mode string `json:"mode"`
}

// blobID is git's object id of a file with content: sha1("blob <size>\0" + content). A client
// compares it with the id of what it expects there without reading the file.
func blobID(content string) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00%s", len(content), content)
	return hex.EncodeToString(h.Sum(nil))
}

// treeNode is one directory of a snapshot, built to list it as git does.
type treeNode struct {
	dirs  map[string]*treeNode
	files map[string]string // name → content
	id    string
}

func buildTree(files tree) *treeNode {
	root := &treeNode{dirs: map[string]*treeNode{}, files: map[string]string{}}
	for path, f := range files {
		n := root
		parts := strings.Split(path, "/")
		for _, d := range parts[:len(parts)-1] {
			c := n.dirs[d]
			if c == nil {
				c = &treeNode{dirs: map[string]*treeNode{}, files: map[string]string{}}
				n.dirs[d] = c
			}
			n = c
		}
		n.files[parts[len(parts)-1]] = f.content
	}
	root.hash()
	return root
}

// names is the directory's entries in git's order: by name, a directory compared as its name
// with a trailing slash.
func (n *treeNode) names() []string {
	var out []string
	for d := range n.dirs {
		out = append(out, d+"/")
	}
	for f := range n.files {
		out = append(out, f)
	}
	slices.Sort(out)
	return out
}

// hash is git's tree object id: "tree <size>\0" and, per entry, "<mode> <name>\0<20-byte id>".
func (n *treeNode) hash() string {
	var body []byte
	for _, name := range n.names() {
		var mode, id string
		if d, ok := strings.CutSuffix(name, "/"); ok {
			mode, id, name = "40000", n.dirs[d].hash(), d
		} else {
			mode, id = "100644", blobID(n.files[name])
		}
		raw, _ := hex.DecodeString(id)
		body = append(body, mode+" "+name+"\x00"...)
		body = append(body, raw...)
	}
	h := sha1.New()
	fmt.Fprintf(h, "tree %d\x00", len(body))
	h.Write(body)
	n.id = hex.EncodeToString(h.Sum(nil))
	return n.id
}

// list appends the entries of n under prefix in git ls-tree -r -t order: a directory, then what
// it holds.
func (n *treeNode) list(prefix string, recursive bool, out []treeEntryJSON) []treeEntryJSON {
	for _, name := range n.names() {
		if d, ok := strings.CutSuffix(name, "/"); ok {
			out = append(out, treeEntryJSON{ID: n.dirs[d].id, Name: d, Type: "tree", Path: prefix + d, Mode: "040000"})
			if recursive {
				out = n.dirs[d].list(prefix+d+"/", true, out)
			}
			continue
		}
		out = append(out, treeEntryJSON{ID: blobID(n.files[name]), Name: name, Type: "blob", Path: prefix + name, Mode: "100644"})
	}
	return out
}

// listTree is GET /projects/:id/repository/tree (ref, path, recursive, page, per_page): the
// entries of a directory of a commit, paginated by page number. An unknown ref and a path that
// is not a directory of it are GitLab's 404 "404 Tree Not Found".
func (c *call) listTree() {
	ref, _ := c.in.str("ref")
	if ref == "" {
		ref = c.p.defaultBranch
	}
	cm := c.p.commits[c.p.resolve(ref)]
	if cm == nil {
		c.fail(http.StatusNotFound, "404 Tree Not Found")
		return
	}
	recursive, _ := c.in.boolean("recursive", false)
	path, _ := c.in.str("path")
	path = strings.Trim(path, "/")
	key := fmt.Sprintf("%t:%s", recursive, path)
	entries, ok := cm.listings[key]
	if !ok {
		var found bool
		if entries, found = listing(cm.files, path, recursive); !found {
			c.fail(http.StatusNotFound, "404 Tree Not Found")
			return
		}
		if cm.listings == nil {
			cm.listings = map[string][]treeEntryJSON{}
		}
		cm.listings[key] = entries
	}
	writeJSON(c.w, http.StatusOK, paginate(c, entries))
}

// listing is the entries of directory path of files (found false: no such directory).
func listing(files tree, path string, recursive bool) ([]treeEntryJSON, bool) {
	n := buildTree(files)
	prefix := ""
	if path != "" {
		for _, d := range strings.Split(path, "/") {
			if n = n.dirs[d]; n == nil {
				return nil, false
			}
		}
		prefix = path + "/"
	}
	return n.list(prefix, recursive, []treeEntryJSON{}), true
}

// listCommits is GET /projects/:id/repository/commits (ref_name, path, page, per_page): the
// commits reachable from ref_name, newest first; with path, only those that changed it (added,
// edited or deleted: the file differs from every parent's, so a merge that took one side's
// change is left out and the commit that made it is listed). An unknown ref_name is an empty
// list here (bindery asks only for its target branches).
func (c *call) listCommits() {
	ref, _ := c.in.str("ref_name")
	if ref == "" {
		ref = c.p.defaultBranch
	}
	path, hasPath := c.in.str("path")
	var out []commitJSON
	if head := c.p.resolve(ref); head != "" {
		reach := c.p.ancestors(head)
		for i := len(c.p.order) - 1; i >= 0; i-- {
			cm := c.p.commits[c.p.order[i]]
			if !reach[cm.id] || (hasPath && path != "" && !c.p.touches(cm, path)) {
				continue
			}
			out = append(out, c.commitJSON(cm, false))
		}
	}
	writeJSON(c.w, http.StatusOK, paginate(c, out))
}

// touches reports whether commit cm changed path against every one of its parents.
func (p *project) touches(cm *commit, path string) bool {
	f, ok := cm.files[path]
	if len(cm.parents) == 0 {
		return ok
	}
	for _, id := range cm.parents {
		pf, pok := p.commits[id].files[path]
		if pok == ok && (!ok || pf.content == f.content) {
			return false
		}
	}
	return true
}
