package config

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
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
	// MaxTTL bounds renewals: a renewal never sets the expiry later than this long after the
	// binding first came into effect (0: no bound).
	MaxTTL time.Duration `json:"maxTtl,omitempty"`
	// Renewal is how a renewal is decided: RenewalApproval (the default: a ticket in the approval
	// system, as an application) or RenewalAuto (at once).
	Renewal string `json:"renewal,omitempty"`
	// Owners review the target's bindings (access reviews): identities, or group:NAME for the
	// members of a group the identity provider names at sign-in. Operators may always.
	Owners []string `json:"owners,omitempty"`
	// ReviewEvery starts a review of the target by itself this long after the last one started
	// (0: only by hand); ReviewDue is how long its reviewers have (default DefaultReviewDue).
	ReviewEvery time.Duration `json:"reviewEvery,omitempty"`
	ReviewDue   time.Duration `json:"reviewDue,omitempty"`
}

// DefaultReviewDue is how long the reviewers of a review started by itself have.
const DefaultReviewDue = 14 * 24 * time.Hour

// OwnerGroupPrefix marks an owner that is a group: group:NAME.
const OwnerGroupPrefix = "group:"

// Owned reports whether identity, or one of its groups, is among t's owners. Identities and
// groups compare case-insensitively, as in permission.rules: an identity provider may name a
// group "DBA" where the catalog says group:dba.
func (t Target) Owned(identity string, groups []string) bool {
	for _, o := range t.Owners {
		if g, ok := strings.CutPrefix(o, OwnerGroupPrefix); ok {
			if slices.ContainsFunc(groups, func(have string) bool { return strings.EqualFold(have, g) }) {
				return true
			}
		} else if strings.EqualFold(o, identity) {
			return true
		}
	}
	return false
}

// How a target's renewals are decided (Target.Renewal).
const (
	RenewalApproval = "approval"
	RenewalAuto     = "auto"
)

// RenewalMode is t's renewal mode: RenewalApproval unless the catalog says auto.
func (t Target) RenewalMode() string {
	if t.Renewal == RenewalAuto {
		return RenewalAuto
	}
	return RenewalApproval
}

var targetKeyRE = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$`)

type rawTarget struct {
	Key       string    `yaml:"key"`
	Title     string    `yaml:"title"`
	Project   string    `yaml:"project"`
	Branch    string    `yaml:"branch"`
	Path      string    `yaml:"path"`
	RuleCodes []string  `yaml:"ruleCodes"`
	TTL       string    `yaml:"ttl"`
	MaxTTL    string    `yaml:"maxTtl"`
	Renewal   string    `yaml:"renewal"`
	Owners    []string  `yaml:"owners"`
	Reviews   yaml.Node `yaml:"reviews"`
}

// rawReviews is a target's reviews key: how often a review starts by itself, and how long its
// reviewers have.
type rawReviews struct {
	Every string `yaml:"every"`
	Due   string `yaml:"due"`
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
	if s := strings.TrimSpace(rt.MaxTTL); s != "" {
		d, err := parseTTL(s)
		if err != nil || d <= 0 || (t.TTL > 0 && d < t.TTL) {
			return t, fmt.Errorf("maxTtl %q: want a number of days such as 90d or a duration, at least the ttl, or nothing for no bound", s)
		}
		t.MaxTTL = d
	}
	switch r := strings.TrimSpace(rt.Renewal); r {
	case "", RenewalApproval, RenewalAuto:
		t.Renewal = r
	default:
		return t, fmt.Errorf("renewal %q: want auto, approval, or nothing (approval)", r)
	}
	for _, o := range rt.Owners {
		o = strings.TrimSpace(o)
		if o == "" || o == OwnerGroupPrefix || len(o) > 254 {
			return t, fmt.Errorf("owners: %q is not an identity or group:NAME", o)
		}
		t.Owners = append(t.Owners, o)
	}
	if rt.Reviews.Kind != 0 {
		if err := rt.validateReviews(&t); err != nil {
			return t, err
		}
	}
	return t, nil
}

// validateReviews reads the reviews key into t.
func (rt rawTarget) validateReviews(t *Target) error {
	var rr rawReviews
	if err := decodeStrict(&rt.Reviews, &rr); err != nil {
		return fmt.Errorf("reviews: %w", err)
	}
	for _, f := range []struct {
		name, s string
		into    *time.Duration
	}{{"every", rr.Every, &t.ReviewEvery}, {"due", rr.Due, &t.ReviewDue}} {
		if s := strings.TrimSpace(f.s); s != "" {
			d, err := parseTTL(s)
			if err != nil || d < time.Hour {
				return fmt.Errorf("reviews.%s %q: want a number of days such as 90d or a duration of at least an hour", f.name, s)
			}
			*f.into = d
		}
	}
	if t.ReviewEvery > 0 && t.ReviewDue == 0 {
		t.ReviewDue = min(DefaultReviewDue, t.ReviewEvery)
	}
	return nil
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
