package notify

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// mailpit is a real SMTP server we did not write (github.com/axllent/mailpit), started for one
// test: its messages and its chaos triggers are its own, so tests never see each other's mail.
// The binary is BINDERY_MAILPIT, or mailpit on PATH or in $GOPATH/bin (.ci/run installs it
// with go install). Without it the test skips — or fails, when BINDERY_REQUIRE_MAILPIT=1.
type mailpit struct {
	smtp string // host:port
	api  string // http://host:port
}

func mailpitBinary() string {
	if p := os.Getenv("BINDERY_MAILPIT"); p != "" {
		return p
	}
	if p, err := exec.LookPath("mailpit"); err == nil {
		return p
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		home, _ := os.UserHomeDir()
		gopath = filepath.Join(home, "go")
	}
	if p := filepath.Join(gopath, "bin", "mailpit"); fileExists(p) {
		return p
	}
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startMailpit runs a private mailpit with chaos enabled and any login accepted.
func startMailpit(t *testing.T, extra ...string) *mailpit {
	t.Helper()
	bin := mailpitBinary()
	if bin == "" {
		if os.Getenv("BINDERY_REQUIRE_MAILPIT") == "1" {
			t.Fatal("mailpit is required (BINDERY_REQUIRE_MAILPIT=1) but not installed: go install github.com/axllent/mailpit@v1.33.1")
		}
		t.Skip("mailpit not installed (go install github.com/axllent/mailpit@v1.33.1); BINDERY_REQUIRE_MAILPIT=1 makes this a failure")
	}
	m := &mailpit{smtp: freeAddr(t), api: "http://" + freeAddr(t)}
	args := append([]string{"--smtp", m.smtp, "--listen", strings.TrimPrefix(m.api, "http://"), "--database", filepath.Join(t.TempDir(), "mailpit.db"),
		"--quiet", "--disable-version-check", "--smtp-disable-rdns", "--enable-chaos", "--smtp-auth-accept-any", "--smtp-auth-allow-insecure"}, extra...)
	cmd := exec.Command(bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start mailpit: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(m.api + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("mailpit did not start: %v\n%s", err, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return m
}

// mailMessage is a message as mailpit's API reads it back.
type mailMessage struct {
	ID        string
	MessageID string
	Subject   string
	To        []struct{ Address string }
	Text      string
	HTML      string
	Headers   map[string][]string
}

func (m *mailpit) get(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := http.Get(m.api + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// messages reads every message mailpit holds, whole, oldest first.
func (m *mailpit) messages(t *testing.T) []mailMessage {
	t.Helper()
	var list struct{ Messages []struct{ ID string } }
	m.get(t, "/api/v1/messages?limit=500", &list)
	out := make([]mailMessage, 0, len(list.Messages))
	for i := len(list.Messages) - 1; i >= 0; i-- {
		var msg mailMessage
		m.get(t, "/api/v1/message/"+list.Messages[i].ID, &msg)
		m.get(t, "/api/v1/message/"+list.Messages[i].ID+"/headers", &msg.Headers)
		out = append(out, msg)
	}
	return out
}

// chaos sets mailpit's recipient trigger: every RCPT answered code (0: off).
func (m *mailpit) chaos(t *testing.T, code int) {
	t.Helper()
	p := 0
	if code != 0 {
		p = 100
	}
	body := fmt.Sprintf(`{"Recipient": {"ErrorCode": %d, "Probability": %d}}`, max(code, 451), p)
	req, _ := http.NewRequest(http.MethodPut, m.api+"/api/v1/chaos", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("chaos: %v %v", resp, err)
	}
	resp.Body.Close()
}

// emailConfig sends email through smtp without STARTTLS (mailpit offers none without a
// certificate), as bindery@example.com.
func emailConfig(smtp string, extra string) string {
	return fmt.Sprintf("notify:\n  timeout: 2s\n  email: {smtp: %q, from: \"bindery <bindery@example.com>\", starttls: none%s}\n", smtp, extra)
}
