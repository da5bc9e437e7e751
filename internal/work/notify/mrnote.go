package notify

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"bindery/internal/platform/config"
	"bindery/internal/remote/outbound"
	"bindery/internal/vocab/explain"
	"bindery/internal/vocab/state"
	"bindery/store"
)

// The batch's merge request note, as merge bots write it: one note when the merge request opens,
// listing the members with links to their requests, and the same note edited when a bisection
// isolates the change that fails.

// Notes writes merge request notes as bindery's bot (GitLab's notes API; package gitlab).
type Notes interface {
	CreateNote(ctx context.Context, project string, iid int64, body string) (noteID int64, err error)
	UpdateNote(ctx context.Context, project string, iid, noteID int64, body string) error
}

// noteSender writes or edits one merge request's note.
type noteSender struct{ n *Notifier }

func (s noteSender) send(ctx context.Context, d store.Delivery, e store.Event, snap *config.Snapshot) result {
	project, iid, ok := parseMR(d.Target)
	if !ok {
		return result{class: classInternal, err: "the delivery names no merge request", permanent: true}
	}
	id, body, known, err := s.n.db.MRNote(ctx, project, iid)
	if err != nil {
		return result{class: classInternal, err: "the note's record could not be read"}
	}
	l := s.n.links(snap)
	switch e.Type {
	case state.EventBatchOpened:
		body = openedNote(e, l)
	case state.EventBatchCulprit:
		if !known {
			body = fmt.Sprintf("**bindery** batch %d", e.Facts.RootBatch)
		}
		body = withCulprit(body, e, l)
	default:
		return result{class: classInternal, err: "no note for " + string(e.Type), permanent: true}
	}
	if known {
		err = s.n.notes.UpdateNote(ctx, project, iid, id, body)
	} else if id, err = s.n.notes.CreateNote(ctx, project, iid, body); err == nil {
		// Kept at once: an attempt whose outcome is lost after this edits the note next time
		// instead of writing a second one.
		err = s.n.db.KeepMRNote(ctx, project, iid, id, body)
		if err != nil {
			return result{code: 201, class: store.ClassOK, err: "the note was written; its id was not kept"}
		}
		return result{code: 201, class: store.ClassOK}
	}
	if err == nil {
		if kerr := s.n.db.KeepMRNote(ctx, project, iid, id, body); kerr != nil {
			return result{code: 200, class: store.ClassOK, err: "the note was edited; its text was not kept"}
		}
		return result{code: 200, class: store.ClassOK}
	}
	return noteFailure(err)
}

// noteFailure classifies a failed GitLab call: a merge request or note that is gone cannot be
// written again; anything temporary is tried again by the schedule.
func noteFailure(err error) result {
	var oe *outbound.Error
	if !errors.As(err, &oe) {
		return result{class: classInternal, err: "the note could not be written"}
	}
	switch oe.Kind {
	case outbound.KindStatus:
		r := result{code: oe.Status, class: classStatus, err: fmt.Sprintf("GitLab answered %d", oe.Status), retryAfter: oe.RetryAfter}
		r.permanent = oe.Status == 404 || oe.Status == 403 || oe.Status == 400 || oe.Status == 422
		return r
	case outbound.KindTimeout:
		return result{class: classTimeout, err: "GitLab gave no answer in time"}
	}
	return result{class: classConnect, err: "GitLab could not be reached (" + string(oe.Kind) + ")"}
}

// parseMR reads "project!iid".
func parseMR(target string) (string, int64, bool) {
	i := strings.LastIndexByte(target, '!')
	if i <= 0 {
		return "", 0, false
	}
	iid, err := strconv.ParseInt(target[i+1:], 10, 64)
	return target[:i], iid, err == nil && iid > 0
}

// openedNote lists the batch's members with links to their requests.
func openedNote(e store.Event, l explain.Links) string {
	f := e.Facts
	var b strings.Builder
	fmt.Fprintf(&b, "**bindery** batch %d carries %d %s:\n\n", f.BatchID, len(f.Members), plural(len(f.Members), "change"))
	for _, op := range f.Members {
		fmt.Fprintf(&b, "- [%s](%s)\n", op, l.Request(op))
	}
	b.WriteString("\nbindery merges this merge request once its pipeline passes; a failing change is isolated by bisection and named here.")
	return b.String()
}

// culpritMark starts the part of the note a bisection adds.
const culpritMark = "\n\n---\n**Bisection isolated the change that fails:** "

// withCulprit is the note with the isolated change named (again: the part is replaced, never
// added twice).
func withCulprit(note string, e store.Event, l explain.Links) string {
	f := e.Facts
	if i := strings.Index(note, culpritMark); i >= 0 {
		note = note[:i]
	}
	return note + culpritMark + fmt.Sprintf("[%s](%s) — batch %d failed with it alone, after %d %s; the other changes go on without it.",
		f.Culprit, l.Request(f.Culprit), f.BatchID, f.Bisections, plural(f.Bisections, "bisection"))
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
