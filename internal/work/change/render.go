// Package change takes a set of file actions through a GitLab merge request: it renders the
// files, and (with the GitLab seam) creates the branch, commit and MR, polls the pipeline in
// stages, approves, merges, rebases and closes — each step reading the remote state first so
// that re-running it after a crash or an operator retry is safe. It knows nothing of the
// database: the batch and workflow packages record what it reports.
package change

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"bindery/internal/platform/config"
)

// MaxFileSize caps a rendered binding file. The reason is the only free text and is capped
// by the API, so a larger file means something is wrong.
const MaxFileSize = 16 << 10

// subjectPattern is what a subject may look like inside a file path: a canonical identity
// (alice@example.com, E1001). No slash, no "..": the path must stay inside the repository
// whatever the subject is.
var subjectPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$`)

// ErrInvalidChange reports a change that cannot be rendered or validated. It is deterministic:
// the same request renders the same way, so it ends in CREATE_INVALID (contact support).
var ErrInvalidChange = errors.New("invalid change")

// RenderPath resolves a target's path template for subject.
func RenderPath(t config.Target, subject string) (string, error) {
	if !subjectPattern.MatchString(subject) || strings.Contains(subject, "..") {
		return "", fmt.Errorf("%w: subject %q cannot be used in a file path", ErrInvalidChange, subject)
	}
	if err := config.ValidatePathTemplate(t.Path); err != nil {
		return "", fmt.Errorf("%w: target %s: %v", ErrInvalidChange, t.Key, err)
	}
	p := strings.NewReplacer("{subject}", subject, "{target}", t.Key).Replace(t.Path)
	if strings.Contains(p, "{") || strings.Contains(p, "}") {
		return "", fmt.Errorf("%w: target %s: unknown placeholder in %q", ErrInvalidChange, t.Key, t.Path)
	}
	return p, nil
}

// BindingFile is the content of one binding's file in the repository.
type BindingFile struct {
	Subject     string     `yaml:"subject"`
	Target      string     `yaml:"target"`
	OperationID string     `yaml:"operationId"`
	Reason      string     `yaml:"reason"`
	RequestedAt time.Time  `yaml:"requestedAt"`
	ExpiresAt   *time.Time `yaml:"expiresAt,omitempty"`
}

// FileAction is one file change of a batch's commit.
type FileAction struct {
	Action      string // "create", "update" or "delete"
	Path        string
	Content     string
	OperationID string
}

// RenderFile renders a binding's file. The YAML encoder quotes the free-text reason, so no
// input can change the document's structure.
func RenderFile(t config.Target, f BindingFile) (path string, content []byte, err error) {
	if path, err = RenderPath(t, f.Subject); err != nil {
		return "", nil, err
	}
	f.Target = t.Key
	f.RequestedAt = f.RequestedAt.UTC().Truncate(time.Millisecond)
	if f.ExpiresAt != nil {
		e := f.ExpiresAt.UTC().Truncate(time.Millisecond)
		f.ExpiresAt = &e
	}
	content, err = yaml.Marshal(f)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %v", ErrInvalidChange, err)
	}
	content = append([]byte("# Managed by bindery. Do not edit: changes are made through a request.\n"), content...)
	if len(content) > MaxFileSize {
		return "", nil, fmt.Errorf("%w: rendered file is %d bytes, more than %d", ErrInvalidChange, len(content), MaxFileSize)
	}
	return path, content, nil
}

// ValidateBatch checks a batch's actions before they become one commit: every path inside the
// repository, no two members touching one path (a commit with a duplicate path fails as a whole
// in GitLab, taking every member down with it).
func ValidateBatch(actions []FileAction) error {
	seen := map[string]string{}
	for _, a := range actions {
		if a.Action != "create" && a.Action != "update" && a.Action != "delete" {
			return fmt.Errorf("%w: unknown action %q", ErrInvalidChange, a.Action)
		}
		if strings.HasPrefix(a.Path, "/") || strings.Contains("/"+a.Path+"/", "/../") || a.Path == "" {
			return fmt.Errorf("%w: path %q leaves the repository", ErrInvalidChange, a.Path)
		}
		if other, dup := seen[a.Path]; dup {
			return fmt.Errorf("%w: %s and %s both change %s", ErrInvalidChange, other, a.OperationID, a.Path)
		}
		seen[a.Path] = a.OperationID
	}
	return nil
}
