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
		req, _ := http.NewRequestWithContext(context.Background(), method, api+path, strings.NewReader(form.Encode()))
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
