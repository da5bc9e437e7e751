package sim_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"bindery/internal/platform/config"
	"bindery/internal/sim"
)

// The simulated GitLab over raw HTTP, answering as GitLab does (docs/gitlab.md).

const simConfig = `
gitlab:
  botToken: bot-token
  reviewerTokens: [rev1-token, rev2-token]
hooks:
  gitlabToken: hook-secret
  approvalSecret: approval-secret
  deployToken: deploy-token
sim:
  gitlab:
    pipelineDuration: 0s
    rebaseDuration: 0s
  deploy:
    delay: 0s
targets:
  - key: t1
    project: grp/sub.proj
    path: "bindings/{subject}.yaml"
`

type env struct {
	sims    *sim.Sims
	url     string
	bindery string
	hook    *receiver
	src     *config.Source
}

// receiver plays bindery: it records every hook and answers with status.
type receiver struct {
	mu     sync.Mutex
	status int
	got    []*http.Request
	bodies [][]byte
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.got = append(r.got, req)
	r.bodies = append(r.bodies, body)
	status := r.status
	r.mu.Unlock()
	if status == 0 {
		status = 200
	}
	w.WriteHeader(status)
	io.WriteString(w, `{"code":"ACCEPTED"}`)
}

func (r *receiver) requests() ([]*http.Request, [][]byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*http.Request(nil), r.got...), append([][]byte(nil), r.bodies...)
}

func (r *receiver) setStatus(s int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status = s
}

func newEnv(t *testing.T, cfg string, clock sim.Clock) *env {
	t.Helper()
	if cfg == "" {
		cfg = simConfig
	}
	rec := &receiver{}
	bindery := httptest.NewServer(rec)
	src := config.NewStatic(config.MustParse(cfg))
	sims := sim.New(sim.Options{Config: src, BinderyURL: bindery.URL, Clock: clock})
	srv := httptest.NewServer(sims.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	sims.Start(ctx)
	t.Cleanup(func() { cancel(); sims.Stop(context.Background()); srv.Close(); bindery.Close() })
	return &env{sims: sims, url: srv.URL, bindery: bindery.URL, hook: rec, src: src}
}

type answer struct {
	status int
	header http.Header
	body   string
}

func (a answer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(a.body), &m); err != nil {
		t.Fatalf("body %q: %v", a.body, err)
	}
	return m
}

// call sends a request to the simulator. body: nil, a string (form-encoded), or a value sent as JSON.
func (e *env) call(t *testing.T, method, path, token string, body any) answer {
	t.Helper()
	var rd io.Reader
	ct := ""
	switch b := body.(type) {
	case nil:
	case string:
		rd, ct = strings.NewReader(b), "application/x-www-form-urlencoded"
	default:
		data, _ := json.Marshal(b)
		rd, ct = bytes.NewReader(data), "application/json"
	}
	req, _ := http.NewRequest(method, e.url+"/sim/gitlab/api/v4/"+path, rd)
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if token != "" {
		req.Header.Set("Private-Token", token)
	}
	return send(t, req)
}

func send(t *testing.T, req *http.Request) answer {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(data)}
}

const proj = "projects/grp%2Fsub%2Eproj"

// prepare: a branch with one commit and an open MR (iid 1).
func (e *env) prepare(t *testing.T) {
	t.Helper()
	if a := e.call(t, "POST", proj+"/repository/commits", "bot-token", map[string]any{
		"branch": "feat/x.y", "start_branch": "main", "commit_message": "add",
		"actions": []map[string]any{{"action": "create", "file_path": "bindings/a.yaml", "content": "operationId: op-a\n"}},
	}); a.status != 201 {
		t.Fatalf("commit: %d %s", a.status, a.body)
	}
	if a := e.call(t, "POST", proj+"/merge_requests", "bot-token", map[string]any{"source_branch": "feat/x.y", "target_branch": "main", "title": "T"}); a.status != 201 {
		t.Fatalf("mr: %d %s", a.status, a.body)
	}
}

