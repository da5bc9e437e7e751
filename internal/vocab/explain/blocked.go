package explain

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// A merge GitLab holds for something only a person can clear (docs/gitlab.md, 'Blockers a person
// clears') is told one way everywhere — the request page, its badge, the ops console's lists and
// the notifications: what holds it, who must act and where, and when bindery goes on after.

// blocker is the words of one reason GitLab gives: what holds the merge request (%[1]s: "merge
// request !4"), who must act (%[2]s: the project) and what they do; short is the badge's words.
// who "": nobody needs to act (a set time).
type blocker struct {
	status, what, who, do, short string
}

// blockers lists GitLab's detailed_merge_status values bindery cannot clear itself, and two
// reasons of bindery's own: GitLab refused the merge with nothing reported in the way
// ("refused"), and it kept computing mergeability past poll.timeout ("checking").
var blockers = []blocker{
	{"discussions_not_resolved", "%[1]s has an unresolved discussion", "a maintainer of %[2]s", "resolve it in GitLab", "unresolved discussion"},
	{"draft_status", "%[1]s is marked as draft", "a maintainer of %[2]s", "mark it ready in GitLab", "marked as draft"},
	{"requested_changes", "a reviewer requested changes on %[1]s", "that reviewer or a maintainer of %[2]s", "approve it or withdraw the request for changes in GitLab", "changes requested"},
	{"not_approved", "%[1]s needs approvals from people other than bindery's reviewer accounts", "an approver of %[2]s", "approve it in GitLab", "approvals missing"},
	{"merge_request_blocked", "%[1]s depends on another merge request that has not merged", "a maintainer of %[2]s", "merge that one first or remove the dependency in GitLab", "waits for another merge request"},
	{"status_checks_must_pass", "the external status checks of %[1]s have not passed", "the owner of those checks or a maintainer of %[2]s", "make them pass in GitLab", "status checks not passed"},
	{"jira_association_missing", "%[1]s does not name a Jira issue", "a maintainer of %[2]s", "add the issue key to its title or description in GitLab", "Jira issue missing"},
	{"security_policy_violations", "a security policy of the project blocks %[1]s", "a maintainer of %[2]s", "resolve the policy violation in GitLab", "security policy"},
	{"locked_paths", "%[1]s changes files someone has locked", "whoever holds the lock or a maintainer of %[2]s", "unlock them in GitLab", "locked files"},
	{"locked_lfs_files", "%[1]s changes LFS files someone has locked", "whoever holds the lock or a maintainer of %[2]s", "unlock them in GitLab", "locked files"},
	{"commits_status", "a commit of %[1]s is not allowed by the project's push rules", "a maintainer of %[2]s", "allow it in the push rules in GitLab", "push rules"},
	{"merge_time", "%[1]s may only be merged after a set time", "", "", "merge time not reached"},
	{"refused", "GitLab refused to merge %[1]s several times although it reports nothing in the way", "a maintainer of %[2]s", "find out in GitLab what holds it", "GitLab refuses the merge"},
	{"checking", "GitLab kept computing whether %[1]s can be merged for longer than expected", "a maintainer of %[2]s", "look at it in GitLab", "GitLab still checking"},
}

// unknownBlocker is a status bindery has no words for: GitLab's status word, as GitLab reports it.
var unknownBlocker = blocker{"", `GitLab holds %[1]s (it reports it as "%[3]s")`, "a maintainer of %[2]s", "clear that in GitLab", "held in GitLab"}

// statusWord is what a GitLab merge status looks like: the only part of GitLab's answer a
// requester reads.
var statusWord = regexp.MustCompile(`^[a-z][a-z_]{0,63}$`)

func mrWords(iid int64) string { return "merge request !" + strconv.FormatInt(iid, 10) }

// BlockerNote is what bindery records of merge request !iid held by GitLab at status (the step's
// and the batch's note), in plain words a requester may read: "merge request !4 has an
// unresolved discussion". MergeBlocked reads it back.
func BlockerNote(status string, iid int64) string {
	for _, b := range blockers {
		if b.status == status {
			return fmt.Sprintf(b.what, mrWords(iid))
		}
	}
	if !statusWord.MatchString(status) {
		status = "blocked"
	}
	return fmt.Sprintf(unknownBlocker.what, mrWords(iid), "", status)
}

