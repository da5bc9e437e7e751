package gitlab

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"time"

	gl "gitlab.com/gitlab-org/api/client-go/v2"

	"bindery/internal/remote/outbound"
)

// Reading a repository (docs/gitlab.md, 'Reading the repository'): what the drift check
// compares with the bindings bindery holds.

// TreeEntry is one file of a repository tree.
type TreeEntry struct {
	Path string
	// BlobID is git's object id of the file's content (sha1 of "blob <size>\0" and the content):
	// equal to BlobID(content) exactly when the file holds content.
	BlobID string
}

// maxTreePages bounds Tree: 100,000 entries under one directory is not a repository of binding
// files, and reading on would hold a drift round for minutes.
const maxTreePages = 1000

// Tree lists every file (not the directories) under dir at ref, recursively, reading every page;
// a page that fails fails the whole read, so no caller ever sees part of a tree. ErrNotFound when
// dir is not a directory at ref (or ref is unknown).
func (c *Client) Tree(ctx context.Context, project, ref, dir string) ([]TreeEntry, error) {
	var out []TreeEntry
	opt := &gl.ListTreeOptions{Ref: &ref, Recursive: gl.Ptr(true)}
	if dir != "" {
		opt.Path = &dir
	}
	more, err := c.pages(ctx, "list_tree", maxTreePages, func(l *gl.Client, o, page gl.RequestOptionFunc) (*gl.Response, error) {
		list, resp, err := l.Repositories.ListTree(project, opt, o, page, perPage(100))
		for _, n := range list {
			if n.Type == "blob" {
				out = append(out, TreeEntry{Path: n.Path, BlobID: n.ID})
			}
		}
		return resp, err
	})
	if err != nil {
		return nil, err
	}
	if more {
		msg := fmt.Sprintf("the tree of %s under %q has more than %d pages", project, dir, maxTreePages)
		return nil, outbound.NewStatusError(system, "list_tree", 200, ReasonMalformed, msg, nil)
	}
	return out, nil
}

// PathCommit is the newest commit that changed a path.
type PathCommit struct {
	ID         string
	ShortID    string
	AuthorName string
	At         time.Time // committed date (zero when GitLab did not say)
	Title      string
}

// LastChangeOf reads the newest commit on ref that changed path (created, edited or removed
// it): for a file that is gone, the commit that removed it. ErrNotFound when none did.
func (c *Client) LastChangeOf(ctx context.Context, project, ref, path string) (PathCommit, error) {
	var out PathCommit
	found := false
	err := c.call(ctx, botAccount(c.cfg.Current()), "list_commits", func(l *gl.Client, o gl.RequestOptionFunc) (*gl.Response, error) {
		list, resp, err := l.Commits.ListCommits(project, &gl.ListCommitsOptions{RefName: &ref, Path: &path}, o, perPage(1))
		if err == nil && len(list) > 0 {
			cm := list[0]
			out = PathCommit{ID: cm.ID, ShortID: cm.ShortID, AuthorName: cm.AuthorName, Title: cm.Title}
			if cm.CommittedDate != nil {
				out.At = cm.CommittedDate.UTC()
			}
			found = true
		}
		return resp, err
	})
	if err == nil && !found {
		return PathCommit{}, outbound.NewStatusError(system, "list_commits", 404, ReasonNotFound, "no commit changed "+path, nil)
	}
	return out, err
}

// RawFile reads a file's content at ref. ErrNotFound when it is not there.
func (c *Client) RawFile(ctx context.Context, project, ref, path string) ([]byte, error) {
	var out []byte
	err := c.call(ctx, botAccount(c.cfg.Current()), "get_file_raw", func(l *gl.Client, o gl.RequestOptionFunc) (*gl.Response, error) {
		b, resp, err := l.RepositoryFiles.GetRawFile(project, path, &gl.GetRawFileOptions{Ref: &ref}, o)
		if err == nil {
			out = b
		}
		return resp, err
	})
	return out, err
}

// BlobID is git's object id of a file holding content, what TreeEntry.BlobID says of the file in
// the repository: the drift check compares the two without reading the file.
func BlobID(content []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(content))
	h.Write(content)
	return hex.EncodeToString(h.Sum(nil))
}
