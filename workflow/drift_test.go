package workflow_test

import (
	"fmt"
	"strings"
	"sync"

	"bindery/api"
	"testing"

	"bindery/internal/sim"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
	"bindery/workflow"
)

// docs/drift.md: the config repository is the truth. The drift round compares the files under
// each target's path template with the bindings whose last change merged.

// drift runs one drift round and fails the test on an error.
func (h *harness) drift() (read, opened int) {
	h.t.Helper()
	res, err := h.wf.Drift(bg)
	if err != nil {
		h.t.Fatalf("drift round: %v", err)
	}
	return res.Read, res.Opened
}

// findings are the findings of the database, by subject.
func findings(t *testing.T, db *store.DB) map[string]store.DriftFinding {
	t.Helper()
	fs, err := db.ListDrift(bg, nil, 100)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]store.DriftFinding{}
	for _, f := range fs {
		out[f.Subject] = f
	}
	return out
}

func driftEvents(t *testing.T, db *store.DB, op string) []store.Event {
	t.Helper()
	evs, err := db.EventsOf(bg, op, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []store.Event
	for _, e := range evs {
		if e.Type == state.EventBindingDrifted {
			out = append(out, e)
		}
	}
	return out
}

func TestAFileRemovedOutsideBinderyIsFoundWithWhoRemovedItAndClosesWhenItComesBack(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{realBatch: true})
		op := h.validated("alice", "db-read")
		path := "bindings/db-read/alice@example.com.yaml"
		content, ok := h.sims.GitLab.File(project, "main", path)
		if !ok {
			t.Fatal("no file")
		}
		if read, opened := h.drift(); read != 2 || opened != 0 || len(findings(t, db)) != 0 {
			t.Fatalf("first round: read %d branches, opened %d, %v", read, opened, findings(t, db))
		}
		tree := h.sims.GitLab.Calls("list_tree")
		if read, _ := h.drift(); read != 0 || h.sims.GitLab.Calls("list_tree") != tree {
			t.Fatalf("nothing moved, yet %d branches were read (%d tree calls)", read, h.sims.GitLab.Calls("list_tree")-tree)
		}

		removed, err := h.sims.GitLab.RemoveFromBranch(project, "main", path)
		if err != nil {
			t.Fatal(err)
		}
		// Two instances run the round at once: one finding, one event.
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() { defer wg.Done(); _, _ = h.wf.Drift(bg) }()
		}
		wg.Wait()
		f := findings(t, db)["alice@example.com"]
		if f.Kind != store.DriftMissing || f.State != store.DriftOpen || f.CommitSHA != removed || f.Author != sim.PersonName ||
			f.OperationID != op || f.TargetKey != "db-read" || f.Path != path || f.CommittedAt == nil {
			t.Fatalf("finding %+v, want missing by %s", f, removed)
		}
		evs := driftEvents(t, db, op)
		if len(evs) != 1 || evs[0].SubjectID != "alice@example.com" || evs[0].Facts.SHA != removed || evs[0].Facts.Reason != store.DriftMissing {
			t.Fatalf("events %+v, want one binding.drifted to alice", evs)
		}
		if _, opened := h.drift(); opened != 0 {
			t.Fatal("a finding already open was told again")
		}

		// Somebody puts the file back as it was: the finding closes by itself.
		if _, err := h.sims.GitLab.PushToBranch(project, "main", path, content); err != nil {
			t.Fatal(err)
		}
		h.drift()
		if f := findings(t, db)["alice@example.com"]; f.State != store.DriftClosed || f.ClosedAt == nil {
			t.Fatalf("after the file came back: %+v", f)
		}
	})
}

