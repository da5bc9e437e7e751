package rehearsal

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// marker names the block of a guide that follows it: <!-- rehearsal: NAME -->.
var marker = regexp.MustCompile(`^\s*<!-- rehearsal: ([a-z-]+) -->\s*$`)

// block is one marked command block of the guide.
type block struct {
	Name   string
	Script string
	Line   int // of its opening fence, for messages
}

// guideBlocks reads the marked ```sh blocks of a Markdown guide, in order. A marker that is not
// followed by a sh block, a block left open, or a name used twice is an error: the guide and its
// rehearsal must not drift apart silently.
func guideBlocks(path string) ([]block, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []block
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	n, pending, indent := 0, "", ""
	var cur *block
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case cur != nil:
			if strings.TrimSpace(line) == "```" {
				out = append(out, *cur)
				cur = nil
				continue
			}
			cur.Script += strings.TrimPrefix(line, indent) + "\n"
		case pending != "":
			trimmed := strings.TrimLeft(line, " ")
			if trimmed != "```sh" {
				return nil, fmt.Errorf("%s:%d: the marker of %q is not followed by a ```sh block", path, n-1, pending)
			}
			indent = line[:len(line)-len(trimmed)]
			cur = &block{Name: pending, Line: n}
			pending = ""
		default:
			if m := marker.FindStringSubmatch(line); m != nil {
				if seen[m[1]] {
					return nil, fmt.Errorf("%s:%d: block %q is marked twice", path, n, m[1])
				}
				seen[m[1]] = true
				pending = m[1]
			}
		}
	}
	if cur != nil || pending != "" {
		return nil, fmt.Errorf("%s: the last marked block is not closed", path)
	}
	return out, sc.Err()
}

// exports are the names a block exports (export A=… B=…), in order.
func exports(script string) []string {
	var names []string
	for _, line := range strings.Split(script, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "export ")
		if !ok {
			continue
		}
		for _, word := range strings.Fields(rest) {
			if word == "#" || strings.HasPrefix(word, "#") {
				break
			}
			if name, _, ok := strings.Cut(word, "="); ok && regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`).MatchString(name) {
				names = append(names, name)
			}
		}
	}
	return names
}

// rehearsed are the blocks of docs/install.md the rehearsal runs, in the guide's order.
var rehearsed = []string{"values", "release", "database", "accounts", "signin", "config", "members", "deploy-job", "protect", "webhook", "check", "instances", "backup", "restore"}
