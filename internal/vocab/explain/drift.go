package explain

import (
	"fmt"
	"time"
)

// Drift is what people read of a drift finding (docs/drift.md): kind is missing, changed or
// unknown; what is the target's title (or key); commit, author and at say who removed a missing
// file, when the repository says it.

// DriftRemoved tells the requester of a binding whose file was removed outside bindery:
// "Your access to X was removed outside bindery by commit abc1234 (A. Person) on 12-03."
func DriftRemoved(what, commit, author string, at *time.Time) string {
	s := "Your access to " + what + " was removed outside bindery"
	if commit != "" {
		s += " by commit " + short(commit)
		if author != "" {
			s += " (" + author + ")"
		}
	}
	if at != nil && !at.IsZero() {
		s += " on " + at.UTC().Format("01-02")
	}
	return s + ". bindery shows it in effect until an operator restores the file or accepts its removal."
}

// DriftFound is a finding in the operators' words, one sentence.
func DriftFound(kind, targetKey, subject, path, commit, author string) string {
	switch kind {
	case "missing":
		by := ""
		if commit != "" {
			by = " by commit " + short(commit)
			if author != "" {
				by += " (" + author + ")"
			}
		}
		return fmt.Sprintf("The file of %s for %s (%s) was removed outside bindery%s; the binding is in effect in bindery only.", subject, targetKey, path, by)
	case "changed":
		return fmt.Sprintf("The file of %s for %s (%s) differs from what bindery wrote.", subject, targetKey, path)
	case "unknown":
		return fmt.Sprintf("%s matches the path of %s for %s, but no binding of bindery owns it.", path, targetKey, subject)
	}
	return fmt.Sprintf("%s (%s, %s): %s", path, targetKey, subject, kind)
}

// short is a commit id as people read it: its first 7 characters.
func short(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
}

// DriftRestoring says where an operator's restore of a finding's file stands: state is waiting,
// batched, merged, failed or done (store.Restore*), by the operator who asked, batch and mr the
// batch that carries it and its MR, note a failed batch's note.
func DriftRestoring(state, by string, batch, mr int64, note string) string {
	switch state {
	case "waiting":
		return fmt.Sprintf("%s asked bindery to restore the file; it waits for a batch.", by)
	case "batched":
		if mr > 0 {
			return fmt.Sprintf("%s asked bindery to restore the file; batch %d carries it (MR !%d) through CI and the train.", by, batch, mr)
		}
		return fmt.Sprintf("%s asked bindery to restore the file; batch %d carries it through CI and the train.", by, batch)
	case "merged":
		return fmt.Sprintf("The restore asked by %s merged (MR !%d); the finding closes with the deploy that includes it.", by, mr)
	case "failed":
		s := fmt.Sprintf("The restore asked by %s failed: batch %d did not merge", by, batch)
		if note != "" {
			s += " (" + note + ")"
		}
		return s + ". The file is still as the finding says; restore it again, or accept or ignore the finding."
	case "done":
		return fmt.Sprintf("Restored by %s (MR !%d merged; the finding closed).", by, mr)
	}
	return ""
}

// DriftRestoreAsked is the binding's history when an operator asks bindery to restore its file.
func DriftRestoreAsked(path, by string) string {
	return fmt.Sprintf("Its file (%s) differs from what bindery wrote, outside bindery; %s asked bindery to write it again (through a batch, like any change).", path, by)
}

// DriftChangedForRequester tells the requester of a binding whose file was edited outside bindery.
func DriftChangedForRequester(what string) string {
	return "The file that grants your access to " + what + " was changed outside bindery: what is deployed may differ from what you asked for. An operator restores it or accepts the change."
}

// DriftRestoringForRequester is added once an operator asked bindery to write the file again.
const DriftRestoringForRequester = "An operator asked bindery to write it again; it goes through a batch and CI like any change."
