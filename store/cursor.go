package store

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrBadCursor is returned for a pagination cursor this store did not issue (the API answers 400).
var ErrBadCursor = errors.New("invalid cursor")

// Page asks for one page of a list: Cursor is the NextCursor of the previous page ("" for the
// first), Limit is clamped to 1…200 (0 → 50).
type Page struct {
	Cursor string
	Limit  int
}

func (p Page) limit() int {
	switch {
	case p.Limit <= 0:
		return 50
	case p.Limit > 200:
		return 200
	}
	return p.Limit
}

// cursor is the position after the last row of a page: the row's time and its id. Every list
// is ordered by a time of the database clock (newest first, or longest unchanged first), and
// the id only orders the rows of one time: ids alone are no order, since a distributed MySQL
// hands them out in blocks per server. It is opaque to clients (base64 of "unixmicro.id").
type cursor struct {
	ID int64
	At time.Time
}

func (c cursor) encode() string {
	s := strconv.FormatInt(c.At.UnixMicro(), 10) + "." + strconv.FormatInt(c.ID, 10)
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

func decodeCursor(s string) (cursor, bool, error) {
	if s == "" {
		return cursor{}, false, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return cursor{}, false, fmt.Errorf("%w: %q", ErrBadCursor, s)
	}
	at, id, ok := strings.Cut(string(raw), ".")
	if !ok {
		return cursor{}, false, fmt.Errorf("%w: %q", ErrBadCursor, s)
	}
	us, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return cursor{}, false, fmt.Errorf("%w: %q", ErrBadCursor, s)
	}
	c := cursor{At: time.UnixMicro(us).UTC()}
	c.ID, err = strconv.ParseInt(id, 10, 64)
	if err != nil || c.ID <= 0 {
		return cursor{}, false, fmt.Errorf("%w: %q", ErrBadCursor, s)
	}
	return c, true, nil
}

// keyset is how a list is paged: by a time of the database clock, then the id (at and id are the
// columns as the query names them), newest first when desc.
type keyset struct {
	at, id string
	desc   bool
}

// page ends q, whose WHERE is open, with the rows after cursor c (every row when !after), the
// list's order, and a limit of limit+1 rows: the one more tells whether a next page exists
// (trimPage).
func (k keyset) page(db *DB, q string, args []any, c cursor, after bool, limit int) (string, []any) {
	cmp, dir := ">", ""
	if k.desc {
		cmp, dir = "<", " DESC"
	}
	if after {
		q += " AND (" + k.at + " " + cmp + " ? OR (" + k.at + " = ? AND " + k.id + " " + cmp + " ?))"
		args = append(args, db.timeArg(c.At), db.timeArg(c.At), c.ID)
	}
	q += " ORDER BY " + k.at + dir + ", " + k.id + dir + " LIMIT ?"
	return q, append(args, limit+1)
}
