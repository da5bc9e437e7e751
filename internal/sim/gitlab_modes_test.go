package sim_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"bindery/internal/platform/config"
	"bindery/internal/testkit"
)

// The simulated GitLab's modes (sim.gitlab.pipelineSource, mergeBlocker, checkingFor, version,
// rateLimitRate, edition) and the endpoints real clients call first, as docs/gitlab.md describes
// them.

// withKnobs returns simConfig with lines added under sim.gitlab.
func withKnobs(lines ...string) string {
	add := ""
	for _, l := range lines {
		add += "    " + l + "\n"
	}
	return strings.Replace(simConfig, "    rebaseDuration: 0s\n", "    rebaseDuration: 0s\n"+add, 1)
}

func (e *env) mr(t *testing.T) map[string]any {
	t.Helper()
	return e.call(t, "GET", proj+"/merge_requests/1", "bot-token", nil).json(t)
}

func (e *env) approveBoth(t *testing.T) {
	t.Helper()
	for _, tok := range []string{"rev1-token", "rev2-token"} {
		if a := e.call(t, "POST", proj+"/merge_requests/1/approve", tok, nil); a.status != 201 {
			t.Fatalf("approve: %d %s", a.status, a.body)
		}
	}
}

func list(t *testing.T, a answer) []map[string]any {
	t.Helper()
	var out []map[string]any
	if err := json.Unmarshal([]byte(a.body), &out); err != nil {
		t.Fatalf("body %q: %v", a.body, err)
	}
	return out
}

// A merged-results pipeline runs on a merge commit of the head into the target: its sha is not
// the MR's head, its ref is the merge ref, head_pipeline points at it, and the commit's parents
// are the target and the head.
func TestMergedResultPipelinesRunOnAMergeCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withKnobs("pipelineSource: merged_result"), nil)
	e.prepare(t)
	mainHead := e.sims.GitLab.BranchHead("grp/sub.proj", "main")
	m := e.mr(t)
	head := m["sha"].(string)
	hp, _ := m["head_pipeline"].(map[string]any)
	if hp == nil || hp["sha"] == head || hp["ref"] != "refs/merge-requests/1/merge" || hp["source"] != "merge_request_event" {
		t.Fatalf("head_pipeline %v (head %s)", hp, head)
	}
	c := e.call(t, "GET", proj+"/repository/commits/"+hp["sha"].(string), "bot-token", nil)
	var cm struct {
		ParentIDs []string `json:"parent_ids"`
	}
	if c.status != 200 || json.Unmarshal([]byte(c.body), &cm) != nil || !slices.Equal(cm.ParentIDs, []string{mainHead, head}) {
		t.Fatalf("merge commit: %d %s", c.status, c.body)
	}
	e.approveBoth(t)
	if m := e.mr(t); m["detailed_merge_status"] != "mergeable" {
		t.Fatalf("after its pipeline passed and two approvals: %v", m["detailed_merge_status"])
	}
	if a := e.call(t, "PUT", proj+"/merge_requests/1/merge", "bot-token", map[string]any{"sha": head}); a.status != 200 {
		t.Fatalf("merge at the tested head: %d %s", a.status, a.body)
	}
}

// With branch pipelines only, the push runs the pipeline (source push, ref the branch) and the
// MR shows it; an MR pipeline cannot be created (400), a branch pipeline can (POST
// /projects/:id/pipeline, source api), and a pipeline hook names no merge request.
func TestBranchPipelinesOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withKnobs("pipelineSource: push"), nil)
	e.prepare(t)
	m := e.mr(t)
	hp, _ := m["head_pipeline"].(map[string]any)
	if hp == nil || hp["source"] != "push" || hp["ref"] != "feat/x.y" || hp["sha"] != m["sha"] {
		t.Fatalf("head_pipeline %v", hp)
	}
	if l := list(t, e.call(t, "GET", proj+"/merge_requests/1/pipelines", "bot-token", nil)); len(l) != 1 || l[0]["source"] != "push" {
		t.Fatalf("MR pipelines %v", l)
	}
	a := e.call(t, "POST", proj+"/merge_requests/1/pipelines", "bot-token", nil)
	if a.status != 400 || !strings.Contains(a.body, `"base":["No stages / jobs for this pipeline."]`) {
		t.Fatalf("MR pipeline in a branch-pipelines project: %d %s", a.status, a.body)
	}
	a = e.call(t, "POST", proj+"/pipeline", "bot-token", map[string]any{"ref": "feat/x.y"})
	if a.status != 201 || a.json(t)["source"] != "api" || a.json(t)["ref"] != "feat/x.y" {
		t.Fatalf("branch pipeline through the API: %d %s", a.status, a.body)
	}
	if a := e.call(t, "POST", proj+"/pipeline", "bot-token", map[string]any{"ref": "nope"}); a.status != 400 {
		t.Fatalf("pipeline on no branch: %d %s", a.status, a.body)
	}
	_, bodies := waitHooks(t, e, 3)
	for _, b := range bodies {
		var h map[string]any
		_ = json.Unmarshal(b, &h)
		if h["object_kind"] == "pipeline" && h["merge_request"] != nil {
			t.Fatalf("a branch pipeline's hook names an MR: %s", b)
		}
	}
}

