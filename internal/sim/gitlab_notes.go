package sim

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Merge request notes (GitLab's Notes API for merge requests): what bots write on an MR — bindery
// writes one note on each batch's MR and edits it when a bisection isolates a culprit.

// mrNote is one note of a merge request.
type mrNote struct {
	id        int64
	body      string
	authorID  int64
	createdAt time.Time
	updatedAt time.Time
}

// Note is a merge request's note as tests read it.
type Note struct {
	ID     int64
	Body   string
	Author string // the author's username
	Edited bool
}

// Notes returns the notes of project's MR iid, oldest first (nil: no such MR).
func (g *GitLab) Notes(project string, iid int64) []Note {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.projects[project]
	if p == nil {
		return nil
	}
	mr := p.mr(iid)
	if mr == nil {
		return nil
	}
	out := make([]Note, 0, len(mr.notes))
	for _, n := range mr.notes {
		out = append(out, Note{ID: n.id, Body: n.body, Author: g.userByID(n.authorID).Username, Edited: !n.updatedAt.Equal(n.createdAt)})
	}
	return out
}

type noteJSON struct {
	ID           int64    `json:"id"`
	Type         *string  `json:"type"`
	Body         string   `json:"body"`
	Author       userJSON `json:"author"`
	CreatedAt    string   `json:"created_at"`
	UpdatedAt    string   `json:"updated_at"`
	System       bool     `json:"system"`
	NoteableID   int64    `json:"noteable_id"`
	NoteableType string   `json:"noteable_type"`
	NoteableIID  int64    `json:"noteable_iid"`
	Internal     bool     `json:"internal"`
	Resolvable   bool     `json:"resolvable"`
}

func (c *call) noteJSON(mr *mergeRequest, n *mrNote) noteJSON {
	return noteJSON{ID: n.id, Body: n.body, Author: c.userJSON(c.g.userByID(n.authorID)), CreatedAt: isoTime(n.createdAt), UpdatedAt: isoTime(n.updatedAt),
		NoteableID: mr.id, NoteableType: "MergeRequest", NoteableIID: mr.iid}
}

func isoTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// maxNoteBody is GitLab's limit on a note's text (1,000,000 characters).
const maxNoteBody = 1_000_000

func (c *call) createNote() {
	mr := c.mr()
	if mr == nil {
		return
	}
	body, _ := c.in.str("body")
	if strings.TrimSpace(body) == "" {
		writeJSON(c.w, http.StatusBadRequest, map[string]string{"error": "body is missing"})
		return
	}
	if len(body) > maxNoteBody {
		c.fail(http.StatusBadRequest, map[string][]string{"note": {"is too long (maximum is 1000000 characters)"}})
		return
	}
	c.g.nextNoteID++
	n := &mrNote{id: c.g.nextNoteID, body: body, authorID: c.user.ID, createdAt: c.now, updatedAt: c.now}
	mr.notes = append(mr.notes, n)
	writeJSON(c.w, http.StatusCreated, c.noteJSON(mr, n))
}

func (c *call) listNotes() {
	mr := c.mr()
	if mr == nil {
		return
	}
	out := make([]noteJSON, 0, len(mr.notes))
	for _, n := range mr.notes {
		out = append(out, c.noteJSON(mr, n))
	}
	writeJSON(c.w, http.StatusOK, out)
}

func (c *call) updateNote() {
	mr := c.mr()
	if mr == nil {
		return
	}
	id, err := strconv.ParseInt(c.vars["note_id"], 10, 64)
	var n *mrNote
	for _, x := range mr.notes {
		if err == nil && x.id == id {
			n = x
		}
	}
	if n == nil {
		c.fail(http.StatusNotFound, "404 Not found")
		return
	}
	if n.authorID != c.user.ID {
		c.fail(http.StatusForbidden, "403 Forbidden")
		return
	}
	body, _ := c.in.str("body")
	if strings.TrimSpace(body) == "" {
		writeJSON(c.w, http.StatusBadRequest, map[string]string{"error": "body is missing"})
		return
	}
	n.body, n.updatedAt = body, c.now
	writeJSON(c.w, http.StatusOK, c.noteJSON(mr, n))
}
