package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Simulator settings (package sim): the fault knobs of the simulated GitLab, approval system
// and deploy pipeline. They are read at each simulated call, so a demo can switch a fault on and
// off by editing the file; tests set the same structs through the simulators' Go API. Every
// fault fails off: a blank or invalid knob injects nothing.

// SimTransport are the faults a simulator applies to a call before (or after) doing its work.
type SimTransport struct {
	Latency   time.Duration // added before every answer
	ErrorRate float64       // share of calls answered 500 before any effect (0..1)
	Hang      bool          // calls never answer; the caller's timeout must end them
	DropRate  float64       // share of calls whose effect happens but whose answer is lost (0..1)
	Endpoints []string      // simulator endpoint names the faults above apply to; empty: all
}

// SimGitLab are the simulated GitLab's knobs.
type SimGitLab struct {
	SimTransport
	PipelineDuration    time.Duration // from creation to a final status
	PipelineFailRate    float64       // share of pipelines that end "failed"
	PipelineStuckRate   float64       // share of pipelines that never finish (a timeout for the poller)
	PipelineFailOn      []string      // a pipeline fails when its tree changes, over the merge base with the target, a file with one of these in its path or content
	RebaseDuration      time.Duration // from the rebase call to its result
	MergeDuration       time.Duration // a merge call leaves the MR "locked" this long before it is merged
	NeedRebaseRate      float64       // share of merge attempts that find the target branch moved
	RebaseConflictRate  float64       // share of rebases that fail with a conflict
	RepeatApprove       int           // answer to a repeated approve: 401 (older GitLab) or 304 (newer)
	DeniedApprovers     []string      // usernames that may not approve
	DeniedApproveStatus int           // what they get: 401 or 403
	Checklist           []string      // required approval checklist of every project; empty: none
	ApprovalsRequired   int           // approvals an MR needs before it can be merged
	HookRedeliver       bool          // a webhook that failed or timed out is delivered again (same Idempotency-Key)
	PipelineSource      string        // PipelineMergeRequest, PipelineMergedResult or PipelinePush
	MergeBlocker        string        // a detailed_merge_status new MRs are held at until it is cleared; "": none
	CheckingFor         time.Duration // a new or pushed MR reports "checking" this long; 0: for the first read only
	Version             string        // GitLab version whose answers are simulated: "17", "16", "15", "15.5"
	RateLimitRate       float64       // share of calls answered 429 with Retry-After
	Edition             string        // "ee" or "ce": the shape of the approvals answer
	PipelineMustSucceed bool          // the project's "Pipelines must succeed": a merge needs the head's pipeline passed
	MergeMethod         string        // the projects' merge method: MergeMethodMerge, MergeMethodRebaseMerge or MergeMethodFF
}

// Pipeline sources of sim.gitlab.pipelineSource: how a project's CI runs for an MR.
const (
	PipelineMergeRequest = "merge_request_event" // MR pipelines on the MR's head (refs/merge-requests/<iid>/head)
	PipelineMergedResult = "merged_result"       // merged-results pipelines on a merge commit (refs/merge-requests/<iid>/merge)
	PipelinePush         = "push"                // branch pipelines only; an MR pipeline cannot be created
)

// Merge methods of sim.gitlab.mergeMethod, named as GitLab's project API names them.
const (
	MergeMethodMerge       = "merge"        // a merge commit; the target may have moved since the branch was made
	MergeMethodRebaseMerge = "rebase_merge" // a merge commit, only when the target's head is in the branch (semi-linear history)
	MergeMethodFF          = "ff"           // the target is moved to the head, only when its head is in the branch
)

// MergeBlockers are the detailed_merge_status values sim.gitlab.mergeBlocker accepts: checks a
// bot account cannot clear by itself.
var MergeBlockers = []string{"draft_status", "discussions_not_resolved", "requested_changes", "merge_request_blocked",
	"status_checks_must_pass", "jira_association_missing", "security_policy_violations", "locked_paths",
	"locked_lfs_files", "merge_time", "not_approved"}

// SimApproval are the simulated approval system's knobs.
type SimApproval struct {
	SimTransport
	AutoApprove      bool          // approve every new ticket without a click
	CallbackDelay    time.Duration // wait before each callback is sent
	DuplicateRate    float64       // share of callbacks sent twice (same callback request id)
	CallbackLossRate float64       // share of decisions whose callback never reaches bindery (an outage longer than the retries)
	Reorder          bool          // hold each callback until the next one and send the newer first
}