// A failed pipeline retried through POST /pipelines/:id/retry runs again with the same id.
func TestRetryingAFailedPipelineRunsItAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withKnobs("pipelineSource: push"), nil)
	e.sims.GitLab.FailNextPipelines(1)
	e.prepare(t)
	hp := e.mr(t)["head_pipeline"].(map[string]any)
	if hp["status"] != "failed" {
		t.Fatalf("first run: %v", hp["status"])
	}
	id := int64(hp["id"].(float64))
	a := e.call(t, "POST", proj+"/pipelines/"+itoa(id)+"/retry", "bot-token", nil)
	if a.status != 201 || int64(a.json(t)["id"].(float64)) != id {
		t.Fatalf("retry: %d %s", a.status, a.body)
	}
	if st := e.headPipelineStatus(t); st != "success" {
		t.Fatalf("after the retry: %s", st)
	}
	if a := e.call(t, "POST", proj+"/pipelines/999/retry", "bot-token", nil); a.status != 404 {
		t.Fatalf("retry of no pipeline: %d", a.status)
	}
}

// A blocker holds the MR (before the git and CI checks), refuses its merge with 405, shows in
// the fields older GitLab has, and is cleared by a person: the endpoint, or the button on the
// MR page. Clearing sends an MR update hook.
func TestAMergeBlockerHoldsTheMRUntilCleared(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withKnobs("mergeBlocker: discussions_not_resolved"), nil)
	e.prepare(t)
	e.approveBoth(t)
	e.mr(t) // "checking"
	m := e.mr(t)
	if m["detailed_merge_status"] != "discussions_not_resolved" || m["blocking_discussions_resolved"] != false {
		t.Fatalf("held MR: %v %v", m["detailed_merge_status"], m["blocking_discussions_resolved"])
	}
	if a := e.call(t, "PUT", proj+"/merge_requests/1/merge", "bot-token", nil); a.status != 405 {
		t.Fatalf("merge of a held MR: %d", a.status)
	}
	page := send(t, mustRequest(t, "GET", e.url+"/sim/gitlab/grp/sub.proj/-/merge_requests/1"))
	if !strings.Contains(page.body, `id="clear-blocker"`) || !strings.Contains(page.body, "discussions_not_resolved") {
		t.Fatalf("MR page has no clear button: %s", page.body)
	}
	// A phone shows the page at its own width, with a button a thumb can press.
	if !strings.Contains(page.body, `<meta name="viewport" content="width=device-width, initial-scale=1">`) || !strings.Contains(page.body, "#clear-blocker{font:inherit;min-height:44px") {
		t.Fatalf("MR page without a mobile viewport or a large Clear button: %s", page.body)
	}
	hooksBefore := len(e.sims.GitLab.Hooks().Deliveries)
	req := mustRequest(t, "POST", e.url+"/sim/gitlab/blockers/clear?"+url.Values{"project": {"grp/sub.proj"}, "iid": {"1"}}.Encode())
	if a := send(t, req); a.status != 200 {
		t.Fatalf("clear: %d %s", a.status, a.body)
	}
	if m := e.mr(t); m["detailed_merge_status"] != "mergeable" {
		t.Fatalf("after clearing: %v", m["detailed_merge_status"])
	}
	waitHooks(t, e, hooksBefore+1)
	if a := send(t, mustRequest(t, "POST", e.url+"/sim/gitlab/blockers/clear?project=grp/sub.proj&iid=9")); a.status != 404 {
		t.Fatalf("clear of no MR: %d", a.status)
	}
	if e.sims.GitLab.SetBlocker("grp/sub.proj", 1, "no_such_status") {
		t.Fatal("an unknown blocker was accepted")
	}
}

