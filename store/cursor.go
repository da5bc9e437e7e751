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

// cursor is the position after the last row of a page: an id, and for lists ordered by time the
// row's time too. It is opaque to clients (base64 of "id" or "unixmicro.id").
type cursor struct {
	ID int64
	At time.Time
}

func (c cursor) encode(withTime bool) string {
	s := strconv.FormatInt(c.ID, 10)
	if withTime {
		s = strconv.FormatInt(c.At.UnixMicro(), 10) + "." + s
	}
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

func decodeCursor(s string, withTime bool) (cursor, bool, error) {
	if s == "" {
		return cursor{}, false, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return cursor{}, false, fmt.Errorf("%w: %q", ErrBadCursor, s)
	}
	var c cursor
	idPart := string(raw)
	if withTime {
		at, id, ok := strings.Cut(idPart, ".")
		if !ok {
			return cursor{}, false, fmt.Errorf("%w: %q", ErrBadCursor, s)
		}
		us, err := strconv.ParseInt(at, 10, 64)
		if err != nil {
			return cursor{}, false, fmt.Errorf("%w: %q", ErrBadCursor, s)
		}
		c.At = time.UnixMicro(us).UTC()
		idPart = id
	}
	c.ID, err = strconv.ParseInt(idPart, 10, 64)
	if err != nil || c.ID <= 0 {
		return cursor{}, false, fmt.Errorf("%w: %q", ErrBadCursor, s)
	}
	return c, true, nil
}
