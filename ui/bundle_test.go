package ui_test

import (
	"regexp"
	"strings"
	"testing"

	"bindery/ui/bundle"
)

// TestCommittedBundleIsWhatTheSourceBuilds fails when ui/src changed without `go run ./ui/build`
// (or ui/dist was edited by hand): the binary embeds ui/dist, so the two must agree.
func TestCommittedBundleIsWhatTheSourceBuilds(t *testing.T) {
	t.Parallel()
	files, err := bundle.Build(".")
	if err != nil {
		t.Fatal(err)
	}
	diffs, err := bundle.Diff("dist", files)
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) > 0 {
		t.Fatalf("ui/dist is stale; run `go run ./ui/build` and commit:\n  %s", strings.Join(diffs, "\n  "))
	}
	// The index names only hashed assets, the recovery listener first, and holds no inline
	// script, style or event handler (the content policy would refuse them).
	index := string(files["index.html"])
	rec, css, js := strings.Index(index, `<script src="/assets/recovery-`), strings.Index(index, `href="/assets/app-`), strings.Index(index, `src="/assets/app-`)
	if rec < 0 || css < 0 || js < 0 || rec > css || rec > js {
		t.Fatalf("index.html must load the recovery script before the hashed stylesheet and script:\n%s", index)
	}
	if inline := regexp.MustCompile(`(?i)<script(\s[^>]*)?>[^<]|<style|\sstyle=|\son[a-z]+=`).FindString(index); inline != "" {
		t.Fatalf("index.html has inline code (%q):\n%s", inline, index)
	}
	var recovery []byte
	for name, data := range files {
		if strings.HasPrefix(name, "assets/recovery-") {
			recovery = data
		}
	}
	if !strings.Contains(string(recovery), "bindery.autoReloadAt") {
		t.Fatalf("no recovery script among the assets")
	}
}
