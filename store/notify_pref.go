package store

import (
	"bindery/internal/vocab/state"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Preferences: which events email a person (table notify_pref; no row: the defaults).

// EmailPrefs returns the event types subject chose to be emailed about, and whether they chose
// at all (false: no choice recorded; the defaults apply).
func (db *DB) EmailPrefs(ctx context.Context, subject string) ([]state.EventType, bool, error) {
	var raw string
	err := translate(db.ro.QueryRowContext(ctx, "SELECT events FROM notify_pref WHERE subject_id = ?", subject).Scan(&raw))
	if errors.Is(err, ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("preferences of %s: %w", subject, err)
	}
	var out []state.EventType
	for _, t := range strings.Split(raw, ",") {
		if t != "" {
			out = append(out, state.EventType(t))
		}
	}
	return out, true, nil
}

// SetEmailPrefs records subject's choice (an empty list: no email at all).
func (db *DB) SetEmailPrefs(ctx context.Context, subject string, types []state.EventType) error {
	names := make([]string, 0, len(types))
	for _, t := range types {
		names = append(names, string(t))
	}
	slices.Sort(names)
	list := strings.Join(slices.Compact(names), ",")
	q := "INSERT INTO notify_pref (subject_id, events, updated_at) VALUES (?, ?, " + db.now() + ")" +
		db.onConflict("subject_id") + "events = " + db.excluded("events") + ", updated_at = " + db.excluded("updated_at")
	_, err := db.rw.ExecContext(ctx, q, clipText(subject, 254), clipText(list, 1024))
	return translate(err)
}

// MRNote reads the note bindery wrote on a merge request (known false: none yet).
func (db *DB) MRNote(ctx context.Context, project string, iid int64) (noteID int64, body string, known bool, err error) {
	err = translate(db.ro.QueryRowContext(ctx, "SELECT note_id, body FROM notify_mr_note WHERE project = ? AND mr_iid = ?", project, iid).Scan(&noteID, &body))
	if errors.Is(err, ErrNotFound) {
		return 0, "", false, nil
	}
	return noteID, body, err == nil, err
}

// KeepMRNote records the note bindery wrote on a merge request, with its text.
func (db *DB) KeepMRNote(ctx context.Context, project string, iid, noteID int64, body string) error {
	_, err := db.rw.ExecContext(ctx, "INSERT INTO notify_mr_note (project, mr_iid, note_id, body, updated_at) VALUES (?, ?, ?, ?, "+db.now()+")"+
		db.onConflict("project, mr_iid")+"note_id = "+db.excluded("note_id")+", body = "+db.excluded("body")+", updated_at = "+db.excluded("updated_at"),
		project, iid, noteID, body)
	return translate(err)
}

// ChosenTypes is every event type some person chose to be emailed about (the notifier routes
// the others' events only when a default or a webhook wants them).
func (db *DB) ChosenTypes(ctx context.Context) (map[state.EventType]bool, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT DISTINCT events FROM notify_pref")
	lists, err := collect(rows, err, func(s scanner) (string, error) { var l string; return l, s.Scan(&l) })
	if err != nil {
		return nil, err
	}
	out := map[state.EventType]bool{}
	for _, l := range lists {
		for _, t := range strings.Split(l, ",") {
			if t != "" {
				out[state.EventType(t)] = true
			}
		}
	}
	return out, nil
}
