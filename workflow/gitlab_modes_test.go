package workflow_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"bindery/api"
	"bindery/internal/remote/gitlab"
	"bindery/internal/sim"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// The batched flow against each way a real GitLab runs CI and merges (docs/gitlab.md): every
// pipeline source, every version's merge answers, a blocker a person clears, a long "checking",
// a rate limit, an untested head, a flaky pipeline in a branch-pipelines project.

const modeTargets = `
targets:
  - {key: db-read, title: DB read, project: infra/access-config, path: "bindings/db-read/{subject}.yaml"}
  - {key: db-write, title: DB write, project: infra/access-config, path: "bindings/db-write/{subject}.yaml"}
`

// modeSims is fastSims with knobs added under sim.gitlab (and pipelines long enough for a test
// to act while one runs).
func modeSims(knobs ...string) string {
	add := "    pipelineDuration: 300ms\n"
	for _, k := range knobs {
		add += "    " + k + "\n"
	}
	return strings.Replace(fastSims, "    pipelineDuration: 0s\n", add, 1) + modeTargets
}

// moveMainWhileInCI lands another change on the target branch while the batch's pipeline runs:
// the merge then needs a rebase (or, on older GitLab, is refused until one).
func (h *harness) moveMainWhileInCI(op string) {
	h.t.Helper()
	h.roundUntil("the batch's MR", func() bool { return h.view(op).MR != nil })
	if _, err := h.sims.GitLab.PushToBranch(project, "main", fmt.Sprintf("other/%s.txt", op), "another team's change\n"); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) landed(ops ...string) {
	h.t.Helper()
	h.roundUntil("every request validated", func() bool {
		for _, op := range ops {
			if v := h.view(op); v.Status != state.StatusValidated {
				if v.Status.Failed() {
					h.t.Fatalf("%s failed: %s/%s %s", op, v.Status, v.Step.Name, v.NextActionText)
				}
				return false
			}
		}
		return true
	})
}

func TestABatchLandsInEveryGitLabMode(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		knobs []string
	}{
		{"MR pipelines", []string{"pipelineSource: merge_request_event"}},
		{"merged-results pipelines", []string{"pipelineSource: merged_result"}},
		{"branch pipelines only", []string{"pipelineSource: push"}},
		{"GitLab 17", []string{`version: "17"`, "needRebaseRate: 0.3"}},
		{"GitLab 16", []string{`version: "16"`, "needRebaseRate: 0.3"}},
		{"GitLab 15", []string{`version: "15"`, "needRebaseRate: 0.3"}},
		{"GitLab 15.5", []string{`version: "15.5"`, "needRebaseRate: 0.3"}},
		{"checking for 5s", []string{"checkingFor: 5s"}},
		{"rate limited", []string{"rateLimitRate: 0.1"}},
		{"CE approvals", []string{"edition: ce"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			storetest.Each(t, func(t *testing.T, db *store.DB) {
				extra := modeSims(c.knobs...)
				if strings.Contains(c.name, "checking") {
					extra = strings.Replace(extra, "sim:\n", "sim:\n  timeScale: 10\n", 1) // 5 s of "checking" in 0.5 s
				}
				h := setup(t, db, options{approvalFirst: true, realBatch: true, extra: extra})
				ops := append(h.approved("alice", "db-read"), h.approved("bob", "db-write")...)
				h.moveMainWhileInCI(ops[0])
				h.landed(ops...)
				v := h.view(ops[0])
				if v.BatchID == 0 || v.MR == nil {
					t.Fatalf("no batch or MR: %+v", v)
				}
				if got, ok := h.sims.GitLab.File(project, "main", "other/"+ops[0]+".txt"); !ok || got == "" {
					t.Fatal("the other team's change is gone from main")
				}
			})
		})
	}
}