func TestAChangedFileAndAFileNoBindingOwnsAreFound(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{realBatch: true})
		op := h.validated("alice", "db-read")
		h.drift()
		path := "bindings/db-read/alice@example.com.yaml"
		for p, c := range map[string]string{
			path:                                    "subject: alice@example.com\nrole: admin\n",
			"bindings/db-read/zed@example.com.yaml": "subject: zed@example.com\n",
			"bindings/db-read/team/x.yaml":          "not a subject's file\n", // no subject has a slash
			"README.md":                             "outside every template\n",
		} {
			if _, err := h.sims.GitLab.PushToBranch(project, "main", p, c); err != nil {
				t.Fatal(err)
			}
		}
		if _, opened := h.drift(); opened != 2 {
			t.Fatalf("opened %d, want 2: %v", opened, findings(t, db))
		}
		fs := findings(t, db)
		if f := fs["alice@example.com"]; f.Kind != store.DriftChanged || f.OperationID != op || f.BlobID == "" {
			t.Fatalf("changed: %+v", f)
		}
		if f := fs["zed@example.com"]; f.Kind != store.DriftUnknown || f.OperationID != "" || f.Path != "bindings/db-read/zed@example.com.yaml" {
			t.Fatalf("unknown: %+v", f)
		}
		// The ops console lists them and counts the open ones.
		var list api.DriftList
		if code := h.api("GET", "/api/ops/drift", "ops", "", &list); code != 200 || len(list.Items) != 2 || list.Items[0].Text == "" {
			t.Fatalf("GET /api/ops/drift: %d %+v", code, list)
		}
		var att api.Attention
		if code := h.api("GET", "/api/ops/attention", "ops", "", &att); code != 200 || att.Drift != 2 {
			t.Fatalf("attention: %d %+v", code, att)
		}
		// Only a missing file tells the requester; a changed one tells operators.
		if evs := driftEvents(t, db, op); len(evs) != 1 || evs[0].SubjectID != "" {
			t.Fatalf("events of the changed file: %+v", evs)
		}
		// Then it is removed as well: the finding is of another kind now, and told again.
		if _, err := h.sims.GitLab.RemoveFromBranch(project, "main", path); err != nil {
			t.Fatal(err)
		}
		h.drift()
		if f := findings(t, db)["alice@example.com"]; f.Kind != store.DriftMissing || f.State != store.DriftOpen {
			t.Fatalf("after the removal: %+v", f)
		}
		if evs := driftEvents(t, db, op); len(evs) != 2 || evs[1].SubjectID != "alice@example.com" {
			t.Fatalf("events: %+v", evs)
		}
	})
}

func TestNothingInFlightIsDriftAndAFailedReadFindsNothing(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{realBatch: true})
		op := h.validated("alice", "db-read")
		h.drift()
		// The removal is on its way (revoked, not yet merged) when somebody deletes the file.
		if code := h.api("POST", "/api/requests/"+op+"/revoke", "alice", `{"operationId":"rv-1"}`, nil); code != 202 {
			t.Fatalf("revoke: %d", code)
		}
		if _, err := h.sims.GitLab.RemoveFromBranch(project, "main", "bindings/db-read/alice@example.com.yaml"); err != nil {
			t.Fatal(err)
		}
		if _, opened := h.drift(); opened != 0 || len(findings(t, db)) != 0 {
			t.Fatalf("a binding in flight was reported: %v", findings(t, db))
		}

		// A file appears; the tree read fails (a 5xx), then the branch read is throttled (429):
		// no finding, and the next round reads the branch again.
		if _, err := h.sims.GitLab.PushToBranch(project, "main", "bindings/db-read/zed@example.com.yaml", "x\n"); err != nil {
			t.Fatal(err)
		}
		h.sims.GitLab.Inject("list_tree", sim.FaultError, 1)
		if res, err := h.wf.Drift(bg); err == nil || res.Opened != 0 || len(findings(t, db)) != 0 {
			t.Fatalf("a failed tree read: %+v %v %v", res, err, findings(t, db))
		}
		h.sims.GitLab.Inject("get_branch", sim.FaultStatus(429, "Retry later"), 1)
		if res, err := h.wf.Drift(bg); err == nil || res.Opened != 0 || len(findings(t, db)) != 0 {
			t.Fatalf("a throttled round: %+v %v", res, err)
		}
		if _, opened := h.drift(); opened != 1 || findings(t, db)["zed@example.com"].Kind != store.DriftUnknown {
			t.Fatalf("the next round: opened %d, %v", opened, findings(t, db))
		}
	})
}

