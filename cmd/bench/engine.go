package main

import (
	"context"
	"fmt"
)

// engineSection: the durable-execution benchmarks in workflow/bench_test.go. An application's
// first step (its approval ticket) beside 0, 10, 100 and 1,000 batches waiting on CI on one
// instance, on SQLite and MariaDB; the goroutines and background workers that wait costs; a
// webhook's way to the next action on the receiving instance and on another one.
func engineSection(ctx context.Context, e *env) (string, []goal, error) {
	extra := []string{"-timeout", "60m"}
	if e.quick {
		extra = append(extra, "-short")
	}
	pattern := "FirstStepWithBatchesInCI|WebhookToNextAction"
	if e.mysql == "" {
		pattern = "FirstStepWithBatchesInCI/sqlite|WebhookToNextAction"
	}
	runs, err := goBench(ctx, e, "./workflow", pattern, "1x", extra)
	if err != nil {
		return "", nil, err
	}
	levels := []int{0, 10, 100, 1000}
	if e.quick {
		levels = []int{0, 10}
	}
	top := levels[len(levels)-1]
	var goals []goal
	body := fmt.Sprintf("`go test ./workflow -run '^$' -bench 'FirstStepWithBatchesInCI|WebhookToNextAction' -benchtime 1x -count %d` "+
		"(`workflow/bench_test.go`): one instance with the default lanes (workers.first 4, workers.size 8) and the product's "+
		"polling schedule (poll.short 5s × 12, then poll.long 30s); every batch waits on a pipeline of an hour. The first "+
		"step's latency is the database's own: from the application's APPROVAL_SENDING row to its APPROVAL_SENT row (SQLite "+
		"keeps milliseconds, MariaDB microseconds). Idle (0 batches in CI) is the baseline.\n\n", e.runs)
	for _, db := range []struct{ key, name string }{{"sqlite", "SQLite"}, {"mysql", "MariaDB"}} {
		name := "FirstStepWithBatchesInCI/" + db.key
		if len(runs[name]) == 0 {
			body += fmt.Sprintf("**%s**: Not measured: MariaDB only runs with `-mysql` set.\n\n", db.name)
			goals = append(goals, goal{fmt.Sprintf("first step with %d batches waiting on CI (%s)", top, db.name), "≤ 1.5× idle", "—", notMeasured})
			continue
		}
		rows := [][]string{{"batches in CI", ">first step p50", ">max", ">p50 ÷ idle", ">goroutines beyond idle", ">background workers busy (of 8)"}}
		idle := runs.values(name, "p50-ms/0-in-ci")
		row := func(what, label string) {
			p50 := runs.values(name, "p50-ms/"+label)
			rows = append(rows, []string{what, distOf(p50).show(millis), distOf(runs.values(name, "max-ms/"+label)).show(millis),
				ratios(p50, idle).show(times), distOf(runs.values(name, "goroutines/"+label)).show(count),
				distOf(runs.values(name, "busy-workers/"+label)).show(count)})
		}
		for _, n := range levels {
			row(count(float64(n))+" (their first minute: a look every 5 s)", fmt.Sprintf("%d-in-ci", n))
		}
		first := ratios(runs.values(name, fmt.Sprintf("p50-ms/%d-in-ci", top)), idle)
		steady := fmt.Sprintf("%d-in-ci-steady", top)
		r := first
		if !e.quick { // -short skips the wait for the long phase
			row(count(float64(top))+" (later: a look every 30 s)", steady)
			goals = append(goals, goal{fmt.Sprintf("first step with %d batches in their first minute of CI (%s)", top, db.name), "≤ 1.5× idle", first.show(times),
				map[bool]goalStatus{true: met, false: missed}[first.med <= 1.5]})
			r = ratios(runs.values(name, "p50-ms/"+steady), idle)
		}
		body += fmt.Sprintf("**%s**\n\n", db.name) + table(rows) + "\n"
		status := met
		if r.med > 1.5 {
			status = missed
		}
		goals = append(goals, goal{fmt.Sprintf("first step with %d batches waiting on CI (%s)", top, db.name), "≤ 1.5× idle", r.show(times), status})
	}
	rows := [][]string{{"webhook received by", ">pipeline end → next action, p50", ">max"}}
	for _, w := range []struct{ key, what string }{{"receiving-instance", "the instance that runs the batch"}, {"other-instance", "another instance (the batch's runs at its idle poll, workers.idlePoll 1s)"}} {
		name := "WebhookToNextAction/" + w.key
		rows = append(rows, []string{w.what, distOf(runs.values(name, "p50-ms")).show(millis), distOf(runs.values(name, "max-ms")).show(millis)})
	}
	body += "**A GitLab webhook to the next action** (SQLite; the batch's polls an hour apart, so only the webhook moves it)\n\n" + table(rows)
	return body, goals, nil
}
