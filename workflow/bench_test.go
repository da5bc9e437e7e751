package workflow_test

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"bindery/api"
	"bindery/internal/sim"
	"bindery/internal/testkit"
	"bindery/internal/vocab/state"
	"bindery/internal/work/engine"
	"bindery/store"
	"bindery/store/storetest"
)

// BENCHMARKS.md, section 5 (end to end): N approved requests → validated against the simulator,
// batched (approval-first, one MR per batch) vs. one MR per request (legacy), reported as GitLab
// calls, MRs and pipelines per request. Target: GitLab calls per request ≤ 1/20 of one MR per request at the
// default batch size (50). Run with
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
				h := setup(b, storetest.SQLite(b), options{approvalFirst: flow.approvalFirst, realBatch: true, extra: extra, workers: 8})
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
	"retry_pipeline", "create_pipeline", "get_commit", "get_project",
}

// docs/architecture.md, 'Lanes': an application's first step (its approval ticket) with 0, 10, 100
// and 1,000 batches waiting on CI on one instance, against the same figure idle: goal ≤ 1.5× idle
// at 1,000. Every batch sits in a pipeline of an hour (the product's polling schedule: poll.short
// 5s × 12, then poll.long 30s); the instance has the default lanes (workers.first 4, workers.size
// 8). The latency is the database's own: from the application's APPROVAL_SENDING row to its
// APPROVAL_SENT row. Also reported: goroutines and background workers in use while the batches
// wait. Run with
//
//	go test ./workflow -run '^$' -bench FirstStepWithBatchesInCI -benchtime 1x -timeout 30m
func BenchmarkFirstStepWithBatchesInCI(b *testing.B) {
	const probes = 30
	levels := []int{0, 10, 100, 1000}
	if testing.Short() {
		levels = []int{0, 10}
	}
	top := levels[len(levels)-1]
	var targets strings.Builder
	targets.WriteString("targets:\n")
	for i := range top {
		fmt.Fprintf(&targets, "  - {key: ci-%04d, title: CI %d, project: infra/ci-%04d, path: \"bindings/{subject}.yaml\"}\n", i, i, i)
	}
	for i := range probes {
		fmt.Fprintf(&targets, "  - {key: probe-%02d, title: Probe %d, project: infra/probe, path: \"probe-%02d/{subject}.yaml\"}\n", i, i, i)
	}
	extra := `
batch:
  flakyRetries: 0
sim:
  gitlab:
    pipelineDuration: 1h
    rebaseDuration: 0s
    approvalsRequired: 2
  deploy:
    delay: 0s
ratelimit:
  apply: ''
` + targets.String()
	for _, dbName := range []string{"sqlite", "mysql"} {
		b.Run(dbName, func(b *testing.B) {
			for range b.N {
				db := storetest.SQLite(b)
				if dbName == "mysql" {
					db = storetest.MySQL(b)
				}
				firstStepWithBatchesInCI(b, db, extra, levels, probes)
			}
		})
	}
}