// docs/drift.md, 'Repairs': accept makes the repository win, ignore leaves a finding until its
// file changes again; both through the ops API, audited and idempotent by operationId.
func TestAnOperatorAcceptsOrIgnoresWhatTheRepositoryHolds(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{realBatch: true})
		alice := h.validated("alice", "db-read")
		h.validated("bob", "db-read")
		h.validated("ops", "db-read")
		h.drift()
		dir := "bindings/db-read/"
		if _, err := h.sims.GitLab.RemoveFromBranch(project, "main", dir+"alice@example.com.yaml"); err != nil {
			t.Fatal(err)
		}
		for p, c := range map[string]string{dir + "bob@example.com.yaml": "edited: by hand\n", dir + "zed@example.com.yaml": "subject: zed@example.com\n",
			dir + "ops@example.com.yaml": "edited: too\n"} {
			if _, err := h.sims.GitLab.PushToBranch(project, "main", p, c); err != nil {
				t.Fatal(err)
			}
		}
		h.drift()
		fs := findings(t, db)
		act := func(id int64, action, body string) (int, api.DriftFinding) {
			var f api.DriftFinding
			code := h.api("POST", fmt.Sprintf("/api/ops/drift/%d/%s", id, action), "ops", body, &f)
			return code, f
		}

		// A missing file accepted: its binding ends CLOSED, with the commit in its history.
		code, f := act(fs["alice@example.com"].ID, "accept", `{"operationId":"acc-1"}`)
		if code != 200 || f.State != "closed" {
			t.Fatalf("accept missing: %d %+v", code, f)
		}
		if code, again := act(fs["alice@example.com"].ID, "accept", `{"operationId":"acc-1"}`); code != 200 || again.State != "closed" {
			t.Fatalf("the same accept again: %d %+v", code, again)
		}
		if code, _ := act(fs["alice@example.com"].ID, "accept", `{"operationId":"acc-2"}`); code != 409 {
			t.Fatalf("accepting a closed finding: %d", code)
		}
		v := h.view(alice)
		if v.Status != state.StatusClosed || !strings.Contains(fmt.Sprint(v.Timeline), "Removed outside bindery (commit "+fs["alice@example.com"].CommitSHA[:12]) {
			t.Fatalf("alice after the accept: %s %+v", v.Status, v.Timeline)
		}

		// A changed file accepted: it is the binding's own now, no round finds it again.
		if code, f := act(fs["bob@example.com"].ID, "accept", `{"operationId":"acc-3"}`); code != 200 || f.State != "closed" {
			t.Fatalf("accept changed: %d %+v", code, f)
		}
		// An unknown file accepted: a binding in effect for its subject, its history saying so.
		code, f = act(fs["zed@example.com"].ID, "accept", `{"operationId":"acc-4"}`)
		if code != 200 || f.State != "closed" || f.OperationID == "" {
			t.Fatalf("accept unknown: %d %+v", code, f)
		}
		zed := h.view(f.OperationID)
		if zed.Status != state.StatusValidated || zed.Subject != "zed@example.com" || !strings.Contains(fmt.Sprint(zed.Timeline), "Adopted from the config repository") {
			t.Fatalf("the adopted binding: %+v", zed)
		}
		// A changed file ignored, with a reason (required).
		if code, _ := act(fs["ops@example.com"].ID, "ignore", `{"operationId":"ign-0"}`); code != 400 {
			t.Fatalf("ignore without a reason: %d", code)
		}
		if code, f := act(fs["ops@example.com"].ID, "ignore", `{"operationId":"ign-1","reason":"hand fix during the incident"}`); code != 200 || f.State != "ignored" || f.IgnoreReason != "hand fix during the incident" {
			t.Fatalf("ignore: %d %+v", code, f)
		}
		// The branch moves (an unrelated file): nothing accepted or ignored is found again.
		if _, err := h.sims.GitLab.PushToBranch(project, "main", "README.md", "moved\n"); err != nil {
			t.Fatal(err)
		}
		if read, opened := h.drift(); read != 1 || opened != 0 {
			t.Fatalf("after the repairs: read %d, opened %d: %v", read, opened, findings(t, db))
		}
		fs = findings(t, db)
		if fs["ops@example.com"].State != store.DriftIgnored || fs["bob@example.com"].State != store.DriftClosed || fs["zed@example.com"].State != store.DriftClosed {
			t.Fatalf("states after the next round: %v", fs)
		}
		// The ignored file changes again: the finding is back.
		if _, err := h.sims.GitLab.PushToBranch(project, "main", dir+"ops@example.com.yaml", "edited: again\n"); err != nil {
			t.Fatal(err)
		}
		if _, opened := h.drift(); opened != 1 || findings(t, db)["ops@example.com"].State != store.DriftOpen {
			t.Fatalf("the ignored file changed again: %v", findings(t, db))
		}
		// Every repair is in the audit log once (the replayed acc-1 is not written again; the
		// refused acc-2 is, as every attempt of an ops action is).
		audit, err := db.ListAudit(bg, 0, 50)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range audit {
			if strings.HasPrefix(e.Action, "ops.drift.") {
				n++
			}
		}
		if n != 5 {
			t.Fatalf("%d drift repairs audited, want 5: %+v", n, audit)
		}
	})
}