// A blocker bindery cannot clear (an unresolved discussion) stops the batch BLOCKED with its MR
// open and a plain reason; when a person clears it on GitLab, the batch goes on by itself.
func TestABlockerAPersonClearsHoldsTheBatchThenItLands(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true, realBatch: true, extra: modeSims("mergeBlocker: discussions_not_resolved")})
		op := h.approved("alice", "db-read")[0]
		var v api.RequestView
		h.roundUntil("the batch held by the unresolved discussion", func() bool {
			v = h.view(op)
			return v.NextAction == state.NextWaitManual
		})
		iid := v.MR.ID
		// One story of the blocker — what, who must act and where, and when bindery goes on (the
		// poll schedule's longest gap is 30 s) — on the page, in its badge and in the ops lists.
		story := fmt.Sprintf("merge request !%d has an unresolved discussion: a maintainer of %s must resolve it in GitLab; bindery merges within a minute after", iid, project)
		if b := v.Waiting.Blocker; b == nil || b.Text != story || b.Label != "Merge blocked: unresolved discussion" || b.MR == nil || b.MR.ID != iid || b.BatchID != v.BatchID || b.Behind ||
			!strings.Contains(v.NextActionText, story) || !strings.Contains(v.Waiting.WaitingFor, story) {
			t.Fatalf("the blocker for the user: %q / %+v / %+v", v.NextActionText, v.Waiting, v.Waiting.Blocker)
		}
		if st := h.sims.GitLab.MergeRequestState(project, iid); st != "opened" {
			t.Fatalf("the MR is %s, want it left open", st)
		}
		var batches api.Page[api.BatchView]
		h.api("GET", "/api/ops/batches?status=BLOCKED", "ops", "", &batches)
		if len(batches.Items) != 1 || batches.Items[0].Status != "BLOCKED" || batches.Items[0].Blocker == nil || batches.Items[0].Blocker.Text != story ||
			batches.Items[0].Members[0].Blocker == nil || batches.Items[0].Members[0].Blocker.Text != story {
			t.Fatalf("ops view: %+v", batches.Items)
		}
		// The operator sees the member at once, with the same story; a request waiting behind the
		// blocked batch says so, since when and why, and that a person must act (not "nothing
		// to do"), without calling itself next in line.
		if s, ok := h.stuckList()[op]; !ok || s.Step.Code != int(state.StepHandleMRBlocked) || s.Blocker == nil || s.Blocker.Text != story || s.Blocker.BatchID != v.BatchID {
			t.Fatalf("the blocked member is not in the stuck list with its blocker: %+v", h.stuckList()[op])
		}
		behind := h.approved("bob", "db-write")[0]
		bv := h.view(behind)
		if w := bv.Waiting; w == nil || w.Blocker == nil || !w.Blocker.Behind || w.Blocker.BatchID != batches.Items[0].ID || w.Blocker.Text != story ||
			!strings.Contains(w.WaitingFor, fmt.Sprintf("behind blocked batch %d since ", batches.Items[0].ID)) || !strings.Contains(w.WaitingFor, " UTC: "+story) {
			t.Fatalf("the request behind the blocked batch: %+v", w)
		}
		if bv.NextAction != state.NextWaitManual || !strings.HasPrefix(bv.NextActionText, fmt.Sprintf("Your request waits behind blocked batch %d since ", batches.Items[0].ID)) {
			t.Fatalf("the request behind the blocked batch: %s %q", bv.NextAction, bv.NextActionText)
		}
		// A person resolves it on GitLab (the simulated MR page's button posts here).
		form := url.Values{"project": {project}, "iid": {fmt.Sprint(iid)}}
		resp, err := http.PostForm(h.url+"/sim/gitlab/blockers/clear", form)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("clear: %v %v", err, resp)
		}
		resp.Body.Close()
		h.landed(op)
		h.api("GET", "/api/ops/batches?status=SUCCEEDED", "ops", "", &batches)
		if len(batches.Items) != 1 || batches.Items[0].Members[0].OperationID != op {
			t.Fatalf("batches %+v", batches.Items)
		}
	})
}

// mergeRecorder is the real GitLab client, recording the sha of every merge call; before the
// first one reaches GitLab it runs beforeMerge.
type mergeRecorder struct {
	gitlab.API
	beforeMerge func()
	once        sync.Once
	mu          sync.Mutex
	shas        []string
}

func (m *mergeRecorder) Merge(ctx context.Context, project string, iid int64, o gitlab.MergeOptions) (gitlab.MergeRequest, error) {
	if m.beforeMerge != nil {
		m.once.Do(m.beforeMerge)
	}
	m.mu.Lock()
	m.shas = append(m.shas, o.SHA)
	m.mu.Unlock()
	return m.API.Merge(ctx, project, iid, o)
}

// With "Pipelines must succeed" off, a push to the batch branch after its pipeline passed is
// not merged untested: bindery merges only the sha whose pipeline passed, and a moved head
// waits for its own pipeline.
func TestOnlyATestedHeadIsMerged(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		rec := &mergeRecorder{}
		h := setup(t, db, options{approvalFirst: true, realBatch: true, extra: modeSims("pipelineMustSucceed: false", "pipelineFailOn: [untested]"),
			wrapGitLab: func(api gitlab.API) gitlab.API { rec.API = api; return rec }})
		// Someone pushes to the batch branch after its pipeline passed and it was approved, as
		// bindery merges; that commit's pipeline fails.
		var untested string
		rec.beforeMerge = func() {
			const branch = "bindery/batch-1"
			if _, err := h.sims.GitLab.PushToBranch(project, branch, "untested.txt", "untested\n"); err != nil {
				t.Error(err)
			}
			untested = h.sims.GitLab.BranchHead(project, branch)
		}
		op := h.approved("alice", "db-read")[0]
		var v api.RequestView
		h.roundUntil("the batch settled", func() bool {
			v = h.view(op)
			return v.Status == state.StatusValidated || v.Status.Failed()
		})
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if untested == "" {
			t.Fatal("the push never happened")
		}
		for _, sha := range rec.shas {
			if sha == untested || sha == "" {
				t.Fatalf("merge called with sha %q (untested head %s): %v", sha, untested, rec.shas)
			}
		}
		if content, ok := h.sims.GitLab.File(project, "main", "untested.txt"); ok {
			t.Fatalf("the untested commit reached main: %q (request %s/%s)", content, v.Status, v.Step.Name)
		}
	})
}

