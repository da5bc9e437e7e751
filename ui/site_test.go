package ui_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"

	"bindery/api"
	"bindery/internal/app"
	"bindery/internal/platform/config"
	"bindery/internal/platform/logging/logtest"
	"bindery/internal/sim"
	"bindery/internal/testkit"
	"bindery/schema"
	"bindery/ui"
)

// The browser tests' site is the real product as `bindery demo` runs it: the server's handlers,
// the workflow, the engine and the batch service over a SQLite database of its own, the GitLab,
// approval and deploy simulators mounted under /sim/, the demo users (alice, bob, ops). Nothing
// is faked: a test reaches the state it shows the way a person or a remote system would — it
// applies through the API, decides in the approval simulator's inbox, runs a batch round as an
// operator, makes the simulated GitLab hold or fail a pipeline or block a merge — and waits for
// bindery to get there (testkit.Eventually), never for a time.
//
// The ui tests are an external package (ui_test), so they can import internal/app without a
// cycle: app imports ui only through the embedded files the test hands it.

// setting is one configuration key of a site, in dotted form ("sim.gitlab.pipelineDuration"),
// with its value as YAML would read it.
type setting struct {
	key   string
	value any
}

func set(key string, value any) setting { return setting{key, value} }

// siteDefaults speed the sample configuration up for tests and make its batch rounds the
// test's to run (s.round, as an operator does from the console): a request stays in the waiting
// set until a test moves it, so what a page shows does not depend on how soon a loaded machine
// runs the cron. The simulators' durations are the sample's, 20 times faster.
var siteDefaults = []setting{
	set("sim.timeScale", 20),
	set("poll.short", "100ms"),
	set("cron.rounds", "@every 24h"),
	set("cron.reconcile", "@every 24h"),
	set("ratelimit.apply", 1000),
	set("ratelimit.revoke", 1000),
	// A page's reads and an operator's round get the test kit's room, not production's 5 s: the
	// ui tests run beside the other packages under -race on two cores, where a request's reads
	// have taken longer than 5 s (a round then failed, a view had no estimate). A test of that
	// deadline sets it itself.
	set("database.requestTimeout", (testkit.Timeout() / 4).String()),
}

// site is one running demo, with a front that records page loads and files a test can make
// disappear (a release removing the previous build's assets).
type site struct {
	URL   string // the front: what the browser opens
	API   string // the demo itself: what a test's own calls go to
	App   *app.App
	files *releasable
	logs  *logtest.Buffer

	t          *testing.T
	configPath string
	config     map[string]any

	mu        sync.Mutex
	documents []string // request URIs of every page load (navigations), in order
	applies   []string // the operationId of every POST /api/apply the browser sent, in order
}

// startSite boots a site with the sample configuration, siteDefaults and settings.
func startSite(t *testing.T, settings ...setting) *site {
	t.Helper()
	configPath, dsn, err := app.PrepareDemo(filepath.Join(t.TempDir(), "demo"))
	if err != nil {
		t.Fatal(err)
	}
	s := &site{t: t, configPath: configPath, files: &releasable{FS: ui.Dist(), gone: map[string]bool{}}, logs: &logtest.Buffer{}}
	if err := yaml.Unmarshal(config.Sample, &s.config); err != nil {
		t.Fatal(err)
	}
	s.write(append(append([]setting{}, siteDefaults...), settings...))
	a, err := app.New(context.Background(), app.Options{Mode: app.ModeDemo, ConfigPath: configPath, Addr: "127.0.0.1:0", DSN: dsn,
		Assets: app.Assets{Schema: schema.FS, UI: s.files}, LogOutput: s.logs})
	if err != nil {
		t.Fatal(err)
	}
	s.App, s.API = a, a.URL()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	target, _ := url.Parse(a.URL())
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Sec-Fetch-Dest") == "document" {
			s.mu.Lock()
			s.documents = append(s.documents, r.URL.RequestURI())
			s.mu.Unlock()
		}
		if r.Method == "POST" && r.URL.Path == "/api/apply" {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var in struct{ OperationID string }
			_ = json.Unmarshal(body, &in)
			s.mu.Lock()
			s.applies = append(s.applies, in.OperationID)
			s.mu.Unlock()
		}
		proxy.ServeHTTP(w, r)
	}))
	s.URL = front.URL
	t.Cleanup(func() {
		front.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the site stopped with %v", err)
		}
		if t.Failed() {
			t.Logf("the site's log:\n%s", s.logs.String())
		}
	})
	testkit.Eventually(t, "the site ready", func() bool {
		code, _ := s.send("GET", "/readyz", "", "")
		return code == 200
	})
	return s
}

