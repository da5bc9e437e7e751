package config

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"bindery/internal/platform/logging/logtest"
	"bindery/internal/testkit"
)

var update = flag.Bool("update", false, "rewrite docs/config.md from the key registry")

// TestConfigDocs keeps docs/config.md equal to the registry, so no key goes undocumented.
func TestConfigDocs(t *testing.T) {
	t.Parallel()
	path := filepath.Join("..", "..", "..", "docs", "config.md")
	want := Markdown()
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v (run: go test ./internal/platform/config -run TestConfigDocs -update)", path, err)
	}
	if string(got) != want {
		t.Fatalf("docs/config.md is stale; run: go test ./internal/platform/config -run TestConfigDocs -update")
	}
	for _, k := range Keys {
		if !strings.Contains(string(got), "`"+k.Name+"`") {
			t.Errorf("docs/config.md does not mention %s", k.Name)
		}
	}
}

// yamlDoc nests dotted keys of at most two levels: {"a.b": "v"} gives "a:\n  b: v\n". A nil
// value writes the key blank.
func yamlDoc(kv map[string]*string) string {
	sections := map[string][]string{}
	var order []string
	for key, val := range kv {
		sec, sub, nested := strings.Cut(key, ".")
		line := sec + ":"
		if nested {
			line = "  " + sub + ":"
		}
		if val != nil {
			line += " " + *val
		}
		if _, ok := sections[sec]; !ok {
			order = append(order, sec)
		}
		if nested {
			sections[sec] = append(sections[sec], line)
		} else {
			sections[sec] = append([]string{line}, sections[sec]...)
		}
	}
	var b strings.Builder
	for _, sec := range order {
		lines := sections[sec]
		if !strings.HasPrefix(lines[0], sec+":") {
			b.WriteString(sec + ":\n")
		}
		for _, l := range lines {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func str(s string) *string { return &s }

var shanghaiMondayNoon = time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC) // 12:00 in Asia/Shanghai

// misconfigCase is one row: the key written as val (nil: blank; "missing" omits the key).
type misconfigCase struct {
	class string // missing, blank, garbage, negative/zero, valid
	val   *string
	want  any
}

// probes read a dynamic key's effective value through its public getter.
var probes = map[string]func(*Snapshot) any{
	"log.level":              func(s *Snapshot) any { return s.LogLevel() },
	"log.access":             func(s *Snapshot) any { return s.LogAccess() },
	"server.trustedProxies":  func(s *Snapshot) any { return fmt.Sprint(s.TrustedProxies()) },
	"ratelimit.window":       func(s *Snapshot) any { return s.RateWindow() },
	"ratelimit.apply":        func(s *Snapshot) any { return s.RateLimit("ratelimit.apply", 10) },
	"apply.mode":             func(s *Snapshot) any { return s.ApplyMode() },
	"apply.window":           func(s *Snapshot) any { return s.ApplyOpen(shanghaiMondayNoon) },
	"apply.timezone":         func(s *Snapshot) any { return s.ApplyOpen(shanghaiMondayNoon) },
	"workflow.approvalFirst": func(s *Snapshot) any { return s.ApprovalFirst() },
	"batch.maxRequests":      func(s *Snapshot) any { return s.BatchMaxRequests() },
	"approval.maxRetries":    func(s *Snapshot) any { return s.ApprovalMaxRetries() },
	"approval.checklistMode": func(s *Snapshot) any { return s.ChecklistMode() },
	"idempotency.ttl":        func(s *Snapshot) any { return s.IdempotencyTTL() },
	"targets":                func(s *Snapshot) any { return len(s.Targets()) },
	"server.loginURL":        func(s *Snapshot) any { return s.LoginURL() },
	"approval.ticketURL":     func(s *Snapshot) any { return s.TicketURL() },
	"support.contact":        func(s *Snapshot) any { return s.SupportContact() },
}

// context prepended to some keys' rows so the probe observes the key (e.g. the window only
// matters in TEST_WINDOW mode).
var rowContext = map[string]map[string]*string{
	"apply.window":   {"apply.mode": str("TEST_WINDOW")},
	"apply.timezone": {"apply.mode": str("TEST_WINDOW")},
}

var misconfigTable = map[string][]misconfigCase{
	"support.contact": { // words a requester reads: nothing that garbles them
		{"missing", nil, ""}, {"blank", nil, ""}, {"garbage", str(`"a\u0000b"`), ""},
		{"negative/zero", str("0"), "0"}, {"valid", str("https://chat.example/bindery-help"), "https://chat.example/bindery-help"},
		{"a short text", str("the platform team in #access"), "the platform team in #access"},
		{"too long", str(strings.Repeat("x", 201)), ""}, {"a line break", str(`"ask\nus"`), ""},
	},
	"approval.ticketURL": { // a link that cannot work, or names no ticket, is no link
		{"missing", nil, ""}, {"blank", nil, ""}, {"garbage", str("approvals.example/{id}"), ""},
		{"negative/zero", str("0"), ""}, {"valid", str("https://approvals.example/tickets/{id}"), "https://approvals.example/tickets/{id}"},
		{"no {id}", str("https://approvals.example/tickets"), ""}, {"another scheme", str("javascript:alert('{id}')"), ""},
	},
	"server.loginURL": { // a link that cannot work is no link
		{"missing", nil, ""}, {"blank", nil, ""}, {"garbage", str("login.example.com/sso"), ""},
		{"negative/zero", str("0"), ""}, {"valid", str("https://login.example.com/sso?app=bindery"), "https://login.example.com/sso?app=bindery"},
		{"another scheme", str("javascript:alert(1)"), ""}, {"no host", str("https:///sso"), ""},
	},
	"log.level": {
		{"missing", nil, slog.LevelInfo}, {"blank", nil, slog.LevelInfo}, {"garbage", str("loud"), slog.LevelInfo},
		{"negative/zero", str("-4"), slog.LevelInfo}, {"valid", str("DEBUG"), slog.LevelDebug},
	},
	"log.access": { // on unless clearly switched off
		{"missing", nil, true}, {"blank", nil, true}, {"garbage", str("quiet"), true},
		{"negative/zero", str("0"), false}, {"valid", str("false"), false},
	},
	"server.trustedProxies": {
		{"missing", nil, "[]"}, {"blank", nil, "[]"}, {"garbage", str("[nonsense, 10.0.0.1]"), "[10.0.0.1/32]"},
		{"negative/zero", str("0"), "[]"}, {"valid", str("[10.0.0.0/8, \"::1\"]"), "[10.0.0.0/8 ::1/128]"},
	},
	"ratelimit.window": {
		{"missing", nil, time.Minute}, {"blank", nil, time.Minute}, {"garbage", str("soon"), time.Minute},
		{"negative/zero", str("-5s"), time.Minute}, {"valid", str("30s"), 30 * time.Second},
	},
	"ratelimit.apply": { // fail open: anything wrong means no limiting
		{"missing", nil, 10}, {"blank", nil, 0}, {"garbage", str("ten"), 0},
		{"negative/zero", str("0"), 0}, {"valid", str("25"), 25},
	},
	"apply.mode": { // typos close
		{"missing", nil, ModeTestWindow}, {"blank", nil, ModeTestWindow}, {"garbage", str("OPNE"), ModeClosed},
		{"negative/zero", str("0"), ModeClosed}, {"valid", str("' open '"), ModeOpen},
	},
	"apply.window": { // Monday 12:00 in Shanghai
		{"missing", nil, true}, {"blank", nil, false}, {"garbage", str("weekdays"), false},
		{"negative/zero", str("Mon-Fri 18:00-10:00"), false}, {"valid", str("Mon 11:00-13:00"), true},
	},
	"apply.timezone": { // default window Mon-Fri 10:00-18:00
		{"missing", nil, true}, {"blank", nil, true}, {"garbage", str("Mars/Olympus"), false},
		{"negative/zero", str("Local"), false}, {"valid", str("UTC"), false},
	},
	"workflow.approvalFirst": { // switches fail off
		{"missing", nil, false}, {"blank", nil, false}, {"garbage", str("maybe"), false},
		{"negative/zero", str("0"), false}, {"valid", str("true"), true},
	},
	"batch.maxRequests": {
		{"missing", nil, 50}, {"blank", nil, 50}, {"garbage", str("lots"), 50},
		{"negative/zero", str("-1"), 50}, {"valid", str("5000"), 1000},
	},
	"approval.maxRetries": {
		{"missing", nil, 3}, {"blank", nil, 3}, {"garbage", str("x"), 3},
		{"negative/zero", str("-2"), 0}, {"valid", str("5"), 5},
	},
	"approval.checklistMode": {
		{"missing", nil, false}, {"blank", nil, false}, {"garbage", str("perhaps"), false},
		{"negative/zero", str("0"), false}, {"valid", str("yes"), true},
	},
	"idempotency.ttl": {
		{"missing", nil, 24 * time.Hour}, {"blank", nil, 24 * time.Hour}, {"garbage", str("1 day"), 24 * time.Hour},
		{"negative/zero", str("0s"), 24 * time.Hour}, {"valid", str("2h"), 2 * time.Hour},
	},
	"targets": { // a broken catalog is rejected (want -1 = the file fails to load)
		{"missing", nil, 0}, {"blank", nil, 0}, {"garbage", str(`[{key: BAD KEY, project: a/b, path: "x/{subject}"}]`), -1},
		{"negative/zero", str(`[{key: a, project: a/b, path: "../{subject}"}]`), -1},
		{"valid", str(`[{key: a, project: a/b, path: "x/{subject}.yaml"}]`), 1},
	},
}

// TestDynamicKeyMisconfig covers every dynamic key × {missing, blank, garbage, negative/zero,
// valid}, read through the key's getter.
func TestDynamicKeyMisconfig(t *testing.T) {
	t.Parallel()
	classes := []string{"missing", "blank", "garbage", "negative/zero", "valid"}
	for _, k := range Keys {
		if k.Static {
			continue
		}
		rows, ok := misconfigTable[k.Name]
		probe := probes[k.Name]
		if !ok || probe == nil {
			t.Errorf("dynamic key %s has no row in misconfigTable/probes", k.Name)
			continue
		}
		for _, class := range classes {
			found := false
			for _, row := range rows {
				if row.class != class {
					continue
				}
				found = true
				t.Run(k.Name+"/"+class, func(t *testing.T) {
					kv := map[string]*string{}
					for ck, cv := range rowContext[k.Name] {
						kv[ck] = cv
					}
					if class != "missing" {
						kv[k.Name] = row.val
					}
					doc := yamlDoc(kv)
					snap, err := Parse([]byte(doc))
					if want, isInt := row.want.(int); isInt && want == -1 {
						if err == nil {
							t.Fatalf("want the file rejected, it loaded:\n%s", doc)
						}
						return
					}
					if err != nil {
						t.Fatalf("parse %q: %v", doc, err)
					}
					if got := probe(snap); got != row.want {
						t.Fatalf("%s = %v (%T), want %v (%T)\nfile:\n%s", k.Name, got, got, row.want, row.want, doc)
					}
					status := reportFor(t, snap, k.Name).Status
					wantStatus := map[string]string{"missing": StatusDefault, "blank": StatusFallback}[class]
					if wantStatus != "" && status != wantStatus && !(class == "blank" && k.Name == "targets") {
						t.Errorf("report status %q, want %q", status, wantStatus)
					}
				})
			}
			if !found {
				t.Errorf("dynamic key %s has no %q row", k.Name, class)
			}
		}
	}
}

func reportFor(t *testing.T, s *Snapshot, key string) KeyReport {
	t.Helper()
	for _, r := range s.Report {
		if r.Key == key {
			return r
		}
	}
	t.Fatalf("no report for %s", key)
	return KeyReport{}
}

func TestStaticKeysFallBackOrRejectClearly(t *testing.T) {
	t.Parallel()
	s := MustParse("database:\n  maxOpenConns: -3\nworkers:\n  size: lots\n  first: 0\n  idlePoll: 1ms\n")
	if s.MaxOpenConns() != 20 || s.Workers() != 8 || s.FirstWorkers() != 4 || s.IdlePoll() != time.Second {
		t.Fatalf("got maxOpenConns=%d workers=%d first=%d idlePoll=%s", s.MaxOpenConns(), s.Workers(), s.FirstWorkers(), s.IdlePoll())
	}
	if s := MustParse("workers:\n  first: 2\n  idlePoll: 250ms\n"); s.FirstWorkers() != 2 || s.IdlePoll() != 250*time.Millisecond {
		t.Fatalf("valid lane settings: first=%d idlePoll=%s", s.FirstWorkers(), s.IdlePoll())
	}
	for _, bad := range []string{"log:\n  format: xml\n", "server:\n  publicURL: ftp://x\n"} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("%q: want rejection", bad)
		}
	}
}

