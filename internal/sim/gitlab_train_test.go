package sim_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"bindery/internal/remote/gitlab"
	"bindery/internal/sim"
	"bindery/internal/testkit"
)

// Branches built on branches, as bindery's merge train builds its cars (docs/gitlab.md): car k's
// branch is car k−1's plus one commit, its MR targets main. Everything here goes through
// bindery's own GitLab client over HTTP.

const trainProject = "grp/sub.proj"

var ctx = context.Background()

type trainEnv struct {
	*env
	gl *gitlab.Client
}

// newTrain starts the simulator with no approvals needed (they are not what is tested), a
// pipeline failing on "poison", and knobs; and bindery's client on it.
func newTrain(t *testing.T, knobs ...string) *trainEnv {
	t.Helper()
	return newTrainOn(t, nil, knobs...)
}

func newTrainOn(t *testing.T, clock sim.Clock, knobs ...string) *trainEnv {
	t.Helper()
	e := newEnv(t, withKnobs(append([]string{"approvalsRequired: 0", "pipelineFailOn: [poison]"}, knobs...)...), clock)
	c, err := gitlab.New(e.src, gitlab.Options{DefaultBaseURL: e.url + "/sim/gitlab"})
	if err != nil {
		t.Fatal(err)
	}
	return &trainEnv{e, c}
}

func carBranch(k int) string { return "train/" + itoa(int64(k)) }
func carFile(k int) string   { return "bindings/car-" + itoa(int64(k)) + ".yaml" }

// buildCar commits car k's file on its branch, started from a branch or a commit id (force:
// remade there).
func (e *trainEnv) buildCar(t *testing.T, k int, startBranch, startSHA, content string, force bool) gitlab.Commit {
	t.Helper()
	cm, err := e.gl.CreateCommit(ctx, trainProject, gitlab.CommitRequest{
		Branch: carBranch(k), StartBranch: startBranch, StartSHA: startSHA, Force: force, Message: "car " + itoa(int64(k)),
		Actions: []gitlab.FileAction{{Action: gitlab.ActionCreate, Path: carFile(k), Content: content}},
	})
	if err != nil {
		t.Fatalf("car %d: %v", k, err)
	}
	return cm
}

func (e *trainEnv) openCar(t *testing.T, k int) gitlab.MergeRequest {
	t.Helper()
	mr, err := e.gl.CreateMergeRequest(ctx, trainProject, gitlab.MergeRequestRequest{SourceBranch: carBranch(k), TargetBranch: "main", Title: "car " + itoa(int64(k))})
	if err != nil {
		t.Fatalf("MR of car %d: %v", k, err)
	}
	return mr
}

// chain builds n cars, each on the one before (car 1 on main), and opens their MRs.
func (e *trainEnv) chain(t *testing.T, n int) ([]gitlab.Commit, []gitlab.MergeRequest) {
	t.Helper()
	var cms []gitlab.Commit
	var mrs []gitlab.MergeRequest
	start := "main"
	for k := 1; k <= n; k++ {
		cms = append(cms, e.buildCar(t, k, start, "", "operationId: op-"+itoa(int64(k))+"\n", false))
		mrs = append(mrs, e.openCar(t, k))
		start = carBranch(k)
	}
	return cms, mrs
}

// settled reads an MR once GitLab has computed its mergeability.
func (e *trainEnv) settled(t *testing.T, iid int64) gitlab.MergeRequest {
	t.Helper()
	for range 5 {
		mr, err := e.gl.GetMergeRequest(ctx, trainProject, iid)
		if err != nil {
			t.Fatal(err)
		}
		if mr.DetailedMergeStatus != "checking" {
			return mr
		}
	}
	t.Fatalf("MR !%d still checking", iid)
	return gitlab.MergeRequest{}
}

// outcome is how the MR's pipeline for its current head ended.
func (e *trainEnv) outcome(t *testing.T, iid int64) gitlab.Outcome {
	t.Helper()
	mr := e.settled(t, iid)
	if mr.HeadPipeline == nil || mr.HeadPipeline.SHA != mr.SHA {
		t.Fatalf("MR !%d: no pipeline for its head %s: %+v", iid, mr.SHA, mr.HeadPipeline)
	}
	return mr.HeadPipeline.Outcome()
}

