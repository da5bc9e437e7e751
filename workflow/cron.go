package workflow

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/robfig/cron/v3"

	"bindery/config"
	"bindery/metric"
	"bindery/store"
)

// Cron runs the workflow's periodic jobs (robfig/cron/v3) on every instance: batch rounds,
// reconciliation, the sweep of expired leases (operations and batches), expiry, and the purge of
// expired idempotency records. No leader: every job is safe to run on every instance at once
// (claims, lease take-overs, flips and admissions are guarded writes that one instance wins).
// Schedules come from cron.<job> and are re-applied when the configuration changes. A run that
// is still going when its next tick comes is skipped, not queued; a panic is contained and
// logged; a failed run is logged and counted, and the next tick tries again.
type Cron struct {
	c    *cron.Cron
	cfg  *config.Source
	log  *slog.Logger
	rec  *metric.Recorder
	jobs []*cronJob

	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	started bool
	stopped bool
	running sync.WaitGroup // every run, scheduled or RunNow
}

type cronJob struct {
	name    string
	run     func(ctx context.Context) (int, error)
	spec    string
	id      cron.EntryID
	running atomic.Bool
}

// NewCron prepares the jobs; nothing runs until Start.
func NewCron(w *Workflow, db *store.DB) *Cron {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Cron{c: cron.New(), cfg: w.cfg, log: w.log.With("component", "cron"), rec: w.rec, ctx: ctx, cancel: cancel}
	c.jobs = []*cronJob{
		{name: config.JobRounds, run: func(ctx context.Context) (int, error) {
			res, err := w.RunRound(ctx)
			n := 0
			for _, p := range res.Partitions {
				n += p.Claimed
			}
			return n, err
		}},
		{name: config.JobReconcile, run: func(ctx context.Context) (int, error) {
			res, err := w.Reconcile(ctx)
			return res.Validated, err
		}},
		{name: config.JobSweep, run: w.Sweep},
		{name: config.JobExpiry, run: w.Expire},
		{name: config.JobPurge, run: func(ctx context.Context) (int, error) {
			n, err := db.PurgeExpiredIdempotency(ctx, 1000)
			return int(n), err
		}},
	}
	return c
}

// Start schedules every job and starts the scheduler.
func (c *Cron) Start() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started || c.stopped {
		return
	}
	c.started = true
	c.schedule(c.cfg.Current())
	c.cfg.OnChange(func(_, cur *config.Snapshot) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.stopped {
			c.schedule(cur)
		}
	})
	c.c.Start()
}

// schedule (re)places the entries whose schedule changed. Holds c.mu.
func (c *Cron) schedule(snap *config.Snapshot) {
	for _, j := range c.jobs {
		spec := snap.Schedule(j.name)
		if spec == j.spec && j.id != 0 {
			continue
		}
		sched, err := config.ParseSchedule(spec)
		if err != nil { // the config layer falls back to the default; this is a last guard
			c.log.Error("cron schedule refused; keeping the previous one", "job", j.name, "schedule", spec, "err", err)
			continue
		}
		if j.id != 0 {
			c.c.Remove(j.id)
		}
		j.id, j.spec = c.c.Schedule(sched, cron.FuncJob(func() { c.runJob(j) })), spec
		c.log.Info("cron job scheduled", "job", j.name, "schedule", spec)
	}
}

// Schedules are the schedules in force, by job.
func (c *Cron) Schedules() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]string, len(c.jobs))
	for _, j := range c.jobs {
		out[j.name] = j.spec
	}
	return out
}

// RunNow runs one job at once, under the same overlap guard (tests, tools).
func (c *Cron) RunNow(name string) error {
	for _, j := range c.jobs {
		if j.name == name {
			return c.runJob(j)
		}
	}
	return fmt.Errorf("no cron job %q", name)
}

// errSkipped: the previous run of the job was still going.
var errSkipped = fmt.Errorf("skipped: the previous run is still going")

// errStopped: the cron is stopping or stopped (shutdown); nothing new starts.
var errStopped = fmt.Errorf("not run: the cron is stopped")

// runJob runs one tick of a job: skipped while the previous run goes on, panics contained.
func (c *Cron) runJob(j *cronJob) (err error) {
	if !j.running.CompareAndSwap(false, true) {
		c.log.Debug("cron job skipped: previous run still going", "job", j.name)
		c.rec.Inc("bindery_cron_runs_total", "job", j.name, "outcome", "skipped")
		return errSkipped
	}
	defer j.running.Store(false)
	// Counted under the lock that Stop sets stopped with: a run that starts after Stop began
	// must not Add while Stop waits (the WaitGroup forbids it), so it does not start at all.
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return errStopped
	}
	c.running.Add(1)
	c.mu.Unlock()
	defer c.running.Done()
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("cron job %s panicked: %v", j.name, p)
			c.log.Error("cron job panicked", "job", j.name, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
		outcome := "ok"
		if err != nil {
			outcome = "error"
		}
		c.rec.Inc("bindery_cron_runs_total", "job", j.name, "outcome", outcome)
		c.rec.Since("bindery_cron_run_seconds", start, "job", j.name)
	}()
	n, err := j.run(c.ctx)
	switch {
	case err != nil && c.ctx.Err() == nil:
		c.log.Error("cron job failed", "job", j.name, "err", err)
	case n > 0:
		c.log.Info("cron job did work", "job", j.name, "count", n, "took", time.Since(start).Round(time.Millisecond))
	}
	return err
}

// Stop stops scheduling, cancels running jobs' context and waits for them until ctx ends.
// Safe to call more than once, and without Start.
func (c *Cron) Stop(ctx context.Context) error {
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	c.cancel()
	done := make(chan struct{})
	go func() {
		<-c.c.Stop().Done()
		c.running.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("cron: jobs still running at shutdown: %w", ctx.Err())
	}
}
