package notify

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"bindery/internal/platform/config"
	"bindery/internal/testkit"
	"bindery/internal/vocab/state"
	"bindery/internal/work/service/servicetest"
	"bindery/store"
	"bindery/store/storetest"
)

// The watch tells the news that is a matter of time once per request's stay — a deploy
// callback overdue, an approval waiting too long — however many instances look and however
// often; it counts what the alert rules read, and purges old attempts.
func TestTheWatchTellsOverdueRequestsOnce(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		rc := newReceiver(t, nil)
		yaml := webhookConfig("ops", rc.URL, "[deploy.overdue, request.needs_attention]") + "  keepAttempts: 1ms\nreconcile:\n  deployOverdue: 1ms\napproval:\n  timeout: 1ms\n"
		src := config.NewStatic(config.MustParse(yaml))
		a := startEnv(t, db, src, "i-1")
		b := startEnv(t, db, src, "i-2")
		apply(t, db, "op-merged", "alice@example.com", toInEffect[:6]...)
		apply(t, db, "op-waiting", "bob@example.com", toInEffect[:1]...)
		dbClockPasses(t, db, 2*time.Millisecond) // past both overdue bounds (1 ms)
		set := metrics.NewSet()
		wa, wb := a.n.NewWatch(15*time.Second, set), b.n.NewWatch(15*time.Second, nil)
		for range 3 {
			if _, err := wa.RunOnce(bg); err != nil {
				t.Fatal(err)
			}
			if _, err := wb.RunOnce(bg); err != nil {
				t.Fatal(err)
			}
		}
		settled(t, db)
		var types []string
		for _, h := range rc.got() {
			b := body(t, h)
			types = append(types, b["type"].(string)+" "+b["data"].(map[string]any)["operationId"].(string)+" "+b["data"].(map[string]any)["reason"].(string))
		}
		slices.Sort(types)
		if !slices.Equal(types, []string{"deploy.overdue op-merged deploy", "request.needs_attention op-waiting approval"}) {
			t.Fatalf("told %q", types)
		}
		if _, err := wa.RunOnce(bg); err != nil {
			t.Fatal(err)
		}
		c := wa.Counts()
		if c.DeploysOverdue != 1 || c.NeedingAttention != 2 || c.PendingSends != 0 {
			t.Fatalf("counts %+v", c)
		}
		var out strings.Builder
		set.WritePrometheus(&out)
		for _, want := range []string{"bindery_deploys_overdue 1", "bindery_requests_needing_attention 2", "bindery_batches_blocked 0", "bindery_config_refused_keys 0"} {
			if !strings.Contains(out.String(), want) {
				t.Fatalf("gauges without %q:\n%s", want, out.String())
			}
		}
		// The request moved on and came back: a new stay, told again.
		cur, _ := db.Request(bg, "op-waiting")
		if _, err := db.Transition(bg, cur, store.Change{To: state.StatusApprovalSent, Step: state.StepApprovalSent, Note: "asked again"}); err != nil {
			t.Fatal(err)
		}
		dbClockPasses(t, db, 2*time.Millisecond) // the new stay is past the bound too
		if _, err := wb.RunOnce(bg); err != nil {
			t.Fatal(err)
		}
		settled(t, db)
		if n := len(rc.got()); n != 3 {
			t.Fatalf("%d deliveries after a new stay, want 3", n)
		}
		// Attempts older than notify.keepAttempts (1ms) are purged by the next look.
		dbClockPasses(t, db, 2*time.Millisecond)
		if _, err := wa.RunOnce(bg); err != nil {
			t.Fatal(err)
		}
		if c := count(t, db, "SELECT COUNT(*) FROM notify_attempt"); c != 0 {
			t.Fatalf("%d attempts kept past notify.keepAttempts", c)
		}
		if c := count(t, db, "SELECT COUNT(*) FROM notify_delivery WHERE status = 'delivered'"); c != 3 {
			t.Fatalf("deliveries purged with their attempts: %d left", c)
		}
	})
}

// A BLOCKED batch counts from its batch.blocked event.
func TestTheWatchCountsBlockedBatches(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := newEnv(t, db, "notify:\n  mrNotes: false\n")
		if _, err := db.Raw().ExecContext(bg, "INSERT INTO merge_batch (partition_key, project, status) VALUES ('infra/acl', 'infra/acl', 'RUNNING')"); err != nil {
			t.Fatal(err)
		}
		b, err := db.Batch(bg, 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.UpdateBatch(bg, b, store.BatchChange{Status: state.BatchBlocked, Note: "a thread"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // the behaviour: the batch stays blocked 50 ms, which the watch measures
		w := e.n.NewWatch(15*time.Second, nil)
		if _, err := w.RunOnce(bg); err != nil {
			t.Fatal(err)
		}
		if c := w.Counts(); c.BatchesBlocked != 1 || c.BlockedLongest < 40*time.Millisecond || c.BlockedLongest > time.Minute {
			t.Fatalf("counts %+v", c)
		}
	})
}

// twoInstances writes content as a configuration file and starts two instances' notifiers on it,
// each with its own Source (each reloads on its own, as processes do); it returns the file's path
// and the sources.
func twoInstances(t *testing.T, db *store.DB, content string) (string, []*config.Source) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	var srcs []*config.Source
	for i := range 2 {
		src, err := config.Open(path, slog.New(slog.DiscardHandler), nil)
		if err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, src)
		startEnv(t, db, src, "i-"+string(rune('1'+i)))
	}
	return path, srcs
}