// SimDeploy are the simulated deploy pipeline's knobs.
type SimDeploy struct {
	Delay            time.Duration // from a merge to the deploy callback
	DropRate         float64       // share of deploy callbacks never sent (reconciliation closes the gap)
	WithOperationIDs bool          // the callback names the operationIds found in the merged files
	ExactRate        float64       // without WithOperationIDs: the share of callbacks that name them all the same
}

type simSettings struct {
	simTimeScale float64
	simGitLab    SimGitLab
	simApproval  SimApproval
	simDeploy    SimDeploy
}

func init() {
	register(Key{
		Name: "sim.timeScale", Type: "number", Default: "1",
		Doc:       "Speed of simulated time: every simulator duration (pipelines, rebases, callbacks, deploys) is divided by it. 10 runs a demo ten times faster.",
		Misconfig: "blank, unparsable or ≤ 0 → 1.",
		apply: func(s *Snapshot, v value) (string, string, error) {
			f, note := floatOr(v, 1)
			if f <= 0 {
				f, note = 1, "must be > 0"
			}
			s.simTimeScale = f
			return strconv.FormatFloat(f, 'g', -1, 64), note, nil
		},
	})
	register(transportKeys("sim.gitlab", "GitLab", func(s *Snapshot) *SimTransport { return &s.simGitLab.SimTransport })...)
	g := func(s *Snapshot) *SimGitLab { return &s.simGitLab }
	register(
		simDuration("sim.gitlab.pipelineDuration", 20*time.Second, "Time a simulated pipeline takes from creation to its final status (created → pending → running → success/failed).",
			func(s *Snapshot) *time.Duration { return &g(s).PipelineDuration }),
		simRate("sim.gitlab.pipelineFailRate", "Share of new pipelines that end failed.",
			func(s *Snapshot) *float64 { return &g(s).PipelineFailRate }),
		simRate("sim.gitlab.pipelineStuckRate", "Share of new pipelines that stay running forever, so the poller times out.",
			func(s *Snapshot) *float64 { return &g(s).PipelineStuckRate }),
		simList("sim.gitlab.pipelineFailOn", "Texts that make a pipeline fail deterministically, as a bad change fails real CI: a new (or retried) pipeline fails when the changes its commit's tree carries over the merge base with the target branch (its MR's target, else the default branch) touch a file with one of them in its path or content — added, changed or deleted. A branch built on a branch carries both changes: a pipeline on top of a bad change fails too, the same change rebuilt without it passes, and once the bad change's own branch is merged only what is added on top counts. As opposed to the random sim.gitlab.pipelineFailRate.",
			func(s *Snapshot) *[]string { return &g(s).PipelineFailOn }),
		simDuration("sim.gitlab.rebaseDuration", 3*time.Second, "Time an asynchronous rebase takes before rebase_in_progress clears.",
			func(s *Snapshot) *time.Duration { return &g(s).RebaseDuration }),
		simDuration("sim.gitlab.mergeDuration", 0, "Time GitLab takes to carry out a merge: the merge call answers with the MR \"locked\", and it becomes \"merged\" this long after, or \"opened\" again with merge_error when the target moved meanwhile so that the merge method can no longer merge it (closing a locked MR changes nothing, as in GitLab). 0: merged at once.",
			func(s *Snapshot) *time.Duration { return &g(s).MergeDuration }),
		simRate("sim.gitlab.needRebaseRate", "Share of merge attempts that find the target branch moved (someone else merged first): under the rebase_merge and ff merge methods the MR needs a rebase and the merge is refused; under merge it lands beside the other change.",
			func(s *Snapshot) *float64 { return &g(s).NeedRebaseRate }),
		simRate("sim.gitlab.rebaseConflictRate", "Share of rebases that fail with \"Rebase failed. Please rebase locally\".",
			func(s *Snapshot) *float64 { return &g(s).RebaseConflictRate }),
		simStatus("sim.gitlab.repeatApprove", 401, []int{401, 304}, "Answer to approving an MR the account already approved: 401 (older GitLab) or 304 with no body (newer GitLab).",
			func(s *Snapshot) *int { return &g(s).RepeatApprove }),
		simList("sim.gitlab.deniedApprovers", "Usernames (bindery-bot, reviewer-1, reviewer-2, …) that lack the right to approve.",
			func(s *Snapshot) *[]string { return &g(s).DeniedApprovers }),
		simStatus("sim.gitlab.deniedApproveStatus", 403, []int{401, 403}, "What a denied approver gets: 403 (no approve permission) or 401 (not an eligible approver).",
			func(s *Snapshot) *int { return &g(s).DeniedApproveStatus }),
		simList("sim.gitlab.checklist", "Approval checklist every project requires (item titles). While non-empty, an approve without exactly these items gets 422 with the current list; editing it is a checklist change.",
			func(s *Snapshot) *[]string { return &g(s).Checklist }),
		Key{
			Name: "sim.gitlab.approvalsRequired", Type: "int", Default: "2",
			Doc:       "Approvals a simulated MR needs before it can be merged.",
			Misconfig: "blank, unparsable or < 0 → 2.",
			apply: func(s *Snapshot, v value) (string, string, error) {
				n, note := intOr(v, 2, 2)
				if n < 0 {
					n, note = 2, "must be ≥ 0"
				}
				g(s).ApprovalsRequired = n
				return itoa(n), note, nil
			},
		},
		simBool("sim.gitlab.hookRedeliver", false, "Deliver a webhook again, with the same Idempotency-Key, when bindery failed it or did not answer within 10s (GitLab may do so).",
			func(s *Snapshot) *bool { return &g(s).HookRedeliver }),
		simChoice("sim.gitlab.pipelineSource", PipelineMergeRequest, []string{PipelineMergeRequest, PipelineMergedResult, PipelinePush},
			"How CI runs for an MR. merge_request_event: MR pipelines on the MR's head. merged_result: merged-results pipelines, whose sha is a merge commit of the head into the target on refs/merge-requests/<iid>/merge (head_pipeline points at it). push: branch pipelines only (source push, ref the source branch); creating an MR pipeline answers 400, as GitLab does when the CI configuration has no merge request jobs.",
			func(s *Snapshot) *string { return &g(s).PipelineSource }),
		simChoice("sim.gitlab.mergeBlocker", "", append([]string{""}, MergeBlockers...),
			"A detailed_merge_status every new MR is held at (before any other check) until someone clears it: the Clear button on the simulated MR page, or POST /sim/gitlab/blockers/clear?project=<path>&iid=<iid>. Empty: none.",
			func(s *Snapshot) *string { return &g(s).MergeBlocker }),
		simDuration("sim.gitlab.checkingFor", 0, "How long a new or pushed MR reports detailed_merge_status checking (merge_status checking) before its real status; a merge meanwhile is refused as not mergeable by git. 0: only the first read after a change answers checking.",
			func(s *Snapshot) *time.Duration { return &g(s).CheckingFor }),
		simChoice("sim.gitlab.version", "17", []string{"17", "16", "15", "15.5"},
			"GitLab version whose merge answers are simulated. A merge that git cannot do (needs a rebase, conflicts) answers 422 on 17, 405 on 16 and 406 on 15 and 15.5; 15.5 (before 15.6) has no detailed_merge_status in MRs.",
			func(s *Snapshot) *string { return &g(s).Version }),
		simRate("sim.gitlab.rateLimitRate", "Share of API calls answered 429 Too Many Requests, with Retry-After: 1 and RateLimit-* headers, before any effect.",
			func(s *Snapshot) *float64 { return &g(s).RateLimitRate }),
		simBool("sim.gitlab.pipelineMustSucceed", true, "The projects' \"Pipelines must succeed\" setting: a merge needs the head's pipeline passed. false: GitLab merges whatever the pipeline says (only the caller's sha guard keeps an untested head out).",
			func(s *Snapshot) *bool { return &g(s).PipelineMustSucceed }),
		simChoice("sim.gitlab.mergeMethod", MergeMethodRebaseMerge, []string{MergeMethodMerge, MergeMethodRebaseMerge, MergeMethodFF},
			"The projects' merge method (merge_method of GET /projects/:id). merge: a merge commit whose tree is the three-way merge of the head and the target since their merge base; the MR needs no rebase. rebase_merge (merge commit with semi-linear history): the same merge commit, but only when the target's head is an ancestor of the MR's head, else detailed_merge_status need_rebase. ff (fast-forward): no merge commit, the target branch is moved to the MR's head (merge_commit_sha stays null), only when the target's head is an ancestor of it, else need_rebase. A file changed differently on both sides is a conflict in every method.",
			func(s *Snapshot) *string { return &g(s).MergeMethod }),
		simChoice("sim.gitlab.edition", "ee", []string{"ee", "ce"},
			"GitLab edition whose approvals answer is simulated: ee adds approvals_required, approvals_left and the rules; ce has only approved, approved_by, user_has_approved and user_can_approve.",
			func(s *Snapshot) *string { return &g(s).Edition }),
	)
	register(transportKeys("sim.approval", "approval system", func(s *Snapshot) *SimTransport { return &s.simApproval.SimTransport })...)
	a := func(s *Snapshot) *SimApproval { return &s.simApproval }
	register(
		simBool("sim.approval.autoApprove", false, "Approve every new ticket at once (after sim.approval.callbackDelay), without a click in the approval inbox.",
			func(s *Snapshot) *bool { return &a(s).AutoApprove }),
		simDuration("sim.approval.callbackDelay", 0, "Wait before each approval callback is sent.",
			func(s *Snapshot) *time.Duration { return &a(s).CallbackDelay }),
		simRate("sim.approval.duplicateRate", "Share of approval callbacks sent twice with the same callback request id.",
			func(s *Snapshot) *float64 { return &a(s).DuplicateRate }),
		simRate("sim.approval.callbackLossRate", "Share of decisions whose callback never reaches bindery, as in a callback outage longer than the sender's retries: only reading the ticket (approval.pollAfter) finds the decision.",
			func(s *Snapshot) *float64 { return &a(s).CallbackLossRate }),
		simBool("sim.approval.reorder", false, "Hold each approval callback until the next one and send the newer first (a lone callback goes out after 2s of simulated time).",
			func(s *Snapshot) *bool { return &a(s).Reorder }),
	)
	d := func(s *Snapshot) *SimDeploy { return &s.simDeploy }
	register(
		simDuration("sim.deploy.delay", 3*time.Second, "Time from a merge to the simulated deploy pipeline's callback (POST /hooks/deploy).",
			func(s *Snapshot) *time.Duration { return &d(s).Delay }),
		simRate("sim.deploy.dropRate", "Share of deploy callbacks never sent, so that reconciliation has work.",
			func(s *Snapshot) *float64 { return &d(s).DropRate }),
		simBool("sim.deploy.withOperationIds", true, "The deploy callback lists the operationIds found in the merged files (exact match); false sends only project, mrIid and the deployed commit (reconciliation infers the rest by merge order), except for the share sim.deploy.exactRate.",
			func(s *Snapshot) *bool { return &d(s).WithOperationIDs }),
		simRate("sim.deploy.exactRate", "With sim.deploy.withOperationIds false: the share of deploy callbacks that list the operationIds all the same, so exact and inferred validation mix.",
			func(s *Snapshot) *float64 { return &d(s).ExactRate }),
	)
}