func (e *trainEnv) has(branch, path string) bool {
	_, ok := e.sims.GitLab.File(trainProject, branch, path)
	return ok
}

// Each car's pipeline runs on its combined tree: a poisoned middle car fails itself and the car
// on top, never the one below; the top car rebuilt on car 1 without car 2 passes.
func TestPipelinesRunOnTheTreeOfBranchesBuiltOnBranches(t *testing.T) {
	t.Parallel()
	e := newTrain(t)
	c1 := e.buildCar(t, 1, "main", "", "operationId: op-1\n", false)
	c2 := e.buildCar(t, 2, carBranch(1), "", "operationId: op-2\nreason: poison\n", false)
	c3 := e.buildCar(t, 3, "", c2.ID, "operationId: op-3\n", false) // from a commit id
	if !slices.Equal(c2.ParentIDs, []string{c1.ID}) || !slices.Equal(c3.ParentIDs, []string{c2.ID}) {
		t.Fatalf("parents: car 2 %v, car 3 %v", c2.ParentIDs, c3.ParentIDs)
	}
	for k, want := range map[int][]bool{1: {true, false, false}, 2: {true, true, false}, 3: {true, true, true}} {
		for j, in := range want {
			if e.has(carBranch(k), carFile(j+1)) != in {
				t.Errorf("car %d's tree holds car %d's file: %v, want %v", k, j+1, !in, in)
			}
		}
	}
	var mrs []gitlab.MergeRequest
	for k := 1; k <= 3; k++ {
		mrs = append(mrs, e.openCar(t, k))
	}
	for i, want := range []gitlab.Outcome{gitlab.Passed, gitlab.Failed, gitlab.Failed} {
		if got := e.outcome(t, mrs[i].IID); got != want {
			t.Errorf("car %d's pipeline: %v, want %v", i+1, got, want)
		}
	}

	// Regenerating a car elsewhere needs force; with it, car 3 stands on car 1 alone and passes.
	_, err := e.gl.CreateCommit(ctx, trainProject, gitlab.CommitRequest{Branch: carBranch(3), StartBranch: carBranch(1), Message: "car 3",
		Actions: []gitlab.FileAction{{Action: gitlab.ActionCreate, Path: carFile(3), Content: "operationId: op-3\n"}}})
	if !errors.Is(err, gitlab.ErrBranchExists) {
		t.Fatalf("remaking car 3 without force: %v", err)
	}
	c3 = e.buildCar(t, 3, carBranch(1), "", "operationId: op-3\n", true)
	if !slices.Equal(c3.ParentIDs, []string{c1.ID}) || e.has(carBranch(3), carFile(2)) {
		t.Fatalf("car 3 rebuilt on car 1: parents %v, holds car 2's file %v", c3.ParentIDs, e.has(carBranch(3), carFile(2)))
	}
	if got := e.outcome(t, mrs[2].IID); got != gitlab.Passed {
		t.Fatalf("car 3 without car 2: %v, want passed", got)
	}
	if got := e.outcome(t, mrs[1].IID); got != gitlab.Failed {
		t.Fatalf("car 2 itself: %v, want failed", got)
	}
}

// Once the car below is merged, a car's pipeline answers for what it adds over the target: a bad
// change merged below no longer fails the car on top. Under the merge method the target's head is
// a merge commit whose first parent is the old target: the merge base is the car's own base.
func TestOnceTheCarBelowMergedOnlyWhatACarAddsCounts(t *testing.T) {
	t.Parallel()
	for _, method := range []string{"merge", "ff"} {
		t.Run(method, func(t *testing.T) {
			// Pipelines need not pass: the bad car is merged by a person regardless.
			e := newTrain(t, "mergeMethod: "+method, "pipelineMustSucceed: false")
			e.buildCar(t, 1, "main", "", "operationId: op-1\nreason: poison\n", false)
			e.buildCar(t, 2, carBranch(1), "", "operationId: op-2\n", false)
			mr1, mr2 := e.openCar(t, 1), e.openCar(t, 2)
			if e.outcome(t, mr1.IID) != gitlab.Failed || e.outcome(t, mr2.IID) != gitlab.Failed {
				t.Fatal("the bad car and the car on it should both fail")
			}
			if _, err := e.gl.Merge(ctx, trainProject, mr1.IID, gitlab.MergeOptions{SHA: mr1.SHA}); err != nil {
				t.Fatalf("merge car 1: %v", err)
			}
			pl, err := e.gl.CreateMergeRequestPipeline(ctx, trainProject, mr2.IID)
			if err != nil || pl.Outcome() != gitlab.Passed {
				t.Fatalf("car 2's new pipeline after car 1 merged: %+v, %v", pl, err)
			}
		})
	}
}

