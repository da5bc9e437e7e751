// Package service is the one start/stop contract of bindery's background work: the engine's
// dispatchers, the cron runner, the instance heartbeat, the configuration watcher, SQLite's
// checkpointer, the simulators' timed callbacks and the HTTP listeners. The process starts its
// services in order and stops them in the reverse order (StopAll), so that what a service uses
// — the database, the simulators a step calls, the listener a callback reaches — outlives it.
//
// A service embeds no framework: it keeps a Base, calls StartInit in its Start and runs its
// goroutines with Base.Go, which is what lets every service be stopped the same way, before it
// started and twice, and lets Stop know when its last goroutine has ended.
package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Service is background work of one process.
type Service interface {
	// Start begins the work under ctx and returns without waiting for it. An error means
	// nothing runs and the service stays stopped. Starting a running service does nothing; a
	// stopped one never starts again (ErrStopped).
	Start(ctx context.Context) error
	// Stop ends the work and returns once every goroutine of the service has ended, or when ctx
	// ends first (an error: the goroutines were told to end but had not yet). Safe before Start
	// (the service then never starts) and more than once: a later Stop waits like the first.
	Stop(ctx context.Context) error
}

// ErrStopped is the cause of a stopping service's context, and Start's answer once it stopped.
var ErrStopped = errors.New("service stopped")

type state uint8

const (
	idle state = iota
	running
	stopped
)

// Base is the state machine every service shares: idle → running → stopped, never back. Its
// zero value is ready to use; it must not be copied after first use.
type Base struct {
	mu     sync.Mutex
	state  state
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
	done   chan struct{} // closed when stopped and every goroutine of Go has returned
}

// StartInit moves the service to running and returns the context its goroutines run under: it
// ends when Stop begins (cause ErrStopped) or when ctx ends. ok is false when the service must
// not start: it runs already (err nil) or it was stopped (err ErrStopped). A Start that fails
// after StartInit calls StopInit, so that nothing half-started is left.
func (b *Base) StartInit(ctx context.Context) (run context.Context, ok bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case running:
		return nil, false, nil
	case stopped:
		return nil, false, ErrStopped
	}
	b.state = running
	b.ctx, b.cancel = context.WithCancelCause(ctx)
	return b.ctx, true, nil
}

// Go runs fn on a goroutine of the service, with the service's context; Stop waits for it. It
// returns false without running fn when the service is not running: before Start, or once Stop
// began (work scheduled then is dropped, never left running behind Stop's back).
func (b *Base) Go(fn func(ctx context.Context)) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != running {
		return false
	}
	// Added under the lock that StopInit changes the state under: no Add can race the Wait.
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		fn(b.ctx)
	}()
	return true
}

// Running reports whether the service started and has not begun to stop.
func (b *Base) Running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state == running
}

// StopInit moves the service to stopped and ends its context: from now on Go starts nothing. It
// reports whether this call stopped a running service (false: it never started, or another
// call stopped it first). A service with more to do at its stop than end and wait — drain
// first, write something after — calls StopInit, then Wait, instead of Stop.
func (b *Base) StopInit() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == stopped {
		return false
	}
	wasRunning := b.state == running
	b.state = stopped
	b.done = make(chan struct{})
	if !wasRunning {
		close(b.done)
		return false
	}
	b.cancel(ErrStopped)
	go func() {
		b.wg.Wait()
		close(b.done)
	}()
	return true
}

// Wait returns once every goroutine of Go has returned, or when ctx ends first. Call it after
// StopInit (before, it would wait for work that was never told to end, so it refuses).
func (b *Base) Wait(ctx context.Context) error {
	b.mu.Lock()
	done := b.done
	b.mu.Unlock()
	if done == nil {
		return errors.New("service: Wait before StopInit")
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("goroutines still running when the stop's deadline passed: %w", ctx.Err())
	}
}

// Stop is the usual Stop: end the context, wait for the goroutines.
func (b *Base) Stop(ctx context.Context) error {
	b.StopInit()
	return b.Wait(ctx)
}

// Every runs fn every interval until ctx ends; a run is never overlapped by the next (a slow
// run delays the following tick). The first run is one interval after the call.
func Every(ctx context.Context, interval time.Duration, fn func(ctx context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn(ctx)
		}
	}
}

// StopAll stops services in the reverse of their order (the reverse of the order they were
// started in), each within ctx, one after another: a service stops while what it uses still
// runs. Every service is asked to stop even when an earlier one failed to; the failures are
// joined.
func StopAll(ctx context.Context, services ...Service) error {
	var errs []error
	for i := len(services) - 1; i >= 0; i-- {
		errs = append(errs, services[i].Stop(ctx))
	}
	return errors.Join(errs...)
}
