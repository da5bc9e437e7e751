package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"bindery/store"
	"bindery/store/storetest"
)

// The physical baselines: the raw database operation each bindery figure stands on, measured
// in the same run, on the same database server, at the same concurrency, through the pools
// bindery itself opens (store.Open: on SQLite one write connection with BEGIN IMMEDIATE, WAL,
// synchronous NORMAL). Bindery ÷ raw says how far it is from what the database can do.
//
//   - apply: a transaction of two inserts with unique keys (the least an application writes
//     atomically: a key that refuses a duplicate, and the row it guards);
//   - status: a point read of three indexed rows (a request, its binding, its latest step).

// rawOps are the raw operations by name, each run by conc goroutines in a closed loop.
type rawOp struct {
	name string
	run  func(ctx context.Context, rw, ro *sql.DB, n int64) error
}

var rawApply = rawOp{
	name: "two-insert transaction",
	run: func(ctx context.Context, rw, _ *sql.DB, n int64) error {
		return storetest.RawTwoInserts(ctx, rw, n, fmt.Sprintf("raw-%d-%d", time.Now().UnixNano(), n))
	},
}

var rawStatus = rawOp{
	name: "point read of three indexed rows",
	run: func(ctx context.Context, _, ro *sql.DB, n int64) error {
		return storetest.RawPointRead(ctx, ro, n)
	},
}

// rawDB opens the baseline's own database beside bindery's: the same MariaDB server (own
// tables in bindery's database), or a SQLite file in the same directory.
func rawDB(ctx context.Context, db database, conc int) (rw, ro *sql.DB, closeFn func(), err error) {
	dsn := db.dsn
	if db.kind == "sqlite" {
		dsn = "sqlite:" + filepath.Join(filepath.Dir(strings.TrimPrefix(db.dsn, "sqlite:")), "raw.db")
	}
	s, err := store.Open(ctx, dsn, store.Options{MaxOpenConns: conc, MaxIdleConns: conc})
	if err != nil {
		return nil, nil, nil, err
	}
	rw, ro = s.Raw(), s.Raw()
	closeFn = func() { s.Close() }
	if db.kind == "sqlite" {
		// Reads go through a pool of their own, as bindery's do (store's read pool).
		path := strings.TrimPrefix(dsn, "sqlite:")
		r, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
		if err != nil {
			s.Close()
			return nil, nil, nil, err
		}
		r.SetMaxOpenConns(max(2, min(conc, 8)))
		ro, closeFn = r, func() { r.Close(); s.Close() }
	}
	return rw, ro, closeFn, nil
}

// measureRaw runs op at conc for warmup then duration and adds its throughput and latencies, and
// the CPU the bench process and the database server spent per operation (rawCPU).
func measureRaw(ctx context.Context, db database, op rawOp, conc int, warmup, duration time.Duration, into *endpointRuns) error {
	rw, ro, closeDB, err := rawDB(ctx, db, conc)
	if err != nil {
		return err
	}
	defer closeDB()
	for _, q := range storetest.RawTables {
		q = strings.Replace(q, "CREATE TABLE ", "CREATE TABLE IF NOT EXISTS ", 1)
		if _, err := rw.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("raw %s: %w", op.name, err)
		}
	}
	if op.name == rawStatus.name {
		if err := storetest.SeedRawPoints(ctx, rw); err != nil {
			return err
		}
	}
	pids := map[string]int{"bench process": os.Getpid()}
	if db.kind == "mysql" {
		pids["database server"] = findProcess("mariadbd", "mysqld")
	}
	cpuBefore := map[string]float64{}
	for name, pid := range pids {
		cpuBefore[name], _ = cpuSeconds(pid)
	}
	var seq, ran atomic.Int64
	seq.Store(time.Now().UnixNano() % 1e12 * 1000)
	var mu sync.Mutex
	var lat []float64
	var failures int
	var first error
	start := time.Now()
	measureFrom, end := start.Add(warmup), start.Add(warmup+duration)
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				t0 := time.Now()
				if t0.After(end) {
					return
				}
				err := op.run(ctx, rw, ro, seq.Add(1))
				ran.Add(1)
				if t0.Before(measureFrom) {
					continue
				}
				mu.Lock()
				if err != nil {
					failures++
					if first == nil {
						first = err
					}
				} else {
					lat = append(lat, float64(time.Since(t0))/1e6)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for name, pid := range pids {
		if after, err := cpuSeconds(pid); err == nil && pid > 0 && ran.Load() > 0 {
			into.addCPU(name, (after-cpuBefore[name])/float64(ran.Load()))
		}
	}
	if len(lat) == 0 {
		return fmt.Errorf("raw %s on %s: nothing succeeded: %v", op.name, db.name(), first)
	}
	sort.Float64s(lat)
	into.rps = append(into.rps, float64(len(lat))/duration.Seconds())
	into.p50 = append(into.p50, lat[len(lat)/2])
	into.p99 = append(into.p99, lat[min(len(lat)-1, len(lat)*99/100)])
	into.errors += failures
	if first != nil && into.firstError == "" {
		into.firstError = first.Error()
	}
	return nil
}

// ceilingOver is, per run, the most requests per second an HTTP endpoint standing on raw could
// reach on this machine's cores: each of its requests costs at least what /healthz costs every
// process (parsing, the answer, the load generator) plus what the raw operation costs the bench
// process and the database server. Divided by raw's throughput it is the highest bindery ÷ raw
// any implementation could show here, since the load generator, the server and the database
// share the cores the raw loop had to itself.
func ceilingOver(health, raw endpointRuns) []float64 {
	h, r := sumCPU(health), sumCPU(raw)
	var out []float64
	for j := range min(len(h), len(r)) {
		if h[j]+r[j] > 0 {
			out = append(out, float64(runtime.NumCPU())/(h[j]+r[j]))
		}
	}
	return out
}
