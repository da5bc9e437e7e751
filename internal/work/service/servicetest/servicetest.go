// Package servicetest checks that a service keeps the start/stop contract of package service:
// stopped before it starts it never starts; started, its Stop — called twice — ends every
// goroutine it started (go.uber.org/goleak looks).
package servicetest

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/goleak"

	"bindery/internal/work/service"
)

// StoppedBeforeStart stops s before any start, then tries to start it: the stop succeeds, the
// start answers service.ErrStopped, a second stop succeeds, and no goroutine is left.
func StoppedBeforeStart(t *testing.T, s service.Service) {
	t.Helper()
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := context.Background()
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("stop before start: %v", err)
	}
	if err := s.Start(ctx); !errors.Is(err, service.ErrStopped) {
		t.Fatalf("start after stop: %v, want service.ErrStopped", err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("second stop: %v", err)
	}
}

// StartedAndStoppedTwice starts s, runs work while it runs (the test's proof that it does its
// job), stops it twice and checks that no goroutine started since the call is left. Open what
// s needs (a database, a listener) before the call: their own goroutines are not s's.
func StartedAndStoppedTwice(t *testing.T, s service.Service, work func()) {
	t.Helper()
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatalf("a second start of a running service: %v", err)
	}
	if work != nil {
		work()
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("second stop: %v", err)
	}
}