func TestGitLabSimulatorAnswersLikeGitLab(t *testing.T) {
	e := newEnv(t, "", nil)
	e.prepare(t)
	head := e.call(t, "GET", proj+"/repository/branches/feat%2Fx%2Ey", "bot-token", nil).json(t)["commit"].(map[string]any)["id"].(string)
	cases := []struct {
		name, method, path, token string
		body                      any
		status                    int
		contains                  []string
	}{
		{"no token", "GET", proj + "/merge_requests/1", "", nil, 401, []string{`{"message":"401 Unauthorized"}`}},
		{"unknown token", "GET", "user", "nope", nil, 401, []string{`"401 Unauthorized"`}},
		{"current user", "GET", "user", "rev1-token", nil, 200, []string{`"username":"reviewer-1"`}},
		{"a file's raw content at a branch", "GET", proj + "/repository/files/bindings%2Fa.yaml/raw?ref=feat%2Fx.y", "bot-token", nil, 200, []string{"operationId: op-a\n"}},
		{"a file not on the default branch", "GET", proj + "/repository/files/bindings%2Fa.yaml/raw", "bot-token", nil, 404, []string{`"404 File Not Found"`}},
		{"a file at an unknown ref", "GET", proj + "/repository/files/bindings%2Fa.yaml/raw?ref=nope", "bot-token", nil, 404, []string{`"404 Commit Not Found"`}},
		{"unknown route", "GET", "projects/1/wikis", "bot-token", nil, 404, []string{`{"error":"404 Not Found"}`}},
		{"wrong method", "DELETE", proj + "/merge_requests/1/approve", "bot-token", nil, 405, []string{`405`}},
		{"unknown project", "GET", "projects/nope%2Fnope/merge_requests/1", "bot-token", nil, 404, []string{`"404 Project Not Found"`}},
		{"numeric project id", "GET", "projects/1/merge_requests/1", "bot-token", nil, 200, []string{`"iid":1`}},
		{"unknown MR", "GET", proj + "/merge_requests/99", "bot-token", nil, 404, []string{`"404 Merge Request Not Found"`}},
		{"missing params", "POST", proj + "/repository/branches", "bot-token", map[string]any{}, 400, []string{`{"error":"branch is missing, ref is missing"}`}},
		{"branch exists", "POST", proj + "/repository/branches", "bot-token", map[string]any{"branch": "main", "ref": "main"}, 400, []string{`{"message":"Branch already exists"}`}},
		{"branch name invalid", "POST", proj + "/repository/branches", "bot-token", map[string]any{"branch": "a..b", "ref": "main"}, 400, []string{`"Branch name is invalid"`}},
		{"bad ref", "POST", proj + "/repository/branches", "bot-token", map[string]any{"branch": "n", "ref": "zzz"}, 400, []string{`"Failed to create branch 'n': invalid reference name 'zzz'"`}},
		{"branch by form", "POST", proj + "/repository/branches", "bot-token", "branch=form-branch&ref=main", 201, []string{`"name":"form-branch"`}},
		{"branch by query", "POST", proj + "/repository/branches?branch=q-branch&ref=main", "bot-token", nil, 201, []string{`"name":"q-branch"`}},
		{"unknown branch", "GET", proj + "/repository/branches/nope", "bot-token", nil, 404, []string{`"404 Branch Not Found"`}},
		{"commit missing params", "POST", proj + "/repository/commits", "bot-token", map[string]any{"branch": "x"}, 400, []string{`"commit_message is missing, actions is missing"`}},
		{"commit create existing", "POST", proj + "/repository/commits", "bot-token", map[string]any{"branch": "feat/x.y", "commit_message": "m",
			"actions": []map[string]any{{"action": "create", "file_path": "bindings/a.yaml", "content": "x"}}}, 400, []string{`"A file with this name already exists"`}},
		{"commit update missing", "POST", proj + "/repository/commits", "bot-token", map[string]any{"branch": "feat/x.y", "commit_message": "m",
			"actions": []map[string]any{{"action": "update", "file_path": "nope", "content": "x"}}}, 400, []string{`"A file with this name doesn't exist"`}},
		{"commit on a directory", "POST", proj + "/repository/commits", "bot-token", map[string]any{"branch": "feat/x.y", "commit_message": "m",
			"actions": []map[string]any{{"action": "create", "file_path": "bindings", "content": "x"}}}, 400, []string{`"A directory with this name already exists"`}},
		{"commit stale last_commit_id", "POST", proj + "/repository/commits", "bot-token", map[string]any{"branch": "feat/x.y", "commit_message": "m",
			"actions": []map[string]any{{"action": "update", "file_path": "bindings/a.yaml", "content": "x", "last_commit_id": "0000000"}}}, 400, []string{`"The file has changed since you started editing it: bindings/a.yaml"`}},
		{"commit without branch", "POST", proj + "/repository/commits", "bot-token", map[string]any{"branch": "nobranch", "commit_message": "m",
			"actions": []map[string]any{{"action": "create", "file_path": "f", "content": "x"}}}, 400, []string{`"You can only create or edit files when you are on a branch"`}},
		{"commit bad action", "POST", proj + "/repository/commits", "bot-token", map[string]any{"branch": "feat/x.y", "commit_message": "m",
			"actions": []map[string]any{{"action": "explode", "file_path": "f"}}}, 400, []string{`"actions[0][action] does not have a valid value"`}},
		{"commit start exclusive", "POST", proj + "/repository/commits", "bot-token", map[string]any{"branch": "n2", "commit_message": "m", "start_branch": "main", "start_sha": head,
			"actions": []map[string]any{{"action": "create", "file_path": "f", "content": "x"}}}, 400, []string{`mutually exclusive`}},
		{"commit from start_sha", "POST", proj + "/repository/commits", "bot-token", map[string]any{"branch": "from-sha", "commit_message": "m", "start_sha": head,
			"actions": []map[string]any{{"action": "create", "file_path": "g", "content": "x"}}}, 201, []string{`"parent_ids":["` + head + `"]`, `"stats":{`}},
		{"commit by form", "POST", proj + "/repository/commits", "bot-token",
			"branch=form-commit&start_branch=main&commit_message=m&actions[][action]=create&actions[][file_path]=f1&actions[][content]=a&actions[][action]=create&actions[][file_path]=f2&actions[][content]=b",
			201, []string{`"stats":{"additions":2`}},
		{"duplicate open MR", "POST", proj + "/merge_requests", "bot-token", map[string]any{"source_branch": "feat/x.y", "target_branch": "main", "title": "again"},
			409, []string{`{"message":["Another open merge request already exists for this source branch: !1"]}`}},
		{"MR onto itself", "POST", proj + "/merge_requests", "bot-token", map[string]any{"source_branch": "main", "target_branch": "main", "title": "x"}, 422, []string{`"message":[`}},
		{"MR missing params", "POST", proj + "/merge_requests", "bot-token", map[string]any{"title": "x"}, 400, []string{`source_branch is missing, target_branch is missing`}},
		{"rebase flag only when asked", "GET", proj + "/merge_requests/1?include_rebase_in_progress=true", "bot-token", nil, 200, []string{`"rebase_in_progress":false`}},
		{"approve at stale sha", "POST", proj + "/merge_requests/1/approve", "rev1-token", map[string]any{"sha": "deadbeef"}, 409, []string{`"SHA does not match HEAD of source branch: ` + head + `"`}},
		{"author cannot approve", "POST", proj + "/merge_requests/1/approve", "bot-token", nil, 401, []string{`"401 Unauthorized"`}},
		{"unapprove never approved", "POST", proj + "/merge_requests/1/unapprove", "rev2-token", nil, 404, nil},
		{"merge unapproved", "PUT", proj + "/merge_requests/1/merge", "bot-token", nil, 405, []string{`"405 Method Not Allowed"`}},
		{"update with nothing", "PUT", proj + "/merge_requests/1", "bot-token", map[string]any{}, 400, []string{`at least one parameter must be provided`}},
		{"update bad state_event", "PUT", proj + "/merge_requests/1", "bot-token", map[string]any{"state_event": "explode"}, 400, []string{`"state_event does not have a valid value"`}},
		{"pipeline by id", "GET", proj + "/pipelines/1", "bot-token", nil, 200, []string{`"status":"success"`, `"detailed_status":{`}},
		{"unknown pipeline", "GET", proj + "/pipelines/999", "bot-token", nil, 404, nil},
		{"checklist", "GET", proj + "/approval_checklist", "bot-token", nil, 200, []string{`[]`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := e.call(t, tc.method, tc.path, tc.token, tc.body)
			if a.status != tc.status {
				t.Fatalf("%s %s: %d %s, want %d", tc.method, tc.path, a.status, a.body, tc.status)
			}
			for _, want := range tc.contains {
				if !strings.Contains(a.body, want) {
					t.Errorf("body %s lacks %s", a.body, want)
				}
			}
			raw := strings.Contains(tc.path, "/raw") && a.status == 200 // a raw file is text
			if a.status != 204 && a.status != 304 && !raw && !strings.HasPrefix(a.header.Get("Content-Type"), "application/json") {
				t.Errorf("Content-Type %q", a.header.Get("Content-Type"))
			}
			if a.header.Get("RateLimit-Limit") != "" {
				t.Error("a small RateLimit-Limit would make client-go throttle itself")
			}
		})
	}
	// rebase_in_progress appears only when asked for.
	if a := e.call(t, "GET", proj+"/merge_requests/1", "bot-token", nil); strings.Contains(a.body, "rebase_in_progress") {
		t.Fatal("rebase_in_progress without include_rebase_in_progress")
	}
}