// The cars merge in order, each at the SHA its pipeline passed, with no rebase and no conflict:
// a merge commit each (merge), or the target fast-forwarded to each head (ff).
func TestATrainOfBranchesMergesInOrderAtItsSHAs(t *testing.T) {
	t.Parallel()
	for _, method := range []string{"merge", "ff"} {
		t.Run(method, func(t *testing.T) {
			e := newTrain(t, "mergeMethod: "+method)
			cms, mrs := e.chain(t, 3)
			for i, mr := range mrs {
				got := e.settled(t, mr.IID)
				if got.DetailedMergeStatus != "mergeable" || got.HasConflicts || got.SHA != cms[i].ID {
					t.Fatalf("car %d before its merge: %s, conflicts %v, sha %s", i+1, got.DetailedMergeStatus, got.HasConflicts, got.SHA)
				}
				before := e.sims.GitLab.BranchHead(trainProject, "main")
				merged, err := e.gl.Merge(ctx, trainProject, mr.IID, gitlab.MergeOptions{SHA: got.SHA})
				if err != nil || !merged.Merged() {
					t.Fatalf("merge car %d: %+v, %v", i+1, merged, err)
				}
				head := e.sims.GitLab.BranchHead(trainProject, "main")
				if merged.LandedSHA() != head {
					t.Fatalf("car %d: main at %s, the MR says %s landed", i+1, head, merged.LandedSHA())
				}
				switch method {
				case "ff":
					if merged.MergeCommitSHA != "" || head != got.SHA {
						t.Fatalf("car %d fast-forwarded: merge_commit_sha %q, main %s, head %s", i+1, merged.MergeCommitSHA, head, got.SHA)
					}
				case "merge":
					mc, err := e.gl.GetCommit(ctx, trainProject, merged.MergeCommitSHA)
					if err != nil || !slices.Equal(mc.ParentIDs, []string{before, got.SHA}) {
						t.Fatalf("car %d's merge commit: %+v, %v (main was %s)", i+1, mc, err, before)
					}
				}
				for j := range mrs {
					if e.has("main", carFile(j+1)) != (j <= i) {
						t.Fatalf("after car %d merged, main holds car %d's file: %v", i+1, j+1, j > i)
					}
				}
			}
			if n := e.sims.GitLab.Calls("rebase"); n != 0 {
				t.Fatalf("%d rebases", n)
			}
		})
	}
}

// In a project with semi-linear history (rebase_merge, the simulator's default) a merge commit
// on main is in no car's branch: the next car needs a rebase, as GitLab reports it.
func TestSemiLinearHistoryNeedsARebaseAfterEachCar(t *testing.T) {
	t.Parallel()
	e := newTrain(t)
	if m := e.call(t, "GET", proj, "bot-token", nil).json(t); m["merge_method"] != "rebase_merge" {
		t.Fatalf("merge_method %v", m["merge_method"])
	}
	_, mrs := e.chain(t, 2)
	if got := e.settled(t, mrs[1].IID); got.DetailedMergeStatus != "mergeable" {
		t.Fatalf("car 2 before car 1 merged: %s", got.DetailedMergeStatus)
	}
	if _, err := e.gl.Merge(ctx, trainProject, mrs[0].IID, gitlab.MergeOptions{SHA: mrs[0].SHA}); err != nil {
		t.Fatal(err)
	}
	got := e.settled(t, mrs[1].IID)
	if got.DetailedMergeStatus != "need_rebase" || got.HasConflicts {
		t.Fatalf("car 2 after car 1's merge commit: %s, conflicts %v", got.DetailedMergeStatus, got.HasConflicts)
	}
	if _, err := e.gl.Merge(ctx, trainProject, mrs[1].IID, gitlab.MergeOptions{SHA: got.SHA}); !errors.Is(err, gitlab.ErrMergeFailed) {
		t.Fatalf("merge of a car that needs a rebase: %v", err)
	}
	if err := e.gl.Rebase(ctx, trainProject, mrs[1].IID); err != nil {
		t.Fatal(err)
	}
	if got := e.settled(t, mrs[1].IID); got.DetailedMergeStatus != "mergeable" || got.SHA == mrs[1].SHA {
		t.Fatalf("car 2 after its rebase: %s at %s", got.DetailedMergeStatus, got.SHA)
	}
}

