package store_test

// Store benchmarks, reported in BENCHMARKS.md ("Store"):
//
//	BINDERY_REQUIRE_MYSQL=1 go test ./store -run '^$' -bench . -benchtime 5x
//
// `go run ./cmd/bench` runs them with its own counts (BenchmarkScale with -benchtime 1x).
//
// Each reports, besides time per operation, the statements it ran (stmts/op) and, for the
// enqueue benchmark, the latency percentiles of enqueues issued while a claim is open.

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"bindery/batch"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
	"bindery/workflow"
)

// benchSeq keeps fixture names unique across the runs of one benchmark (b.N grows).
var benchSeq atomic.Int64

// benchDBs opens a counting database per dialect (MySQL skipped loudly when unreachable).
func benchDBs(b *testing.B, fn func(b *testing.B, db *store.DB, st *statements)) {
	for _, d := range []struct {
		name string
		dsn  func(testing.TB) string
	}{{"sqlite", storetest.SQLiteDSN}, {"mysql", storetest.MySQLDSN}} {
		b.Run(d.name, func(b *testing.B) {
			st := &statements{counts: map[string]int{}}
			db := storetest.Open(b, d.dsn(b), store.Options{OnStatement: st.observe})
			fn(b, db, st)
		})
	}
}

// BenchmarkClaim: one claim round of 1, 100 and 1,000 waiting rows (seeding and settlement
// outside the timer).
func BenchmarkClaim(b *testing.B) {
	benchDBs(b, func(b *testing.B, db *store.DB, st *statements) {
		for _, n := range []int{1, 100, 1000} {
			b.Run(fmt.Sprintf("rows=%d", n), func(b *testing.B) {
				stmts := 0
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					partition := fmt.Sprintf("bench/%d/%d", n, benchSeq.Add(1))
					queued(b, db, partition, n)
					b.StartTimer()
					var c store.BatchClaim
					total, _, _ := st.during(b, func() {
						var err error
						if c, err = batch.Claim(bg, db, claimInput(partition, n)); err != nil || len(c.Members) != n {
							b.Fatalf("claim: %d members, %v", len(c.Members), err)
						}
					})
					b.StopTimer()
					stmts += total
					if _, err := db.Settle(bg, store.Settlement{BatchID: c.Batch.ID, Version: c.Batch.Version, Status: state.BatchSucceeded}); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				b.ReportMetric(float64(stmts)/float64(b.N), "stmts/op")
			})
		}
	})
}

