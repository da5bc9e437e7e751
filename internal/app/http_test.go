package app_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"bindery/internal/testkit"
	"bindery/store"
	"bindery/store/storetest"
)

// do calls url as user (the demo's X-Bindery-User; none when user is empty).
func do(t *testing.T, method, url, user, body string) (int, string) {
	t.Helper()
	return send(t, method, url, "X-Bindery-User", user, body)
}

// send calls url with user in header (none when user is empty) and returns the status and body.
func send(t *testing.T, method, url, header, user, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if user != "" {
		req.Header.Set(header, user)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// The booted demo serves the API: identities, the catalog, an application through the wired
// workflow; the ops console only to those the permission service says are operators.
func TestBootedDemoServesTheAPI(t *testing.T) {
	t.Parallel()
	b := boot(t, storetest.SQLiteDSN(t), "apply:\n  mode: OPEN\ntargets:\n  - {key: a, title: A, project: p/q, path: \"x/{subject}.yaml\"}\n")
	if code, body := do(t, "GET", b.URL()+"/api/me", "E1002", ""); code != 200 || !strings.Contains(body, `"identity":"bob@example.com"`) {
		t.Fatalf("me: %d %s", code, body)
	}
	if code, body := do(t, "GET", b.URL()+"/api/targets", "alice", ""); code != 200 || !strings.Contains(body, `"key":"a"`) {
		t.Fatalf("targets: %d %s", code, body)
	}
	if code, body := do(t, "POST", b.URL()+"/api/apply", "alice", `{"operationId":"op-1","targetKey":"a","reason":"r"}`); code != 202 || !strings.Contains(body, `"code":"ACCEPTED"`) {
		t.Fatalf("apply: %d %s", code, body)
	}
	if code, _ := do(t, "GET", b.URL()+"/api/me", "", ""); code != 401 {
		t.Fatalf("anonymous me: %d", code)
	}
	if code, _ := do(t, "GET", b.URL()+"/api/ops/config", "ops", ""); code != 403 {
		t.Fatalf("ops config with no permission rule naming ops: %d, want 403 (fails closed)", code)
	}
}

// docs/api.md, 'Rate limits': two instances on one database each enforce ⌈limit ÷ 2⌉, learnt from
// the heartbeat table in the background.
func TestTwoInstancesShareOneRateLimit(t *testing.T) {
	t.Parallel()
	dsn := storetest.MigratedDSN(t, store.MySQL)
	cfg := "apply:\n  mode: OPEN\nratelimit:\n  apply: 3\ntargets:\n"
	for _, k := range []string{"a", "b", "c"} {
		cfg += "  - {key: " + k + ", title: " + k + ", project: p/q, path: \"" + k + "/{subject}.yaml\"}\n"
	}
	a := boot(t, dsn, cfg)
	b2 := boot(t, dsn, cfg)
	for _, inst := range []*booted{a, b2} {
		testkit.Eventually(t, "both instances to see each other", func() bool {
			_, m := get(t, inst.URL()+"/metrics")
			return strings.Contains(m, "bindery_ratelimit_live_instances 2")
		})
	}
	codes := []int{}
	for i := 0; i < 3; i++ {
		code, _ := do(t, "POST", a.URL()+"/api/apply", "alice", fmt.Sprintf(`{"operationId":"op-%d","targetKey":%q,"reason":"r"}`, i, []string{"a", "b", "c"}[i]))
		codes = append(codes, code)
	}
	// ⌈3 ÷ 2⌉ = 2 pass the limiter (and are accepted); the third is refused.
	if codes[0] != 202 || codes[1] != 202 || codes[2] != 429 {
		t.Fatalf("answers %v, want [202 202 429]", codes)
	}
}
