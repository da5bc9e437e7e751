// Package worker is the bounded, rejecting pool that runs long steps.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"

	"github.com/VictoriaMetrics/metrics"
)

// Pool runs long steps (GitLab, approval system) on a fixed number of workers behind a bounded
// queue. Submit never blocks and never runs the task on the caller's goroutine: a full queue is
// an error the caller turns into a persisted failure state, so that a client polling the request
// sees a failure instead of "processing" forever. An unbounded queue would hide overload; running
// on the caller (a web request) would spread it to every endpoint.
type Pool struct {
	log   *slog.Logger
	tasks chan poolTask
	wg    sync.WaitGroup

	// ctx is handed to every task; it is cancelled when a shutdown's deadline passes, so tasks
	// still running stop at their next call and leave their state for the lease sweep to resume.
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.RWMutex // guards stopped against a concurrent Submit's send
	stopped bool
	stop    sync.Once
	drained chan struct{}

	rejected *metrics.Counter
	panics   *metrics.Counter
}

type poolTask struct {
	name string
	fn   func(ctx context.Context)
}

// Pool errors. Both mean "not accepted": the caller must persist the failure.
var (
	ErrPoolFull    = errors.New("worker pool queue is full")
	ErrPoolStopped = errors.New("worker pool is shutting down")
)

// NewPool starts workers goroutines behind a queue of queueSize. set receives the pool's metrics
// (nil: none).
func NewPool(workers, queueSize int, log *slog.Logger, set *metrics.Set) *Pool {
	workers, queueSize = max(workers, 1), max(queueSize, 1)
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pool{log: log, tasks: make(chan poolTask, queueSize), ctx: ctx, cancel: cancel, drained: make(chan struct{})}
	if set != nil {
		p.rejected = set.NewCounter("bindery_pool_rejected_total")
		p.panics = set.NewCounter("bindery_pool_panics_total")
		set.NewGauge("bindery_pool_queue_depth", func() float64 { return float64(len(p.tasks)) })
		set.NewGauge("bindery_pool_workers", func() float64 { return float64(workers) })
	}
	p.wg.Add(workers)
	for range workers {
		go p.work()
	}
	go func() { p.wg.Wait(); close(p.drained) }()
	return p
}

// Submit queues fn. It returns ErrPoolFull or ErrPoolStopped without running fn.
func (p *Pool) Submit(name string, fn func(ctx context.Context)) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.stopped {
		p.count(p.rejected)
		return ErrPoolStopped
	}
	select {
	case p.tasks <- poolTask{name, fn}:
		return nil
	default:
		p.count(p.rejected)
		return ErrPoolFull
	}
}

func (p *Pool) work() {
	defer p.wg.Done()
	for t := range p.tasks {
		p.run(t)
	}
}

// run is the last line of defence: a step's own wrapper writes its declared failure state; a
// panic that escapes even that is logged here and the worker lives on.
func (p *Pool) run(t poolTask) {
	defer func() {
		if r := recover(); r != nil {
			p.count(p.panics)
			p.log.Error("CRITICAL: task panicked outside its step wrapper", "task", t.name,
				"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		}
	}()
	t.fn(p.ctx)
}

func (p *Pool) count(c *metrics.Counter) {
	if c != nil {
		c.Inc()
	}
}

// Shutdown stops accepting tasks, lets the workers finish what is queued and running, and waits
// until ctx ends; then it cancels the tasks' context and waits for them to return. Safe to call
// more than once.
func (p *Pool) Shutdown(ctx context.Context) error {
	p.stop.Do(func() {
		p.mu.Lock()
		p.stopped = true
		close(p.tasks)
		p.mu.Unlock()
	})
	select {
	case <-p.drained:
		p.cancel()
		return nil
	case <-ctx.Done():
		p.cancel()
		<-p.drained
		return fmt.Errorf("worker pool: stopped before draining: %w", ctx.Err())
	}
}
