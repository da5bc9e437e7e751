package sim_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"bindery/internal/platform/config"
	"bindery/internal/sim"
)

// startAt runs simulators that keep their state in file, calling back bindery (rec).
func startAt(t *testing.T, file string, rec *receiver, bindery *httptest.Server) (*env, func()) {
	t.Helper()
	src := config.NewStatic(config.MustParse(simConfig))
	sims := sim.New(sim.Options{Config: src, BinderyURL: bindery.URL, StateFile: file})
	srv := httptest.NewServer(sims.Handler())
	sims.Start(context.Background())
	stop := func() { sims.Stop(context.Background()); srv.Close() }
	return &env{sims: sims, url: srv.URL, bindery: bindery.URL, hook: rec, src: src}, stop
}

func TestStateSurvivesARestart(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "sim-state.json")
	rec := &receiver{}
	bindery := httptest.NewServer(rec)
	defer bindery.Close()
	e, stop := startAt(t, file, rec, bindery)
	e.mergeMR(t) // MR !1 merged
	if a := e.call(t, "POST", proj+"/repository/commits", "bot-token", map[string]any{"branch": "second", "start_branch": "main", "commit_message": "m",
		"actions": []map[string]any{{"action": "create", "file_path": "bindings/b.yaml", "content": "operationId: op-b\n"}}}); a.status != 201 {
		t.Fatal(a.body)
	}
	e.call(t, "POST", proj+"/merge_requests", "bot-token", map[string]any{"source_branch": "second", "target_branch": "main", "title": "second"})
	e.sims.Approval.SetFaults(sim.ApprovalFaults{CallbackDelay: time.Hour}) // the decision's callback is still pending at stop
	a := e.raw(t, "POST", "/sim/approval/tickets", `{"operationId":"op-t","subject":"s","targetKey":"t1","callbackUrl":"`+e.bindery+`/hooks/approval"}`)
	id := a.json(t)["ticketId"].(string)
	e.raw(t, "POST", "/sim/approvals/"+id+"/decide", `{"decision":"APPROVED"}`)
	stop()

	rec.mu.Lock()
	rec.got, rec.bodies = nil, nil
	rec.mu.Unlock()
	e2, stop2 := startAt(t, file, rec, bindery)
	defer stop2()
	if m := e2.call(t, "GET", proj+"/merge_requests/1", "bot-token", nil).json(t); m["state"] != "merged" {
		t.Fatalf("MR !1 after restart: %v", m["state"])
	}
	if m := e2.call(t, "GET", proj+"/merge_requests/2", "bot-token", nil).json(t); m["state"] != "opened" || m["source_branch"] != "second" {
		t.Fatalf("MR !2 after restart: %v", m)
	}
	if content, ok := e2.sims.GitLab.File("grp/sub.proj", "main", "bindings/a.yaml"); !ok || content != "operationId: op-a\n" {
		t.Fatalf("merged file after restart: %q %v", content, ok)
	}
	// MR numbers keep growing: deploy callbacks name MRs by number.
	e2.call(t, "POST", proj+"/repository/branches", "bot-token", map[string]any{"branch": "third", "ref": "main"})
	e2.call(t, "POST", proj+"/repository/commits", "bot-token", map[string]any{"branch": "third", "commit_message": "m",
		"actions": []map[string]any{{"action": "create", "file_path": "c.yaml", "content": "x"}}})
	if m := e2.call(t, "POST", proj+"/merge_requests", "bot-token", map[string]any{"source_branch": "third", "target_branch": "main", "title": "3"}).json(t); m["iid"] != float64(3) {
		t.Fatalf("next iid %v, want 3", m["iid"])
	}
	// The decision bindery never heard about is sent after the restart, with its callback id.
	reqs, bodies := waitHooks(t, e2, 1)
	found := false
	for i, r := range reqs {
		if r.URL.Path == "/hooks/approval" && strings.Contains(string(bodies[i]), `"operationId":"op-t"`) {
			found = true
		}
	}
	if !found || len(e2.sims.Approval.Tickets()) != 1 {
		t.Fatalf("undelivered decision not resent (tickets %+v)", e2.sims.Approval.Tickets())
	}
}

