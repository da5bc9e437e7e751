package explain

import "strconv"

// Plural is word for one of a thing and word+"s" for any other count ("1 pipeline", "3
// pipelines", "0 changes"): every count bindery writes in words names a thing with a regular
// plural.
func Plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// pluralOf is Plural of a count written in digits (as a stored note carries it); anything else
// counts as many.
func pluralOf(digits, word string) string {
	n, err := strconv.Atoi(digits)
	if err != nil {
		n = -1
	}
	return Plural(n, word)
}