func TestUserWithoutRightsIsRefused(t *testing.T) {
	e := newEnv(t, "", nil)
	e.prepare(t)
	e.sims.GitLab.AddUser(sim.User{Username: "guest", Token: "guest-token"})
	for _, tc := range []struct {
		method, path string
		body         any
		status       int
		contains     string
	}{
		{"POST", proj + "/repository/branches", map[string]any{"branch": "g", "ref": "main"}, 403, "403 Forbidden"},
		{"POST", proj + "/repository/commits", map[string]any{"branch": "g", "start_branch": "main", "commit_message": "m", "actions": []map[string]any{{"action": "create", "file_path": "f", "content": "x"}}}, 403, "403 Forbidden"},
		{"PUT", proj + "/merge_requests/1/merge", nil, 401, "401 Unauthorized"},
		{"PUT", proj + "/merge_requests/1/rebase", nil, 403, "Cannot push to source branch"},
	} {
		if a := e.call(t, tc.method, tc.path, "guest-token", tc.body); a.status != tc.status || !strings.Contains(a.body, tc.contains) {
			t.Errorf("%s %s: %d %s", tc.method, tc.path, a.status, a.body)
		}
	}
}

func TestRepeatApproveAnswers401Or304(t *testing.T) {
	e := newEnv(t, "", nil)
	e.prepare(t)
	approve := func() answer { return e.call(t, "POST", proj+"/merge_requests/1/approve", "rev1-token", nil) }
	if a := approve(); a.status != 201 || !strings.Contains(a.body, `"approved_by":[{"user":{"id":2,"username":"reviewer-1"`) {
		t.Fatalf("first approve: %d %s", a.status, a.body)
	}
	if a := approve(); a.status != 401 || a.body != "{\"message\":\"401 Unauthorized\"}\n" {
		t.Fatalf("repeat on older GitLab: %d %q", a.status, a.body)
	}
	f := e.sims.GitLab.Faults()
	f.RepeatApprove = 304
	e.sims.GitLab.SetFaults(f)
	if a := approve(); a.status != 304 || a.body != "" {
		t.Fatalf("repeat on newer GitLab: %d %q", a.status, a.body)
	}
	if a := e.call(t, "POST", proj+"/merge_requests/1/unapprove", "rev2-token", nil); a.status != 304 {
		t.Fatalf("unapprove never approved, newer GitLab: %d", a.status)
	}
	if a := e.call(t, "POST", proj+"/merge_requests/1/unapprove", "rev1-token", nil); a.status != 201 {
		t.Fatalf("unapprove: %d", a.status)
	}
	// user_has_approved is about the caller.
	a := e.call(t, "POST", proj+"/merge_requests/1/approve", "rev2-token", nil)
	if m := a.json(t); m["user_has_approved"] != true || m["approvals_left"] != float64(1) {
		t.Fatalf("approval state %s", a.body)
	}
	if m := e.call(t, "GET", proj+"/merge_requests/1/approvals", "rev1-token", nil).json(t); m["user_has_approved"] != false {
		t.Fatalf("reviewer-1 sees %v", m["user_has_approved"])
	}
}

