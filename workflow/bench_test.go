package workflow_test

import (
	"fmt"
	"strings"
	"testing"

	"bindery/store/storetest"
)

// SPEC §9: N approved requests → validated against the simulator, batched (approval-first, one
// MR per batch) vs. one MR per request (legacy), reported as GitLab calls, MRs and pipelines per
// request. Target: GitLab calls per request ≤ 1/20 of one MR per request at the default batch
// size (50). Run with
//
//	go test ./workflow -run '^$' -bench EndToEnd -benchtime 1x
func BenchmarkEndToEndGitLabCallsPerRequest(b *testing.B) {
	const n = 51 // 3 users × 17 targets, one relation each
	var targets strings.Builder
	targets.WriteString("targets:\n")
	for i := 1; i <= n/3; i++ {
		fmt.Fprintf(&targets, "  - {key: t%d, title: T%d, project: infra/access-config, path: \"bindings/t%d/{subject}.yaml\"}\n", i, i, i)
	}
	extra := strings.Replace(fastSims, "    delay: 0s\n", "    delay: 0s\n  approval:\n    autoApprove: true\n", 1) + "ratelimit:\n  apply: 1000\n" + targets.String()
	for _, flow := range []struct {
		name          string
		approvalFirst bool
	}{{"batched", true}, {"one-MR-per-request", false}} {
		b.Run(flow.name, func(b *testing.B) {
			for range b.N {
				h := setup(b, storetest.SQLite(b), options{approvalFirst: flow.approvalFirst, realBatch: true, extra: extra, workers: 8, queue: 256})
				var ops []string
				for i := 1; i <= n/3; i++ {
					for _, user := range []string{"alice", "bob", "ops"} {
						ops = append(ops, h.apply(user, fmt.Sprintf("t%d", i)))
					}
				}
				h.roundUntil("every request validated", func() bool {
					states := map[string]int{}
					for _, op := range ops {
						v := h.view(op)
						states[string(v.Status)+"/"+v.Step.Name]++
					}
					return states["VALIDATED/CALLED_BACK"] == n
				})
				calls := 0
				for _, ep := range gitlabEndpoints {
					calls += h.sims.GitLab.Calls(ep)
				}
				b.ReportMetric(float64(calls)/n, "gitlab-calls/request")
				b.ReportMetric(float64(h.sims.GitLab.Calls("create_mr"))/n, "MRs/request")
				b.ReportMetric(float64(h.sims.GitLab.Calls("create_commit"))/n, "commits/request")
			}
		})
	}
}

// gitlabEndpoints are the simulated GitLab's endpoint names (its call counters).
var gitlabEndpoints = []string{
	"current_user", "create_branch", "get_branch", "delete_branch", "create_commit", "create_mr", "get_mr", "update_mr",
	"mr_pipelines", "create_mr_pipeline", "get_approvals", "approve", "unapprove", "merge", "rebase", "get_pipeline", "checklist",
}
