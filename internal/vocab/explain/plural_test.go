package explain

import "testing"

func TestOneThingIsSingularAndAnyOtherCountPlural(t *testing.T) {
	for _, c := range []struct {
		n    int
		want string
	}{{0, "pipelines"}, {1, "pipeline"}, {2, "pipelines"}, {-1, "pipelines"}} {
		if got := Plural(c.n, "pipeline"); got != c.want {
			t.Errorf("Plural(%d) = %q, want %q", c.n, got, c.want)
		}
	}
	if pluralOf("1", "bisection") != "bisection" || pluralOf("3", "bisection") != "bisections" || pluralOf("x", "bisection") != "bisections" {
		t.Error("a count in digits is not read as its number")
	}
}