func TestUnreadableStateIsSetAsideNotFatal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "sim-state.json")
	os.WriteFile(file, []byte("{not json"), 0o644)
	rec := &receiver{}
	bindery := httptest.NewServer(rec)
	defer bindery.Close()
	e, stop := startAt(t, file, rec, bindery)
	defer stop()
	e.prepare(t)
	matches, _ := filepath.Glob(file + ".broken-*")
	if len(matches) != 1 {
		t.Fatalf("broken state not set aside: %v", matches)
	}
}

// What a maintainer set up survives a restart (the demo restarts keep it): the project's
// webhook, still delivering with its secret token, the branch protection as set (not GitLab's
// default again), the CI/CD variables and the members' roles; a hook added after the restart
// gets a new id.
func TestAMaintainersSetupSurvivesARestart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "sim-state.json")
	rec := &receiver{}
	bindery := httptest.NewServer(rec)
	defer bindery.Close()
	e, stop := startAt(t, file, rec, bindery)
	if a := e.call(t, "POST", proj+"/hooks", "bot-token", map[string]any{"url": bindery.URL + "/hooks/gitlab", "token": "kept-secret",
		"merge_requests_events": true, "pipeline_events": true}); a.status != 201 {
		t.Fatal(a.body)
	}
	e.call(t, "DELETE", proj+"/protected_branches/main", "bot-token", nil)
	if a := e.call(t, "POST", proj+"/protected_branches", "bot-token", map[string]any{"name": "main", "push_access_level": 0, "merge_access_level": 40, "allow_force_push": true}); a.status != 201 {
		t.Fatal(a.body)
	}
	if a := e.call(t, "POST", proj+"/variables", "bot-token", map[string]any{"key": "BINDERY_URL", "value": "https://bindery.example.com"}); a.status != 201 {
		t.Fatal(a.body)
	}
	if a := e.call(t, "POST", proj+"/members", "bot-token", map[string]any{"user_id": 2, "access_level": 30}); a.status != 201 {
		t.Fatal(a.body)
	}
	stop()

	e2, stop2 := startAt(t, file, rec, bindery)
	defer stop2()
	hooks := e2.call(t, "GET", proj+"/hooks", "bot-token", nil)
	if hooks.status != 200 || !strings.Contains(hooks.body, bindery.URL+"/hooks/gitlab") {
		t.Fatalf("hooks after the restart: %d %s", hooks.status, hooks.body)
	}
	if pr := e2.call(t, "GET", proj+"/protected_branches/main", "bot-token", nil); !strings.Contains(pr.body, `"push_access_levels":[{"access_level":0`) || !strings.Contains(pr.body, `"allow_force_push":true`) {
		t.Fatalf("the protection after the restart: %s", pr.body)
	}
	if v := e2.call(t, "GET", proj+"/variables", "bot-token", nil); !strings.Contains(v.body, "https://bindery.example.com") {
		t.Fatalf("variables after the restart: %s", v.body)
	}
	if m := e2.call(t, "GET", proj+"/members/all/2", "bot-token", nil); !strings.Contains(m.body, `"access_level":30`) {
		t.Fatalf("the reviewer's role after the restart: %s", m.body)
	}
	if again := e2.call(t, "POST", proj+"/members", "bot-token", map[string]any{"user_id": 2, "access_level": 30}); again.status != 409 {
		t.Fatalf("the member added before the restart, added again: %d", again.status)
	}
	added := e2.call(t, "POST", proj+"/hooks", "bot-token", map[string]any{"url": bindery.URL + "/other"}).json(t)
	if strings.Count(e2.call(t, "GET", proj+"/hooks", "bot-token", nil).body, fmt.Sprintf(`"id":%v,`, added["id"])) != 1 {
		t.Fatalf("a hook added after the restart reuses the id %v", added["id"])
	}
	// The kept hook still delivers, with its secret token.
	rec.mu.Lock()
	rec.got, rec.bodies = nil, nil
	rec.mu.Unlock()
	e2.mergeMR(t)
	var hook *http.Request
	for deadline := time.Now().Add(10 * time.Second); hook == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		reqs, _ := e2.hook.requests()
		for _, r := range reqs {
			if r.URL.Path == "/hooks/gitlab" {
				hook = r
				break
			}
		}
	}
	if hook == nil || hook.Header.Get("X-Gitlab-Token") != "kept-secret" {
		t.Fatalf("no delivery to the kept hook with its secret token after the restart: %v", hook)
	}
}
