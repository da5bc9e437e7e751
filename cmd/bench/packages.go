package main

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The sections measured by the package benchmarks: 1 (server), 3 and 4 (store), 6 (ratelimit).

// chainSection: BenchmarkChainOverhead in server/bench_test.go, every route bare and chained.
func chainSection(ctx context.Context, e *env) (string, []goal, error) {
	benchtime := quickOr(e, "1s", "100ms")
	runs, err := goBench(ctx, e, "./server", "ChainOverhead", benchtime, []string{"-benchmem"})
	if err != nil {
		return "", nil, err
	}
	routes := []struct{ key, route, what string }{
		{"targets", "GET /api/targets", " (config only: caller, auth, API metrics)"},
		{"request", "GET /api/requests/{id}", " (the status: caller, auth, API metrics; owner check in the handler)"},
		{"apply", "POST /api/apply", " (all four interceptors; idempotency record on SQLite)"},
	}
	rows := [][]string{{"route", ">bare", ">chain", ">chain ÷ bare", ">allocs (both)"}}
	var goals []goal
	for _, r := range routes {
		name := "ChainOverhead/" + r.key
		bare, chain, ratio := runs.values(name, "bare-ns/op"), runs.values(name, "chain-ns/op"), distOf(runs.values(name, "chain/bare"))
		if len(bare) == 0 || len(chain) == 0 || ratio.n == 0 {
			return "", nil, fmt.Errorf("no results for route %s", r.key)
		}
		rows = append(rows, []string{"`" + r.route + "`" + r.what, distOf(bare).show(nanos), distOf(chain).show(nanos), ratio.show(times),
			count(distOf(runs.values(name, "allocs/op")).med)})
		goals = append(goals, goal{"chain overhead, `" + r.route + "`", "≤ 1.10× bare", times(ratio.med), check(ratio.med <= 1.10)})
	}
	body := fmt.Sprintf("`go test ./server -bench ChainOverhead -benchtime %s -count %d -benchmem` (`server/bench_test.go`). "+
		"\"bare\" is the route's handler with its own body binding and the caller the chain would have found; \"chain\" "+
		"adds the whole interceptor chain (docs/api.md, 'Interceptors') in front of it: identity resolution, rate limit (apply), authentication, API metrics, "+
		"business-activity metrics (apply), body checks. Both are served by the product's router (httprouter). Bare and "+
		"chain requests alternate in one loop and each is timed on its own — building the request (parsed as net/http's "+
		"server would) and its recorder included, the socket not — so both see the same moments of a shared machine; the "+
		"ratio is per run.\n\n", benchtime, e.runs)
	return body + table(rows), goals, nil
}

// limiterSection: BenchmarkCheck and BenchmarkMemoryPerKey in internal/platform/ratelimit/bench_test.go.
func limiterSection(ctx context.Context, e *env) (string, []goal, error) {
	benchtime := quickOr(e, "300ms", "50ms") // the checks take about 100 ns: millions of them per run
	runs, err := goBench(ctx, e, "./internal/platform/ratelimit", ".", benchtime, nil)
	if err != nil {
		return "", nil, err
	}
	rows := [][]string{{"check", ">sliding log (bindery)", ">x/time/rate", ">sliding ÷ x/time/rate"}}
	for _, c := range []struct{ key, what string }{
		{"hotkey", "one hot key"},
		{"10000keys", "10,000 keys in turn"},
		{"10000keys-parallel", fmt.Sprintf("10,000 keys, %d goroutines", gomaxprocs())},
	} {
		ours, base := runs.values("Check/slidinglog/"+c.key, "ns/op"), runs.values("Check/xtimerate/"+c.key, "ns/op")
		if len(ours) == 0 || len(base) == 0 {
			return "", nil, fmt.Errorf("no results for check %s", c.key)
		}
		rows = append(rows, []string{c.what, distOf(ours).show(nanos), distOf(base).show(nanos), ratios(ours, base).show(times)})
	}
	mem := [][]string{{"requests per key in the window", ">sliding log (bindery)", ">x/time/rate", ">sliding ÷ x/time/rate"}}
	for _, n := range []string{"1", "10"} {
		ours, base := runs.values("MemoryPerKey/slidinglog/"+n+"req", "B/key"), runs.values("MemoryPerKey/xtimerate/"+n+"req", "B/key")
		if len(ours) == 0 || len(base) == 0 {
			return "", nil, fmt.Errorf("no results for memory per key at %s requests", n)
		}
		what := n
		if n == "10" {
			what += " (the default limit)"
		}
		mem = append(mem, []string{what, distOf(ours).show(byteSize), distOf(base).show(byteSize), ratios(ours, base).show(times)})
	}
	body := fmt.Sprintf("`go test ./internal/platform/ratelimit -bench . -benchtime %s -count %d` (`internal/platform/ratelimit/bench_test.go`): bindery's sliding-window "+
		"log against `golang.org/x/time/rate` token buckets in a mutex-guarded map, the usual per-key use. A token bucket is "+
		"not a sliding window (it admits a burst at the window edge), so this compares cost, not semantics.\n\n"+
		"**Cost per check**\n\n", benchtime, e.runs)
	body += table(rows)
	body += "\n**Memory per key** (live heap after 10,000 keys, the keys' own strings excluded). A sliding log keeps one " +
		"timestamp per admitted request in the window; keys are capped (100,000 by default, least recently used evicted " +
		"from a full shard) and idle keys are swept every heartbeat.\n\n" + table(mem)
	return body, nil, nil
}