// A commit pushed to main from outside the train: under ff the next car needs a rebase; under
// merge it merges beside it. Either way merge_base shows the car's base still in main's history,
// and main's head not in the car's.
func TestAnOutsideCommitOnTheTarget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ method, status string }{{"ff", "need_rebase"}, {"merge", "mergeable"}} {
		t.Run(tc.method, func(t *testing.T) {
			e := newTrain(t, "mergeMethod: "+tc.method)
			cms, mrs := e.chain(t, 2)
			if _, err := e.gl.Merge(ctx, trainProject, mrs[0].IID, gitlab.MergeOptions{SHA: mrs[0].SHA}); err != nil {
				t.Fatal(err)
			}
			outside, err := e.sims.GitLab.PushToBranch(trainProject, "main", "other/change.txt", "someone else's\n")
			if err != nil {
				t.Fatal(err)
			}
			got := e.settled(t, mrs[1].IID)
			if got.DetailedMergeStatus != tc.status || got.HasConflicts {
				t.Fatalf("car 2 after the outside commit: %s, conflicts %v", got.DetailedMergeStatus, got.HasConflicts)
			}
			if base, err := e.gl.MergeBase(ctx, trainProject, cms[0].ID, "main"); err != nil || base.ID != cms[0].ID {
				t.Fatalf("car 1's head should be in main's history: merge base %+v, %v", base, err)
			}
			if base, err := e.gl.MergeBase(ctx, trainProject, "main", carBranch(2)); err != nil || base.ID != cms[0].ID {
				t.Fatalf("main's head %s should not be in car 2's history: merge base %+v, %v", outside, base, err)
			}
			merged, err := e.gl.Merge(ctx, trainProject, mrs[1].IID, gitlab.MergeOptions{SHA: got.SHA})
			if tc.method == "ff" {
				if !errors.Is(err, gitlab.ErrMergeFailed) {
					t.Fatalf("fast-forward over an outside commit: %v", err)
				}
				return
			}
			if err != nil || merged.MergeCommitSHA != e.sims.GitLab.BranchHead(trainProject, "main") {
				t.Fatalf("merge beside the outside commit: %+v, %v", merged, err)
			}
			for _, path := range []string{carFile(1), carFile(2), "other/change.txt", "README.md"} {
				if !e.has("main", path) {
					t.Errorf("main lost %s", path)
				}
			}
		})
	}
}