// BenchmarkApplyConcurrent: applications written by 16 goroutines at once, as the HTTP
// handlers do — each in a transaction of its own (Apply) and as the product writes them, sharing
// the commits of those that arrive together (Submit) — beside the raw operation an application
// stands on, a transaction of two inserts with unique keys, at the same concurrency on the same
// database. ns/op is per application; raw ÷ submit is the application's writes ÷ raw.
func BenchmarkApplyConcurrent(b *testing.B) {
	benchDBs(b, func(b *testing.B, db *store.DB, _ *statements) {
		for _, q := range storetest.RawTables {
			if _, err := db.Raw().Exec(q); err != nil {
				b.Fatal(err)
			}
		}
		var seq atomic.Int64 // keys unique across the sub-benchmarks and their rounds
		app := func(n int64) store.Application {
			id := fmt.Sprintf("bench-%d", n)
			return answered(id, id+"@bench.example", "t", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
		}
		for _, c := range []struct {
			name string
			op   func(n int64) error
		}{
			{"raw", func(n int64) error { return storetest.RawTwoInserts(bg, db.Raw(), n, fmt.Sprintf("raw-%d", n)) }},
			{"apply", func(n int64) error { _, err := db.Apply(bg, app(n)); return err }},
			{"submit", func(n int64) error { return db.Submit(bg, app(n)) }},
		} {
			b.Run(c.name, func(b *testing.B) { parallel(b, &seq, c.op) })
		}
	})
}

// BenchmarkEnqueueDuringOpenClaim (MySQL): 50 concurrent enqueues into a partition while a claim
// of its 1,000 waiting rows is open — read, claimed and recorded, held 100 ms before commit —
// with the product's plain read and with a FOR UPDATE read, against the same enqueues with no
// claim ("idle"). Reports enqueue latency p50/p99 in milliseconds.
func BenchmarkEnqueueDuringOpenClaim(b *testing.B) {
	const hold = 100 * time.Millisecond
	dsn := storetest.MigratedDSN(b, store.MySQL)
	db := storetest.Open(b, dsn, store.Options{MaxOpenConns: 60, MaxIdleConns: 60})
	for _, mode := range []string{"idle", "plain-read", "for-update-read"} {
		b.Run(mode, func(b *testing.B) {
			var lat []time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				seq := benchSeq.Add(1)
				partition := fmt.Sprintf("enq/%s/%d", mode, seq)
				queued(b, db, partition, 1000)
				store.SetLockingClaimRead(db, mode == "for-update-read")
				held := make(chan struct{})
				release := make(chan struct{})
				claimDone := make(chan error, 1)
				if mode != "idle" {
					store.SetPause(db, func(point string) {
						if point == "claim.written" {
							close(held)
							<-release
						}
					})
					go func() {
						c, err := batch.Claim(bg, db, claimInput(partition, 5000))
						if err == nil && len(c.Members) != 1000 {
							err = fmt.Errorf("claimed %d", len(c.Members))
						}
						claimDone <- err
					}()
					<-held
				}
				b.StartTimer()
				var mu sync.Mutex
				var wg sync.WaitGroup
				for j := range 50 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						start := time.Now()
						if _, err := db.Admit(bg, store.Admission{OperationID: fmt.Sprintf("e-%s-%d-%d", mode, seq, j), Action: state.ActionAdd, Partition: partition}); err != nil {
							b.Error(err)
						}
						mu.Lock()
						lat = append(lat, time.Since(start))
						mu.Unlock()
					}()
				}
				if mode != "idle" {
					time.Sleep(hold) // the load under test: the claim held open this long
					close(release)
				}
				wg.Wait()
				b.StopTimer()
				if mode != "idle" {
					if err := <-claimDone; err != nil {
						b.Fatal(err)
					}
				}
				store.SetPause(db, nil)
				store.SetLockingClaimRead(db, false)
				b.StartTimer()
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / float64(time.Millisecond) }
			b.ReportMetric(pct(0.50), "p50-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
		})
	}
}