// enqueueSection: BenchmarkEnqueueDuringOpenClaim in store/bench_test.go (MariaDB only: the
// gap locks it shows are InnoDB's).
func enqueueSection(ctx context.Context, e *env) (string, []goal, error) {
	if e.mysql == "" {
		return "Not measured: MariaDB only (run without `-mysql ''`).\n", []goal{{"enqueue p99 during a 1,000-row claim", "≤ 2× idle", "—", notMeasured}}, nil
	}
	benchtime := quickOr(e, "5x", "1x")
	runs, err := goBench(ctx, e, "./store", "EnqueueDuringOpenClaim", benchtime, nil)
	if err != nil {
		return "", nil, err
	}
	idle := runs.values("EnqueueDuringOpenClaim/idle", "p99-ms")
	rows := [][]string{{"claim reads its rows with", ">enqueue p50", ">enqueue p99", ">p99 ÷ idle p99"}}
	var goals []goal
	for _, m := range []struct{ key, what string }{
		{"idle", "no claim (idle, the baseline)"},
		{"plain-read", "plain read (the product)"},
		{"for-update-read", "`FOR UPDATE` (contrast only)"},
	} {
		p50, p99 := runs.values("EnqueueDuringOpenClaim/"+m.key, "p50-ms"), runs.values("EnqueueDuringOpenClaim/"+m.key, "p99-ms")
		if len(p99) == 0 {
			return "", nil, fmt.Errorf("no results for %s", m.key)
		}
		r := ratios(p99, idle)
		rows = append(rows, []string{m.what, distOf(p50).show(millis), distOf(p99).show(millis), r.show(times)})
		if m.key == "plain-read" {
			goals = append(goals, goal{"enqueue p99 during a 1,000-row claim", "≤ 2× idle", times(r.med), check(r.med <= 2)})
		}
	}
	body := fmt.Sprintf("`go test ./store -bench EnqueueDuringOpenClaim -benchtime %s -count %d` (`store/bench_test.go`): 50 "+
		"concurrent enqueues into a partition while a claim of its 1,000 waiting rows has read, claimed and recorded them "+
		"and stays open 100 ms before committing; \"idle\" is the same enqueues with no claim. With a locking read every "+
		"enqueue waits for the claim to commit: its next-key locks cover the gap at the end of the waiting range, where new "+
		"requests insert (I3).\n\n", benchtime, e.runs)
	return body + table(rows), goals, nil
}