// Blocker is a merge held by something only a person can clear, as people read it.
type Blocker struct {
	MR    int64  // the merge request's number (0: not known from the note)
	What  string // what holds it: "merge request !4 has an unresolved discussion"
	Who   string // who must act: "a maintainer of infra/access-config" ("": nobody)
	Do    string // what they do, and where: "resolve it in GitLab"
	Short string // the badge's words: "unresolved discussion"
	After string // when bindery goes on: "bindery merges within a minute after"
}

// Text is the whole story in one sentence, without a final period: "merge request !4 has an
// unresolved discussion: a maintainer of infra/access-config must resolve it in GitLab; bindery
// merges within a minute after".
func (b Blocker) Text() string {
	if b.Who == "" {
		return b.What + ": nobody needs to act; " + b.After + " that time"
	}
	return b.What + ": " + b.Who + " must " + b.Do + "; " + b.After
}

// Label is the badge of a request held by it: "Merge blocked: unresolved discussion".
func (b Blocker) Label() string { return "Merge blocked: " + b.Short }

// notePatterns read a note BlockerNote wrote back into its blocker.
var notePatterns = func() []*regexp.Regexp {
	out := make([]*regexp.Regexp, len(blockers)+1)
	for i, b := range append(blockers[:len(blockers):len(blockers)], unknownBlocker) {
		p := regexp.QuoteMeta(fmt.Sprintf(b.what, "\x00", "", "\x01"))
		p = strings.Replace(p, "\x00", `merge request !(\d{1,18})`, 1)
		p = strings.Replace(p, "\x01", `([a-z][a-z_]{0,63})`, 1)
		out[i] = regexp.MustCompile(`(?:^|: )` + p + `(?:$|[;.])`)
	}
	return out
}()

// anyMR finds a merge request's number in a note bindery wrote before it wrote BlockerNote's words.
var anyMR = regexp.MustCompile(`(?:\bMR|\bmerge request) !(\d{1,18})\b`)

// MergeBlocked reads the note of a merge held for a person (the step HANDLE_MR_BLOCKED's, or its
// BLOCKED batch's) into the story people read: what holds it, who of project must act, where,
// and when bindery goes on — poll is the longest time between two looks at a held merge request
// (poll.long; a GitLab webhook wakes it sooner). ok: the note is BlockerNote's; a note of other
// words keeps them as what holds it, and a maintainer of the project is the one to act.
func MergeBlocked(note, project string, poll time.Duration) (b Blocker, ok bool) {
	after := "bindery merges within " + within(poll) + " after"
	for i, p := range notePatterns {
		m := p.FindStringSubmatch(note)
		if m == nil {
			continue
		}
		b := unknownBlocker
		if i < len(blockers) {
			b = blockers[i]
		}
		iid, _ := strconv.ParseInt(m[1], 10, 64)
		status := ""
		if len(m) > 2 {
			status = m[2]
		}
		out := Blocker{MR: iid, What: fmt.Sprintf(b.what, mrWords(iid), "", status), Short: b.short, After: after}
		if b.who != "" {
			out.Who, out.Do = fmt.Sprintf(b.who, "", project), b.do
		}
		return out, true
	}
	out := Blocker{What: strings.TrimSuffix(strings.TrimPrefix(note, "BLOCKED: "), "."), Who: "a maintainer of " + project,
		Do: "clear it in GitLab", Short: "a person must act in GitLab", After: after}
	if m := anyMR.FindStringSubmatch(note); m != nil {
		out.MR, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if out.What == "" {
		out.What = "GitLab does not merge the merge request"
	}
	return out, false
}

// within says a poll interval as an upper bound people read: "a minute" up to one.
func within(poll time.Duration) string {
	switch {
	case poll <= time.Minute:
		return "a minute"
	case poll < time.Hour:
		m := int((poll + time.Minute - 1) / time.Minute)
		return strconv.Itoa(m) + " minutes"
	}
	h := int((poll + time.Hour - 1) / time.Hour)
	if h == 1 {
		return "an hour"
	}
	return strconv.Itoa(h) + " hours"
}
