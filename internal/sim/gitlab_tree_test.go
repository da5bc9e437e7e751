package sim_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// The repository tree and the commits of a path, as bindery's drift check reads them
// (docs/gitlab.md, 'Reading the repository').

func TestTheTreeListsABranchPageByPageWithGitsObjectIDs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "", nil)
	files := map[string]string{"bindings/a.yaml": "operationId: op-a\n", "bindings/team/b.yaml": "operationId: op-b\n", "zz.txt": "z\n"}
	var actions []map[string]any
	for p, c := range files {
		actions = append(actions, map[string]any{"action": "create", "file_path": p, "content": c})
	}
	if a := e.call(t, "POST", proj+"/repository/commits", "bot-token", map[string]any{"branch": "main", "commit_message": "files", "actions": actions}); a.status != 201 {
		t.Fatalf("commit: %d %s", a.status, a.body)
	}

	var all []map[string]string
	for page := "1"; page != ""; {
		a := e.call(t, "GET", proj+"/repository/tree?ref=main&recursive=true&per_page=2&page="+page, "bot-token", nil)
		if a.status != 200 || a.header.Get("X-Per-Page") != "2" || a.header.Get("X-Total") == "" {
			t.Fatalf("tree page %s: %d %v %s", page, a.status, a.header, a.body)
		}
		var entries []map[string]string
		if err := json.Unmarshal([]byte(a.body), &entries); err != nil || len(entries) == 0 || len(entries) > 2 {
			t.Fatalf("tree page %s: %v %s", page, err, a.body)
		}
		all = append(all, entries...)
		page = a.header.Get("X-Next-Page")
	}
	var paths []string
	byPath := map[string]map[string]string{}
	for _, en := range all {
		paths = append(paths, en["type"]+":"+en["path"])
		byPath[en["path"]] = en
	}
	// git ls-tree -r -t order: a directory, then what it holds; README.md is the project's own.
	want := "blob:README.md tree:bindings blob:bindings/a.yaml tree:bindings/team blob:bindings/team/b.yaml blob:zz.txt"
	if got := strings.Join(paths, " "); got != want {
		t.Fatalf("recursive tree:\n got %s\nwant %s", got, want)
	}
	if en := byPath["bindings/team/b.yaml"]; en["name"] != "b.yaml" || en["mode"] != "100644" || byPath["bindings"]["mode"] != "040000" {
		t.Fatalf("entry fields: %v %v", en, byPath["bindings"])
	}
	if git, err := exec.LookPath("git"); err == nil {
		// The blob's id is git's own: a client compares it with the id of the content it expects.
		cmd := exec.Command(git, "hash-object", "--stdin")
		cmd.Stdin = strings.NewReader(files["bindings/a.yaml"])
		out, err := cmd.Output()
		if err != nil || strings.TrimSpace(string(out)) != byPath["bindings/a.yaml"]["id"] {
			t.Fatalf("blob id %s, git says %s (%v)", byPath["bindings/a.yaml"]["id"], out, err)
		}
	}

	// One directory, not recursive.
	a := e.call(t, "GET", proj+"/repository/tree?ref=main&path=bindings", "bot-token", nil)
	var dir []map[string]string
	json.Unmarshal([]byte(a.body), &dir)
	if a.status != 200 || len(dir) != 2 || dir[0]["path"] != "bindings/a.yaml" || dir[1]["path"] != "bindings/team" || dir[1]["id"] != byPath["bindings/team"]["id"] {
		t.Fatalf("directory: %d %s", a.status, a.body)
	}

	for _, c := range []struct{ path, msg string }{
		{proj + "/repository/tree?ref=main&path=nowhere", "404 Tree Not Found"},
		{proj + "/repository/tree?ref=main&path=zz.txt", "404 Tree Not Found"}, // a file is not a tree
		{proj + "/repository/tree?ref=no-such-branch", "404 Tree Not Found"},
		{"projects/no%2Fsuch/repository/tree", "404 Project Not Found"},
	} {
		if a := e.call(t, "GET", c.path, "bot-token", nil); a.status != 404 || a.json(t)["message"] != c.msg {
			t.Errorf("%s: %d %s, want 404 %s", c.path, a.status, a.body, c.msg)
		}
	}
}

func TestTheCommitsOfAPathNameWhoRemovedAFile(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "", nil)
	if a := e.call(t, "POST", proj+"/repository/commits", "bot-token", map[string]any{"branch": "main", "commit_message": "add a",
		"actions": []map[string]any{{"action": "create", "file_path": "bindings/a.yaml", "content": "x\n"}}}); a.status != 201 {
		t.Fatalf("commit: %d %s", a.status, a.body)
	}
	if _, err := e.sims.GitLab.PushToBranch("grp/sub.proj", "main", "other.txt", "unrelated\n"); err != nil {
		t.Fatal(err)
	}
	removed, err := e.sims.GitLab.RemoveFromBranch("grp/sub.proj", "main", "bindings/a.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a := e.call(t, "GET", proj+"/repository/commits?ref_name=main&path=bindings/a.yaml&per_page=1", "bot-token", nil)
	var list []map[string]any
	json.Unmarshal([]byte(a.body), &list)
	if a.status != 200 || len(list) != 1 || list[0]["id"] != removed || list[0]["author_name"] != "A. Person" ||
		a.header.Get("X-Total") != "2" || a.header.Get("X-Next-Page") != "2" {
		t.Fatalf("commits of the path: %d %v %s", a.status, a.header, a.body)
	}
	a = e.call(t, "GET", proj+"/repository/commits?ref_name=main&per_page=100", "bot-token", nil)
	json.Unmarshal([]byte(a.body), &list)
	if len(list) < 4 || list[0]["id"] != removed {
		t.Fatalf("every commit of main, newest first: %s", a.body)
	}
	if _, err := e.sims.GitLab.RemoveFromBranch("grp/sub.proj", "main", "bindings/a.yaml"); err == nil {
		t.Fatal("removing a file that is gone was accepted")
	}
}