func TestUnknownKeysAreReportedNotFatal(t *testing.T) {
	t.Parallel()
	s, err := Parse([]byte("ratelimit:\n  aply: 5\nsurprise: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.Unknown, ","); got != "ratelimit.aply,surprise" {
		t.Fatalf("unknown = %q", got)
	}
}

func TestStructuralMistakesRejectTheFile(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{
		"ratelimit: 5\n",          // scalar where a section belongs
		"- a\n- b\n",              // not a mapping
		"apply:\n  mode: [OPEN\n", // broken YAML
		"a: 1\na: 2\n",            // duplicate key
		"ratelimit:\n  apply: 1\nratelimit:\n  apply: 2\n",
	} {
		if _, err := Parse([]byte(doc)); err == nil {
			t.Errorf("%q: want an error", doc)
		}
	}
	if _, err := Parse([]byte("# only a comment\n")); err != nil {
		t.Errorf("comment-only file: %v", err)
	}
}

func TestSampleConfigLoadsClean(t *testing.T) {
	t.Parallel()
	s, err := Parse(Sample)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Unknown) > 0 {
		t.Fatalf("sample has unknown keys: %v", s.Unknown)
	}
	for _, r := range s.Report {
		if r.Status == StatusFallback {
			t.Errorf("sample key %s falls back: %s", r.Key, r.Note)
		}
	}
	if !s.ApprovalFirst() || len(s.Targets()) == 0 {
		t.Fatal("sample must enable approval-first and list targets")
	}
}

