package config

import (
	"strings"
	"testing"
)

// The sample file cut short anywhere is never installed half: a cut either does not parse, or is
// refused (the last good configuration stays, the error is kept for the ops console and counted),
// or it still has every section, its catalog and every secret of the file in force.
func TestAFileCutShortIsNeverInstalledHalf(t *testing.T) {
	full := string(Sample)
	ts := openTestSource(t, full)
	good := ts.Current()
	refused := 0
	for pct := 5; pct < 100; pct += 5 {
		cut := full[:len(full)*pct/100]
		write(t, ts.path, cut)
		err := ts.Reload()
		cur := ts.Current()
		if err != nil {
			if cur != good {
				t.Fatalf("%d%%: a failed reload replaced the configuration", pct)
			}
			if ts.LastError() == nil {
				t.Fatalf("%d%%: the error is not kept for the ops console", pct)
			}
			if strings.Contains(err.Error(), "cut short") {
				refused++
			}
			continue
		}
		if halfFile(good, cur) != nil || len(cur.Targets()) == 0 || len(cur.ApprovalSecret()) == 0 {
			t.Fatalf("%d%% of the file was installed: %d targets, sections %v", pct, len(cur.Targets()), cur.sections)
		}
		// Accepted (the cut only lost trailing keys): go back to the whole file.
		write(t, ts.path, full)
		if err := ts.Reload(); err != nil {
			t.Fatal(err)
		}
		good = ts.Current()
	}
	if refused < 10 {
		t.Fatalf("only %d cuts were refused as cut short", refused)
	}
	if got := ts.metric("bindery_config_reload_errors_total"); got == "" || got == "0" {
		t.Fatalf("reload errors metric = %q", got)
	}
}

// What the guard refuses, and how a file says it means it.
func TestHalfAFileIsRefusedUnlessItSaysSo(t *testing.T) {
	const base = `
hooks:
  approvalSecret: s3cret
  deployToken: dtok
ratelimit:
  apply: 3
targets:
  - {key: t1, title: T1, project: a/b, path: "x/{subject}.yaml"}
`
	for _, c := range []struct {
		name, file, refusal string
	}{
		{"a section gone", "hooks:\n  approvalSecret: s3cret\n  deployToken: dtok\ntargets:\n  - {key: t1, title: T1, project: a/b, path: \"x/{subject}.yaml\"}\n", `"ratelimit" section`},
		{"the catalog emptied", "hooks:\n  approvalSecret: s3cret\n  deployToken: dtok\nratelimit:\n  apply: 3\ntargets:\n", "empty the catalog"},
		{"the catalog emptied on purpose", "hooks:\n  approvalSecret: s3cret\n  deployToken: dtok\nratelimit:\n  apply: 3\ntargets: []\n", ""},
		{"a secret blanked", "hooks:\n  approvalSecret:\n  deployToken: dtok\nratelimit: {}\ntargets:\n  - {key: t1, title: T1, project: a/b, path: \"x/{subject}.yaml\"}\n", "blank hooks.approvalSecret"},
		{"a secret left out", "hooks:\n  deployToken: dtok\nratelimit: {}\ntargets:\n  - {key: t1, title: T1, project: a/b, path: \"x/{subject}.yaml\"}\n", "blank hooks.approvalSecret"},
		{"a secret blanked on purpose", "hooks:\n  approvalSecret: \"\"\n  deployToken: dtok\nratelimit: {}\ntargets:\n  - {key: t1, title: T1, project: a/b, path: \"x/{subject}.yaml\"}\n", ""},
		{"a section dropped on purpose", "hooks:\n  approvalSecret: s3cret\n  deployToken: dtok\nratelimit: {}\ntargets:\n  - {key: t1, title: T1, project: a/b, path: \"x/{subject}.yaml\"}\n", ""},
		{"the catalog left out", "hooks:\n  approvalSecret: s3cret\n  deployToken: dtok\nratelimit:\n  apply: 3\n", "empty the catalog"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts := openTestSource(t, base)
			write(t, ts.path, c.file)
			err := ts.Reload()
			switch {
			case c.refusal == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.refusal != "" && (err == nil || !strings.Contains(err.Error(), c.refusal)):
				t.Fatalf("reload = %v, want a refusal naming %q", err, c.refusal)
			case c.refusal != "" && (ts.Current().RateLimit("ratelimit.apply", 10) != 3 || ts.LastError() == nil):
				t.Fatal("the refused file changed the configuration, or its error is not kept")
			}
		})
	}
}

// A section emptied on purpose (`ratelimit: {}`) may then be deleted: only a section that held
// keys is missed.
func TestASectionEmptiedOnPurposeCanThenGo(t *testing.T) {
	ts := openTestSource(t, "ratelimit:\n  apply: 3\nlog:\n  level: info\n")
	for _, step := range []string{"ratelimit: {}\nlog:\n  level: info\n", "log:\n  level: info\n"} {
		write(t, ts.path, step)
		if err := ts.Reload(); err != nil {
			t.Fatalf("%q: %v", step, err)
		}
	}
}