func TestChecklistRequiredAnswers422WithTheCurrentList(t *testing.T) {
	e := newEnv(t, strings.Replace(simConfig, "rebaseDuration: 0s", "rebaseDuration: 0s\n    checklist: [Security review done]", 1), nil)
	e.prepare(t)
	a := e.call(t, "POST", proj+"/merge_requests/1/approve", "rev1-token", nil)
	if a.status != 422 || !strings.Contains(a.body, `"checklist":[{"id":"security-review-done","title":"Security review done"}]`) {
		t.Fatalf("approve without checklist: %d %s", a.status, a.body)
	}
	a = e.call(t, "POST", proj+"/merge_requests/1/approve", "rev1-token", map[string]any{"checklist": []map[string]any{{"id": "security-review-done", "checked": true}}})
	if a.status != 201 {
		t.Fatalf("approve with checklist: %d %s", a.status, a.body)
	}
	// The checklist is config: an edit (hot reload) is a change the client must heal from.
	e.src.Replace(config.MustParse(strings.Replace(simConfig, "rebaseDuration: 0s", "rebaseDuration: 0s\n    checklist: [Security review done, Rollback plan]", 1)))
	a = e.call(t, "POST", proj+"/merge_requests/1/approve", "rev2-token", map[string]any{"checklist": []map[string]any{{"id": "security-review-done", "checked": true}}})
	if a.status != 422 || !strings.Contains(a.body, `"rollback-plan"`) {
		t.Fatalf("approve with the old checklist: %d %s", a.status, a.body)
	}
}

