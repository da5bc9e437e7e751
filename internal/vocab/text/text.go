// Package text bounds the text bindery stores and shows, with one clipping rule: never inside a
// UTF-8 character, a cut marked where people read the text, the bound counted in characters
// where a database column counts them (MySQL's VARCHAR) and in bytes where a size is the budget
// (a log line, a TEXT column, an error for the ops console). It imports nothing of bindery's, so
// every layer can share it.
package text

import "unicode/utf8"

// Ellipsis marks a cut in a text a person reads.
const Ellipsis = "…"

// Unit is what a bound counts.
type Unit int

const (
	Chars Unit = iota // characters (runes): a VARCHAR column of MySQL
	Bytes             // bytes of UTF-8: a size budget
)

// Clip keeps at most n units of s: s itself when it fits, else its first characters followed by
// mark, the whole at most n units (mark counts). It never splits a character. A column's bound
// takes mark "" (the text just ends, as a key or an id must); a text people read takes Ellipsis.
// When mark alone is over n, the result is as much of mark as fits.
func Clip(s string, n int, unit Unit, mark string) string {
	size := func(x string) int {
		if unit == Bytes {
			return len(x)
		}
		return utf8.RuneCountInString(x)
	}
	if n <= 0 {
		return ""
	}
	if size(s) <= n {
		return s
	}
	room := n - size(mark)
	if room < 0 {
		return Clip(mark, n, unit, "")
	}
	end, used := 0, 0
	for end < len(s) {
		_, w := utf8.DecodeRuneInString(s[end:])
		step := 1
		if unit == Bytes {
			step = w
		}
		if used+step > room {
			break
		}
		end, used = end+w, used+step
	}
	return s[:end] + mark
}
