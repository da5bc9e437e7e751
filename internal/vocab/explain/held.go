package explain

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// The sentences of a request held in its project's merge train, the same on the request page,
// in "My requests" and in the news: an operator's pause of the queue, a blocked batch ahead of
// it (docs/workflow.md, 'The merge train').

// Clock says a time of the database clock for people: "08:06 UTC" on now's day, with the date
// otherwise. The zone is named: an operator's pause or a blocked batch is read by people in
// other zones than the server's.
func Clock(t, now time.Time) string {
	t, now = t.UTC(), now.UTC()
	if t.Year() == now.Year() && t.YearDay() == now.YearDay() {
		return t.Format("15:04") + " UTC"
	}
	return t.Format("Jan 2 15:04") + " UTC"
}

// Pause is an operator's pause of a project's queue.
type Pause struct {
	Project, By, Reason string
	Since               time.Time
}

// Words say who paused the queue, why (the reason says until when, when the operator wrote it)
// and since when: "paused by ops@example.com: release freeze until 18:00 (since 16:53 UTC)".
func (p Pause) Words(now time.Time) string {
	return fmt.Sprintf("paused by %s: %s (since %s)", p.By, p.Reason, Clock(p.Since, now))
}

// Requester is the sentence a requester reads of a request the pause holds.
func (p Pause) Requester(now time.Time) string {
	return fmt.Sprintf("Your request waits: the queue of %s is %s. It goes on when an operator resumes the queue.", p.Project, p.Words(now))
}

// Behind is a blocked batch a request waits behind: its number, since when it is blocked, and
// what holds it (a merge held for a person, or why else it is blocked).
type Behind struct {
	BatchID int64
	Since   time.Time
	Why     string
}

// Words: "behind blocked batch 7 since 08:06 UTC: <why>".
func (b Behind) Words(now time.Time) string {
	return fmt.Sprintf("behind blocked batch %d since %s: %s", b.BatchID, Clock(b.Since, now), b.Why)
}

// Requester is the sentence a requester reads of a request behind a blocked batch.
func (b Behind) Requester(now time.Time) string {
	return "Your request waits " + b.Words(now) + ". It goes on once that is cleared, or an operator settles the batch."
}

// flakyRetried marks the note of a flaky retry (FlakyRetryNote).
const flakyRetried = "trying it once more on the same commit (flaky retry"

// FlakyRetryNote is what a batch writes on its members' timelines when their pipeline failed
// and runs once more (batch.flakyRetries): "pipeline 12 (<url>) failed; trying it once more on
// the same commit (flaky retry 1 of 1)".
func FlakyRetryNote(pipeline string, n, of int) string {
	return fmt.Sprintf("%s failed; %s %d of %d)", pipeline, flakyRetried, n, max(n, of))
}

// IsFlakyRetry reports whether a step's note is a FlakyRetryNote.
func IsFlakyRetry(note string) bool { return strings.Contains(note, flakyRetried) }

// FlakyRetry is what a requester reads while the pipeline that failed runs once more
// (batch.flakyRetries): not "waiting for the pipeline", as if nothing had happened.
const FlakyRetry = "The pipeline failed; bindery is trying it once more on the same commit (a flaky retry). If it passes, your request goes on; nothing to do meanwhile."

// configKey finds a configuration key an operator's sentence names ("approval.pollAfter").
var configKey = regexp.MustCompile(`\b(?:approval|batch|poll|reconcile|notify|support|cron|workers)\.[a-z][A-Za-z]+\b`)

// WithValues gives each configuration key an operator's sentence names its value in force, so
// the sentence can be acted on without opening the configuration: "every approval.pollAfter"
// reads "every approval.pollAfter (15 min)", "(reconcile.deployOverdue)" reads
// "(reconcile.deployOverdue: 10 min)". value says a key's effective value (ok false: unknown, left
// as it is); a Go duration reads in words.
func WithValues(sentence string, value func(key string) (string, bool)) string {
	var b strings.Builder
	last := 0
	for _, m := range configKey.FindAllStringIndex(sentence, -1) {
		key := sentence[m[0]:m[1]]
		v, ok := value(key)
		if !ok || v == "" {
			continue
		}
		if d, err := time.ParseDuration(v); err == nil {
			v = Duration(d)
		}
		b.WriteString(sentence[last:m[1]])
		last = m[1]
		if m[0] > 0 && sentence[m[0]-1] == '(' {
			b.WriteString(": " + v) // inside parentheses already
		} else {
			b.WriteString(" (" + v + ")")
		}
	}
	b.WriteString(sentence[last:])
	return b.String()
}