func TestMergeFlowAndMergeRefusals(t *testing.T) {
	e := newEnv(t, "", nil)
	e.prepare(t)
	for _, tok := range []string{"rev1-token", "rev2-token"} {
		e.call(t, "POST", proj+"/merge_requests/1/approve", tok, nil)
	}
	if a := e.call(t, "PUT", proj+"/merge_requests/1/merge", "bot-token", map[string]any{"sha": "abc"}); a.status != 409 || !strings.Contains(a.body, "SHA does not match HEAD of source branch: ") {
		t.Fatalf("stale sha: %d %s", a.status, a.body)
	}
	e.sims.GitLab.Inject("merge", sim.FaultStatus(422, "Branch cannot be merged"), 1)
	if a := e.call(t, "PUT", proj+"/merge_requests/1/merge", "bot-token", nil); a.status != 422 || !strings.Contains(a.body, "Branch cannot be merged") {
		t.Fatalf("injected merge failure: %d %s", a.status, a.body)
	}
	a := e.call(t, "PUT", proj+"/merge_requests/1/merge", "bot-token", map[string]any{"should_remove_source_branch": true})
	m := a.json(t)
	if a.status != 200 || m["state"] != "merged" || m["merge_commit_sha"] == nil {
		t.Fatalf("merge: %d %s", a.status, a.body)
	}
	if a := e.call(t, "GET", proj+"/repository/branches/feat%2Fx%2Ey", "bot-token", nil); a.status != 404 {
		t.Fatalf("source branch after merge with removal: %d", a.status)
	}
	if a := e.call(t, "PUT", proj+"/merge_requests/1/merge", "bot-token", nil); a.status != 405 {
		t.Fatalf("merge a merged MR: %d", a.status)
	}
	// Closing a merged MR is a silent 200 that leaves it merged.
	if a := e.call(t, "PUT", proj+"/merge_requests/1", "bot-token", map[string]any{"state_event": "close"}); a.status != 200 || a.json(t)["state"] != "merged" {
		t.Fatalf("close merged: %d %s", a.status, a.body)
	}
	if a := e.call(t, "PUT", proj+"/merge_requests/1/rebase", "bot-token", nil); a.status != 403 || !strings.Contains(a.body, "Source branch does not exist") {
		t.Fatalf("rebase merged: %d %s", a.status, a.body)
	}
}

// A merge git cannot do is refused with the status of the GitLab version simulated.
func TestMergeWithConflictsIsRefusedPerVersionAndRebaseFails(t *testing.T) {
	e := newEnv(t, "", nil)
	e.prepare(t)
	for _, tok := range []string{"rev1-token", "rev2-token"} {
		e.call(t, "POST", proj+"/merge_requests/1/approve", tok, nil)
	}
	if _, err := e.sims.GitLab.PushToBranch("grp/sub.proj", "main", "bindings/a.yaml", "theirs\n"); err != nil {
		t.Fatal(err)
	}
	e.call(t, "GET", proj+"/merge_requests/1", "bot-token", nil) // "checking"
	m := e.call(t, "GET", proj+"/merge_requests/1", "bot-token", nil).json(t)
	if m["detailed_merge_status"] != "conflict" || m["has_conflicts"] != true || m["merge_status"] != "cannot_be_merged" {
		t.Fatalf("conflicting MR: %v %v %v", m["detailed_merge_status"], m["has_conflicts"], m["merge_status"])
	}
	for _, v := range []struct {
		version string
		status  int
	}{{"17", 422}, {"16", 405}, {"15", 406}, {"15.5", 406}} {
		f := e.sims.GitLab.Faults()
		f.Version = v.version
		e.sims.GitLab.SetFaults(f)
		if a := e.call(t, "PUT", proj+"/merge_requests/1/merge", "bot-token", nil); a.status != v.status {
			t.Fatalf("merge with conflicts on GitLab %s: %d, want %d", v.version, a.status, v.status)
		}
	}
	e.sims.GitLab.ResetFaults()
	if a := e.call(t, "PUT", proj+"/merge_requests/1/rebase", "bot-token", nil); a.status != 202 || a.body != "{\"rebase_in_progress\":true}\n" {
		t.Fatalf("rebase: %d %s", a.status, a.body)
	}
	m = e.call(t, "GET", proj+"/merge_requests/1?include_rebase_in_progress=true", "bot-token", nil).json(t)
	if m["rebase_in_progress"] != false || m["merge_error"] != "Rebase failed. Please rebase locally" {
		t.Fatalf("after a conflicting rebase: %v %v", m["rebase_in_progress"], m["merge_error"])
	}
}

