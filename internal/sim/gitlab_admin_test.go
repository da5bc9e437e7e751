package sim_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"bindery/internal/platform/config"
	"bindery/internal/sim"
)

// The calls of docs/install.md's GitLab steps that make the accounts members: an account found
// by its username, added to the project with a role (once: a second time is 409, as in GitLab),
// its role read back; a Developer may not add members; the administrator's token works on every
// project.
func TestAnAdministratorFindsTheAccountsAndMakesThemMembers(t *testing.T) {
	sims := sim.New(sim.Options{Config: config.NewStatic(config.MustParse(simConfig)), AdminToken: "admin-token"})
	srv := httptest.NewServer(sims.Handler())
	defer srv.Close()
	api := srv.URL + "/sim/gitlab/api/v4"
	call := func(token, method, path string, form url.Values) (int, string) {
		t.Helper()
		return formCall(t, srv, token, method, api+path, form.Encode())
	}
	code, body := call("admin-token", "GET", "/users?username="+sim.ReviewerUsername(0), nil)
	var users []struct {
		ID       int64  `json:"id"`
		Username string `json:"username"`
	}
	if err := json.Unmarshal([]byte(body), &users); code != 200 || err != nil || len(users) != 1 || users[0].Username != "reviewer-1" {
		t.Fatalf("GET /users?username=reviewer-1: %d %s", code, body)
	}
	if code, body := call("admin-token", "GET", "/users?username=nobody", nil); code != 200 || strings.TrimSpace(body) != "[]" {
		t.Fatalf("an unknown username: %d %s, want 200 []", code, body)
	}
	project := "/projects/grp%2Fsub.proj/members"
	member := url.Values{"user_id": {jsonInt(users[0].ID)}, "access_level": {"30"}}
	if code, body := call("admin-token", "POST", project, member); code != 201 || !strings.Contains(body, `"access_level":30`) {
		t.Fatalf("add a member: %d %s", code, body)
	}
	if code, _ := call("admin-token", "POST", project, member); code != 409 {
		t.Fatalf("add the same member again: %d, want 409", code)
	}
	if code, body := call("admin-token", "GET", project+"/all/"+jsonInt(users[0].ID), nil); code != 200 || !strings.Contains(body, `"access_level":30`) {
		t.Fatalf("the member's role: %d %s", code, body)
	}
	// The reviewer is a Developer now: it may not add members.
	if code, _ := call("rev1-token", "POST", project, url.Values{"user_id": {"1"}, "access_level": {"40"}}); code != 403 {
		t.Fatalf("a Developer adds a member: %d, want 403", code)
	}
	if code, _ := call("admin-token", "POST", project, url.Values{"user_id": {"1"}, "access_level": {"45"}}); code != 400 {
		t.Fatalf("an access level GitLab does not have: %d, want 400", code)
	}
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

// formCall sends a form to the simulated GitLab as token's owner: the status and the body.
func formCall(t *testing.T, srv *httptest.Server, token, method, u, form string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), method, u, strings.NewReader(form))
	req.Header.Set("PRIVATE-TOKEN", token)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A protected branch answers as GitLab's protected branches API does: the role entries with
// their descriptions, a user allowed by id beside them, allow_force_push as set (false unless
// asked; a value that is not a Boolean is Grape's 400), the same in the list and one by one.
func TestAProtectedBranchAnswersWhoMayPushMergeAndForcePush(t *testing.T) {
	sims := sim.New(sim.Options{Config: config.NewStatic(config.MustParse(simConfig)), AdminToken: "admin-token"})
	srv := httptest.NewServer(sims.Handler())
	defer srv.Close()
	protected := srv.URL + "/sim/gitlab/api/v4/projects/grp%2Fsub.proj/protected_branches"
	call := func(method, u, form string) (int, string) {
		t.Helper()
		return formCall(t, srv, "admin-token", method, u, form)
	}
	type access struct {
		AccessLevel int    `json:"access_level"`
		Description string `json:"access_level_description"`
		UserID      *int64 `json:"user_id"`
	}
	type branch struct {
		Name           string   `json:"name"`
		Push           []access `json:"push_access_levels"`
		Merge          []access `json:"merge_access_levels"`
		AllowForcePush *bool    `json:"allow_force_push"`
	}
	read := func(body string) branch {
		t.Helper()
		var b branch
		if err := json.Unmarshal([]byte(body), &b); err != nil || b.AllowForcePush == nil {
			t.Fatalf("a protected branch: %v %s", err, body)
		}
		return b
	}
	call("DELETE", protected+"/main", "")

	// docs/install.md's protection: push No one, merge Maintainers, no force push.
	code, body := call("POST", protected, "name=main&push_access_level=0&merge_access_level=40")
	if b := read(body); code != 201 || *b.AllowForcePush || len(b.Push) != 1 || b.Push[0] != (access{0, "No one", nil}) ||
		len(b.Merge) != 1 || b.Merge[0] != (access{40, "Maintainers", nil}) {
		t.Fatalf("protect main: %d %s", code, body)
	}
	call("DELETE", protected+"/main", "")

	// Merge by the bot alone, force pushes allowed.
	_, body = call("GET", srv.URL+"/sim/gitlab/api/v4/users?username="+sim.BotUsername, "")
	var users []struct {
		ID int64 `json:"id"`
	}
	if err := json.Unmarshal([]byte(body), &users); err != nil || len(users) != 1 {
		t.Fatalf("the bot's account: %s", body)
	}
	bot := users[0].ID
	code, body = call("POST", protected, "name=main&push_access_level=0&merge_access_level=0&allow_force_push=true&allowed_to_merge[][user_id]="+jsonInt(bot))
	b := read(body)
	if code != 201 || !*b.AllowForcePush || len(b.Merge) != 2 || b.Merge[0].AccessLevel != 0 || b.Merge[1].UserID == nil || *b.Merge[1].UserID != bot {
		t.Fatalf("protect main for the bot's merges: %d %s", code, body)
	}
	code, body = call("GET", protected+"/main", "")
	if one := read(body); code != 200 || !*one.AllowForcePush || len(one.Merge) != 2 {
		t.Fatalf("GET the protected branch: %d %s", code, body)
	}
	code, body = call("GET", protected, "")
	var list []branch
	if err := json.Unmarshal([]byte(body), &list); code != 200 || err != nil || len(list) != 1 || list[0].AllowForcePush == nil || !*list[0].AllowForcePush {
		t.Fatalf("the list: %d %s", code, body)
	}
	sims.GitLab.AllowForcePush("grp/sub.proj", "main", false)
	if _, body := call("GET", protected+"/main", ""); *read(body).AllowForcePush {
		t.Fatalf("force pushes turned off: %s", body)
	}

	if code, body := call("POST", protected, "name=release&allow_force_push=maybe"); code != 400 || !strings.Contains(body, `"allow_force_push is invalid"`) {
		t.Fatalf("allow_force_push=maybe: %d %s, want 400", code, body)
	}
}
