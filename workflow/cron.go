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

	"bindery/internal/platform/config"
	"bindery/internal/platform/metric"
	"bindery/internal/work/service"
	"bindery/store"
)

// The periodic jobs. Each is one type whose runOnce does one pass and says how much it did;
// the Cron schedules them. No leader: every job is safe to run on every instance at once
// (claims, flips, repairs and deletions are guarded writes that one instance wins).

// periodic is one periodic job.
type periodic interface {
	// runOnce does one pass of the job and returns how many items it acted on.
	runOnce(ctx context.Context) (int, error)
}

// roundJob is the batch round: every partition with waiting requests gets a batch.
type roundJob struct{ w *Workflow }

func (j roundJob) runOnce(ctx context.Context) (int, error) {
	res, err := j.w.RunRound(ctx)
	n := 0
	for _, p := range res.Partitions {
		n += p.Claimed
	}
	return n, err
}

// reconcileJob validates merged requests whose deploy callback was lost.
type reconcileJob struct{ w *Workflow }

func (j reconcileJob) runOnce(ctx context.Context) (int, error) {
	res, err := j.w.Reconcile(ctx)
	return res.Validated, err
}

// sweepJob is the repair sweep: in-flight work without a task gets one.
type sweepJob struct{ w *Workflow }

func (j sweepJob) runOnce(ctx context.Context) (int, error) { return j.w.Sweep(ctx) }

// expiryJob closes the bindings whose ttl passed.
type expiryJob struct{ w *Workflow }

func (j expiryJob) runOnce(ctx context.Context) (int, error) { return j.w.Expire(ctx) }

// driftJob is the drift check: the config repository compared with the bindings (docs/drift.md).
type driftJob struct{ w *Workflow }

func (j driftJob) runOnce(ctx context.Context) (int, error) {
	res, err := j.w.Drift(ctx)
	return res.Opened, err
}

// reviewsJob starts the access reviews due by themselves and reminds reviewers of due dates.
type reviewsJob struct{ w *Workflow }

func (j reviewsJob) runOnce(ctx context.Context) (int, error) { return j.w.RunReviews(ctx) }

// purgeJob deletes what is over, in chunks: expired idempotency records, and of signing in the
// sessions past identity.session.idle or .absolute (by the configuration in force), the
// sign-ins never finished, and the API tokens expired or revoked tokenKeep ago.
type purgeJob struct {
	db  *store.DB
	cfg *config.Source
}

// tokenKeep is how long an expired or revoked API token's row stays, so that a script that
// still uses it is told "revoked" or "expired" rather than "unknown".
const tokenKeep = 30 * 24 * time.Hour

func (j purgeJob) runOnce(ctx context.Context) (int, error) {
	n, err := j.db.PurgeExpiredIdempotency(ctx, 1000)
	if err != nil {
		return int(n), err
	}
	snap := j.cfg.Current()
	m, err := j.db.PurgeSignins(ctx, store.SessionLimits{Idle: snap.SessionIdle(), Absolute: snap.SessionAbsolute()}, tokenKeep, 1000)
	return int(n + m), err
}

// Cron runs the workflow's periodic jobs on every instance (robfig/cron/v3), as a service:
// Start schedules them, Stop ends the scheduling, cancels the runs in progress and waits for
// them. Schedules come from cron.<job> and are re-applied when the configuration changes. A run
// that is still going when its next tick comes is skipped, not queued; a panic is contained and
// logged; a failed run is logged and counted, and the next tick tries again.
type Cron struct {
	c    *cron.Cron
	cfg  *config.Source
	log  *slog.Logger
	rec  *metric.Recorder
	jobs []*cronJob
	bg   service.Base // every run is a goroutine of it

	mu sync.Mutex // the jobs' entries (a configuration change re-schedules)
}

type cronJob struct {
	name    string
	job     periodic
	spec    string
	id      cron.EntryID
	running atomic.Bool
}