func TestPipelineListIsPaginatedLikeGitLab(t *testing.T) {
	e := newEnv(t, "", nil)
	e.prepare(t)
	for range 4 {
		e.call(t, "POST", proj+"/merge_requests/1/pipelines", "bot-token", nil)
	}
	a := e.call(t, "GET", proj+"/merge_requests/1/pipelines?per_page=2&page=2", "bot-token", nil)
	h := a.header
	if a.status != 200 || h.Get("X-Page") != "2" || h.Get("X-Per-Page") != "2" || h.Get("X-Total") != "5" ||
		h.Get("X-Total-Pages") != "3" || h.Get("X-Next-Page") != "3" || h.Get("X-Prev-Page") != "1" {
		t.Fatalf("headers %v", h)
	}
	for _, rel := range []string{`rel="prev"`, `rel="next"`, `rel="first"`, `rel="last"`, "grp%2Fsub%2Eproj"} {
		if !strings.Contains(h.Get("Link"), rel) {
			t.Errorf("Link %q lacks %s", h.Get("Link"), rel)
		}
	}
	var page []map[string]any
	json.Unmarshal([]byte(a.body), &page)
	if len(page) != 2 || page[0]["id"].(float64) != 3 || page[0]["source"] != "merge_request_event" || page[0]["ref"] != "refs/merge-requests/1/head" {
		t.Fatalf("page %s", a.body)
	}
	last := e.call(t, "GET", proj+"/merge_requests/1/pipelines?per_page=2&page=3", "bot-token", nil)
	if v, ok := last.header["X-Next-Page"]; !ok || v[0] != "" {
		t.Fatalf("X-Next-Page on the last page: %v %v", v, ok)
	}
}

func TestWebhooksCarryGitLabsHeadersAndPayloads(t *testing.T) {
	e := newEnv(t, "", nil)
	e.prepare(t)
	e.call(t, "PUT", proj+"/merge_requests/1", "bot-token", map[string]any{"state_event": "close"})
	reqs, bodies := waitHooks(t, e, 3) // open, pipeline success (a 0s pipeline), close
	var kinds []string
	for i, r := range reqs {
		for _, h := range []string{"X-Gitlab-Event-UUID", "X-Gitlab-Webhook-UUID", "X-Gitlab-Instance", "Idempotency-Key"} {
			if r.Header.Get(h) == "" {
				t.Errorf("hook %d lacks %s", i, h)
			}
		}
		if r.Header.Get("X-Gitlab-Token") != "hook-secret" || !strings.HasPrefix(r.Header.Get("User-Agent"), "GitLab/") || r.URL.Path != "/hooks/gitlab" {
			t.Errorf("hook %d headers %v path %s", i, r.Header, r.URL.Path)
		}
		var m map[string]any
		json.Unmarshal(bodies[i], &m)
		attrs := m["object_attributes"].(map[string]any)
		switch r.Header.Get("X-Gitlab-Event") {
		case "Merge Request Hook":
			kinds = append(kinds, "mr:"+attrs["action"].(string))
			if m["object_kind"] != "merge_request" || attrs["iid"] != float64(1) || attrs["detailed_merge_status"] == nil {
				t.Errorf("MR hook %s", bodies[i])
			}
		case "Pipeline Hook":
			kinds = append(kinds, "pipeline:"+attrs["status"].(string))
			if m["object_kind"] != "pipeline" || !strings.HasSuffix(attrs["created_at"].(string), " UTC") || m["merge_request"] == nil {
				t.Errorf("pipeline hook %s", bodies[i])
			}
		}
	}
	got := strings.Join(kinds, ",")
	if !strings.HasPrefix(got, "mr:open,") || !strings.Contains(got, "pipeline:success") || !strings.Contains(got, "mr:close") {
		t.Fatalf("hooks %s", got)
	}
}

func waitHooks(t *testing.T, e *env, n int) ([]*http.Request, [][]byte) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if reqs, bodies := e.hook.requests(); len(reqs) >= n {
			return reqs, bodies
		}
		time.Sleep(10 * time.Millisecond)
	}
	reqs, _ := e.hook.requests()
	t.Fatalf("%d hooks, want %d", len(reqs), n)
	return nil, nil
}

