package server

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"bindery/internal/platform/config"
	"bindery/internal/platform/logging"
	"bindery/internal/platform/logging/logtest"
	"bindery/internal/platform/metric"
	"bindery/internal/platform/ratelimit"
	"bindery/internal/remote/approval"
	"bindery/store"
	"bindery/store/storetest"
)

// baseConfig is the configuration of the handler tests, as dotted keys (two levels at most;
// values are YAML). Rows override keys; a value of "" leaves the key out.
var baseConfig = map[string]string{
	"server.trustedProxies": "[10.0.0.0/8]",
	"apply.mode":            "OPEN",
	"ratelimit.apply":       "3",
	"ratelimit.revoke":      "2",
	"hooks.approvalSecret":  "s3cret",
	"hooks.deployToken":     "dtok",
	"hooks.gitlabToken":     "gtok",
	"identity.directory":    `[{account: carol@corp.example, employeeId: "77001", name: carol}]`,
	"targets": `[{key: public-a, title: Public A, project: infra/access-config, path: "a/{subject}.yaml", ttl: 720h},
  {key: restricted-b, title: Restricted B, project: infra/access-config, path: "b/{subject}.yaml", ruleCodes: [b-owners]}]`,
}

// configYAML renders baseConfig with overrides.
func configYAML(overrides map[string]string) string {
	kv := map[string]string{}
	for k, v := range baseConfig {
		kv[k] = v
	}
	for k, v := range overrides {
		kv[k] = v
	}
	sections := map[string][]string{}
	var tops []string
	for k, v := range kv {
		if v == "" {
			continue
		}
		sec, sub, nested := strings.Cut(k, ".")
		if !nested {
			tops = append(tops, k+": "+v)
			continue
		}
		if v == "<blank>" {
			v = ""
		}
		sections[sec] = append(sections[sec], "  "+sub+": "+v)
	}
	var b strings.Builder
	names := make([]string, 0, len(sections))
	for s := range sections {
		names = append(names, s)
	}
	sort.Strings(names)
	for _, s := range names {
		sort.Strings(sections[s])
		b.WriteString(s + ":\n" + strings.Join(sections[s], "\n") + "\n")
	}
	sort.Strings(tops)
	for _, l := range tops {
		b.WriteString(l + "\n")
	}
	return b.String()
}

type options struct {
	config   map[string]string
	serve    bool        // serve mode: no demo identities
	sink     metric.Sink // nil → the process metric set
	db       *store.DB   // nil → a fresh SQLite database
	jsonLogs bool        // log lines as JSON (else text)
}

// harness is a server on fakes and a real store.
type harness struct {
	t       testing.TB
	srv     *Server
	src     *config.Source
	db      *store.DB
	wf      *fakeWorkflow
	perms   *fakePermissions
	notes   *fakeNotifications
	set     *metrics.Set
	limiter *ratelimit.Limiter
	logs    *logtest.Buffer
	// offContract: a test's fakes answer what the real parts never do (a NOT_FOUND from a
	// workflow call that has none), so the answers are not held to the OpenAPI document.
	offContract bool
	lastAllowed atomic.Bool // whether the document allowed the last request do sent (tests send concurrently)
}

func setup(t testing.TB, o options) *harness {
	t.Helper()
	snap, err := config.Parse([]byte(configYAML(o.config)))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, configYAML(o.config))
	}
	h := &harness{t: t, src: config.NewStatic(snap), db: o.db, wf: newFakeWorkflow(), perms: newFakePermissions(), notes: newFakeNotifications(), set: metrics.NewSet(), logs: &logtest.Buffer{}}
	if h.db == nil {
		h.db = storetest.SQLite(t)
	}
	h.wf.db = h.db
	level := new(slog.LevelVar)
	level.Set(slog.LevelDebug)
	format := "text"
	if o.jsonLogs {
		format = "json"
	}
	log := logging.New(h.logs, format, level)
	sink := o.sink
	if sink == nil {
		sink = metric.SetSink(h.set)
	}
	h.limiter = ratelimit.New(ratelimit.Options{Now: func() time.Time { return t0 }})
	d := Deps{
		Config: h.src, DB: h.db, Metrics: h.set, Log: log, Version: "test", Demo: !o.serve,
		Workflow: h.wf, Permissions: h.perms, Notifications: h.notes, Limiter: h.limiter, Recorder: metric.New(sink, log),
		Now: func() time.Time { return t0 }, PermissionTimeout: 100 * time.Millisecond,
		UI: fstest.MapFS{"index.html": {Data: []byte("<!doctype html><title>spa</title>")}, "assets/app-3f9a1c2b.js": {Data: []byte("console.log(1)")}, "favicon.svg": {Data: []byte("<svg/>")}},
	}
	h.srv = New(d)
	return h
}

