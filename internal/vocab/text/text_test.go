package text

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestClipKeepsWholeCharactersWithinTheBound(t *testing.T) {
	for _, c := range []struct {
		name, s string
		n       int
		unit    Unit
		mark    string
		want    string
	}{
		{"fits exactly", "abcde", 5, Chars, Ellipsis, "abcde"},
		{"one too many, marked", "abcdef", 5, Chars, Ellipsis, "abcd…"},
		{"one too many, a column", "abcdef", 5, Chars, "", "abcde"},
		{"two-byte characters count once", "ééééé", 5, Chars, Ellipsis, "ééééé"},
		{"a cut before a two-byte character", "abcdé", 4, Chars, "", "abcd"},
		{"a cut after four-byte characters", "a😀😀b", 3, Chars, "", "a😀😀"},
		{"a cut between four-byte characters, marked", "😀😀😀😀", 3, Chars, Ellipsis, "😀😀…"},
		{"combining marks are characters of their own", "e\u0301e\u0301", 3, Chars, "", "e\u0301e"},
		{"bytes: fits exactly", "éé", 4, Bytes, "", "éé"},
		{"bytes: a cut inside a character goes before it", "xéé", 4, Bytes, "", "xé"},
		{"bytes: the mark counts its three bytes", "abcdefgh", 6, Bytes, Ellipsis, "abc…"},
		{"bytes: a four-byte character that does not fit", "ab😀", 5, Bytes, "", "ab"},
		{"a mark longer than the bound", "abcdef", 2, Chars, "[cut]", "[c"},
		{"a bound of nothing", "abc", 0, Chars, Ellipsis, ""},
		{"empty", "", 3, Bytes, Ellipsis, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Clip(c.s, c.n, c.unit, c.mark)
			if got != c.want {
				t.Fatalf("Clip(%q, %d, %d, %q) = %q, want %q", c.s, c.n, c.unit, c.mark, got, c.want)
			}
		})
	}
}

// Every cut of a text mixing one- to four-byte characters stays valid, within the bound, and a
// prefix of the text followed by the mark.
func TestNoBoundSplitsACharacter(t *testing.T) {
	s := strings.Repeat("aé€😀", 40)
	for n := range len(s) + 2 {
		for _, unit := range []Unit{Chars, Bytes} {
			for _, mark := range []string{"", Ellipsis} {
				got := Clip(s, n, unit, mark)
				size := utf8.RuneCountInString(got)
				if unit == Bytes {
					size = len(got)
				}
				if !utf8.ValidString(got) || size > n || !strings.HasPrefix(s, strings.TrimSuffix(got, mark)) {
					t.Fatalf("Clip(…, %d, %d, %q) = %q", n, unit, mark, got)
				}
			}
		}
	}
}