// BenchmarkReconcile100k: reconciliation over 100,000 MERGED rows, all merged before their
// project's deployed merge (the rows are put back to MERGED outside the timer).
func BenchmarkReconcile100k(b *testing.B) {
	const rows = 100_000
	benchDBs(b, func(b *testing.B, db *store.DB, st *statements) {
		ids := make([]string, rows)
		for i := range ids {
			ids[i] = fmt.Sprintf("r-%06d", i)
		}
		for p := 0; p < 4; p++ { // four projects, 25,000 rows each
			seedRequests(b, db, fmt.Sprintf("team/%d", p), ids[p*rows/4:(p+1)*rows/4], state.StatusMerged, state.StepHandleMerged, int64(10+p))
			seedMerge(b, db, fmt.Sprintf("team/%d", p), 100, "main", mergedAtBase.Add(100*time.Minute))
			if _, err := db.Raw().ExecContext(bg, "INSERT INTO deploy_callback (project, mr_iid) VALUES (?, ?)", fmt.Sprintf("team/%d", p), 100); err != nil {
				b.Fatal(err)
			}
		}
		clockPast(b, db, "SELECT CAST(MAX(updated_at) AS CHAR) FROM binding")
		b.ResetTimer()
		stmts, reads := 0, 0
		for i := 0; i < b.N; i++ {
			var r workflow.Reconciled
			total, _, all := st.during(b, func() {
				var err error
				if r, err = workflow.ReconcileDeploys(bg, db, 0, time.Hour); err != nil || len(r.Validated) != rows {
					b.Fatalf("reconcile: %d of %d, %v", len(r.Validated), rows, err)
				}
			})
			stmts += total
			for _, s := range all {
				if strings.HasPrefix(s.Query, "SELECT") && !strings.Contains(s.Query, "WHERE operation_id IN") {
					reads++
				}
				// The stage times come with the flip's locking read (Operation.Stages).
				if strings.Contains(s.Query, "operation_step") && !strings.HasPrefix(s.Query, "INSERT") {
					b.Fatalf("reconciliation reads the step history: %s", s.Query)
				}
			}
			if len(r.Validated[rows-1].Stages) == 0 {
				b.Fatalf("a validated row without its stage times: %+v", r.Validated[rows-1])
			}
			b.StopTimer()
			for _, q := range []string{"UPDATE operation SET status = 'MERGED', step = ?", "UPDATE binding SET status = 'MERGED'"} {
				args := []any{}
				if strings.Contains(q, "?") {
					args = append(args, state.StepHandleMerged)
				}
				if _, err := db.Raw().ExecContext(bg, q, args...); err != nil {
					b.Fatal(err)
				}
			}
			clockPast(b, db, "SELECT CAST(MAX(updated_at) AS CHAR) FROM binding")
			b.StartTimer()
		}
		b.ReportMetric(float64(stmts)/float64(b.N), "stmts/op")
		b.ReportMetric(float64(reads)/float64(b.N), "reads/op")
	})
}

// BenchmarkScale: the bulk paths of one round at 10, 1,000 and 100,000 rows (BINDERY_BENCH_ROWS,
// comma-separated, overrides the sizes): one claim of every waiting row of a partition; the
// hand-off (the members read with their applications in one query, then moved MR_CREATING →
// MR_CREATED with the MR); the settlement (batch SUCCEEDED, members MERGED); the reconciliation
// of those merged rows, merged before their project's deployed merge. Each phase reports its time (ms) and
// its statements; seeding happens between the phases' measurements. Run it with -benchtime 1x:
// every iteration seeds its own partition.
func BenchmarkScale(b *testing.B) {
	benchDBs(b, func(b *testing.B, db *store.DB, st *statements) {
		for _, n := range benchRows(b) {
			b.Run(fmt.Sprintf("rows=%d", n), func(b *testing.B) {
				phases := []string{"claim", "handoff", "settle", "reconcile"}
				spent := map[string]time.Duration{}
				stmts := map[string]int{}
				measure := func(phase string, fn func()) {
					start := time.Now()
					total, _, _ := st.during(b, fn)
					spent[phase] += time.Since(start)
					stmts[phase] += total
				}
				b.StopTimer() // the phases time themselves; seeding is not counted
				for i := 0; i < b.N; i++ {
					partition := fmt.Sprintf("scale/%d/%d", n, benchSeq.Add(1))
					queued(b, db, partition, n)
					var c store.BatchClaim
					measure("claim", func() {
						var err error
						if c, err = batch.Claim(bg, db, claimInput(partition, n)); err != nil || len(c.Members) != n {
							b.Fatalf("claim: %d of %d members, %v", len(c.Members), n, err)
						}
					})
					spent["rawclaim"] += rawClaim(b, db, n)
					measure("handoff", func() {
						reqs, err := db.BatchRequests(bg, c.Batch.ID)
						if err != nil || len(reqs) != n {
							b.Fatalf("hand-off read: %d of %d, %v", len(reqs), n, err)
						}
						moved, err := db.TransitionMembers(bg, c.Batch.ID, store.MemberChange{From: []state.BindingStatus{state.StatusMRCreating},
							To: state.StatusMRCreated, Step: state.StepCreateSucceeded, MRIID: int64(n)})
						if err != nil || len(moved) != n {
							b.Fatalf("hand-off: %d of %d moved, %v", len(moved), n, err)
						}
					})
					measure("settle", func() {
						s, err := db.Settle(bg, store.Settlement{BatchID: c.Batch.ID, Version: c.Batch.Version, Status: state.BatchSucceeded,
							Members: &store.MemberChange{From: []state.BindingStatus{state.StatusMRCreated}, To: state.StatusMerged, Step: state.StepHandleMerged}})
						if err != nil || len(s.Flipped) != n {
							b.Fatalf("settle: %d of %d flipped, %v", len(s.Flipped), n, err)
						}
					})
					// MR n landed (the settlement above recorded no merge: seeded here), then MR
					// n+1, whose deploy was called back.
					seedMerge(b, db, partition, int64(n), "main", mergedAtBase)
					seedMerge(b, db, partition, int64(n+1), "main", mergedAtBase.Add(time.Minute))
					if _, err := db.Raw().ExecContext(bg, "INSERT INTO deploy_callback (project, mr_iid) VALUES (?, ?)", partition, n+1); err != nil {
						b.Fatal(err)
					}
					clockPast(b, db, "SELECT CAST(MAX(updated_at) AS CHAR) FROM binding")
					measure("reconcile", func() {
						r, err := workflow.ReconcileDeploys(bg, db, 0, time.Hour)
						if err != nil || len(r.Validated) != n {
							b.Fatalf("reconcile: %d of %d validated, %v", len(r.Validated), n, err)
						}
					})
				}
				for _, p := range phases {
					b.ReportMetric(float64(spent[p])/float64(time.Millisecond)/float64(b.N), p+"-ms")
					b.ReportMetric(float64(stmts[p])/float64(b.N), p+"-stmts")
				}
				b.ReportMetric(float64(spent["rawclaim"])/float64(time.Millisecond)/float64(b.N), "rawclaim-ms")
			})
		}
	})
}