// docs/drift.md, 'Importing a repository': a dry run lists every file with what it would become
// and writes nothing; the import adopts in one step; running it again adds nothing; a file that
// does not parse is listed with why and left out.
func TestImportAdoptsTheFilesAlreadyInTheRepository(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{realBatch: true})
		alice := h.validated("alice", "db-read")
		if _, err := h.gl.GetBranch(bg, "infra/observability-config", "main"); err != nil { // the simulator makes a project at its first read
			t.Fatal(err)
		}
		files := map[string]string{
			"bindings/db-read/zed@example.com.yaml": "# by hand\nsubject: zed@example.com\ntarget: db-read\nreason: on call\nexpiresAt: 2031-01-02T03:04:05Z\n",
			"bindings/db-read/yan@example.com.yaml": "subject: yan@example.com\n",
			"bindings/db-read/bad@example.com.yaml": "subject: [unclosed\n",
			"bindings/db-read/eve@example.com.yaml": "subject: mallory@example.com\n",
			"grafana/kim@example.com.yaml":          "target: grafana\n",
			"bindings/db-read/notes/readme.md":      "not a binding file\n",
		}
		for p, c := range files {
			proj := project
			if strings.HasPrefix(p, "grafana/") {
				proj = "infra/observability-config"
			}
			if _, err := h.sims.GitLab.PushToBranch(proj, "main", p, c); err != nil {
				t.Fatal(err)
			}
		}
		snap := h.cfg.Current()
		byPath := func(res workflow.ImportResult) map[string]workflow.ImportItem {
			out := map[string]workflow.ImportItem{}
			for _, it := range res.Items {
				out[it.Path] = it
			}
			return out
		}
		dry, err := workflow.Import(bg, db, snap, h.gl, "tester", true)
		if err != nil || dry.Adopted != 0 || len(dry.Items) != 6 {
			t.Fatalf("dry run: %+v %v", dry, err)
		}
		items := byPath(dry)
		if it := items["bindings/db-read/zed@example.com.yaml"]; it.Becomes != workflow.BecomesBinding || it.Subject != "zed@example.com" ||
			it.ExpiresAt == nil || it.ExpiresAt.Year() != 2031 {
			t.Fatalf("zed: %+v", it)
		}
		if it := items["bindings/db-read/bad@example.com.yaml"]; !strings.Contains(it.Problem, "not YAML") {
			t.Fatalf("an unparsable file: %+v", it)
		}
		if it := items["bindings/db-read/eve@example.com.yaml"]; !strings.Contains(it.Problem, "mallory@example.com") {
			t.Fatalf("a file naming another subject: %+v", it)
		}
		if it := items["bindings/db-read/alice@example.com.yaml"]; !strings.Contains(it.Becomes, alice) {
			t.Fatalf("alice's file, bindery's already: %+v", it)
		}
		if fs, _ := db.DriftBindings(bg, []string{"db-read", "grafana"}); len(fs) != 1 {
			t.Fatalf("the dry run wrote bindings: %+v", fs)
		}

		res, err := workflow.Import(bg, db, snap, h.gl, "tester", false)
		if err != nil || res.Adopted != 3 {
			t.Fatalf("import: adopted %d, %v (%+v)", res.Adopted, err, res.Items)
		}
		ops, _ := db.DriftBindings(bg, []string{"db-read", "grafana"})
		var kim store.Operation
		for _, op := range ops {
			if op.SubjectID == "kim@example.com" {
				kim = op
			}
		}
		if len(ops) != 4 || kim.Status != state.StatusValidated {
			t.Fatalf("after the import: %+v", ops)
		}
		if v := h.view(kim.OperationID); !strings.Contains(fmt.Sprint(v.Timeline), "Adopted from the config repository") {
			t.Fatalf("kim's history: %+v", v.Timeline)
		}
		b, err := db.BindingFor(bg, "zed@example.com", "db-read")
		if err != nil || b.ExpiresAt == nil || b.ExpiresAt.Year() != 2031 {
			t.Fatalf("zed's binding: %+v %v", b, err)
		}
		if again, err := workflow.Import(bg, db, snap, h.gl, "tester", false); err != nil || again.Adopted != 0 {
			t.Fatalf("the import again: %+v %v", again, err)
		}
		// The adopted files are the bindings' own: the drift check finds only the two files the
		// import left out, as unknown.
		h.drift()
		open := 0
		for _, f := range findings(t, db) {
			if f.State == store.DriftOpen {
				open++
				if f.Kind != store.DriftUnknown || (f.Subject != "bad@example.com" && f.Subject != "eve@example.com") {
					t.Errorf("after the import: %+v", f)
				}
			}
		}
		if open != 2 {
			t.Fatalf("%d open findings after the import, want 2: %v", open, findings(t, db))
		}
	})
}