// configure changes keys of the running site's configuration as an operator does: the file is
// rewritten and reloaded (every sim.* knob and most keys apply without a restart).
func (s *site) configure(settings ...setting) {
	s.t.Helper()
	s.write(settings)
	if err := s.App.Config().Reload(); err != nil {
		s.t.Fatalf("reload the configuration: %v", err)
	}
}

// configureText writes text as the configuration file and reloads it, returning the reload's
// error (a refused edit keeps the last good configuration).
func (s *site) configureText(text string) error {
	s.t.Helper()
	if err := os.WriteFile(s.configPath, []byte(text), 0o644); err != nil {
		s.t.Fatal(err)
	}
	return s.App.Config().Reload()
}

func (s *site) write(settings []setting) {
	s.t.Helper()
	for _, kv := range settings {
		m := s.config
		parts := strings.Split(kv.key, ".")
		for _, p := range parts[:len(parts)-1] {
			next, ok := m[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[p] = next
			}
			m = next
		}
		m[parts[len(parts)-1]] = kv.value
	}
	data, err := yaml.Marshal(s.config)
	if err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(s.configPath, data, 0o644); err != nil {
		s.t.Fatal(err)
	}
}

// sims are the site's simulators (GitLab, approval system, deploy pipeline, mailbox).
func (s *site) sims() *sim.Sims { return s.App.Sims() }

func (s *site) pageLoads() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.documents...)
}

// appliesSent are the operationIds of the applications the browser sent, in order.
func (s *site) appliesSent() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.applies...)
}

// send calls the demo as user (a demo user's name, or an address; "" for none) with a JSON body
// (demoSend); a failed call answers code 0 with the error.
func (s *site) send(method, path, user, body string) (int, []byte) {
	code, data, err := demoSend(method, s.API+path, user, body)
	if err != nil {
		return 0, []byte(err.Error())
	}
	return code, data
}

// call is send that fails the test on anything but want, decoding the answer into out (nil:
// not decoded).
func (s *site) call(method, path, user, body string, want int, out any) {
	s.t.Helper()
	// A database a loaded machine keeps waiting answers 503 "try again shortly": the call is
	// sent again, with the same operationId when it has one (an action runs once per id).
	var code int
	var data []byte
	_ = testkit.Poll(testkit.Timeout(), func() bool {
		code, data = s.send(method, path, user, body)
		return code != http.StatusServiceUnavailable
	})
	if code != want {
		s.t.Fatalf("%s %s as %q: %d, want %d: %s", method, path, user, code, want, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			s.t.Fatalf("%s %s: %v: %s", method, path, err, data)
		}
	}
}

// opID is a fresh operationId for the test's own calls: a random UUID, as the SPA makes them (the
// ops console links a request named by one in bindery's notes).
func (s *site) opID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// apply applies for target as user with reason and returns the operationId.
func (s *site) apply(user, target, reason string) string {
	s.t.Helper()
	op := s.opID()
	body, _ := json.Marshal(map[string]string{"operationId": op, "targetKey": target, "reason": reason})
	var res api.ApplyResult
	s.call("POST", "/api/apply", user, string(body), 202, &res)
	return op
}

// ticket is the approval simulator's ticket of op, once bindery has sent it.
func (s *site) ticket(op string) string {
	s.t.Helper()
	var id string
	testkit.Eventually(s.t, "the approval ticket of "+op, func() bool {
		var inbox struct {
			Items []struct{ ID, OperationID, Status string }
		}
		s.call("GET", "/sim/approvals", "", "", 200, &inbox)
		for _, tk := range inbox.Items {
			if tk.OperationID == op {
				id = tk.ID
				return true
			}
		}
		return false
	})
	return id
}

