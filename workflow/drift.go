package workflow

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"bindery/api"
	"bindery/batch"
	"bindery/internal/platform/config"
	"bindery/internal/remote/gitlab"
	"bindery/internal/vocab/explain"
	"bindery/internal/vocab/state"
	"bindery/internal/work/change"
	"bindery/store"
)

// The drift check (docs/drift.md): the config repository is the truth. Per project and branch,
// one branch read per round; when the head moved since the last look, the files under every
// target's path template (the tree, whose blob ids say what each file holds) compared with the
// bindings whose last change merged. Nothing in flight is drift.

// DriftResult is what one drift round did.
type DriftResult struct {
	Branches int // branches looked at
	Read     int // branches whose files were read (their head moved)
	Opened   int // findings opened (or reopened, or of another kind now)
}

// Drift runs one drift round (cron.drift). A branch whose read fails — a page of its tree, a
// 429, a 5xx — records nothing this round and is read again at the next: no finding ever comes
// from part of a read. The error joins the branches' failures; the other branches went on.
func (w *Workflow) Drift(ctx context.Context) (DriftResult, error) {
	var res DriftResult
	snap := w.cfg.Current()
	if !snap.DriftEnabled() {
		return res, nil
	}
	groups := map[[2]string][]config.Target{}
	for _, t := range snap.Targets() {
		k := [2]string{t.Project, t.Branch}
		groups[k] = append(groups[k], t)
	}
	keys := make([][2]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]string) int { return strings.Compare(a[0]+"\x00"+a[1], b[0]+"\x00"+b[1]) })
	var errs []error
	for _, k := range keys {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		res.Branches++
		read, opened, err := w.driftBranch(ctx, snap, k[0], k[1], groups[k])
		if read {
			res.Read++
		}
		res.Opened += opened
		if err != nil {
			w.log.Warn("drift: branch not read; it is read again at the next round", "project", k[0], "branch", k[1], "err", err)
			errs = append(errs, fmt.Errorf("%s %s: %w", k[0], k[1], err))
		}
	}
	return res, errors.Join(errs...)
}