// transportKeys declares the four transport faults and their endpoint filter of one simulator.
func transportKeys(prefix, system string, field func(*Snapshot) *SimTransport) []Key {
	return []Key{
		simDuration(prefix+".latency", 0, "Delay added before every simulated "+system+" answer.",
			func(s *Snapshot) *time.Duration { return &field(s).Latency }),
		simRate(prefix+".errorRate", "Share of simulated "+system+" calls answered 500 before any effect.",
			func(s *Snapshot) *float64 { return &field(s).ErrorRate }),
		simBool(prefix+".hang", false, "Simulated "+system+" calls never answer; only the caller's timeout ends them.",
			func(s *Snapshot) *bool { return &field(s).Hang }),
		simRate(prefix+".dropRate", "Share of simulated "+system+" calls whose effect happens but whose answer is lost (the connection closes).",
			func(s *Snapshot) *float64 { return &field(s).DropRate }),
		simList(prefix+".faultEndpoints", "Simulator endpoint names (e.g. approve, merge, create_commit) that "+prefix+".latency, errorRate, hang and dropRate apply to; empty: every endpoint.",
			func(s *Snapshot) *[]string { return &field(s).Endpoints }),
	}
}

func simDuration(name string, def time.Duration, doc string, field func(*Snapshot) *time.Duration) Key {
	return Key{
		Name: name, Type: "duration", Default: def.String(), Doc: doc,
		Misconfig: "blank, unparsable or < 0 → " + def.String() + ".",
		apply: func(s *Snapshot, v value) (string, string, error) {
			d, note := def, ""
			if v.present {
				raw, _ := v.scalar()
				parsed, err := time.ParseDuration(raw)
				switch {
				case v.blank():
					note = "blank"
				case err != nil:
					note = fmt.Sprintf("%q is not a duration", raw)
				case parsed < 0:
					note = "must be ≥ 0"
				default:
					d = parsed
				}
			}
			*field(s) = d
			return d.String(), note, nil
		},
	}
}