// docs/drift.md, 'Repairs': restore makes bindery win — the file is written again through a
// batch, the train and CI like any change; the finding closes with the deploy that includes the
// restore's merge. A restore whose batch fails leaves the finding open and says so.
func TestAnOperatorRestoresAMissingFileThroughTheTrain(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{realBatch: true})
		op := h.validated("alice", "db-read")
		path := "bindings/db-read/alice@example.com.yaml"
		content, _ := h.sims.GitLab.File(project, "main", path)
		h.drift()
		if _, err := h.sims.GitLab.RemoveFromBranch(project, "main", path); err != nil {
			t.Fatal(err)
		}
		if _, err := h.sims.GitLab.PushToBranch(project, "main", "bindings/db-read/zed@example.com.yaml", "subject: zed@example.com\n"); err != nil {
			t.Fatal(err)
		}
		h.drift()
		fs := findings(t, db)
		id := fs["alice@example.com"].ID
		restore := func(opID string) (int, api.DriftFinding) {
			var f api.DriftFinding
			code := h.api("POST", fmt.Sprintf("/api/ops/drift/%d/restore", id), "ops", `{"operationId":"`+opID+`"}`, &f)
			return code, f
		}
		finding := func() api.DriftFinding {
			var list api.DriftList
			h.api("GET", "/api/ops/drift", "ops", "", &list)
			for _, f := range list.Items {
				if f.ID == id {
					return f
				}
			}
			t.Fatalf("finding %d not listed: %+v", id, list)
			return api.DriftFinding{}
		}
		// An unknown file has no binding to restore.
		if code := h.api("POST", fmt.Sprintf("/api/ops/drift/%d/restore", fs["zed@example.com"].ID), "ops", `{"operationId":"rst-0"}`, nil); code != 409 {
			t.Fatalf("restoring an unknown file: %d", code)
		}

		// The requester's page says it, with the commit and its author.
		if d := h.view(op).Drift; d == nil || d.Kind != "missing" || !strings.Contains(d.Text, "was removed outside bindery by commit "+fs["alice@example.com"].CommitSHA[:7]+" ("+sim.PersonName+")") {
			t.Fatalf("alice's page: %+v", d)
		}
		code, f := restore("rst-1")
		if d := h.view(op).Drift; d == nil || !d.Restoring {
			t.Fatalf("alice's page while restoring: %+v", d)
		}
		if code != 202 || f.State != "open" || f.Restore == nil || f.Restore.By != "ops@example.com" || f.Restore.Text == "" {
			t.Fatalf("restore: %d %+v", code, f)
		}
		if code, again := restore("rst-1"); code != 202 || again.Restore == nil {
			t.Fatalf("the same restore again: %d %+v", code, again)
		}
		h.roundUntil("the restore's deploy", func() bool { return finding().State == "closed" })
		f = finding()
		if f.Restore == nil || f.Restore.State != store.RestoreDone || f.Restore.MRIID == 0 {
			t.Fatalf("after the deploy: %+v %+v", f, f.Restore)
		}
		if got, ok := h.sims.GitLab.File(project, "main", path); !ok || got != content {
			t.Fatalf("the file after the restore: %q, want %q", got, content)
		}
		v := h.view(op)
		if v.Drift != nil || v.Status != state.StatusValidated || !strings.Contains(fmt.Sprint(v.Timeline), "asked bindery to write it again") {
			t.Fatalf("alice after the restore: %s %+v", v.Status, v.Timeline)
		}
		if _, opened := h.drift(); opened != 0 || findings(t, db)["alice@example.com"].State != store.DriftClosed {
			t.Fatalf("a round after the restore: %v", findings(t, db))
		}

		// Removed again; this restore's batch fails CI: the finding stays open and says so.
		if _, err := h.sims.GitLab.RemoveFromBranch(project, "main", path); err != nil {
			t.Fatal(err)
		}
		if _, opened := h.drift(); opened != 1 {
			t.Fatalf("the second removal: %v", findings(t, db))
		}
		if f := finding(); f.Restore != nil {
			t.Fatalf("the reopened finding speaks of the old restore: %+v", f.Restore)
		}
		h.sims.GitLab.FailNextPipelines(100)
		if code, f := restore("rst-2"); code != 202 || f.Restore == nil {
			t.Fatalf("the second restore: %d %+v", code, f)
		}
		if code, _ := restore("rst-3"); code != 409 {
			t.Fatalf("a restore while one is on its way: %d", code)
		}
		h.roundUntil("the restore's failed batch", func() bool { r := finding().Restore; return r != nil && r.State == store.RestoreFailed })
		h.sims.GitLab.FailNextPipelines(0)
		f = finding()
		if f.State != "open" || f.Kind != "missing" || !strings.Contains(f.Restore.Text, "failed") {
			t.Fatalf("after the failed restore: %+v %+v", f, f.Restore)
		}
		if _, ok := h.sims.GitLab.File(project, "main", path); ok {
			t.Fatal("the file is back although its restore failed")
		}
		if v := h.view(op); v.Status != state.StatusValidated {
			t.Fatalf("alice after the failed restore: %s", v.Status)
		}
		if h.drift(); findings(t, db)["alice@example.com"].State != store.DriftOpen {
			t.Fatalf("a round after the failed restore: %v", findings(t, db))
		}
		// Restored once more: it goes through this time.
		if code, _ := restore("rst-4"); code != 202 {
			t.Fatalf("the restore after a failure: %d", code)
		}
		h.roundUntil("the third restore's deploy", func() bool { return finding().State == "closed" })
		// Every restore asked is audited (the replayed rst-1 once; the refused ones as well).
		audit, err := db.ListAudit(bg, 0, 50)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range audit {
			if e.Action == "ops.drift.restore" {
				n++
			}
		}
		if n != 5 {
			t.Fatalf("%d restores audited, want 5", n)
		}
	})
}