// call is one request. user sets the demo identity header; body is sent as JSON unless ct says
// otherwise; peer is the direct peer address (default an untrusted public one).
type call struct {
	method, path string
	user         string
	header       map[string]string
	body         string
	ct           string
	peer         string
	// outside: deliberately outside the OpenAPI document (fuzz input, a lenient spelling the
	// server forgives, a configured header the document cannot name); see checkContract.
	outside bool
}

// do sends c to the server and holds the exchange to the OpenAPI document (checkContract).
func (h *harness) do(c call) *httptest.ResponseRecorder {
	h.t.Helper()
	return h.doAs(h.t, c)
}

// doAs is do reporting a drift from the document to t (a fuzz iteration's own t).
func (h *harness) doAs(t testing.TB, c call) *httptest.ResponseRecorder {
	t.Helper()
	var body io.Reader
	if c.body != "" {
		body = strings.NewReader(c.body)
	}
	req := httptest.NewRequest(c.method, c.path, body)
	req.RemoteAddr = "192.0.2.10:4321"
	if c.peer != "" {
		req.RemoteAddr = c.peer
	}
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.ct != "" {
		req.Header.Set("Content-Type", c.ct)
	}
	if c.user != "" {
		req.Header.Set("X-Bindery-User", c.user)
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	probe := req.Clone(req.Context())
	rec := httptest.NewRecorder()
	h.srv.Handler().ServeHTTP(rec, req)
	if !h.offContract {
		h.lastAllowed.Store(checkContract(t, exchange{req: probe, body: []byte(c.body), status: rec.Code, header: rec.Header(), answer: rec.Body.Bytes(), outside: c.outside}))
	}
	return rec
}

// signed returns the headers of an approval callback signed with secret at t0.
func signed(secret, body string) map[string]string {
	return map[string]string{
		approval.TimestampHeader: fmt.Sprint(t0.Unix()),
		approval.SignatureHeader: approval.Sign([]byte(secret), t0, []byte(body)),
	}
}

// metric returns the value of one series in the metric set ("" when absent).
func (h *harness) metric(series string) string {
	var b bytes.Buffer
	h.set.WritePrometheus(&b)
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, series+" ") {
			return strings.TrimPrefix(line, series+" ")
		}
	}
	return ""
}

// dbState dumps what the HTTP layer stored, without times.
func (h *harness) dbState() string {
	var b strings.Builder
	rows, err := h.db.Raw().Query("SELECT scope, idem_key, payload_hash, status, COALESCE(answer, '') FROM idempotency_record ORDER BY scope, idem_key")
	if err != nil {
		h.t.Fatal(err)
	}
	for rows.Next() {
		var scope, key, hash, answer string
		var status int
		rows.Scan(&scope, &key, &hash, &status, &answer)
		fmt.Fprintf(&b, "idem %s %s %s %d %s\n", scope, key, hash, status, answer)
	}
	rows.Close()
	rows, err = h.db.Raw().Query("SELECT event_key, actor, action, params, request_id FROM audit_log ORDER BY id")
	if err != nil {
		h.t.Fatal(err)
	}
	for rows.Next() {
		var k, actor, action, params, rid string
		rows.Scan(&k, &actor, &action, &params, &rid)
		fmt.Fprintf(&b, "audit %s %s %s %s %s\n", k, actor, action, params, rid)
	}
	rows.Close()
	return b.String()
}

var timestamp = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)

// normalized hides the times that differ from run to run (config load time, database clock).
func normalized(body string) string { return timestamp.ReplaceAllString(body, "<time>") }