// A merge GitLab carries out in the background (sim.gitlab.mergeDuration) fails as GitLab's does
// when the target moved under it and git can no longer do it: the MR open again with merge_error,
// the target as the other change left it.
func TestABackgroundMergeFailsWhenTheTargetMovedUnderIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ method, push, status, mergeError string }{
		{"ff", "other/change.txt", "need_rebase", "Only fast-forward merge is allowed for your project. Please update your source branch"},
		{"merge", carFile(1), "conflict", "Conflicts detected during merge"},
	} {
		t.Run(tc.method, func(t *testing.T) {
			clock := testkit.NewClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
			e := newTrainOn(t, clock, "mergeMethod: "+tc.method, "mergeDuration: 10s")
			_, mrs := e.chain(t, 1)
			got := e.settled(t, mrs[0].IID)
			locked, err := e.gl.Merge(ctx, trainProject, got.IID, gitlab.MergeOptions{SHA: got.SHA})
			if err != nil || locked.State != gitlab.StateLocked {
				t.Fatalf("merge: %+v, %v", locked, err)
			}
			outside, err := e.sims.GitLab.PushToBranch(trainProject, "main", tc.push, "someone else's\n")
			if err != nil {
				t.Fatal(err)
			}
			clock.Advance(10 * time.Second)
			e.sims.GitLab.Sync()
			got = e.settled(t, mrs[0].IID)
			if got.State != gitlab.StateOpened || got.MergeError != tc.mergeError || got.DetailedMergeStatus != tc.status || got.MergeCommitSHA != "" {
				t.Fatalf("after the failed merge: %s, merge_error %q, %s, merge commit %q", got.State, got.MergeError, got.DetailedMergeStatus, got.MergeCommitSHA)
			}
			if head := e.sims.GitLab.BranchHead(trainProject, "main"); head != outside {
				t.Fatalf("main at %s, want the outside commit %s", head, outside)
			}
		})
	}
}

// The merge's tree is a three-way merge against the merge base: the same change made on both
// sides (the same file added with the same content, the same file deleted) is no conflict; the
// same file added differently is, in every method.
func TestTheSameChangeOnBothSidesIsNoConflict(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ method, clean string }{{"merge", "mergeable"}, {"ff", "need_rebase"}, {"rebase_merge", "need_rebase"}} {
		t.Run(tc.method, func(t *testing.T) {
			e := newTrain(t, "mergeMethod: "+tc.method)
			both := []gitlab.FileAction{
				{Action: gitlab.ActionCreate, Path: "bindings/same.yaml", Content: "operationId: op-same\n"},
				{Action: gitlab.ActionDelete, Path: "README.md"},
			}
			if _, err := e.gl.CreateCommit(ctx, trainProject, gitlab.CommitRequest{Branch: carBranch(1), StartBranch: "main", Message: "car", Actions: both}); err != nil {
				t.Fatal(err)
			}
			mr := e.openCar(t, 1)
			// A person commits the same change straight to main.
			if _, err := e.gl.CreateCommit(ctx, trainProject, gitlab.CommitRequest{Branch: "main", Message: "by hand", Actions: both}); err != nil {
				t.Fatal(err)
			}
			got := e.settled(t, mr.IID)
			if got.DetailedMergeStatus != tc.clean || got.HasConflicts || got.MergeStatus != "can_be_merged" {
				t.Fatalf("the same change on both sides: %s, conflicts %v, merge_status %s", got.DetailedMergeStatus, got.HasConflicts, got.MergeStatus)
			}
			if tc.method == "merge" {
				if _, err := e.gl.Merge(ctx, trainProject, mr.IID, gitlab.MergeOptions{SHA: got.SHA}); err != nil {
					t.Fatal(err)
				}
				if !e.has("main", "bindings/same.yaml") || e.has("main", "README.md") {
					t.Fatal("the merged tree lost the change both sides made")
				}
			}

			// The same path with other content on each side conflicts.
			e.buildCar(t, 2, "main", "", "operationId: op-mine\n", false)
			mr2 := e.openCar(t, 2)
			if _, err := e.sims.GitLab.PushToBranch(trainProject, "main", carFile(2), "operationId: op-theirs\n"); err != nil {
				t.Fatal(err)
			}
			got = e.settled(t, mr2.IID)
			if got.DetailedMergeStatus != "conflict" || !got.HasConflicts || got.MergeStatus != "cannot_be_merged" {
				t.Fatalf("a file added differently on both sides: %s, conflicts %v, merge_status %s", got.DetailedMergeStatus, got.HasConflicts, got.MergeStatus)
			}
		})
	}
}

