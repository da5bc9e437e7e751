// Package logtest is a log sink for tests: many goroutines (workers, cron, simulators) log while
// the test reads what was written.
package logtest

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
)

// Buffer collects log output from concurrent writers. The zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything logged so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Reset forgets what was logged so far (what a test set up).
func (l *Buffer) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Reset()
}

// Lines returns the logged lines that contain every one of parts.
func (l *Buffer) Lines(parts ...string) []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		ok := line != ""
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}

// RepeatedKeys returns the keys that appear more than once in one JSON object of line (at any
// depth, as "outer.inner"), or an error when line is not one JSON value. encoding/json reads a
// repeated key without a word (the last one wins), so the tokens are walked instead.
func RepeatedKeys(line string) ([]string, error) {
	dec := json.NewDecoder(strings.NewReader(line))
	var repeated []string
	var walk func(path string) error
	walk = func(path string) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return err
				}
				key := path + k.(string)
				if seen[key] {
					repeated = append(repeated, key)
				}
				seen[key] = true
				if err := walk(key + "."); err != nil {
					return err
				}
			}
			_, err = dec.Token() // '}'
			return err
		case json.Delim('['):
			for dec.More() {
				if err := walk(path); err != nil {
					return err
				}
			}
			_, err = dec.Token() // ']'
			return err
		}
		return nil
	}
	if err := walk(""); err != nil {
		return nil, fmt.Errorf("not JSON: %w: %s", err, line)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("more than one JSON value: %s", line)
	}
	return repeated, nil
}