func simRate(name, doc string, field func(*Snapshot) *float64) Key {
	return Key{
		Name: name, Type: "number 0..1", Default: "0", Doc: doc,
		Misconfig: "blank, unparsable or < 0 → 0 (no fault); above 1 → 1.",
		apply: func(s *Snapshot, v value) (string, string, error) {
			f, note := floatOr(v, 0)
			switch {
			case f < 0:
				f, note = 0, "must be ≥ 0"
			case f > 1:
				f, note = 1, "capped at 1"
			}
			*field(s) = f
			return strconv.FormatFloat(f, 'g', -1, 64), note, nil
		},
	}
}

func simBool(name string, def bool, doc string, field func(*Snapshot) *bool) Key {
	return Key{
		Name: name, Type: "bool", Default: strconv.FormatBool(def), Doc: doc,
		Misconfig: "blank or invalid → " + strconv.FormatBool(def) + ".",
		apply: func(s *Snapshot, v value) (string, string, error) {
			b, note := boolOr(v, def, def)
			*field(s) = b
			return strconv.FormatBool(b), note, nil
		},
	}
}

func simStatus(name string, def int, allowed []int, doc string, field func(*Snapshot) *int) Key {
	choices := make([]string, len(allowed))
	for i, c := range allowed {
		choices[i] = itoa(c)
	}
	return Key{
		Name: name, Type: strings.Join(choices, " | "), Default: itoa(def), Doc: doc,
		Misconfig: "blank or any other value → " + itoa(def) + ".",
		apply: func(s *Snapshot, v value) (string, string, error) {
			n, note := intOr(v, def, def)
			ok := false
			for _, c := range allowed {
				ok = ok || n == c
			}
			if !ok {
				n, note = def, "want one of "+strings.Join(choices, ", ")
			}
			*field(s) = n
			return itoa(n), note, nil
		},
	}
}