// scaleSection: BenchmarkScale in store/bench_test.go on both databases.
func scaleSection(ctx context.Context, e *env) (string, []goal, error) {
	sizes := quickOr(e, []int{10, 1000, 100_000}, []int{10, 200})
	var list []string
	for _, n := range sizes {
		list = append(list, strconv.Itoa(n))
	}
	pattern := "Scale/sqlite"
	dbs := []string{"sqlite"}
	if e.mysql != "" {
		pattern = "Scale/(sqlite|mysql)"
		dbs = append(dbs, "mysql")
	}
	runs, err := goBench(ctx, e, "./store", pattern, "1x", nil, "BINDERY_BENCH_ROWS="+strings.Join(list, ","))
	if err != nil {
		return "", nil, err
	}
	phases := []struct{ key, what string }{
		{"claim", "claim"},
		{"handoff", "hand-off"},
		{"settle", "settlement"},
		{"reconcile", "reconciliation"},
	}
	dbName := map[string]string{"sqlite": "SQLite", "mysql": "MariaDB"}
	var body strings.Builder
	fmt.Fprintf(&body, "`BINDERY_BENCH_ROWS=%s go test ./store -bench '%s' -benchtime 1x -count %d` (`store/bench_test.go`, "+
		"BenchmarkScale): one round over N rows of one partition — the claim of every waiting row, the hand-off (members read "+
		"with their applications in one query, then moved MR_CREATING → MR_CREATED with the MR), the settlement (batch "+
		"SUCCEEDED, members MERGED) and the reconciliation of those rows, merged before their project's deployed merge (MERGED → "+
		"VALIDATED). Statements are counted by the driver wrapper (`store.Options.OnStatement`). The baseline of each "+
		"row is the same phase at %s rows in the same run: statements grow by one chunk per 500 rows, never per row.\n\n",
		strings.Join(list, ","), pattern, e.runs, count(float64(sizes[0])))
	var goals []goal
	for _, db := range dbs {
		fmt.Fprintf(&body, "**%s**\n\n", dbName[db])
		rows := [][]string{{"phase", ">rows", ">statements", ">time", ">time per row", ">time ÷ " + count(float64(sizes[0])) + " rows"}}
		for _, p := range phases {
			base := runs.values(fmt.Sprintf("Scale/%s/rows=%d", db, sizes[0]), p.key+"-ms")
			for _, n := range sizes {
				name := fmt.Sprintf("Scale/%s/rows=%d", db, n)
				ms, st := runs.values(name, p.key+"-ms"), runs.values(name, p.key+"-stmts")
				if len(ms) == 0 {
					return "", nil, fmt.Errorf("no results for %s", name)
				}
				perRow := make([]float64, len(ms))
				for i, v := range ms {
					perRow[i] = v / float64(n)
				}
				rows = append(rows, []string{p.what, count(float64(n)), distOf(st).show(count), distOf(ms).show(millis),
					distOf(perRow).show(millis), ratios(ms, base).show(times)})
				if p.key == "reconcile" && n == sizes[len(sizes)-1] {
					// Two reads, then per chunk of 500 rows a locking read and three writes.
					want := 2 + 4*math.Ceil(float64(n)/500)
					goals = append(goals, goal{fmt.Sprintf("reconciliation of %s rows (%s)", count(float64(n)), dbName[db]), "≤ 3 reads + chunked writes",
						fmt.Sprintf("%s statements (2 reads + 4 per 500 rows: %s), %s", count(distOf(st).max), count(want), millis(distOf(ms).med)),
						check(distOf(st).max <= want)})
				}
			}
		}
		body.WriteString(table(rows) + "\n")

		// The claim beside the raw operation it stands on, in the same pass (rawClaim).
		raw := [][]string{{">rows", ">claim", ">raw: guarded update + multi-row insert", ">claim ÷ raw (time)", ">claim rate ÷ raw rate"}}
		for _, n := range sizes {
			name := fmt.Sprintf("Scale/%s/rows=%d", db, n)
			claim, base := runs.values(name, "claim-ms"), runs.values(name, "rawclaim-ms")
			if len(base) == 0 {
				return "", nil, fmt.Errorf("no raw claim for %s", name)
			}
			rate := ratios(base, claim)
			raw = append(raw, []string{count(float64(n)), distOf(claim).show(millis), distOf(base).show(millis),
				ratios(claim, base).show(times), rate.show(times)})
			if n == sizes[0] || n == sizes[len(sizes)-1] {
				goals = append(goals, goal{fmt.Sprintf("claim of %s rows ÷ raw guarded update + multi-row insert (%s)", count(float64(n)), dbName[db]),
					"≥ 0.4× rows claimed per second", times(rate.med), check(rate.med >= 0.4)})
			}
		}
		fmt.Fprintf(&body, "The claim beside its physical baseline on %s, in the same pass on the same database and pool "+
			"(`rawClaim`): in one transaction, per 500 rows, the guarded update that takes waiting rows by primary key "+
			"(`… SET batch_id = ? WHERE batch_id IS NULL AND id IN (…)`, its row count checked) and the multi-row insert of their "+
			"member records, on tables indexed as bindery's are — what a claim writes, without the batch slot, the read of the "+
			"waiting set and the pre-check.\n\n", dbName[db])
		body.WriteString(table(raw) + "\n")
	}
	return body.String(), goals, nil
}
