package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// MaxFileSize bounds the config file; a larger file is rejected rather than parsed.
const MaxFileSize = 4 << 20

// Parse builds a Snapshot from YAML text. It fails only for what must reject a whole file:
// unparsable YAML, a key whose structure is wrong (a scalar where a mapping belongs), or a value
// its key declares fatal (e.g. an invalid catalog). Invalid values of dynamic keys are not
// errors: the key's documented fallback applies and the report says so.
func Parse(data []byte) (*Snapshot, error) { return ParseOver(data, nil) }

// ParseOver is Parse of a reload over last, the configuration in force: a key that refuses its
// value on its own (a notify receiver) keeps last's.
func ParseOver(data []byte, last *Snapshot) (*Snapshot, error) {
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("config is %d bytes, more than the %d allowed", len(data), MaxFileSize)
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) { // io.EOF: an empty file
		return nil, fmt.Errorf("parse: %w", err)
	}
	s := &Snapshot{values: map[string]value{}, rateLimits: map[string]int{}, last: last}
	defer func() { s.last = nil }() // no chain of old snapshots kept alive
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		root := doc.Content[0]
		if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
			// an empty or comment-only file: every key at its default
		} else if root.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("line %d: the top level must be a mapping of keys", root.Line)
		} else if err := s.collect(root, ""); err != nil {
			return nil, err
		}
	}
	var errs []error
	for _, k := range Keys {
		v := s.values[k.Name]
		eff, note, err := k.apply(s, v)
		if err != nil {
			errs = append(errs, clipError(err))
			continue
		}
		eff, note = clip(eff), clip(note)
		status := StatusSet
		switch {
		case !v.present:
			status = StatusDefault
		case note != "":
			status = StatusFallback
		}
		if k.Secret && eff != "" {
			eff = "(redacted)"
		}
		s.Report = append(s.Report, KeyReport{Key: k.Name, Effective: eff, Status: status, Note: note, Static: k.Static})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	sort.Strings(s.Unknown)
	return s, nil
}

// shownMax bounds a text of the report or an error about one key. These texts quote the value
// as written, and they go to the ops console and the log: a pasted blob or a megabyte string in
// the file must not become a megabyte line there.
const shownMax = 256

func clip(s string) string {
	if len(s) <= shownMax {
		return s
	}
	cut := shownMax
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("… (%d bytes)", len(s))
}

func clipError(err error) error {
	if msg := err.Error(); len(msg) > shownMax {
		return errors.New(clip(msg))
	}
	return err
}

// blankDocument reports whether data holds no YAML value at all (empty, whitespace, comments,
// or a lone null).
func blankDocument(data []byte) bool {
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		return errors.Is(err, io.EOF)
	}
	return len(doc.Content) == 1 && doc.Content[0].Kind == yaml.ScalarNode && doc.Content[0].Tag == "!!null"
}

// knownKey reports whether name is a key, and prefix whether some key lives below name.
func knownKey(name string) (known, prefix bool) {
	for _, k := range Keys {
		if k.Name == name {
			known = true
		}
		if strings.HasPrefix(k.Name, name+".") {
			prefix = true
		}
	}
	return known, prefix
}

// collect walks a mapping, recording the node of every known key and the name of every unknown.
func (s *Snapshot) collect(m *yaml.Node, prefix string) error {
	seen := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		kn, vn := m.Content[i], m.Content[i+1]
		// An alias is the node it names. Followed once here (the parser refuses an anchor that
		// contains itself); aliases deeper inside stay aliases, and decoding them is bounded by
		// the YAML decoder's excessive-aliasing check, so a "billion laughs" never expands.
		if vn.Kind == yaml.AliasNode && vn.Alias != nil {
			vn = vn.Alias
		}
		name := kn.Value
		if prefix != "" {
			name = prefix + "." + kn.Value
		}
		if seen[name] {
			return fmt.Errorf("line %d: key %q appears twice", kn.Line, name)
		}
		seen[name] = true
		known, below := knownKey(name)
		if prefix == "" && below {
			s.named = append(s.named, name)
			if vn.Kind == yaml.MappingNode && len(vn.Content) > 0 {
				s.sections = append(s.sections, name)
			}
		}
		switch {
		case known:
			s.values[name] = value{present: true, node: vn}
		case below && vn.Kind == yaml.MappingNode:
			if err := s.collect(vn, name); err != nil {
				return err
			}
		case below && vn.Kind == yaml.ScalarNode && vn.Tag == "!!null":
			// "section:" with nothing under it: every key below at its default
		case below:
			return fmt.Errorf("line %d: %q must be a mapping of keys", vn.Line, name)
		default:
			s.Unknown = append(s.Unknown, clip(name))
		}
	}
	return nil
}

// knownYAMLFields lists the yaml tag names of a struct pointer's fields.
func knownYAMLFields(ptr any) map[string]bool {
	t := reflect.TypeOf(ptr).Elem()
	out := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if tag == "" {
			tag = strings.ToLower(t.Field(i).Name)
		}
		out[tag] = true
	}
	return out
}

// staticChanges names the static keys whose raw value differs between two snapshots.
func staticChanges(old, cur *Snapshot) []string {
	var changed []string
	for _, k := range Keys {
		if k.Static && old.values[k.Name].raw() != cur.values[k.Name].raw() {
			changed = append(changed, k.Name)
		}
	}
	return changed
}

// PendingRestart names the static keys whose value in cur differs from the one the process
// started with (started): they take effect only after a restart.
func PendingRestart(started, cur *Snapshot) []string {
	if started == nil || cur == nil {
		return nil
	}
	return staticChanges(started, cur)
}