func simChoice(name, def string, allowed []string, doc string, field func(*Snapshot) *string) Key {
	shown := make([]string, len(allowed))
	for i, c := range allowed {
		shown[i] = c
		if c == "" {
			shown[i] = "(empty)"
		}
	}
	defShown := def
	if def == "" {
		defShown = "(empty)"
	}
	return Key{
		Name: name, Type: strings.Join(shown, " | "), Default: defShown, Doc: doc,
		Misconfig: "blank or any other value → " + defShown + ".",
		apply: func(s *Snapshot, v value) (string, string, error) {
			c, note := stringOr(v, def)
			if note == "" && v.present && !slices.Contains(allowed, c) {
				note = fmt.Sprintf("%q is not one of %s", c, strings.Join(shown, ", "))
			}
			if note != "" || !slices.Contains(allowed, c) {
				c = def
			}
			*field(s) = c
			return c, note, nil
		},
	}
}

func simList(name, doc string, field func(*Snapshot) *[]string) Key {
	return Key{
		Name: name, Type: "list of strings", Default: "(empty)", Doc: doc,
		Misconfig: "blank → empty; not a list (one string too), or a list of non-scalars → empty (no fault).",
		apply: func(s *Snapshot, v value) (string, string, error) {
			items, note := stringList(v)
			*field(s) = items
			return strings.Join(items, ", "), note, nil
		},
	}
}

// floatOr parses a number. blank/garbage → def.
func floatOr(v value, def float64) (float64, string) {
	s, note := stringOr(v, "")
	if !v.present || note != "" {
		return def, note
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return def, fmt.Sprintf("%q is not a number", s)
	}
	return f, ""
}

// SimTimeScale is sim.timeScale: simulator durations are divided by it. Default 1;
// blank/garbage/≤0 → 1.
func (s *Snapshot) SimTimeScale() float64 { return s.simTimeScale }

// SimGitLab returns the simulated GitLab's knobs (sim.gitlab.*). Every fault fails off:
// blank/garbage rates → 0, durations → their defaults (pipelineDuration 20s, rebaseDuration 3s,
// latency 0), repeatApprove → 401, deniedApproveStatus → 403, approvalsRequired → 2; a blank or
// unknown mergeMethod → rebase_merge.
func (s *Snapshot) SimGitLab() SimGitLab {
	g := s.simGitLab
	g.PipelineFailOn = append([]string(nil), g.PipelineFailOn...)
	g.Endpoints = append([]string(nil), g.Endpoints...)
	g.DeniedApprovers = append([]string(nil), g.DeniedApprovers...)
	g.Checklist = append([]string(nil), g.Checklist...)
	return g
}

// SimApproval returns the simulated approval system's knobs (sim.approval.*). Faults fail off:
// blank/garbage → no auto-approve, no delay, no duplicates, no reordering.
func (s *Snapshot) SimApproval() SimApproval {
	a := s.simApproval
	a.Endpoints = append([]string(nil), a.Endpoints...)
	return a
}

// SimDeploy returns the simulated deploy pipeline's knobs (sim.deploy.*). Default delay 3s, no
// drops, operationIds sent; blank/garbage → those defaults.
func (s *Snapshot) SimDeploy() SimDeploy { return s.simDeploy }