// decide decides op's ticket in the approval simulator's inbox (decision APPROVED or REJECTED;
// by and comment may be empty), then waits until bindery has the decision.
func (s *site) decide(op, decision, by, comment string) {
	s.t.Helper()
	body, _ := json.Marshal(map[string]string{"decision": decision, "decidedBy": by, "comment": comment})
	s.call("POST", "/sim/approvals/"+s.ticket(op)+"/decide", "", string(body), 200, nil)
	s.waitRequest(op, "the decision on "+op+" recorded", func(v api.RequestView) bool { return !v.Status.AwaitingApproval() })
}

// approve is decide APPROVED: op is then in its project's waiting set.
func (s *site) approve(op string) { s.t.Helper(); s.decide(op, "APPROVED", "", "") }

// round runs one batch round as an operator does from the console.
func (s *site) round() api.RoundResult {
	s.t.Helper()
	var res api.RoundResult
	s.call("POST", "/api/ops/batches/run", "ops", `{"operationId":"`+s.opID()+`"}`, 200, &res)
	return res
}

// request is op's view as an operator reads it.
func (s *site) request(op string) api.RequestView {
	s.t.Helper()
	var v api.RequestView
	s.call("GET", "/api/requests/"+op, "ops", "", 200, &v)
	return v
}

// waitRequest waits until op's view satisfies ok, and returns it.
func (s *site) waitRequest(op, what string, ok func(api.RequestView) bool) api.RequestView {
	s.t.Helper()
	var v api.RequestView
	var last bytes.Buffer
	if testkit.Poll(testkit.Timeout(), func() bool {
		code, data := s.send("GET", "/api/requests/"+op, "ops", "")
		last.Reset()
		last.Write(data)
		return code == 200 && json.Unmarshal(data, &v) == nil && ok(v)
	}) != nil {
		s.t.Fatalf("%s: not within %s; the request reads %s", what, testkit.Timeout(), last.String())
	}
	return v
}

// roundTaking runs batch rounds until one has taken op into a batch (its approval's callback may
// still be on its way when the first runs), and returns op's view then.
func (s *site) roundTaking(op string) api.RequestView {
	s.t.Helper()
	return s.roundsUntil(op, "a batch round taking "+op, func(v api.RequestView) bool { return v.BatchID != 0 })
}

// roundsUntil runs batch rounds, as an operator does, until op's view satisfies ok (a request a
// bisection returned to the waiting set needs the next round), and returns the view then. A
// round or a read the loaded database did not answer in time (503) is tried again.
func (s *site) roundsUntil(op, what string, ok func(api.RequestView) bool) api.RequestView {
	s.t.Helper()
	var v api.RequestView
	read := func() bool {
		code, data := s.send("GET", "/api/requests/"+op, "ops", "")
		return code == 200 && json.Unmarshal(data, &v) == nil && ok(v)
	}
	testkit.Eventually(s.t, what, func() bool {
		if read() {
			return true
		}
		s.send("POST", "/api/ops/batches/run", "ops", `{"operationId":"`+s.opID()+`"}`)
		return read()
	})
	return v
}

// myRequests are the operationIds of user's requests, newest first.
func (s *site) myRequests(user string) []string {
	s.t.Helper()
	var page api.Page[api.RequestSummary]
	s.call("GET", "/api/my/requests", user, "", 200, &page)
	var ops []string
	for _, r := range page.Items {
		ops = append(ops, r.OperationID)
	}
	return ops
}

// audited lists the audit log's entries of action, oldest first, as "<request> by <actor>"
// (the request the action was on, as the ops console's audit log shows its parameters).
func (s *site) audited(action string) []string {
	s.t.Helper()
	var page api.Page[struct {
		Actor, Action string
		Params        map[string]any
	}]
	s.call("GET", "/api/ops/audit", "ops", "", 200, &page)
	var out []string
	for i := len(page.Items) - 1; i >= 0; i-- {
		if e := page.Items[i]; e.Action == action {
			out = append(out, fmt.Sprint(e.Params["request"])+" by "+e.Actor)
		}
	}
	return out
}

// refusedEdit saves a configuration file that does not parse and reloads it: bindery refuses
// it, keeps the last good configuration and tells operators (the ops console's error).
func (s *site) refusedEdit() {
	s.t.Helper()
	if err := s.configureText("apply:\n  window: [every day\n"); err == nil {
		s.t.Fatal("a configuration that does not parse was taken")
	}
}