// GET /repository/merge_base answers as GitLab's lib/api/repositories.rb does.
func TestMergeBaseAnswersLikeGitLab(t *testing.T) {
	t.Parallel()
	e := newTrain(t)
	cms, _ := e.chain(t, 2)
	main := e.sims.GitLab.BranchHead(trainProject, "main")
	mb := proj + "/repository/merge_base"
	for _, tc := range []struct {
		name, query string
		status      int
		contains    []string
	}{
		{"two branches", "?refs[]=train%2F2&refs[]=main", 200, []string{`"id":"` + main + `"`, `"parent_ids":[`}},
		{"a branch on a branch", "?refs[]=train%2F2&refs[]=train%2F1", 200, []string{`"id":"` + cms[0].ID + `"`}},
		{"comma separated, short id", "?refs=" + cms[1].ID[:8] + "," + cms[0].ID, 200, []string{`"id":"` + cms[0].ID + `"`}},
		{"three refs: the first against any of the others", "?refs[]=train%2F2&refs[]=main&refs[]=train%2F1", 200, []string{`"id":"` + cms[0].ID + `"`}},
		{"one ref", "?refs[]=main", 400, []string{`{"message":"Provide at least 2 refs"}`}},
		{"no refs", "", 400, []string{`{"error":"refs is missing"}`}},
		{"an unknown ref", "?refs[]=main&refs[]=nope", 400, []string{`{"message":"Could not find ref: nope"}`}},
		{"unknown refs", "?refs[]=nada&refs[]=main&refs[]=nope", 400, []string{`{"message":"Could not find refs: nada, nope"}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := e.call(t, "GET", mb+tc.query, "bot-token", nil)
			if a.status != tc.status {
				t.Fatalf("%d %s, want %d", a.status, a.body, tc.status)
			}
			for _, want := range tc.contains {
				if !strings.Contains(a.body, want) {
					t.Errorf("body %s lacks %s", a.body, want)
				}
			}
			if strings.Contains(a.body, `"stats"`) {
				t.Error("merge_base answers a Commit, without stats")
			}
		})
	}
}

// Commits start where GitLab's Commits::CreateService starts them.
func TestCommitsStartWhereGitLabStartsThem(t *testing.T) {
	t.Parallel()
	e := newTrain(t)
	cms, _ := e.chain(t, 1)
	commit := func(body map[string]any) answer {
		body["commit_message"] = "m"
		if _, ok := body["actions"]; !ok {
			body["actions"] = []map[string]any{{"action": "create", "file_path": "f-" + itoa(int64(len(e.sims.GitLab.Paths(trainProject)))), "content": "x"}}
		}
		return e.call(t, "POST", proj+"/repository/commits", "bot-token", body)
	}
	for _, tc := range []struct {
		name     string
		body     map[string]any
		status   int
		contains string
	}{
		{"on its own start branch", map[string]any{"branch": "train/1", "start_branch": "train/1"}, 201, `"parent_ids":["` + cms[0].ID + `"]`},
		{"elsewhere onto an existing branch", map[string]any{"branch": "train/1", "start_branch": "main"}, 400,
			`"A branch called 'train/1' already exists. Switch to that branch in order to make changes"`},
		{"from a commit onto an existing branch", map[string]any{"branch": "train/1", "start_sha": cms[0].ID}, 400, `already exists`},
		{"a short start_sha", map[string]any{"branch": "n1", "start_sha": cms[0].ID[:8]}, 400, `"Invalid start_sha '` + cms[0].ID[:8] + `'"`},
		{"an unknown start_sha", map[string]any{"branch": "n1", "start_sha": strings.Repeat("0", 40)}, 400, `"Cannot find start_sha '` + strings.Repeat("0", 40) + `'"`},
		{"an unknown start_branch", map[string]any{"branch": "n1", "start_branch": "nope"}, 400, `"You can only create or edit files when you are on a branch"`},
		{"an invalid new branch", map[string]any{"branch": "a..b", "start_branch": "main"}, 400,
			`"Something went wrong when we tried to create 'a..b' for you: Branch name is invalid"`},
		{"force from a commit", map[string]any{"branch": "train/1", "start_sha": e.sims.GitLab.BranchHead(trainProject, "main"), "force": true}, 201,
			`"parent_ids":["` + e.sims.GitLab.BranchHead(trainProject, "main") + `"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if a := commit(tc.body); a.status != tc.status || !strings.Contains(a.body, tc.contains) {
				t.Fatalf("%d %s, want %d with %s", a.status, a.body, tc.status, tc.contains)
			}
		})
	}
	// A branch made from a commit id points at it.
	a := e.call(t, "POST", proj+"/repository/branches", "bot-token", map[string]any{"branch": "from-sha", "ref": cms[0].ID})
	if a.status != 201 || a.json(t)["commit"].(map[string]any)["id"] != cms[0].ID {
		t.Fatalf("branch from a commit: %d %s", a.status, a.body)
	}
}

// Making a branch is a push: with branch pipelines, it runs one, as GitLab's push does.
func TestCreatingABranchRunsItsBranchPipeline(t *testing.T) {
	t.Parallel()
	e := newTrain(t, "pipelineSource: push")
	before := e.sims.GitLab.Usage().Pipelines
	if _, err := e.gl.CreateBranch(ctx, trainProject, "pushed", "main"); err != nil {
		t.Fatal(err)
	}
	if n := e.sims.GitLab.Usage().Pipelines - before; n != 1 {
		t.Fatalf("%d pipelines for a new branch, want 1", n)
	}
}

// The merge history tells a merge that gave the target a tree the head's pipelines never ran on:
// under the merge method branches built on the same head all merge, each beside the files merged
// before it — recorded with the commit that wrote them, its author and whether the merging
// account had read the target at it — and the served history (GET /sim/gitlab/merges) says the
// same. A branch built on a branch merged before it (a car on the car ahead) holds that tree:
// nothing untested, though it does not hold the merge commit.
func TestTheMergeHistoryRecordsWhatAMergePutBesideTheHead(t *testing.T) {
	e := newTrain(t, "mergeMethod: merge")
	var mrs []gitlab.MergeRequest
	var cms []gitlab.Commit
	for k := 1; k <= 3; k++ {
		cms = append(cms, e.buildCar(t, k, "main", "", "operationId: op-"+itoa(int64(k))+"\n", false))
		mrs = append(mrs, e.openCar(t, k))
	}
	e.buildCar(t, 4, carBranch(1), "", "operationId: op-4\n", false) // on car 1
	mrs = append(mrs, e.openCar(t, 4))
	merge := func(mr gitlab.MergeRequest) {
		t.Helper()
		if got := e.settled(t, mr.IID); got.DetailedMergeStatus != "mergeable" {
			t.Fatalf("MR !%d: %s", mr.IID, got.DetailedMergeStatus)
		}
		if _, err := e.gl.Merge(ctx, trainProject, mr.IID, gitlab.MergeOptions{SHA: mr.SHA}); err != nil {
			t.Fatalf("merge !%d: %v", mr.IID, err)
		}
	}
	look := func() {
		t.Helper()
		if _, err := e.gl.GetBranch(ctx, trainProject, "main"); err != nil {
			t.Fatal(err)
		}
	}
	look() // the bot reads main before car 1 merges …
	merge(mrs[0])
	merge(mrs[3]) // … car 4, built on car 1, merges with nothing untested …
	merge(mrs[1]) // … and car 2 beside cars 1 and 4, without reading main again
	look()        // then the bot reads main before car 3
	merge(mrs[2])

	ms := e.sims.GitLab.Merges()
	if len(ms) != 4 {
		t.Fatalf("history: %+v", ms)
	}
	for i, iid := range []int64{mrs[0].IID, mrs[3].IID} {
		if m := ms[i]; m.IID != iid || len(m.Untested) != 0 || m.By != sim.BotUsername {
			t.Fatalf("merge %d: the target got the tree the head tested: %+v", i+1, m)
		}
	}
	second := ms[2]
	if second.TargetBefore != ms[1].Landed || len(second.Untested) != 2 {
		t.Fatalf("car 2 merged beside cars 1's and 4's files: %+v", second)
	}
	for i, f := range second.Untested {
		if want := []string{carFile(1), carFile(4)}[i]; f.Path != want || f.Author != "bindery bot" || f.Seen {
			t.Errorf("beside car 2: %+v, want %s, the bot's, unseen (the bot last read main before car 1 merged)", f, want)
		}
	}
	if second.Untested[0].Commit != cms[0].ID {
		t.Errorf("car 1's file is put down to %s, want car 1's commit %s", second.Untested[0].Commit, cms[0].ID)
	}
	third := ms[3]
	if len(third.Untested) != 3 {
		t.Fatalf("car 3 merged beside cars 1, 2 and 4: %+v", third)
	}
	for _, f := range third.Untested {
		if !f.Seen {
			t.Errorf("beside car 3: %+v, want seen (the bot read main after they merged)", f)
		}
	}
	resp, err := http.Get(e.url + "/sim/gitlab/merges")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var served []sim.MergeRecord
	if err := json.NewDecoder(resp.Body).Decode(&served); err != nil || len(served) != 4 || len(served[2].Untested) != 2 || served[2].Untested[0] != second.Untested[0] {
		t.Fatalf("served history: %+v %v", served, err)
	}
}

// A person's commit pushed through the simulator's control (POST /sim/gitlab/push) lands on the
// branch as theirs, and a merge beside it names it; a removal merged beside a head that still
// holds the file is put down to the commit that removed it. Bad requests get clear answers.
func TestAPersonsPushAndARemovalAreNamedInTheMergeHistory(t *testing.T) {
	e := newTrain(t, "mergeMethod: merge")
	e.buildCar(t, 1, "main", "", "operationId: op-1\n", false)
	mr1 := e.openCar(t, 1)
	if _, err := e.gl.Merge(ctx, trainProject, e.settled(t, mr1.IID).IID, gitlab.MergeOptions{SHA: mr1.SHA}); err != nil {
		t.Fatal(err)
	}
	// Car 2 removes car 1's file; car 3 was built while it was there.
	rm, err := e.gl.CreateCommit(ctx, trainProject, gitlab.CommitRequest{Branch: carBranch(2), StartBranch: "main", Message: "remove car 1",
		Actions: []gitlab.FileAction{{Action: gitlab.ActionDelete, Path: carFile(1)}}})
	if err != nil {
		t.Fatal(err)
	}
	mr2 := e.openCar(t, 2)
	e.buildCar(t, 3, "main", "", "operationId: op-3\n", false)
	mr3 := e.openCar(t, 3)
	post := func(form url.Values) (int, map[string]string) {
		t.Helper()
		resp, err := http.PostForm(e.url+"/sim/gitlab/push", form)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]string
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	code, pushed := post(url.Values{"project": {trainProject}, "branch": {"main"}, "path": {"README.md"}, "content": {"a person's change\n"}})
	if code != http.StatusCreated || len(pushed["sha"]) != 40 {
		t.Fatalf("the push: %d %v", code, pushed)
	}
	for form, want := range map[string]int{
		"project=" + url.QueryEscape(trainProject) + "&branch=main":            http.StatusBadRequest, // no path
		"project=nowhere&branch=main&path=x":                                   http.StatusNotFound,
		"project=" + url.QueryEscape(trainProject) + "&branch=nobranch&path=x": http.StatusNotFound,
	} {
		v, _ := url.ParseQuery(form)
		if code, _ := post(v); code != want {
			t.Errorf("push %s: %d, want %d", form, code, want)
		}
	}
	for _, mr := range []gitlab.MergeRequest{mr2, mr3} {
		got := e.settled(t, mr.IID)
		if _, err := e.gl.Merge(ctx, trainProject, mr.IID, gitlab.MergeOptions{SHA: got.SHA}); err != nil {
			t.Fatalf("merge !%d: %v", mr.IID, err)
		}
	}
	ms := e.sims.GitLab.Merges()
	last := ms[len(ms)-1]
	byPath := map[string]sim.UntestedFile{}
	for _, f := range last.Untested {
		byPath[f.Path] = f
	}
	if f := byPath[carFile(1)]; f.Commit != rm.ID || f.Author != "bindery bot" {
		t.Errorf("car 1's file, removed beside car 3: %+v, want car 2's commit %s", f, rm.ID)
	}
	if f := byPath["README.md"]; f.Commit != pushed["sha"] || f.Author != sim.PersonName || f.Seen {
		t.Errorf("the person's file beside car 3: %+v", f)
	}
}