// A flaky pipeline in a project with branch pipelines only is retried with GitLab's pipeline
// retry (an MR pipeline cannot be created there) and the batch lands.
func TestAFlakyBranchPipelineIsRetriedAndLands(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		extra := strings.Replace(modeSims("pipelineSource: push"), "  flakyRetries: 0\n", "  flakyRetries: 1\n", 1)
		h := setup(t, db, options{approvalFirst: true, realBatch: true, extra: extra})
		h.sims.GitLab.FailNextPipelines(1)
		op := h.approved("alice", "db-read")[0]
		h.landed(op)
		if n := h.sims.GitLab.Calls("retry_pipeline"); n != 1 {
			t.Fatalf("%d pipeline retries, want 1", n)
		}
		if n := h.sims.GitLab.Calls("create_mr_pipeline"); n != 0 {
			t.Fatalf("%d MR pipelines asked for in a branch-pipelines project", n)
		}
		// The retry is no secret: the timeline shows both runs, the failed one and the next.
		runs := 0
		for _, e := range h.view(op).Timeline {
			if e.Step.Code == int(state.StepCreateStarted) {
				runs++
				if runs == 2 && (!strings.Contains(e.Note, " failed; trying it once more on the same commit (flaky retry 1 of 1)") || !strings.HasPrefix(e.Note, "pipeline ")) {
					t.Errorf("the second run's entry: %+v", e)
				}
			}
		}
		if runs != 2 {
			t.Fatalf("%d runs of the pipeline in the timeline, want 2: %+v", runs, h.view(op).Timeline)
		}
	})
}

// In a project with branch pipelines only, a pipeline's webhook names no MR: its ref (the batch's
// branch) tells which batch to wake. Polls are an hour apart, so only the webhook moves it.
func TestABranchPipelineWebhookWakesItsBatch(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		extra := strings.NewReplacer("short: 5ms", "short: 1h", "long: 20ms", "long: 1h", "timeout: 10s", "timeout: 2h").
			Replace(modeSims("pipelineSource: push"))
		h := setup(t, db, options{approvalFirst: true, realBatch: true, extra: extra})
		op := h.approved("alice", "db-read")[0]
		h.round()
		h.waitFor("the pipeline's webhook to move the batch on", func() bool {
			return h.view(op).Step.Code >= int(state.StepHandleStarted)
		})
	})
}

// A legacy request whose MR a person must clear waits at HANDLE_MR_BLOCKED with the reason and
// without its project's merge slot: another request of the project merges meanwhile, and the
// first goes on by itself once its MR is cleared.
func TestALegacyMRBlockedByAPersonDoesNotHoldItsProject(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{realBatch: true, extra: modeSims("mergeBlocker: draft_status")})
		first, second := h.apply("alice", "db-read"), h.apply("bob", "db-write")
		for _, op := range []string{first, second} {
			h.waitState(op, state.StatusApprovalSent, 0)
			h.decide(op, sim.TicketApproved)
		}
		blocked := func(op string) api.RequestView {
			v := h.waitState(op, state.StatusMerging, state.StepHandleMRBlocked)
			if v.NextAction != state.NextWaitManual || !strings.Contains(v.NextActionText, fmt.Sprintf("merge request !%d is marked as draft: a maintainer of %s must mark it ready in GitLab", v.MR.ID, project)) ||
				v.Waiting.Blocker == nil || v.Waiting.Blocker.BatchID != 0 {
				t.Fatalf("%s: %s %q", op, v.NextAction, v.NextActionText)
			}
			return v
		}
		v1, v2 := blocked(first), blocked(second)
		if s := h.stuckList()[first]; s.Blocker == nil || s.Blocker.Text != v1.Waiting.Blocker.Text || s.Blocker.MR == nil || s.Blocker.MR.ID != v1.MR.ID {
			t.Fatalf("the stuck list tells another story of the legacy MR: %+v, page %+v", s.Blocker, v1.Waiting.Blocker)
		}
		h.sims.GitLab.SetBlocker(project, v2.MR.ID, "")
		h.waitState(second, state.StatusValidated, state.StepCalledBack)
		if v := h.view(first); v.Step.Code != int(state.StepHandleMRBlocked) {
			t.Fatalf("the first went on while its MR was still a draft: %s/%s", v.Status, v.Step.Name)
		}
		h.sims.GitLab.SetBlocker(project, v1.MR.ID, "")
		h.waitState(first, state.StatusValidated, state.StepCalledBack)
	})
}
