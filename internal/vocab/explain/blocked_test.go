package explain

import (
	"strings"
	"testing"
	"time"
)

// A held merge is told as one story from the note bindery recorded: what holds it, who of the
// project must act and where, and when bindery goes on — bounded by the poll interval.
func TestAHeldMergeSaysWhoMustActAndWhere(t *testing.T) {
	const project = "infra/access-config"
	got, ok := MergeBlocked(BlockerNote("discussions_not_resolved", 4), project, 30*time.Second)
	want := "merge request !4 has an unresolved discussion: a maintainer of infra/access-config must resolve it in GitLab; bindery merges within a minute after"
	if !ok || got.Text() != want || got.MR != 4 || got.Label() != "Merge blocked: unresolved discussion" {
		t.Errorf("discussion: %q (MR %d, %q)", got.Text(), got.MR, got.Label())
	}
	// The batch's task note and the step's carry the same words, with or without a prefix.
	if b, _ := MergeBlocked("BLOCKED: "+BlockerNote("draft_status", 9), project, 30*time.Second); b.Text() != "merge request !9 is marked as draft: a maintainer of infra/access-config must mark it ready in GitLab; bindery merges within a minute after" {
		t.Errorf("draft: %q", b.Text())
	}
	if b, _ := MergeBlocked(BlockerNote("merge_time", 2), project, 5*time.Minute); b.Text() != "merge request !2 may only be merged after a set time: nobody needs to act; bindery merges within 5 minutes after that time" {
		t.Errorf("merge time: %q", b.Text())
	}
	// A status bindery has no words for keeps GitLab's status word, and nothing else of the answer.
	if b, ok := MergeBlocked(BlockerNote("brand_new", 3), project, time.Minute); !ok || b.MR != 3 || !strings.Contains(b.Text(), `"brand_new"`) || !strings.Contains(b.Text(), "a maintainer of "+project) {
		t.Errorf("unknown: %q", b.Text())
	}
	if n := BlockerNote("<script>alert(1)</script>", 3); strings.Contains(n, "script") {
		t.Errorf("GitLab's text reached the note: %q", n)
	}
	// A note in other words (recorded before these, or a batch blocked for an operator) still
	// names who acts, and the MR; ok says it is not one of these.
	if b, ok := MergeBlocked("a discussion on MR !5 must be resolved", project, 30*time.Second); ok || b.MR != 5 || !strings.HasPrefix(b.Text(), "a discussion on MR !5 must be resolved: a maintainer of infra/access-config must") {
		t.Errorf("older note: %q", b.Text())
	}
	for _, b := range blockers {
		note := BlockerNote(b.status, 77)
		back, ok := MergeBlocked(note, project, time.Hour)
		if !ok || back.What != note || back.MR != 77 || back.Short != b.short || !strings.HasSuffix(back.Text(), "bindery merges within an hour after") && b.who != "" {
			t.Errorf("%s: %q read back as %+v", b.status, note, back)
		}
	}
}
