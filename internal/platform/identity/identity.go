// Package identity answers "who is calling": the one resolver that maps an email-shaped account,
// an employee id or a directory name to the same canonical identity (docs/api.md, 'Who may call'),
// its strict variant for metrics, and the client address behind trusted proxies (docs/api.md, 'Rate
// limits').
//
// It depends on nothing of bindery's, so that config can validate the directory with it and
// server can resolve callers with it: one set of rules, not three copies.
package identity

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Resolution failures. Each one means "no identity" to the caller: 401, never a guess.
var (
	ErrNone    = errors.New("no identity presented")
	ErrInvalid = errors.New("identity value is malformed")
	ErrUnknown = errors.New("identity is neither email-shaped nor in the directory")
)

// maxLen bounds a presented identity (the longest valid email address).
const maxLen = 254

// Entry is one person in the directory: the canonical account (email-shaped), and the other
// spellings the login layer may send for them.
type Entry struct {
	Account    string `yaml:"account" json:"account"`       // canonical identity, email-shaped
	EmployeeID string `yaml:"employeeId" json:"employeeId"` // optional
	Name       string `yaml:"name" json:"name"`             // optional short name (display, demo switcher)
}

// Directory maps every spelling of a person to their entry. The zero value and nil are empty.
type Directory struct {
	entries []Entry
	index   map[string]int // lower-cased spelling → entries index
}

// NewDirectory validates entries and indexes them. An account that is not email-shaped, or a
// spelling claimed by two different accounts, is an error: an ambiguous directory must not
// decide who somebody is.
func NewDirectory(entries []Entry) (*Directory, error) {
	d := &Directory{index: map[string]int{}}
	for i, e := range entries {
		acct, ok := Canonical(e.Account)
		if !ok {
			return nil, fmt.Errorf("entry %d: account %q is not an email-shaped account", i, e.Account)
		}
		e.Account = acct
		e.EmployeeID = strings.TrimSpace(e.EmployeeID)
		e.Name = strings.TrimSpace(e.Name)
		for field, spelling := range map[string]string{"account": e.Account, "employeeId": e.EmployeeID, "name": e.Name} {
			if spelling == "" {
				continue
			}
			if bad := firstBadRune(spelling); bad >= 0 || len(spelling) > maxLen {
				return nil, fmt.Errorf("entry %d: %s %q has a character or length that cannot be an identity", i, field, spelling)
			}
			key := strings.ToLower(spelling)
			if j, taken := d.index[key]; taken && d.entries[j].Account != e.Account {
				return nil, fmt.Errorf("entry %d: %s %q already belongs to %s", i, field, spelling, d.entries[j].Account)
			}
		}
		d.entries = append(d.entries, e)
		for _, spelling := range []string{e.Account, e.EmployeeID, e.Name} {
			if spelling != "" {
				d.index[strings.ToLower(spelling)] = len(d.entries) - 1
			}
		}
	}
	return d, nil
}

// Entries returns the directory's entries (canonical accounts).
func (d *Directory) Entries() []Entry {
	if d == nil {
		return nil
	}
	return d.entries
}

// Lookup finds the entry for any spelling, case-insensitively.
func (d *Directory) Lookup(spelling string) (Entry, bool) {
	if d == nil {
		return Entry{}, false
	}
	i, ok := d.index[strings.ToLower(strings.TrimSpace(spelling))]
	if !ok {
		return Entry{}, false
	}
	return d.entries[i], true
}

// Identity is a resolved caller.
type Identity struct {
	ID   string // canonical: the lower-cased email-shaped account
	Name string // for people: the directory name, else the account's local part
}

// Resolve is the one resolver. The value may be an email-shaped account or an employee id (or a
// directory name); every spelling of one person gives the same canonical identity. Directories
// are searched in order. An email-shaped account that no directory lists is still an identity
// (the login layer vouched for it); any other unknown value is ErrUnknown — an employee id we
// cannot map is never turned into a second identity for the same person.
func Resolve(raw string, dirs ...*Directory) (Identity, error) {
	v := strings.TrimSpace(raw)
	switch {
	case v == "":
		return Identity{}, ErrNone
	case len(v) > maxLen || firstBadRune(v) >= 0:
		return Identity{}, ErrInvalid
	}
	for _, d := range dirs {
		if e, ok := d.Lookup(v); ok {
			return Identity{ID: e.Account, Name: displayName(e)}, nil
		}
	}
	if id, ok := Canonical(v); ok {
		return Identity{ID: id, Name: displayName(Entry{Account: id})}, nil
	}
	return Identity{}, ErrUnknown
}

// Strict is the metrics-only parse (docs/api.md, 'Metrics never change a result'): an email-shaped
// value, normalised the same way Resolve does, or nothing. A bare value that may be an employee id
// is skipped, never looked up or guessed, and the result must never flow back into business logic.
func Strict(raw string) (string, bool) {
	return Canonical(strings.TrimSpace(raw))
}

// Canonical reports whether s is an email-shaped account and returns its canonical form
// (lower-cased, trimmed). Email-shaped: one "@", a non-empty local part, a domain with a dot
// and no empty labels, no spaces or control characters, at most 254 bytes.
func Canonical(s string) (string, bool) {
	s = strings.TrimSpace(s)
	if len(s) == 0 || len(s) > maxLen || firstBadRune(s) >= 0 {
		return "", false
	}
	local, domain, ok := strings.Cut(s, "@")
	if !ok || local == "" || strings.Contains(domain, "@") || !strings.Contains(domain, ".") {
		return "", false
	}
	// An empty label: a dot first, last or twice in a row (checked without splitting: this runs
	// on every request that presents an identity).
	if strings.HasPrefix(domain, ".") || strings.HasSuffix(domain, ".") || strings.Contains(domain, "..") {
		return "", false
	}
	return strings.ToLower(s), true
}

func displayName(e Entry) string {
	if e.Name != "" {
		return e.Name
	}
	local, _, _ := strings.Cut(e.Account, "@")
	return local
}

// firstBadRune returns the index of the first space, control or non-printable rune, or -1.
func firstBadRune(s string) int {
	// ASCII first, byte by byte: the bad ASCII characters are the controls, space and DEL.
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf {
			if j := firstBadRuneSlow(s[i:]); j >= 0 {
				return i + j
			}
			return -1
		}
		if c <= ' ' || c == 0x7f {
			return i
		}
	}
	return -1
}

func firstBadRuneSlow(s string) int {
	for i, r := range s {
		if r == unicode.ReplacementChar || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return i
		}
	}
	return -1
}
