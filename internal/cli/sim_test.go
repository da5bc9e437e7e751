package cli

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"bindery/internal/platform/logging/logtest"
)

var simURLRE = regexp.MustCompile(`listening at (http://[0-9.:]+)`)

// startSim runs `bindery sim` in-process and returns its URL and a stop function.
func startSim(t *testing.T, args ...string) (string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &logtest.Buffer{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, append([]string{"sim", "-addr", "127.0.0.1:0"}, args...), out, io.Discard) }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := simURLRE.FindStringSubmatch(out.String()); m != nil {
			return m[1], func() {
				cancel()
				if code := <-done; code != 0 {
					t.Errorf("sim exit %d", code)
				}
			}
		}
		select {
		case code := <-done:
			t.Fatalf("sim exited %d: %s", code, out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("sim printed no URL: %s", out.String())
	return "", nil
}

func fetch(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Private-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestSimCommandServesEverySimulator(t *testing.T) {
	url, stop := startSim(t, "-bindery", "http://127.0.0.1:1")
	defer stop()
	for _, tc := range []struct{ path, token, want string }{
		{"/healthz", "", `"ok"`},
		// Without -config the embedded sample's demo accounts and catalog are in force.
		{"/sim/gitlab/api/v4/user", "demo-bot-token", `"username":"bindery-bot"`},
		{"/sim/gitlab/api/v4/projects/infra%2Faccess-config/repository/branches/main", "demo-reviewer-1-token", `"name":"main"`},
		{"/sim/approvals", "", `{"items":[]}`},
		{"/sim/deploys", "", `{"items":[]}`},
	} {
		if code, body := fetch(t, url+tc.path, tc.token); code != 200 || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s: %d %s", tc.path, code, body)
		}
	}
}

func TestSimCommandFollowsItsConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sim.yaml")
	os.WriteFile(path, []byte("gitlab:\n  botToken: file-token\n  reviewerTokens: [r]\n"), 0o644)
	url, stop := startSim(t, "-config", path)
	defer stop()
	if code, body := fetch(t, url+"/sim/gitlab/api/v4/user", "file-token"); code != 200 {
		t.Fatalf("token from -config: %d %s", code, body)
	}
	os.WriteFile(path, []byte("gitlab:\n  botToken: rotated\n  reviewerTokens: [r]\n"), 0o644)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if code, _ := fetch(t, url+"/sim/gitlab/api/v4/user", "rotated"); code == 200 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("an edit of the sim's config file was not picked up")
}

func TestSimCommandRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"sim", "-bindery", "ftp://x"}, 2, "not an http(s) URL"},
		{[]string{"sim", "-config", "/no/such/file.yaml", "-addr", "127.0.0.1:0"}, 1, "no such file"},
		{[]string{"sim", "-h"}, 0, "-bindery"},
	} {
		out := &logtest.Buffer{}
		if code := run(context.Background(), tc.args, out, out); code != tc.code || !strings.Contains(out.String(), tc.out) {
			t.Errorf("%v: exit %d, want %d; output %s", tc.args, code, tc.code, out.String())
		}
	}
}