// A refused configuration — a whole file, or keys of one — is told to operators once, however
// many instances refuse it.
func TestARefusedConfigurationIsToldOnce(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		rc := newReceiver(t, nil)
		good := webhookConfig("ops", rc.URL, "[config.refused]")
		path, srcs := twoInstances(t, db, good)
		// A key refused (a bad secret beside the good endpoint): told once for both instances.
		bad := good + "  email: {smtp: \"nowhere\", from: \"x@example.com\"}\n"
		if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, s := range srcs {
			if err := s.Reload(); err != nil {
				t.Fatal(err)
			}
		}
		// A file that does not parse: told once too.
		if err := os.WriteFile(path, []byte("notify: [\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, s := range srcs {
			_ = s.Reload()
		}
		settled(t, db)
		hits := rc.got()
		if len(hits) != 2 {
			t.Fatalf("%d config.refused deliveries, want 2 (the key, the file)", len(hits))
		}
		var keyed, file map[string]any
		for _, h := range hits {
			data := body(t, h)["data"].(map[string]any)
			if _, ok := data["keys"]; ok {
				keyed = data
			} else {
				file = data
			}
		}
		if keys, _ := keyed["keys"].([]any); len(keys) != 1 || keys[0] != "notify.email" || !strings.Contains(keyed["why"].(string), "host:port") {
			t.Fatalf("the refused key's news %v", keyed)
		}
		if file == nil || !strings.Contains(file["why"].(string), "parse") {
			t.Fatalf("the refused file's news %v", file)
		}
	})
}

// The watch keeps the start/stop contract of package service: stopped before it starts it
// never starts; started, it looks at once (the gauges count), and its Stop ends its goroutine.
func TestTheWatchIsAService(t *testing.T) {
	db := storetest.SQLite(t)
	e := newEnv(t, db, "notify:\n  mrNotes: false\n")
	servicetest.StoppedBeforeStart(t, e.n.NewWatch(15*time.Second, nil))
	if _, err := db.Raw().ExecContext(bg, "INSERT INTO merge_batch (partition_key, project, status) VALUES ('p', 'p', 'BLOCKED')"); err != nil {
		t.Fatal(err)
	}
	w := e.n.NewWatch(15*time.Second, nil)
	servicetest.StartedAndStoppedTwice(t, w, func() {
		testkit.Eventually(t, "the first look", func() bool { return w.Counts().BatchesBlocked == 1 })
	})
}

// dbClockPasses waits until the database clock is d past what it says now: the watch measures
// its bounds by that clock.
func dbClockPasses(t *testing.T, db *store.DB, d time.Duration) {
	t.Helper()
	start, err := db.Now(bg)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the database clock to move on by "+d.String(), func() bool {
		now, err := db.Now(bg)
		return err == nil && now.Sub(start) > d
	})
}

// A reload that removes targets bindings still use is told to operators once, however many
// instances take it: the keys with how many bindings are in flight and in effect. A target
// removed that nothing uses is not news, and neither is a reload that removes nothing.
func TestAReloadThatRemovesTargetsInUseIsToldOnce(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		rc := newReceiver(t, nil)
		hooks := webhookConfig("ops", rc.URL, "[config.targets_removed]")
		catalog := func(keys ...string) string {
			var b strings.Builder
			b.WriteString("targets:\n")
			for _, k := range keys {
				fmt.Fprintf(&b, "  - {key: %s, project: infra/%s, path: \"bindings/%s/{subject}.yaml\"}\n", k, k, k)
			}
			return b.String()
		}
		path, srcs := twoInstances(t, db, hooks+catalog("kept", "leaving", "unused"))
		// leaving: two bindings in effect, one on its way, one closed (not in use).
		for i, st := range []state.BindingStatus{state.StatusValidated, state.StatusValidated, state.StatusMRCreating, state.StatusClosed} {
			if _, err := db.Raw().ExecContext(bg, "INSERT INTO binding (subject_id, target_key, status, operation_id) VALUES (?, 'leaving', ?, ?)",
				fmt.Sprintf("s%d", i), st, fmt.Sprintf("op-%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		reload := func(content string) {
			t.Helper()
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, s := range srcs {
				if err := s.Reload(); err != nil {
					t.Fatal(err)
				}
			}
		}
		reload(hooks + catalog("kept", "leaving"))                                                                                // unused removed: no news
		reload(hooks + strings.Replace(catalog("kept", "leaving"), "project: infra/kept", "title: Kept, project: infra/kept", 1)) // nothing removed: no news
		reload(hooks + catalog("kept"))                                                                                           // leaving removed, in use
		settled(t, db)
		hits := rc.got()
		if len(hits) != 1 {
			t.Fatalf("%d config.targets_removed deliveries, want 1", len(hits))
		}
		b := body(t, hits[0])
		data := b["data"].(map[string]any)
		targets, _ := data["targets"].([]any)
		if b["type"] != "config.targets_removed" || len(targets) != 1 {
			t.Fatalf("the news: %v", b)
		}
		if tu := targets[0].(map[string]any); tu["key"] != "leaving" || tu["inFlight"] != float64(1) || tu["inEffect"] != float64(2) {
			t.Fatalf("the removed target told: %v", tu)
		}
	})
}
