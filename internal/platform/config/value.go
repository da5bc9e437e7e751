package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// value is one key as found in the file: absent, present but blank (`key:` or `key: ""`), or
// present with a scalar or a structured node.
type value struct {
	present bool
	node    *yaml.Node
}

func (v value) blank() bool {
	if !v.present || v.node == nil {
		return !v.present
	}
	if v.node.Kind == yaml.ScalarNode {
		return v.node.Tag == "!!null" || strings.TrimSpace(v.node.Value) == ""
	}
	return len(v.node.Content) == 0
}

// scalar returns the trimmed scalar text, or ok=false for a list or mapping.
func (v value) scalar() (string, bool) {
	if v.node == nil || v.node.Kind != yaml.ScalarNode {
		return "", false
	}
	if v.node.Tag == "!!null" {
		return "", true
	}
	return strings.TrimSpace(v.node.Value), true
}

// raw is what the ops console shows as "as written".
func (v value) raw() string {
	if !v.present {
		return ""
	}
	if s, ok := v.scalar(); ok {
		return s
	}
	out, err := yaml.Marshal(v.node)
	if err != nil {
		return "<unprintable>"
	}
	return strings.TrimSpace(string(out))
}

func (v value) where() string {
	if v.node == nil {
		return ""
	}
	return fmt.Sprintf(" (line %d)", v.node.Line)
}

// The parse helpers below return the value, or a note that explains which documented fallback
// was taken. Missing keys never produce a note: the default is simply in force.

// scalarOr is the shape every scalar key shares: missing → def without a note; blank or not a
// scalar → onBad with a note naming what was wanted (kind); else parse's value, or onBad with
// parse's note.
func scalarOr[T any](v value, def, onBad T, kind string, parse func(string) (T, string)) (T, string) {
	if !v.present {
		return def, ""
	}
	if v.blank() {
		return onBad, "blank"
	}
	s, ok := v.scalar()
	if !ok {
		return onBad, "not " + kind
	}
	x, note := parse(s)
	if note != "" {
		return onBad, note
	}
	return x, ""
}

// intOr parses an integer. blank/garbage → onBad; the caller decides about range.
func intOr(v value, def, onBad int) (int, string) {
	return scalarOr(v, def, onBad, "a number", func(s string) (int, string) {
		n, err := strconv.Atoi(s)
		if err != nil {
			return 0, fmt.Sprintf("%q is not an integer", s)
		}
		return n, ""
	})
}

// durationOr parses a Go duration ("90s", "24h"). blank/garbage/≤0 → def.
func durationOr(v value, def time.Duration) (time.Duration, string) {
	return scalarOr(v, def, def, "a duration", func(s string) (time.Duration, string) {
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Sprintf("%q is not a duration (e.g. 90s, 24h)", s)
		}
		if d <= 0 {
			return 0, fmt.Sprintf("%q is not positive", s)
		}
		return d, ""
	})
}

// nonNegativeDurationOr is durationOr for a duration that may be 0: only a negative one is
// replaced by def.
func nonNegativeDurationOr(v value, def time.Duration) (time.Duration, string) {
	if s, ok := v.scalar(); ok && v.present && !v.blank() {
		if d, err := time.ParseDuration(s); err == nil && d == 0 {
			return 0, ""
		} else if err == nil && d < 0 {
			return def, fmt.Sprintf("%q is negative", s)
		}
	}
	return durationOr(v, def)
}

// boolOr parses true/false (and yes/no, on/off, 1/0). Anything else → onBad.
func boolOr(v value, def, onBad bool) (bool, string) {
	return scalarOr(v, def, onBad, "a boolean", func(s string) (bool, string) {
		switch strings.ToLower(s) {
		case "true", "yes", "on", "1":
			return true, ""
		case "false", "no", "off", "0":
			return false, ""
		}
		return false, fmt.Sprintf("%q is not a boolean", s)
	})
}

// stringOr returns the scalar text; blank → def.
func stringOr(v value, def string) (string, string) {
	return scalarOr(v, def, def, "a string", func(s string) (string, string) { return s, "" })
}

// stringList reads a YAML list of scalars. Anything else — one scalar too, even with commas in
// it — is the wrong shape and counts as empty: these lists grant (trusted proxies, reviewer
// tokens, permission rules), and guessing how a string splits must never widen a grant.
func stringList(v value) ([]string, string) {
	if !v.present {
		return nil, ""
	}
	if v.blank() {
		return nil, "blank"
	}
	var out []string
	if v.node.Kind != yaml.SequenceNode {
		return nil, "not a list (write [a, b]); nothing taken from it"
	}
	for _, item := range v.node.Content {
		if item.Kind != yaml.ScalarNode {
			return nil, "list items must be plain values"
		}
		if p := strings.TrimSpace(item.Value); p != "" {
			out = append(out, p)
		}
	}
	return out, ""
}