func TestWindowUsesTheFixedZoneNotTheHost(t *testing.T) {
	t.Parallel()
	s := MustParse("apply:\n  mode: test_window\n  window: Mon-Fri 10:00-18:00\n  timezone: Asia/Shanghai\n")
	cases := []struct {
		at   time.Time
		open bool
	}{
		{time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC), true},                       // Mon 10:00 CST
		{time.Date(2026, 11, 30, 1, 59, 0, 0, time.UTC), false},                     // Mon 09:59 CST
		{time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC), false},                     // Mon 18:00 CST (end excluded)
		{time.Date(2026, 12, 4, 9, 59, 0, 0, time.UTC), true},                       // Fri 17:59 CST
		{time.Date(2026, 12, 5, 4, 0, 0, 0, time.UTC), false},                       // Sat noon CST
		{time.Date(2026, 11, 29, 20, 0, 0, 0, time.FixedZone("NY", -5*3600)), true}, // Mon 09:00 CST? no: 01:00Z+... see below
	}
	// The last row: Sun 20:00 at UTC-5 is Mon 01:00 UTC = Mon 09:00 CST → closed. Fix expectation.
	cases[5].open = false
	for _, c := range cases {
		if got := s.ApplyOpen(c.at); got != c.open {
			t.Errorf("ApplyOpen(%s) = %v, want %v", c.at, got, c.open)
		}
	}
}