// docs/drift.md, 'The round': files no template renders are nobody's business — a directory that
// does not exist, files of another layout beside the bindings' — and a file that is not even YAML
// is compared by its blob id like any other, never parsed: no error, and only the files a
// template renders are found.
func TestATemplateThatMatchesNothingFindsNothingAndAnUnparsableFileIsFoundAsAnyOther(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{realBatch: true})
		op := h.validated("alice", "db-read")
		// grafana's directory does not exist in its project; db-read's holds other layouts.
		if _, err := h.gl.GetBranch(bg, "infra/observability-config", "main"); err != nil {
			t.Fatal(err)
		}
		for p, c := range map[string]string{
			"bindings/db-read/zed@example.com.json":     "{}\n",           // another extension
			"bindings/db-read/old/bob@example.com.yaml": "subject: x\n",   // a subdirectory
			"bindings/db-read/-bad.yaml":                "subject: x\n",   // no subject starts with '-'
			"bindings/grafana/kim@example.com.yaml":     "subject: kim\n", // another target's key, not its template
			"grafana.yaml":                              "not under grafana/\n",
		} {
			proj := project
			if strings.HasPrefix(p, "grafana") {
				proj = "infra/observability-config"
			}
			if _, err := h.sims.GitLab.PushToBranch(proj, "main", p, c); err != nil {
				t.Fatal(err)
			}
		}
		res, err := h.wf.Drift(bg)
		if err != nil || res.Read != 2 || res.Opened != 0 || len(findings(t, db)) != 0 {
			t.Fatalf("files no template renders: %+v %v %v", res, err, findings(t, db))
		}
		// Files that are not YAML at a binding's path and at a subject's path: found, as changed
		// and unknown; the round does not fail on them.
		bad := "subject: [unclosed\n\x00\xff"
		for _, p := range []string{"bindings/db-read/alice@example.com.yaml", "bindings/db-read/yan@example.com.yaml"} {
			if _, err := h.sims.GitLab.PushToBranch(project, "main", p, bad); err != nil {
				t.Fatal(err)
			}
		}
		if res, err := h.wf.Drift(bg); err != nil || res.Opened != 2 {
			t.Fatalf("unparsable files: %+v %v %v", res, err, findings(t, db))
		}
		fs := findings(t, db)
		if f := fs["alice@example.com"]; f.Kind != store.DriftChanged || f.OperationID != op {
			t.Fatalf("alice's unparsable file: %+v", f)
		}
		if f := fs["yan@example.com"]; f.Kind != store.DriftUnknown {
			t.Fatalf("yan's unparsable file: %+v", f)
		}
	})
}