// driftBranch looks at one branch: read reports that its files were read (the head moved).
func (w *Workflow) driftBranch(ctx context.Context, snap *config.Snapshot, project, branch string, targets []config.Target) (read bool, opened int, err error) {
	gl := w.mr.Runner.GitLab
	br, err := gl.GetBranch(ctx, project, branch)
	if err != nil {
		return false, 0, err
	}
	last, err := w.db.DriftHead(ctx, project, branch)
	if err != nil || last == br.CommitSHA {
		return false, 0, err
	}
	keys := make([]string, len(targets))
	for i, t := range targets {
		keys[i] = t.Key
	}
	// The bindings are read before the head whose files are compared and again after: a binding
	// in effect at the first read merged before it, so its file is in that head (bindery's own
	// change is never taken for drift); one whose change started since (a removal, a new grant)
	// differs at the second read and is left alone. Only a moved branch pays for the second head.
	before, err := w.db.DriftBindings(ctx, keys)
	if err != nil {
		return false, 0, err
	}
	if br, err = gl.GetBranch(ctx, project, branch); err != nil {
		return false, 0, err
	}
	head := br.CommitSHA
	var dirs []string
	for _, t := range targets {
		if d := templateDir(t.Path); !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	files := map[string]string{} // path → blob id
	for _, d := range dirs {
		entries, err := gl.Tree(ctx, project, head, d)
		if errors.Is(err, gitlab.ErrNotFound) {
			continue // nothing was ever written there: no file, and every binding's file is missing
		}
		if err != nil {
			return false, 0, err
		}
		for _, e := range entries {
			files[e.Path] = e.BlobID
		}
	}
	bindings, err := w.db.DriftBindings(ctx, keys)
	if err != nil {
		return false, 0, err
	}
	settled := map[string]store.Operation{} // operation → as the first read had it
	for _, op := range before {
		settled[op.OperationID] = op
	}
	known, err := w.db.DriftFindings(ctx, keys)
	if err != nil {
		return false, 0, err
	}
	rows := map[[2]string]store.DriftFinding{}
	for _, f := range known {
		rows[[2]string{f.TargetKey, f.Subject}] = f
	}
	look := store.DriftLook{Project: project, Branch: branch, Head: head, Targets: keys, Keep: map[string]map[string]bool{}}
	keep := func(op store.Operation) {
		if look.Keep[op.TargetKey] == nil {
			look.Keep[op.TargetKey] = map[string]bool{}
		}
		look.Keep[op.TargetKey][op.SubjectID] = true
	}
	restoring, err := w.db.RelationsBeingWritten(ctx, keys, snap.DeployOverdue())
	if err != nil {
		return false, 0, err
	}
	owned := map[string]bool{}
	for _, op := range bindings {
		t, ok := batch.TargetOf(snap, op)
		if !ok {
			keep(op)
			continue
		}
		path, err := change.RenderPath(t, op.SubjectID)
		if err != nil {
			keep(op)
			continue
		}
		owned[path] = true
		was, read := settled[op.OperationID]
		steady := read && was.Status == op.Status && was.Step == op.Step
		if restoring[op.TargetKey][op.SubjectID] {
			// A restore on its way may end without moving the branch (its deploy callback
			// lost): the branch is read again at the next round until it has ended.
			look.ReadAgain = true
		}
		if !inDirs(path, dirs) || !inEffect(op) || !steady || restoring[op.TargetKey][op.SubjectID] {
			keep(op) // not read this round, or in flight (a restore too), or moved meanwhile: nothing in flight is drift
			continue
		}
		row := rows[[2]string{op.TargetKey, op.SubjectID}]
		got, present := files[path]
		if present && row.State == store.DriftClosed && row.SettledOp == op.OperationID && row.SettledBlob == got {
			continue // an operator accepted this file as the binding's own (or it was adopted)
		}
		fa, err := batch.RenderChange(t, op, state.ActionAdd)
		if err != nil {
			keep(op)
			continue
		}
		o := store.DriftObservation{TargetKey: op.TargetKey, Subject: op.SubjectID, Path: path, OperationID: op.OperationID, BlobID: got}
		switch {
		case !present:
			o.Kind = store.DriftMissing
			if row.Kind == store.DriftMissing && row.State != store.DriftClosed && row.OperationID == op.OperationID && row.CommitSHA != "" {
				o.CommitSHA, o.Author = row.CommitSHA, row.Author // who removed it does not change
				if row.CommittedAt != nil {
					o.CommittedAt = *row.CommittedAt
				}
			} else {
				c, err := gl.LastChangeOf(ctx, project, head, path)
				switch {
				case errors.Is(err, gitlab.ErrNotFound): // never there: nobody to name
				case err != nil:
					return false, 0, err
				default:
					o.CommitSHA, o.Author, o.CommittedAt = c.ID, c.AuthorName, c.At
				}
			}
		case got == gitlab.BlobID([]byte(fa.Content)):
			continue // as bindery wrote it
		default:
			o.Kind = store.DriftChanged
		}
		look.Seen = append(look.Seen, o)
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		if !owned[p] {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	match := pathMatcher(targets)
	for _, p := range paths {
		if t, subject, ok := match(p); ok {
			look.Seen = append(look.Seen, store.DriftObservation{TargetKey: t.Key, Subject: subject, Path: p, Kind: store.DriftUnknown, BlobID: files[p]})
		}
	}
	found, err := w.db.RecordDrift(ctx, look)
	return true, len(found), err
}

// inEffect: the binding's last change merged and no removal of it is on its way — the file
// must be in the repository as bindery rendered it.
func inEffect(op store.Operation) bool { return state.InEffect(op.Status, op.Step) }

// templateDir is the directory a path template's files lie under: its text before the first
// placeholder, up to the last slash ("" : the repository's root).
func templateDir(tmpl string) string {
	fixed, _, _ := strings.Cut(tmpl, "{")
	i := strings.LastIndex(fixed, "/")
	if i < 0 {
		return ""
	}
	return fixed[:i]
}

func inDirs(path string, dirs []string) bool {
	for _, d := range dirs {
		if d == "" || strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	return false
}

// subjectRE is what RenderPath accepts as a subject inside a path.
const subjectRE = `([A-Za-z0-9][A-Za-z0-9._@+-]{0,127})`

// pathMatcher finds the target whose path template renders a path, and for which subject: the
// first in the catalog's order whose rendering of that subject is exactly the path.
func pathMatcher(targets []config.Target) func(path string) (config.Target, string, bool) {
	res := make([]*regexp.Regexp, len(targets))
	for i, t := range targets {
		re := regexp.QuoteMeta(t.Path)
		re = strings.ReplaceAll(re, regexp.QuoteMeta("{target}"), regexp.QuoteMeta(t.Key))
		re = strings.ReplaceAll(re, regexp.QuoteMeta("{subject}"), subjectRE)
		res[i], _ = regexp.Compile("^" + re + "$") // nil: never matches
	}
	return func(path string) (config.Target, string, bool) {
		for i, t := range targets {
			if res[i] == nil {
				continue
			}
			sub := res[i].FindStringSubmatch(path)
			if len(sub) < 2 {
				continue
			}
			if p, err := change.RenderPath(t, sub[1]); err == nil && p == path {
				return t, sub[1], true
			}
		}
		return config.Target{}, "", false
	}
}

// DriftFindings lists the drift findings for the ops console, first seen newest first.
func (w *Workflow) DriftFindings(ctx context.Context) (api.DriftList, error) {
	fs, err := w.db.ListDrift(ctx, nil, api.DriftListCap+1)
	if err != nil {
		return api.DriftList{}, err
	}
	out := api.DriftList{Items: []api.DriftFinding{}, More: len(fs) > api.DriftListCap}
	for _, f := range fs[:min(len(fs), api.DriftListCap)] {
		v, err := w.driftView(ctx, f)
		if err != nil {
			return api.DriftList{}, err
		}
		out.Items = append(out.Items, v)
	}
	return out, nil
}

// OpenDrift counts the open findings, up to limit (the attention count).
func (w *Workflow) OpenDrift(ctx context.Context, limit int) (int, error) {
	return w.db.CountOpenDrift(ctx, limit)
}

// driftView is f for the API, with where its restore stands (one read when it has one).
func (w *Workflow) driftView(ctx context.Context, f store.DriftFinding) (api.DriftFinding, error) {
	v := driftView(f)
	if f.RestoreAt == nil {
		return v, nil
	}
	r, err := w.db.RestoreOf(ctx, f)
	if err != nil || r.State == "" {
		return v, err
	}
	v.Restore = &api.DriftRestore{State: r.State, By: f.RestoreBy, At: *f.RestoreAt, BatchID: r.BatchID, MRIID: r.MRIID,
		Text: explain.DriftRestoring(r.State, f.RestoreBy, r.BatchID, r.MRIID, r.Note)}
	return v, nil
}

func driftView(f store.DriftFinding) api.DriftFinding {
	return api.DriftFinding{
		ID: f.ID, Kind: f.Kind, State: f.State, TargetKey: f.TargetKey, Subject: f.Subject, Project: f.Project, Path: f.Path,
		OperationID: f.OperationID, Commit: f.CommitSHA, Author: f.Author, CommittedAt: f.CommittedAt,
		FirstSeen: f.FirstSeen, LastSeen: f.LastSeen, ClosedAt: f.ClosedAt, IgnoreReason: f.IgnoreReason,
		Text: explain.DriftFound(f.Kind, f.TargetKey, f.Subject, f.Path, f.CommitSHA, f.Author),
	}
}