func firstStepWithBatchesInCI(b *testing.B, db *store.DB, extra string, levels []int, probes int) {
	h := setup(b, db, options{approvalFirst: true, realBatch: true, extra: extra, workers: 8, first: 4, idlePoll: time.Second})
	base := runtime.NumGoroutine()
	made, probe := 0, 0
	perLevel := probes / len(levels) * 2
	if testing.Short() {
		perLevel = 6 // a smoke of the measurement (go run ./cmd/bench -quick, in go test ./...)
	}
	measure := func(label string) {
		var lat []time.Duration
		for range perLevel {
			user := []string{"alice", "bob", "ops"}[probe%3]
			op := h.apply(user, fmt.Sprintf("probe-%02d", probe/3))
			probe++
			v := h.waitState(op, state.StatusApprovalSent, state.StepApprovalSent)
			lat = append(lat, v.Timeline[len(v.Timeline)-1].At.Sub(v.Timeline[0].At))
		}
		slices.Sort(lat)
		b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms/"+label)
		b.ReportMetric(ms(lat[len(lat)-1]), "max-ms/"+label)
		b.ReportMetric(float64(runtime.NumGoroutine()-base), "goroutines/"+label)
		busy := 0
		for range 20 { // background workers in use, sampled over 2 s
			busy = max(busy, h.currentEngine().Running(engine.LaneBackground))
			time.Sleep(100 * time.Millisecond) // the measurement: a sample every 100 ms
		}
		b.ReportMetric(float64(busy), "busy-workers/"+label)
	}
	for _, n := range levels {
		for ; made < n; made++ {
			op := h.apply("alice", fmt.Sprintf("ci-%04d", made))
			h.decide(op, sim.TicketApproved)
		}
		h.roundUntil(fmt.Sprintf("%d batches waiting on CI", n), func() bool {
			return h.count("SELECT COUNT(*) FROM task WHERE kind = 'batch' AND step = 'pipeline'") == n
		})
		measure(fmt.Sprintf("%d-in-ci", n))
	}
	// The same batches once every one waits in the long phase of its schedule (after its first
	// poll.shortCount looks): the usual state of a batch in a pipeline of 20 minutes or more.
	if testing.Short() {
		return
	}
	top := levels[len(levels)-1]
	if err := testkit.Poll(5*time.Minute, func() bool {
		return h.count("SELECT COUNT(*) FROM task WHERE kind = 'batch' AND step = 'pipeline' AND checks >= 12") >= top
	}); err != nil {
		b.Fatal("the batches did not reach the long phase of their polling in 5 minutes")
	}
	measure(fmt.Sprintf("%d-in-ci-steady", top))
}

// docs/architecture.md, 'Wakes': a GitLab webhook received by one instance makes the batch waiting
// on that MR go on at once — on the receiving instance (it runs the work itself), or on another one
// whose idle lane looks for work other instances made due (workers.idlePoll, 1s). The batch waits
// on a pipeline of 2s with polls an hour apart, so only the webhook moves it; the latency is from
// the pipeline's end (GitLab's update time) to the members' CREATE_SUCCEEDED row. Run with
//
//	go test ./workflow -run '^$' -bench WebhookToNextAction -benchtime 1x
func BenchmarkWebhookToNextAction(b *testing.B) {
	extra := strings.NewReplacer("short: 5ms", "short: 1h", "long: 20ms", "long: 1h", "timeout: 10s", "timeout: 2h",
		"pipelineDuration: 0s", "pipelineDuration: 2s").Replace(fastSims)
	for _, where := range []string{"receiving-instance", "other-instance"} {
		b.Run(where, func(b *testing.B) {
			for range b.N {
				h := setup(b, storetest.SQLite(b), options{approvalFirst: true, realBatch: true, extra: extra, idlePoll: time.Second, instance: "worker"})
				if where == "other-instance" {
					h.joinFrontend("frontend") // the API and the webhooks reach an instance that runs nothing
				} else {
					h.join("frontend", nil)
				}
				var lat []time.Duration
				requests := 6
				if testing.Short() {
					requests = 1 // a smoke of the measurement (go run ./cmd/bench -quick), a pipeline of 2 s
				}
				for i := range requests {
					op := h.approved([]string{"alice", "bob", "ops"}[i/2], []string{"db-read", "grafana"}[i%2])[0]
					h.round()
					var v api.RequestView
					h.waitFor("the pipeline to pass", func() bool {
						v = h.view(op)
						return v.Step.Code >= int(state.StepHandleMerged) && v.Pipeline != nil
					})
					pl, err := h.gl.GetPipeline(bg, v.Project, v.Pipeline.ID)
					if err != nil {
						b.Fatal(err)
					}
					for _, e := range v.Timeline {
						if e.Step.Code == int(state.StepCreateSucceeded) {
							lat = append(lat, e.At.Sub(pl.UpdatedAt))
						}
					}
				}
				slices.Sort(lat)
				b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
				b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
			}
		})
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// count runs a COUNT(*) query.
func (h *harness) count(query string, args ...any) int {
	h.t.Helper()
	var n int
	if err := h.db.Raw().QueryRow(query, args...).Scan(&n); err != nil {
		h.t.Fatal(err)
	}
	return n
}