// docs/drift.md, 'The round': a tree read that fails on its second page finds nothing from the
// first — no finding, the head not remembered — and the next round reads the whole tree again.
func TestATreeReadFailingHalfwayFindsNothing(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{realBatch: true})
		h.validated("alice", "db-read")
		h.drift()
		const n = 130 // more than one page of the tree (100 entries a page)
		for i := range n {
			if _, err := h.sims.GitLab.PushToBranch(project, "main", fmt.Sprintf("bindings/db-read/u%03d@example.com.yaml", i), "subject: u\n"); err != nil {
				t.Fatal(err)
			}
		}
		before := h.sims.GitLab.Calls("list_tree")
		h.sims.GitLab.Inject("list_tree", sim.Fault{}, 1) // the first page answers,
		h.sims.GitLab.Inject("list_tree", sim.FaultError, 1)
		res, err := h.wf.Drift(bg)
		if err == nil || res.Opened != 0 || len(findings(t, db)) != 0 {
			t.Fatalf("a tree read failing halfway: %+v %v, %d findings", res, err, len(findings(t, db)))
		}
		if got := h.sims.GitLab.Calls("list_tree") - before; got != 2 {
			t.Fatalf("%d tree pages read, want 2 (the second failed)", got)
		}
		res, err = h.wf.Drift(bg)
		all, _ := db.ListDrift(bg, nil, 1000)
		if err != nil || res.Read != 1 || res.Opened != n || len(all) != n {
			t.Fatalf("the next round: %+v %v, %d findings", res, err, len(all))
		}
	})
}

