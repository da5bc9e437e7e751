package gitlab_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"bindery/internal/remote/gitlab"
	"bindery/internal/sim"
)

// Reading a repository as the drift check does, against the simulated GitLab.

func TestTheTreeIsReadWholeOrNotAtAll(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	var actions []gitlab.FileAction
	for i := range 250 { // three pages of 100
		actions = append(actions, gitlab.FileAction{Action: gitlab.ActionCreate, Path: fmt.Sprintf("bindings/t1/u%03d.yaml", i), Content: fmt.Sprintf("n: %d\n", i)})
	}
	actions = append(actions, gitlab.FileAction{Action: gitlab.ActionCreate, Path: "elsewhere/x.yaml", Content: "x\n"})
	head, err := b.client.CreateCommit(ctx, project, gitlab.CommitRequest{Branch: "main", Message: "many", Actions: actions})
	if err != nil {
		t.Fatal(err)
	}
	entries, err := b.client.Tree(ctx, project, head.ID, "bindings/t1")
	if err != nil || len(entries) != 250 {
		t.Fatalf("tree: %d entries, %v", len(entries), err)
	}
	if e := entries[7]; e.Path != "bindings/t1/u007.yaml" || e.BlobID != gitlab.BlobID([]byte("n: 7\n")) {
		t.Fatalf("entry %+v: its id is not git's id of its content", e)
	}
	if _, err := b.client.Tree(ctx, project, head.ID, "bindings/none"); !errors.Is(err, gitlab.ErrNotFound) {
		t.Fatalf("a directory that is not there: %v, want ErrNotFound", err)
	}

	// The second page fails: the read fails, nothing of the first page comes back.
	for _, status := range []int{500, 429} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/repository/tree") && r.URL.Query().Get("page") == "2" {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(status)
				return
			}
			b.sims.Handler().ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)
		c, err := gitlab.New(b.src, gitlab.Options{DefaultBaseURL: srv.URL + "/sim/gitlab"})
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Tree(context.Background(), project, head.ID, "bindings/t1")
		if err == nil || got != nil || statusOf(err) != status {
			t.Fatalf("a page answering %d: %d entries, %v", status, len(got), err)
		}
	}
}

func TestTheCommitThatRemovedAFileIsFoundWithItsAuthor(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	if _, err := b.client.CreateCommit(ctx, project, gitlab.CommitRequest{Branch: "main", Message: "add",
		Actions: []gitlab.FileAction{{Action: gitlab.ActionCreate, Path: "bindings/t1/alice.yaml", Content: "a\n"}}}); err != nil {
		t.Fatal(err)
	}
	removed, err := b.sim.RemoveFromBranch(project, "main", "bindings/t1/alice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.client.LastChangeOf(ctx, project, "main", "bindings/t1/alice.yaml")
	if err != nil || got.ID != removed || got.AuthorName != sim.PersonName || got.At.IsZero() || got.ShortID == "" {
		t.Fatalf("last change: %+v %v, want %s by %s", got, err, removed, sim.PersonName)
	}
	if _, err := b.client.LastChangeOf(ctx, project, "main", "bindings/t1/never.yaml"); !errors.Is(err, gitlab.ErrNotFound) {
		t.Fatalf("a path nothing touched: %v", err)
	}
	if _, err := b.client.RawFile(ctx, project, "main", "bindings/t1/alice.yaml"); !errors.Is(err, gitlab.ErrNotFound) {
		t.Fatalf("raw file that is gone: %v", err)
	}
	if _, err := b.sim.PushToBranch(project, "main", "bindings/t1/bob.yaml", "bob\n"); err != nil {
		t.Fatal(err)
	}
	if raw, err := b.client.RawFile(ctx, project, "main", "bindings/t1/bob.yaml"); err != nil || string(raw) != "bob\n" {
		t.Fatalf("raw file: %q %v", raw, err)
	}
}
