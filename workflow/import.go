package workflow

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"bindery/api"
	"bindery/batch"
	"bindery/internal/platform/config"
	"bindery/internal/remote/gitlab"
	"bindery/internal/vocab/apperr"
	"bindery/internal/work/change"
	"bindery/store"
)

// Adopting an existing repository (docs/drift.md, 'Importing a repository'): every file under
// every target's path template becomes a binding in effect, in one audited transaction, so that
// a team that brings bindery to a config repository with hundreds of binding files does not ask
// everybody to apply again.

// Repository is what an import reads of GitLab (gitlab.API has it).
type Repository interface {
	GetBranch(ctx context.Context, project, branch string) (gitlab.Branch, error)
	Tree(ctx context.Context, project, ref, dir string) ([]gitlab.TreeEntry, error)
	RawFile(ctx context.Context, project, ref, path string) ([]byte, error)
}

// ImportItem is one file an import looked at.
type ImportItem struct {
	Path      string
	TargetKey string
	Subject   string
	ExpiresAt *time.Time // from the file
	// Becomes is what the file becomes: "a binding in effect", or why it stays as it is (its
	// relation has a request already). Problem is set instead when the file cannot be taken.
	Becomes string
	Problem string
}

// BecomesBinding is ImportItem.Becomes of a file the import adopts.
const BecomesBinding = "a binding in effect"

// ImportResult is an import's list of files and what it did.
type ImportResult struct {
	Items   []ImportItem
	Adopted int  // bindings created (0 for a dry run)
	DryRun  bool // nothing was written
}

// Import reads every target's files and, unless dryRun, adopts those no binding owns, all in one
// transaction with one audit record (actor). A file that does not parse, or that names another
// subject or target than its path, is listed with why and left out; the others are adopted or
// none is. Running it again adds nothing: each adopted relation has its binding then.
func Import(ctx context.Context, db *store.DB, snap *config.Snapshot, repo Repository, actor string, dryRun bool) (ImportResult, error) {
	res := ImportResult{DryRun: dryRun}
	groups := map[[2]string][]config.Target{}
	var order [][2]string
	for _, t := range snap.Targets() {
		k := [2]string{t.Project, t.Branch}
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], t)
	}
	var adopt []store.Adoption
	for _, k := range order {
		items, as, err := importBranch(ctx, db, repo, k[0], k[1], groups[k], actor)
		if err != nil {
			return res, fmt.Errorf("import %s %s: %w", k[0], k[1], err)
		}
		res.Items = append(res.Items, items...)
		adopt = append(adopt, as...)
	}
	if dryRun || len(adopt) == 0 {
		return res, nil
	}
	key := "import:" + store.NewEventID()
	err := db.InTx(ctx, func(tx *store.Tx) error {
		if _, err := tx.RecordAudit(ctx, store.AuditEvent{Key: key, Actor: actor, Action: "import",
			Params: map[string]any{"adopted": len(adopt), "files": len(res.Items)}}); err != nil {
			return err
		}
		return tx.Adopt(ctx, adopt, adopted())
	})
	if errors.Is(err, store.ErrDuplicate) {
		return res, fmt.Errorf("a relation got a request while importing; run the import again: %w", err)
	}
	if err != nil {
		return res, err
	}
	res.Adopted = len(adopt)
	return res, nil
}