func TestParseWindowForms(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"Mon-Fri 10:00-18:00", "daily 00:00-24:00", "Sat,Sun 09:30-12:00", "Fri-Mon 08:00-09:00", "* 00:00-00:01"} {
		if _, err := ParseWindow(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "Mon-Fri", "Mon-Fri 10-18", "Funday 10:00-11:00", "Mon 25:00-26:00", "Mon 10:00-10:00", "Mon 10:60-11:00"} {
		if _, err := ParseWindow(bad); err == nil {
			t.Errorf("%q: want error", bad)
		}
	}
}

func TestTrustedProxiesNormalise(t *testing.T) {
	t.Parallel()
	s := MustParse("server:\n  trustedProxies: [10.1.2.3/8, \"::ffff:127.0.0.1\"]\n")
	got := s.TrustedProxies()
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.1/32")}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v want %v", got, want)
	}
	// One string is not a list, commas or not: no proxy is trusted (never a guessed split).
	if got := MustParse("server:\n  trustedProxies: 10.1.2.3/8, 127.0.0.1\n").TrustedProxies(); len(got) != 0 {
		t.Fatalf("a string trusted %v", got)
	}
}

// ---- reload and watch ----

type testSource struct {
	*Source
	path string
	set  *metrics.Set
	logs *logtest.Buffer
}

func openTestSource(t *testing.T, initial string) testSource {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(initial), 0o644); err != nil {
		t.Fatal(err)
	}
	logs := &logtest.Buffer{}
	set := metrics.NewSet()
	src, err := Open(path, slog.New(slog.NewTextHandler(logs, nil)), set)
	if err != nil {
		t.Fatal(err)
	}
	return testSource{src, path, set, logs}
}

func (ts testSource) metric(name string) string {
	var b bytes.Buffer
	ts.set.WritePrometheus(&b)
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, name+" ") {
			return strings.TrimPrefix(line, name+" ")
		}
	}
	return ""
}

