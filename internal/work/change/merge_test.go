package change_test

import (
	"strings"
	"testing"

	"bindery/internal/platform/config"
	"bindery/internal/remote/gitlab"
	"bindery/internal/work/change"
)

// Before GitLab 15.6 the MR has no detailed_merge_status: what stands in the way is derived from
// the older fields, in GitLab's order (still computing first, a conflict last).
func TestMergeabilityFromTheOlderFields(t *testing.T) {
	open := gitlab.MergeRequest{State: gitlab.StateOpened, MergeStatus: "can_be_merged", BlockingDiscussionsResolved: true}
	with := func(f func(*gitlab.MergeRequest)) gitlab.MergeRequest { m := open; f(&m); return m }
	for _, c := range []struct {
		mr   gitlab.MergeRequest
		want string
	}{
		{open, ""},
		{with(func(m *gitlab.MergeRequest) { m.DetailedMergeStatus = "need_rebase" }), "need_rebase"},
		{with(func(m *gitlab.MergeRequest) { m.MergeStatus = "unchecked"; m.Draft = true }), "checking"},
		{with(func(m *gitlab.MergeRequest) { m.MergeStatus = "checking" }), "checking"},
		{with(func(m *gitlab.MergeRequest) { m.MergeStatus = "cannot_be_merged_recheck" }), "checking"},
		{with(func(m *gitlab.MergeRequest) { m.Draft = true; m.HasConflicts = true }), "draft_status"},
		{with(func(m *gitlab.MergeRequest) { m.BlockingDiscussionsResolved = false }), "discussions_not_resolved"},
		{with(func(m *gitlab.MergeRequest) { m.HasConflicts = true }), "conflict"},
		{with(func(m *gitlab.MergeRequest) { m.MergeStatus = "cannot_be_merged" }), "conflict"},
	} {
		if got := change.Mergeability(c.mr); got != c.want {
			t.Errorf("Mergeability(%+v) = %q, want %q", c.mr, got, c.want)
		}
	}
}

// Every blocker GitLab reports gets its own plain sentence naming the MR; an unknown one a
// sentence that still says GitLab holds it.
func TestEveryBlockerHasAPlainReason(t *testing.T) {
	generic := change.BlockerReason("something_new", 7)
	if !strings.Contains(generic, "merge request !7") || !strings.Contains(generic, "GitLab holds") {
		t.Fatalf("unknown blocker: %q", generic)
	}
	seen := map[string]string{}
	for _, b := range config.MergeBlockers {
		r := change.BlockerReason(b, 12)
		switch {
		case !strings.Contains(r, "merge request !12"):
			t.Errorf("%s: %q does not name the MR", b, r)
		case strings.Contains(r, b) || r == change.BlockerReason("something_new", 12):
			t.Errorf("%s: %q is GitLab's code, not a sentence", b, r)
		}
		seen[b] = r
	}
	if r := seen["discussions_not_resolved"]; r != "merge request !12 has an unresolved discussion" {
		t.Errorf("discussions: %q", r)
	}
}