func TestFailingReceiverDisablesTheHookAfterFourFailures(t *testing.T) {
	e := newEnv(t, "", nil)
	e.hook.setStatus(500)
	e.prepare(t) // open + pipeline success: 2 events
	for range 3 {
		e.call(t, "POST", proj+"/merge_requests/1/pipelines", "bot-token", nil) // one event each
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.sims.GitLab.Hooks().Failed+e.sims.GitLab.Hooks().Skipped < 5 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	st := e.sims.GitLab.Hooks()
	if st.Failed != 4 || st.Skipped != 1 || !st.Disabled || st.Permanent {
		t.Fatalf("stats %+v", st)
	}
}

func TestRedeliveryKeepsTheIdempotencyKey(t *testing.T) {
	e := newEnv(t, strings.Replace(simConfig, "rebaseDuration: 0s", "rebaseDuration: 0s\n    hookRedeliver: true", 1), nil)
	e.hook.setStatus(503)
	e.prepare(t)
	reqs, _ := waitHooks(t, e, 2)
	if reqs[0].Header.Get("Idempotency-Key") != reqs[1].Header.Get("Idempotency-Key") ||
		reqs[0].Header.Get("X-Gitlab-Event-UUID") != reqs[1].Header.Get("X-Gitlab-Event-UUID") {
		t.Fatal("a redelivery must repeat the Idempotency-Key and the event UUID")
	}
}

func TestWebURLsOpenAPage(t *testing.T) {
	e := newEnv(t, "", nil)
	e.prepare(t)
	m := e.call(t, "GET", proj+"/merge_requests/1", "bot-token", nil).json(t)
	for _, u := range []string{m["web_url"].(string), m["head_pipeline"].(map[string]any)["web_url"].(string)} {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(string(body), "simulated GitLab") {
			t.Fatalf("GET %s: %d %s", u, resp.StatusCode, body)
		}
		// Its own content policy allows its one inline stylesheet by hash, and nothing else.
		_, style, _ := strings.Cut(string(body), "<style>")
		style, _, _ = strings.Cut(style, "</style>")
		sum := sha256.Sum256([]byte(style))
		policy := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(policy, "default-src 'none'") || !strings.Contains(policy, "'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'") || strings.Contains(policy, "unsafe") {
			t.Fatalf("GET %s: policy %q does not allow exactly its stylesheet", u, policy)
		}
	}
	if resp, _ := http.Get(e.url + "/sim/gitlab/grp/sub.proj/-/merge_requests/99"); resp.StatusCode != 404 {
		t.Fatalf("unknown MR page: %d", resp.StatusCode)
	}
}

// The benchmarks read the simulator's usage: every call counted by endpoint (refused ones too),
// and the merge requests and pipelines that exist.
func TestUsageCountsCallsMergeRequestsAndPipelines(t *testing.T) {
	e := newEnv(t, "", nil)
	before := e.sims.GitLab.Usage()
	if before.TotalCalls() != 0 || before.MergeRequests != 0 || before.Pipelines != 0 {
		t.Fatalf("fresh simulator: %+v", before)
	}
	e.prepare(t) // a commit, then an MR from its branch (which starts a pipeline)
	e.call(t, "GET", proj+"/merge_requests/1", "", nil)
	e.call(t, "GET", proj+"/merge_requests/1", "bot-token", nil)
	u := e.sims.GitLab.Usage()
	if u.Calls["create_commit"] != 1 || u.Calls["create_mr"] != 1 || u.Calls["get_mr"] != 2 || u.TotalCalls() != 4 {
		t.Fatalf("calls: %v (total %d)", u.Calls, u.TotalCalls())
	}
	if u.MergeRequests != 1 || u.Pipelines != 1 {
		t.Fatalf("merge requests %d, pipelines %d; want 1 and 1", u.MergeRequests, u.Pipelines)
	}
	u.Calls["get_mr"] = 100 // a copy: the simulator's counts are not the caller's to change
	if e.sims.GitLab.Calls("get_mr") != 2 {
		t.Fatal("Usage returned the simulator's own map")
	}
}

// headPipelineStatus reads the status of MR 1's head pipeline.
func (e *env) headPipelineStatus(t *testing.T) string {
	t.Helper()
	m := e.call(t, "GET", proj+"/merge_requests/1", "bot-token", nil).json(t)
	hp, _ := m["head_pipeline"].(map[string]any)
	if hp == nil {
		t.Fatalf("no head pipeline: %v", m)
	}
	return hp["status"].(string)
}

// A change whose file carries a configured text fails its pipeline every time (a bad change);
// the same MR regenerated without that file passes. FailNextPipelines is a flaky run instead:
// the retry of the same commit passes.
func TestPipelinesFailOnABadChangeOrWhenToldToFailOnce(t *testing.T) {
	cfg := strings.Replace(simConfig, "    rebaseDuration: 0s\n", "    rebaseDuration: 0s\n    pipelineFailOn: [\"poison\"]\n", 1)
	e := newEnv(t, cfg, nil)
	commit := func(files map[string]string) {
		t.Helper()
		var actions []map[string]any
		for p, c := range files {
			actions = append(actions, map[string]any{"action": "create", "file_path": p, "content": c})
		}
		if a := e.call(t, "POST", proj+"/repository/commits", "bot-token", map[string]any{
			"branch": "feat/x.y", "start_branch": "main", "force": true, "commit_message": "batch", "actions": actions,
		}); a.status != 201 {
			t.Fatalf("commit: %d %s", a.status, a.body)
		}
	}
	commit(map[string]string{"bindings/a.yaml": "operationId: op-a\n", "bindings/b.yaml": "operationId: op-b\nreason: poison\n"})
	if a := e.call(t, "POST", proj+"/merge_requests", "bot-token", map[string]any{"source_branch": "feat/x.y", "target_branch": "main", "title": "T"}); a.status != 201 {
		t.Fatalf("mr: %d %s", a.status, a.body)
	}
	// rerun starts a new pipeline for the MR's head and checks how it ends.
	rerun := func(want, what string) {
		t.Helper()
		if a := e.call(t, "POST", proj+"/merge_requests/1/pipelines", "bot-token", nil); a.status != 200 {
			t.Fatalf("new pipeline: %d %s", a.status, a.body)
		}
		if st := e.headPipelineStatus(t); st != want {
			t.Fatalf("%s: %s, want %s", what, st, want)
		}
	}
	if st := e.headPipelineStatus(t); st != "failed" {
		t.Fatalf("pipeline of a commit with the bad file: %s, want failed", st)
	}
	rerun("failed", "retried pipeline of the bad change")
	commit(map[string]string{"bindings/a.yaml": "operationId: op-a\n"}) // regenerated without it
	if st := e.headPipelineStatus(t); st != "success" {
		t.Fatalf("pipeline without the bad file: %s, want success", st)
	}

	e.sims.GitLab.FailNextPipelines(1)
	rerun("failed", "pipeline told to fail")
	rerun("success", "the retry after a flaky failure")
}

// A pipeline's job list answers like GitLab's: scope filters by status (scope[] several, an
// unknown status is a 400), retried runs only with include_retried, offset pagination, and each
// job's web_url opens a page.
func TestPipelineJobsAreListedByScopeLikeGitLab(t *testing.T) {
	e := newEnv(t, "", nil)
	e.prepare(t) // pipeline 1 passes
	e.sims.GitLab.FailNextPipelines(2)
	if a := e.call(t, "POST", proj+"/merge_requests/1/pipelines", "bot-token", nil); a.status != 200 {
		t.Fatalf("new pipeline: %d %s", a.status, a.body)
	}
	jobs := func(query string) (answer, []map[string]any) {
		t.Helper()
		a := e.call(t, "GET", proj+"/pipelines/2/jobs"+query, "bot-token", nil)
		var list []map[string]any
		if a.status == 200 {
			if err := json.Unmarshal([]byte(a.body), &list); err != nil {
				t.Fatalf("%s: %v", a.body, err)
			}
		}
		return a, list
	}
	a, failed := jobs("?scope[]=failed")
	if a.status != 200 || len(failed) != 1 || a.header.Get("X-Total") != "1" {
		t.Fatalf("failed jobs: %d %s", a.status, a.body)
	}
	j := failed[0]
	pl, _ := j["pipeline"].(map[string]any)
	url, _ := j["web_url"].(string)
	if j["name"] != "test" || j["stage"] != "test" || j["status"] != "failed" || j["failure_reason"] != "script_failure" ||
		pl["id"] != float64(2) || !strings.HasSuffix(url, "/grp/sub.proj/-/jobs/"+strconv.Itoa(int(j["id"].(float64)))) {
		t.Fatalf("failed job: %s", a.body)
	}
	if _, list := jobs("?scope[]=success&scope[]=running"); len(list) != 0 {
		t.Fatalf("success or running jobs of a failed pipeline: %v", list)
	}
	if a, _ := jobs("?scope=bogus"); a.status != 400 || !strings.Contains(a.body, "scope does not have a valid value") {
		t.Fatalf("unknown scope: %d %s", a.status, a.body)
	}
	if a := e.call(t, "GET", proj+"/pipelines/99/jobs", "bot-token", nil); a.status != 404 {
		t.Fatalf("jobs of an unknown pipeline: %d %s", a.status, a.body)
	}
	if page := send(t, mustRequest(t, "GET", url)); page.status != 200 || !strings.Contains(page.body, "Job #") {
		t.Fatalf("job page %s: %d %s", url, page.status, page.body)
	}

	// A retry runs the failed job again under a new id; the first run is a retried one.
	if a := e.call(t, "POST", proj+"/pipelines/2/retry", "bot-token", nil); a.status != 201 {
		t.Fatalf("retry: %d %s", a.status, a.body)
	}
	if _, list := jobs(""); len(list) != 1 || list[0]["id"] == j["id"] {
		t.Fatalf("jobs after a retry: %v", list)
	}
	a, all := jobs("?include_retried=true&scope[]=failed&per_page=1")
	if a.header.Get("X-Total") != "2" || a.header.Get("X-Next-Page") != "2" || len(all) != 1 {
		t.Fatalf("failed runs with the retried one, page 1: %v %s", a.header, a.body)
	}
	if _, second := jobs("?include_retried=true&scope[]=failed&per_page=1&page=2"); len(second) != 1 || second[0]["id"] != j["id"] {
		t.Fatalf("page 2 is the first run: %v", second)
	}
}