// importBranch lists one branch's files under its targets' templates and the adoptions they
// make.
func importBranch(ctx context.Context, db *store.DB, repo Repository, project, branch string, targets []config.Target, actor string) ([]ImportItem, []store.Adoption, error) {
	br, err := repo.GetBranch(ctx, project, branch)
	if err != nil {
		return nil, nil, err
	}
	blobs := map[string]string{}
	var dirs []string
	for _, t := range targets {
		d := templateDir(t.Path)
		if slices.Contains(dirs, d) {
			continue
		}
		dirs = append(dirs, d)
		entries, err := repo.Tree(ctx, project, br.CommitSHA, d)
		if errors.Is(err, gitlab.ErrNotFound) {
			continue // the template matches nothing yet
		}
		if err != nil {
			return nil, nil, err
		}
		for _, e := range entries {
			blobs[e.Path] = e.BlobID
		}
	}
	paths := slices.Sorted(maps.Keys(blobs))
	keys := make([]string, len(targets))
	for i, t := range targets {
		keys[i] = t.Key
	}
	bindings, err := db.DriftBindingsAny(ctx, keys)
	if err != nil {
		return nil, nil, err
	}
	owned := map[[2]string]store.Operation{}
	for _, op := range bindings {
		owned[[2]string{op.TargetKey, op.SubjectID}] = op
	}
	match := pathMatcher(targets)
	var items []ImportItem
	var adopt []store.Adoption
	for _, p := range paths {
		t, subject, ok := match(p)
		if !ok {
			continue // not a binding file of any target
		}
		it := ImportItem{Path: p, TargetKey: t.Key, Subject: subject}
		if op, ok := owned[[2]string{t.Key, subject}]; ok {
			it.Becomes = fmt.Sprintf("stays: request %s of bindery holds this relation (%s)", op.OperationID, op.Status)
			items = append(items, it)
			continue
		}
		raw, err := repo.RawFile(ctx, project, br.CommitSHA, p)
		if err != nil {
			return nil, nil, err
		}
		f, problem := parseBindingFile(raw, t, subject)
		if problem != "" {
			it.Problem = problem
			items = append(items, it)
			continue
		}
		it.ExpiresAt, it.Becomes = f.ExpiresAt, BecomesBinding
		items = append(items, it)
		note := fmt.Sprintf("Adopted from the config repository (%s at %s) by %s.", p, shortSHA(br.CommitSHA), actor)
		reason := f.Reason
		if strings.TrimSpace(reason) == "" {
			reason = note
		}
		adopt = append(adopt, store.Adoption{OperationID: "adopted-" + store.NewEventID(), SubjectID: subject, TargetKey: t.Key, Project: t.Project,
			Reason: reason, TargetDef: batch.TargetDef(t), ExpiresAt: f.ExpiresAt, Note: note, Path: p, Blob: blobs[p]})
	}
	return items, adopt, nil
}

// parseBindingFile reads a binding file as bindery writes them (change.BindingFile): a YAML
// mapping whose subject and target, when present, agree with its path. problem says why a file
// cannot be taken.
func parseBindingFile(raw []byte, t config.Target, subject string) (change.BindingFile, string) {
	var node yaml.Node
	if err := yaml.Unmarshal(raw, &node); err != nil {
		return change.BindingFile{}, "not YAML: " + err.Error()
	}
	if len(node.Content) == 0 || node.Content[0].Kind != yaml.MappingNode {
		return change.BindingFile{}, "not a YAML mapping of a binding (subject, target, expiresAt, …)"
	}
	var f change.BindingFile
	if err := node.Content[0].Decode(&f); err != nil {
		return change.BindingFile{}, "its fields do not read as a binding's: " + err.Error()
	}
	switch {
	case f.Subject != "" && f.Subject != subject:
		return f, fmt.Sprintf("it names subject %s, but its path is %s's", f.Subject, subject)
	case f.Target != "" && f.Target != t.Key:
		return f, fmt.Sprintf("it names target %s, but its path is %s's", f.Target, t.Key)
	}
	return f, ""
}

func shortSHA(sha string) string { return sha[:min(len(sha), 12)] }

// ImportRepository is Import from the ops console (POST /api/ops/import), through the workflow's
// GitLab client.
func (w *Workflow) ImportRepository(ctx context.Context, dryRun bool, actor string) (api.ImportResult, error) {
	res, err := Import(ctx, w.db, w.cfg.Current(), w.mr.Runner.GitLab, actor, dryRun)
	if err != nil {
		return api.ImportResult{}, apperr.Wrap(err, apperr.Unavailable, "The import could not read the repository or write the bindings; nothing was adopted. Try again in a moment.")
	}
	out := api.ImportResult{Items: []api.ImportItem{}, Adopted: res.Adopted, DryRun: res.DryRun}
	for _, it := range res.Items {
		out.Items = append(out.Items, api.ImportItem(it))
	}
	return out, nil
}