func mustRequest(t *testing.T, method, u string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// With checkingFor, every read answers checking until the time is up, and a merge meanwhile is
// refused as git cannot tell yet.
func TestCheckingLastsCheckingFor(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	e := newEnv(t, withKnobs("checkingFor: 5s"), clock)
	e.prepare(t)
	e.approveBoth(t)
	for range 3 {
		if m := e.mr(t); m["detailed_merge_status"] != "checking" || m["merge_status"] != "checking" {
			t.Fatalf("within checkingFor: %v %v", m["detailed_merge_status"], m["merge_status"])
		}
	}
	if a := e.call(t, "PUT", proj+"/merge_requests/1/merge", "bot-token", nil); a.status != 422 {
		t.Fatalf("merge while checking: %d", a.status)
	}
	clock.Advance(5 * time.Second)
	if m := e.mr(t); m["detailed_merge_status"] != "mergeable" {
		t.Fatalf("after checkingFor: %v", m["detailed_merge_status"])
	}
}

// GitLab before 15.6 has no detailed_merge_status; merge_status and has_conflicts remain.
func TestGitLabBefore15_6HasNoDetailedMergeStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withKnobs(`version: "15.5"`), nil)
	e.prepare(t)
	m := e.mr(t)
	if _, ok := m["detailed_merge_status"]; ok {
		t.Fatalf("15.5 answered detailed_merge_status: %v", m["detailed_merge_status"])
	}
	if m["merge_status"] == nil || m["has_conflicts"] != false {
		t.Fatalf("15.5 MR: %v %v", m["merge_status"], m["has_conflicts"])
	}
}

// A rate-limited call is answered 429 with Retry-After and the RateLimit headers, before any
// effect.
func TestRateLimitedCallsAnswer429WithRetryAfter(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withKnobs("rateLimitRate: 1"), nil)
	a := e.call(t, "POST", proj+"/repository/branches", "bot-token", map[string]any{"branch": "b", "ref": "main"})
	if a.status != 429 || a.header.Get("Retry-After") != "1" || a.header.Get("RateLimit-Remaining") != "0" || a.header.Get("RateLimit-Reset") == "" {
		t.Fatalf("rate limited: %d %v %s", a.status, a.header, a.body)
	}
	if e.sims.GitLab.BranchHead("grp/sub.proj", "b") != "" {
		t.Fatal("a refused call took effect")
	}
	if e.sims.FaultCounts()["gitlab"]["rate_limited"] != 1 {
		t.Fatalf("fault counts %v", e.sims.FaultCounts())
	}
}

// GitLab CE answers approvals with four fields only.
func TestCEApprovalsHaveNoRules(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withKnobs("edition: ce"), nil)
	e.prepare(t)
	e.approveBoth(t)
	m := e.call(t, "GET", proj+"/merge_requests/1/approvals", "rev1-token", nil).json(t)
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"approved", "approved_by", "user_can_approve", "user_has_approved"}) || m["user_has_approved"] != true {
		t.Fatalf("CE approvals: %v", m)
	}
}

// Booleans are read as Grape reads them (python-gitlab sends True); GET /projects/:id answers.
func TestBooleansAreLenientAndTheProjectCanBeRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "", nil)
	e.prepare(t)
	for _, v := range []string{"True", "true", "1", "yes"} {
		if m := e.call(t, "GET", proj+"/merge_requests/1?include_rebase_in_progress="+v, "bot-token", nil).json(t); m["rebase_in_progress"] != false {
			t.Fatalf("include_rebase_in_progress=%s: %v", v, m["rebase_in_progress"])
		}
	}
	if m := e.call(t, "GET", proj+"/merge_requests/1?include_rebase_in_progress=no", "bot-token", nil).json(t); m["rebase_in_progress"] != nil {
		t.Fatalf("include_rebase_in_progress=no: %v", m["rebase_in_progress"])
	}
	p := e.call(t, "GET", proj, "bot-token", nil).json(t)
	if p["path_with_namespace"] != "grp/sub.proj" || p["default_branch"] != "main" || p["namespace"].(map[string]any)["full_path"] != "grp" {
		t.Fatalf("project %v", p)
	}
	if a := e.call(t, "GET", "projects/nope%2Fnope", "bot-token", nil); a.status != 404 {
		t.Fatalf("unknown project: %d", a.status)
	}
}

// The blockers the knob accepts are the ones a bot cannot clear.
func TestMergeBlockerValuesAreTheBotUnclearableOnes(t *testing.T) {
	t.Parallel()
	for _, b := range []string{"draft_status", "discussions_not_resolved", "requested_changes", "not_approved"} {
		if !slices.Contains(config.MergeBlockers, b) {
			t.Errorf("%s missing", b)
		}
	}
	for _, b := range []string{"need_rebase", "conflict", "ci_must_pass", "mergeable"} {
		if slices.Contains(config.MergeBlockers, b) {
			t.Errorf("%s is not a blocker: bindery clears it itself", b)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
