package config

import (
	"fmt"
	"slices"

	"go.yaml.in/yaml/v3"
)

// halfFile refuses a reload that looks like a file cut short or half written — an editor that
// truncated before writing, a deploy that copied half of it — because installing it would put
// whole parts of the running configuration back to their defaults at once: no catalog, blank
// secrets. Compared with the configuration in force (old), the new file must not
//   - empty the catalog, unless it says so (`targets: []`);
//   - blank a secret that was set, unless it writes the blank out (`approvalSecret: ""`);
//   - drop a top-level section old has, unless it keeps the section's name (`hooks: {}`).
//
// A refused file is a failed reload: the last good configuration stays, the error is shown.
func halfFile(old, cur *Snapshot) error {
	if old == nil {
		return nil
	}
	for _, sec := range old.sections {
		if !slices.Contains(cur.named, sec) {
			return fmt.Errorf("the file no longer has the %q section the configuration in force has (cut short?); keeping the last good configuration — to drop the section on purpose, write `%s: {}`", sec, sec)
		}
	}
	if len(old.targets) > 0 && len(cur.targets) == 0 && !cur.values["targets"].written(yaml.SequenceNode) {
		return fmt.Errorf("the file would empty the catalog of %d targets (cut short?); keeping the last good configuration — to empty it on purpose, write `targets: []`", len(old.targets))
	}
	for _, k := range Keys {
		if !k.Secret || k.Static {
			continue
		}
		if was, now := old.report(k.Name), cur.report(k.Name); was.Effective != "" && now.Effective == "" && !cur.values[k.Name].written(0) {
			return fmt.Errorf("the file would blank %s, which is set now (cut short?); keeping the last good configuration — to blank it on purpose, write it out as \"\"", k.Name)
		}
	}
	return nil
}

// written reports whether the file wrote the key out with a value — of kind, when kind is not 0 —
// rather than leaving it absent or empty (`key:` with nothing after it, where a file cut short
// would end).
func (v value) written(kind yaml.Kind) bool {
	if !v.present || v.node == nil || v.node.Tag == "!!null" {
		return false
	}
	return kind == 0 || v.node.Kind == kind
}

// report is the report row of key (zero when unknown).
func (s *Snapshot) report(key string) KeyReport {
	for _, r := range s.Report {
		if r.Key == key {
			return r
		}
	}
	return KeyReport{}
}