// NewCron prepares the jobs; nothing runs until Start.
func NewCron(w *Workflow, db *store.DB) *Cron {
	c := &Cron{c: cron.New(), cfg: w.cfg, log: w.log.With("component", "cron"), rec: w.rec}
	for _, j := range []struct {
		name string
		job  periodic
	}{
		{config.JobRounds, roundJob{w}},
		{config.JobReconcile, reconcileJob{w}},
		{config.JobSweep, sweepJob{w}},
		{config.JobExpiry, expiryJob{w}},
		{config.JobPurge, purgeJob{db, w.cfg}},
		{config.JobDrift, driftJob{w}},
		{config.JobReviews, reviewsJob{w}},
	} {
		c.jobs = append(c.jobs, &cronJob{name: j.name, job: j.job})
	}
	return c
}

// Start schedules every job and starts the scheduler; the runs' context ends with ctx or Stop.
func (c *Cron) Start(ctx context.Context) error {
	if _, ok, err := c.bg.StartInit(ctx); !ok {
		return err
	}
	c.cfg.OnChange(func(_, cur *config.Snapshot) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.bg.Running() {
			c.schedule(cur)
		}
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	// Under c.mu, which Stop takes to stop the scheduler: a Stop that began meanwhile finds the
	// scheduler either running (and stops it) or never started here.
	if c.bg.Running() {
		c.schedule(c.cfg.Current())
		c.c.Start()
	}
	return nil
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
		// The scheduler's own goroutine only hands the run to the service, which Stop waits for.
		j.id, j.spec = c.c.Schedule(sched, cron.FuncJob(func() { c.bg.Go(func(ctx context.Context) { _ = c.runJob(ctx, j) }) })), spec
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

// RunNow runs one job at once as a tick would — the overlap guard, the panic guard, the metrics —
// and returns its error (tests, tools). It runs only while the cron runs.
func (c *Cron) RunNow(name string) error {
	for _, j := range c.jobs {
		if j.name == name {
			done := make(chan error, 1)
			if !c.bg.Go(func(ctx context.Context) { done <- c.runJob(ctx, j) }) {
				return errNotRunning
			}
			return <-done
		}
	}
	return fmt.Errorf("no cron job %q", name)
}

// errSkipped: the previous run of the job was still going.
var errSkipped = fmt.Errorf("skipped: the previous run is still going")

// errNotRunning: the cron is not started, or stopped (shutdown); nothing new starts.
var errNotRunning = fmt.Errorf("not run: the cron is not started or stopped")

// runJob runs one tick of a job: skipped while the previous run goes on, panics contained.
func (c *Cron) runJob(ctx context.Context, j *cronJob) (err error) {
	if !j.running.CompareAndSwap(false, true) {
		c.log.Debug("cron job skipped: previous run still going", "job", j.name)
		c.rec.Inc("bindery_cron_runs_total", "job", j.name, "outcome", "skipped")
		return errSkipped
	}
	defer j.running.Store(false)
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
	n, err := j.job.runOnce(ctx)
	switch {
	case err != nil && ctx.Err() == nil:
		c.log.Error("cron job failed", "job", j.name, "err", err)
	case n > 0:
		c.log.Info("cron job did work", "job", j.name, "count", n, "took", time.Since(start).Round(time.Millisecond))
	}
	return err
}

// Stop ends the scheduling, cancels the runs in progress and returns once they ended, or when
// ctx ends first (an error). Safe before Start (the cron then never starts) and more than once.
func (c *Cron) Stop(ctx context.Context) error {
	c.bg.StopInit()
	c.mu.Lock()
	stopped := c.c.Stop()
	c.mu.Unlock()
	// The scheduler's goroutines only hand runs over; its Stop waits for them, then ours for the
	// runs themselves.
	select {
	case <-stopped.Done():
	case <-ctx.Done():
		return fmt.Errorf("cron: jobs still running at shutdown: %w", ctx.Err())
	}
	if err := c.bg.Wait(ctx); err != nil {
		return fmt.Errorf("cron: jobs still running at shutdown: %w", err)
	}
	return nil
}