// A changed file restored is rewritten (an update of the file, not a create) as bindery wrote it.
func TestAnOperatorRestoresAChangedFile(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{realBatch: true})
		h.validated("alice", "db-read")
		path := "bindings/db-read/alice@example.com.yaml"
		content, _ := h.sims.GitLab.File(project, "main", path)
		h.drift()
		if _, err := h.sims.GitLab.PushToBranch(project, "main", path, "subject: alice@example.com\nrole: admin\n"); err != nil {
			t.Fatal(err)
		}
		h.drift()
		f := findings(t, db)["alice@example.com"]
		if f.Kind != store.DriftChanged {
			t.Fatalf("finding: %+v", f)
		}
		if code := h.api("POST", fmt.Sprintf("/api/ops/drift/%d/restore", f.ID), "ops", `{"operationId":"rst-1"}`, nil); code != 202 {
			t.Fatalf("restore: %d", code)
		}
		h.roundUntil("the restore's deploy", func() bool {
			g, err := db.DriftFinding(bg, f.ID)
			return err == nil && g.State == store.DriftClosed
		})
		if got, _ := h.sims.GitLab.File(project, "main", path); got != content {
			t.Fatalf("the file after the restore: %q, want %q", got, content)
		}
	})
}

// A restore whose deploy callback is lost does not hold its finding forever: once merged longer
// than reconcile.deployOverdue ago, the round finds the file as bindery wrote it and closes it.
func TestARestoreWhoseDeployCallbackIsLostClosesByTheRound(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{realBatch: true})
		op := h.validated("alice", "db-read")
		path := "bindings/db-read/alice@example.com.yaml"
		h.drift()
		if _, err := h.sims.GitLab.RemoveFromBranch(project, "main", path); err != nil {
			t.Fatal(err)
		}
		h.drift()
		id := findings(t, db)["alice@example.com"].ID
		f := h.cfg.Current().SimDeploy()
		f.DropRate = 1
		h.sims.Deploy.SetFaults(f)
		if code := h.api("POST", fmt.Sprintf("/api/ops/drift/%d/restore", id), "ops", `{"operationId":"rst-1"}`, nil); code != 202 {
			t.Fatalf("restore: %d", code)
		}
		h.roundUntil("the restore merged", func() bool {
			var list api.DriftList
			h.api("GET", "/api/ops/drift", "ops", "", &list)
			return len(list.Items) == 1 && list.Items[0].Restore != nil && list.Items[0].Restore.State == store.RestoreMerged
		})
		// Within the window the round leaves it open: the deploy may still come.
		if h.drift(); findings(t, db)["alice@example.com"].State != store.DriftOpen {
			t.Fatalf("closed before its deploy was overdue: %v", findings(t, db))
		}
		h.reconfigure(false, fastSims+"reconcile:\n  deployOverdue: 1ms\n")
		h.waitFor("the round closing the finding", func() bool {
			h.drift()
			return findings(t, db)["alice@example.com"].State == store.DriftClosed
		})
		if v := h.view(op); v.Drift != nil {
			t.Fatalf("alice's page after the restore: %+v", v.Drift)
		}
	})
}