// rawClaim is the physical baseline of a claim of n rows, on the same database and pool: in one
// transaction, per 500 rows, the guarded update that takes waiting rows by primary key and the
// multi-row insert of their member records — what a claim writes, without bindery's slot, its
// read of the waiting set and its checks. It returns the time of that transaction (the n
// waiting rows are seeded before, untimed).
func rawClaim(b *testing.B, db *store.DB, n int) time.Duration {
	b.Helper()
	raw := db.Raw()
	for _, q := range []string{
		"CREATE TABLE IF NOT EXISTS raw_wait (id BIGINT NOT NULL PRIMARY KEY, partition_key VARCHAR(128) NOT NULL, batch_id BIGINT NULL)",
		// The waiting set is found by partition, as merge_batch_request's is: the update keeps
		// that index current.
		"CREATE INDEX IF NOT EXISTS raw_wait_partition ON raw_wait (partition_key, batch_id)",
		"CREATE TABLE IF NOT EXISTS raw_member (batch_id BIGINT NOT NULL, request_id BIGINT NOT NULL, operation_id VARCHAR(64) NOT NULL, PRIMARY KEY (batch_id, request_id))",
	} {
		if _, err := raw.ExecContext(bg, q); err != nil {
			b.Fatal(err)
		}
	}
	batch := benchSeq.Add(1)
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = batch*1_000_000 + int64(i)
	}
	for start := 0; start < n; start += 500 {
		chunk := ids[start:min(start+500, n)]
		args := make([]any, 0, 2*len(chunk))
		for _, id := range chunk {
			args = append(args, id, "raw")
		}
		if _, err := raw.ExecContext(bg, "INSERT INTO raw_wait (id, partition_key) VALUES "+strings.TrimSuffix(strings.Repeat("(?, ?), ", len(chunk)), ", "), args...); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	tx, err := raw.BeginTx(bg, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Rollback()
	for from := 0; from < n; from += 500 {
		chunk := ids[from:min(from+500, n)]
		args := []any{batch}
		member := make([]any, 0, 3*len(chunk))
		for _, id := range chunk {
			args = append(args, id)
			member = append(member, batch, id, fmt.Sprintf("op-%d", id))
		}
		res, err := tx.ExecContext(bg, "UPDATE raw_wait SET batch_id = ? WHERE batch_id IS NULL AND id IN ("+strings.TrimSuffix(strings.Repeat("?, ", len(chunk)), ", ")+")", args...)
		if err != nil {
			b.Fatal(err)
		}
		if got, err := res.RowsAffected(); err != nil || got != int64(len(chunk)) {
			b.Fatalf("raw claim: %d of %d rows, %v", got, len(chunk), err)
		}
		if _, err := tx.ExecContext(bg, "INSERT INTO raw_member (batch_id, request_id, operation_id) VALUES "+
			strings.TrimSuffix(strings.Repeat("(?, ?, ?), ", len(chunk)), ", "), member...); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// benchRows are BenchmarkScale's sizes: BINDERY_BENCH_ROWS, else 10, 1,000 and 100,000.
func benchRows(b *testing.B) []int {
	v := os.Getenv("BINDERY_BENCH_ROWS")
	if v == "" {
		return []int{10, 1000, 100_000}
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("BINDERY_BENCH_ROWS=%q: %q is not a positive row count", v, f)
		}
		out = append(out, n)
	}
	return out
}

// BenchmarkStatusRead: status reads (RequestDetail) by 16 goroutines, of requests awaiting
// approval (the page a requester watches longest), waiting for a batch, and in a batch — beside
// the raw operation a status read stands on, a point read of three rows by a unique index, at the
// same concurrency on the same database (go run ./cmd/bench's baseline). ns/op is per read.
func BenchmarkStatusRead(b *testing.B) {
	benchDBs(b, func(b *testing.B, db *store.DB, _ *statements) {
		const n = 600
		if _, err := db.Raw().Exec(storetest.RawTables[2]); err != nil {
			b.Fatal(err)
		}
		if err := storetest.SeedRawPoints(bg, db.Raw()); err != nil {
			b.Fatal(err)
		}
		awaiting := make([]string, n)
		for i := range awaiting {
			awaiting[i] = fmt.Sprintf("await-%d", i)
			a := answered(awaiting[i], awaiting[i]+"@bench.example", "t", "h")
			a.Task = nil // its ticket is sent: no step of its own is left to run
			mustApply(b, db, a)
		}
		waiting := queued(b, db, "bench/waiting", n)
		var batched []string // one active batch per partition: six partitions of 100
		for k := range n / 100 {
			partition := fmt.Sprintf("bench/batched/%d", k)
			batched = append(batched, queued(b, db, partition, 100)...)
			in := claimInput(partition, 100)
			in.Task = &store.TaskSpec{Kind: state.TaskBatch, Lane: "background", Step: "create"}
			if c, err := batch.Claim(bg, db, in); err != nil || len(c.Members) != 100 {
				b.Fatalf("claim: %d members, %v", len(c.Members), err)
			}
		}
		ro := store.ReadPool(db)
		status := func(ids []string) func(i int64) error {
			return func(i int64) error {
				_, err := db.RequestDetail(bg, ids[i%int64(len(ids))])
				return err
			}
		}
		for _, c := range []struct {
			name string
			op   func(i int64) error
		}{
			{"raw", func(i int64) error { return storetest.RawPointRead(bg, ro, i) }},
			{"awaiting", status(awaiting)},
			{"waiting", status(waiting)},
			{"batched", status(batched)},
		} {
			b.Run(c.name, func(b *testing.B) { parallel(b, new(atomic.Int64), c.op) })
		}
	})
}

// parallel runs op in 16 goroutines on two cores, as section 2's 16 connections, numbering the
// operations with seq.
func parallel(b *testing.B, seq *atomic.Int64, op func(n int64) error) {
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := op(seq.Add(1)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