func TestReloadKeepsLastGoodOnBrokenFile(t *testing.T) {
	t.Parallel()
	ts := openTestSource(t, "ratelimit:\n  apply: 3\n")
	if got := ts.Current().RateLimit("ratelimit.apply", 10); got != 3 {
		t.Fatalf("limit %d", got)
	}
	write(t, ts.path, "ratelimit:\n  apply: [7\n")
	if err := ts.Reload(); err == nil {
		t.Fatal("want reload error")
	}
	if got := ts.Current().RateLimit("ratelimit.apply", 10); got != 3 {
		t.Fatalf("after broken edit limit = %d, want last good 3", got)
	}
	if ts.LastError() == nil || !strings.Contains(ts.LastError().Message, "parse") {
		t.Fatalf("last error = %+v", ts.LastError())
	}
	if got := ts.metric("bindery_config_reload_errors_total"); got != "1" {
		t.Fatalf("reload errors metric = %q", got)
	}
	write(t, ts.path, "ratelimit:\n  apply: 7\n")
	if err := ts.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := ts.Current().RateLimit("ratelimit.apply", 10); got != 7 {
		t.Fatalf("limit %d", got)
	}
	if ts.LastError() != nil {
		t.Fatal("a good reload must clear the error")
	}
	if got := ts.metric("bindery_config_generation"); got != "2" {
		t.Fatalf("generation = %q", got)
	}
}

func TestStaticKeyChangeLogsRestartNeeded(t *testing.T) {
	t.Parallel()
	ts := openTestSource(t, "server:\n  addr: 127.0.0.1:1\n")
	write(t, ts.path, "server:\n  addr: 127.0.0.1:2\n")
	if err := ts.Reload(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ts.logs.String(), "restart needed") || !strings.Contains(ts.logs.String(), "server.addr") {
		t.Fatalf("logs: %s", ts.logs.String())
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitLimit waits for the watched value; the watch is asynchronous by nature, so this polls
// with a generous deadline rather than asserting a duration.
func waitLimit(t *testing.T, src *Source, want int) {
	t.Helper()
	testkit.Eventually(t, fmt.Sprintf("the limit to become %d", want), func() bool { return src.Current().RateLimit("ratelimit.apply", 10) == want })
}

// watching installs the watch on s before it returns (so an edit made next is seen, with no
// wait for a goroutine to get there), runs its loop, and returns what stops it.
func watching(t *testing.T, s *Source) (stop func()) {
	t.Helper()
	w, err := s.openWatch()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.watch(ctx, w) }()
	return func() { cancel(); <-done }
}

func TestWatchSeesEveryKindOfEdit(t *testing.T) {
	t.Parallel()
	ts := openTestSource(t, "ratelimit:\n  apply: 1\n")
	ts.PollInterval = time.Hour // prove fsnotify alone sees these edits
	defer watching(t, ts.Source)()

	write(t, ts.path, "ratelimit:\n  apply: 2\n") // in-place write
	waitLimit(t, ts.Source, 2)

	tmp := ts.path + ".swp" // editor-style atomic replace
	write(t, tmp, "ratelimit:\n  apply: 3\n")
	if err := os.Rename(tmp, ts.path); err != nil {
		t.Fatal(err)
	}
	waitLimit(t, ts.Source, 3)

	if err := os.Remove(ts.path); err != nil { // entry deleted and recreated
		t.Fatal(err)
	}
	write(t, ts.path, "ratelimit:\n  apply: 4\n")
	waitLimit(t, ts.Source, 4)

	write(t, ts.path, "ratelimit: {apply: [\n") // broken edit: last good stays
	_ = testkit.Poll(testkit.Timeout(), func() bool { return ts.LastError() != nil })
	if ts.LastError() == nil {
		t.Fatal("broken edit not reported")
	}
	waitLimit(t, ts.Source, 4)
}

func TestWatchSurvivesReplacedDirectory(t *testing.T) {
	t.Parallel()
	ts := openTestSource(t, "ratelimit:\n  apply: 1\n")
	ts.PollInterval = 20 * time.Millisecond
	defer watching(t, ts.Source)()

	dir := filepath.Dir(ts.path)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, ts.path, "ratelimit:\n  apply: 9\n")
	waitLimit(t, ts.Source, 9)
	write(t, ts.path, "ratelimit:\n  apply: 8\n")
	waitLimit(t, ts.Source, 8)
}

