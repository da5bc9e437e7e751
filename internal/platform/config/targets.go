package config

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Target is one catalog entry: what a binding can point at and where its file lands.
type Target struct {
	Key       string        `json:"key"`
	Title     string        `json:"title"`
	Project   string        `json:"project"`   // GitLab project path; also the batch partition
	Branch    string        `json:"branch"`    // target branch of the MR
	Path      string        `json:"path"`      // file path template; {subject} and {target} are replaced
	RuleCodes []string      `json:"ruleCodes"` // empty: any signed-in user may apply
	TTL       time.Duration `json:"ttl"`       // binding expiry after validation; 0: never
}

var targetKeyRE = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$`)

type rawTarget struct {
	Key       string   `yaml:"key"`
	Title     string   `yaml:"title"`
	Project   string   `yaml:"project"`
	Branch    string   `yaml:"branch"`
	Path      string   `yaml:"path"`
	RuleCodes []string `yaml:"ruleCodes"`
	TTL       string   `yaml:"ttl"`
}

// parseTargets validates the catalog strictly: a broken catalog rejects the whole file, so the
// last good catalog stays in force rather than some targets silently disappearing.
func parseTargets(v value) ([]Target, error) {
	if !v.present || v.blank() {
		return nil, nil
	}
	if v.node.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("targets%s: want a list of targets", v.where())
	}
	seen := map[string]bool{}
	out := make([]Target, 0, len(v.node.Content))
	for i, n := range v.node.Content {
		var rt rawTarget
		if err := decodeStrict(n, &rt); err != nil {
			return nil, fmt.Errorf("targets[%d] (line %d): %w", i, n.Line, err)
		}
		t, err := rt.validate()
		if err != nil {
			return nil, fmt.Errorf("targets[%d] (line %d): %w", i, n.Line, err)
		}
		if seen[t.Key] {
			return nil, fmt.Errorf("targets[%d] (line %d): duplicate key %q", i, n.Line, t.Key)
		}
		seen[t.Key] = true
		out = append(out, t)
	}
	return out, nil
}

func (rt rawTarget) validate() (Target, error) {
	t := Target{
		Key:     strings.TrimSpace(rt.Key),
		Title:   strings.TrimSpace(rt.Title),
		Project: strings.TrimSpace(rt.Project),
		Branch:  strings.TrimSpace(rt.Branch),
		Path:    strings.TrimSpace(rt.Path),
	}
	if !targetKeyRE.MatchString(t.Key) {
		return t, fmt.Errorf("key %q: want 1-64 characters of [a-z0-9-], not starting or ending with -", t.Key)
	}
	if t.Title == "" {
		t.Title = t.Key
	}
	if t.Project == "" || strings.ContainsAny(t.Project, " \t\\") || strings.HasPrefix(t.Project, "/") {
		return t, fmt.Errorf("project %q: want a GitLab project path such as group/repo", t.Project)
	}
	if t.Branch == "" {
		t.Branch = "main"
	}
	if err := ValidatePathTemplate(t.Path); err != nil {
		return t, err
	}
	for _, c := range rt.RuleCodes {
		if c = strings.TrimSpace(c); c != "" {
			t.RuleCodes = append(t.RuleCodes, c)
		}
	}
	if s := strings.TrimSpace(rt.TTL); s != "" {
		d, err := parseTTL(s)
		if err != nil || d < 0 {
			return t, fmt.Errorf("ttl %q: want a number of days such as 30d, a duration such as 720h, or nothing for no expiry", s)
		}
		t.TTL = d
	}
	return t, nil
}

// parseTTL reads a target's expiry: whole days ("30d", as people think of access) or a Go
// duration ("720h").
func parseTTL(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 36500 {
			return 0, fmt.Errorf("ttl %q: days out of range", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

// ValidatePathTemplate checks that a file path template stays inside the repository whatever
// the placeholders become: relative, no "..", no empty segment, no backslash.
func ValidatePathTemplate(p string) error {
	if p == "" {
		return fmt.Errorf("path: required, e.g. bindings/<target>/{subject}.yaml")
	}
	if strings.HasPrefix(p, "/") || strings.Contains(p, "\\") || strings.ContainsRune(p, 0) {
		return fmt.Errorf("path %q: must be relative to the repository root", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("path %q: empty, '.' or '..' segments are not allowed", p)
		}
		// A layer that decodes the path once more (a proxy, a second escape) must not find
		// one either: %2e%2e is '..', %2f a separator.
		if d, err := url.PathUnescape(seg); err == nil && (d == "." || d == ".." || strings.ContainsAny(d, "/\\\x00")) {
			return fmt.Errorf("path %q: a segment that percent-decodes to '.', '..' or a separator is not allowed", p)
		}
	}
	if path.Clean(p) != p {
		return fmt.Errorf("path %q: not a clean path", p)
	}
	if !strings.Contains(p, "{subject}") {
		return fmt.Errorf("path %q: must contain {subject} so that each subject gets its own file", p)
	}
	return nil
}

// decodeStrict decodes a node, refusing fields the type does not know.
func decodeStrict(n *yaml.Node, out any) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("want a mapping")
	}
	known := knownYAMLFields(out)
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i].Value; !known[k] {
			return fmt.Errorf("unknown field %q", k)
		}
	}
	return n.Decode(out)
}