// TestWatchIgnoresBusyNeighbours: writes to other files of the directory (the demo keeps its
// database beside the config) must not make the watcher re-read the config.
func TestWatchIgnoresBusyNeighbours(t *testing.T) {
	t.Parallel()
	ts := openTestSource(t, "ratelimit:\n  apply: 1\n")
	ts.PollInterval = time.Hour
	stop := watching(t, ts.Source)
	neighbour := filepath.Join(filepath.Dir(ts.path), "bindery.db-wal")
	for i := range 20 {
		write(t, neighbour, strings.Repeat("x", i))
		time.Sleep(5 * time.Millisecond) // the behaviour: a busy neighbour, writing over the debounce
	}
	time.Sleep(3 * debounce) // the behaviour: past the debounce, a re-read would have happened by now
	write(t, ts.path, "ratelimit:\n  apply: 2\n")
	waitLimit(t, ts.Source, 2)
	stop()
	if n := ts.reads.Load(); n != 1 {
		t.Fatalf("the config was read %d times for one edit among 20 neighbour writes", n)
	}
}

// A sign-in link that cannot work is dropped and reported (the loader warns on a fallback),
// never offered to a person.
func TestALoginURLThatIsNotAnAbsoluteHTTPURLIsIgnoredAndReported(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"login.example.com", "/sso", "ftp://login.example.com/", "javascript:alert(1)"} {
		s := MustParse("server:\n  loginURL: " + strconv.Quote(bad) + "\n")
		if r := reportFor(t, s, "server.loginURL"); s.LoginURL() != "" || r.Status != StatusFallback || r.Note == "" {
			t.Errorf("%q: LoginURL %q, report %+v", bad, s.LoginURL(), r)
		}
	}
	if s := MustParse("server:\n  loginURL: https://login.example.com/\n"); reportFor(t, s, "server.loginURL").Status != StatusSet {
		t.Errorf("a valid URL: %+v", reportFor(t, s, "server.loginURL"))
	}
}

// A target's expiry is written in days as people think of access ("30d"), or as a duration;
// anything else refuses the catalog.
func TestATargetsExpiryIsWrittenInDays(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ttl  string
		want time.Duration
		ok   bool
	}{{"30d", 30 * 24 * time.Hour, true}, {"720h", 720 * time.Hour, true}, {"0d", 0, true}, {"", 0, true},
		{"1.5d", 0, false}, {"-3d", 0, false}, {"d", 0, false}, {"30 days", 0, false}} {
		s, err := Parse([]byte("targets:\n  - key: a\n    project: a/b\n    path: \"x/{subject}.yaml\"\n    ttl: \"" + c.ttl + "\"\n"))
		if !c.ok {
			if err == nil {
				t.Errorf("ttl %q: loaded, want refused", c.ttl)
			}
			continue
		}
		if err != nil {
			t.Errorf("ttl %q: %v", c.ttl, err)
			continue
		}
		if got := s.Targets()[0].TTL; got != c.want {
			t.Errorf("ttl %q: %v, want %v", c.ttl, got, c.want)
		}
	}
}

// A target's owners are identities or groups (group:NAME), and its reviews key says how often a
// review starts by itself and how long its reviewers have; a wrong value refuses the catalog.
func TestATargetsOwnersAndReviews(t *testing.T) {
	t.Parallel()
	target := "targets:\n  - key: a\n    project: a/b\n    path: \"x/{subject}.yaml\"\n"
	s, err := Parse([]byte(target + "    owners: [carol@example.com, \"group:dba\"]\n    reviews: {every: 90d}\n"))
	if err != nil {
		t.Fatal(err)
	}
	tg := s.Targets()[0]
	if !tg.Owned("carol@example.com", nil) || !tg.Owned("erin@example.com", []string{"web", "dba"}) || tg.Owned("erin@example.com", []string{"web"}) || tg.Owned("dba", nil) {
		t.Errorf("owners %v", tg.Owners)
	}
	if tg.ReviewEvery != 90*24*time.Hour || tg.ReviewDue != DefaultReviewDue {
		t.Errorf("reviews every %v, due %v", tg.ReviewEvery, tg.ReviewDue)
	}
	for _, bad := range []string{"    owners: [\"group:\"]\n", "    owners: [\"\"]\n", "    reviews: {every: soon}\n", "    reviews: {every: 1m}\n", "    reviews: {often: 90d}\n", "    reviews: 90d\n"} {
		if _, err := Parse([]byte(target + bad)); err == nil {
			t.Errorf("%q: loaded, want refused", bad)
		}
	}
}
