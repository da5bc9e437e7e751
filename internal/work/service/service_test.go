package service_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"bindery/internal/work/service"
)

// ticker is the smallest service: one goroutine that counts until it stops.
type ticker struct {
	bg    service.Base
	ticks atomic.Int64
}

func (s *ticker) Start(ctx context.Context) error {
	_, ok, err := s.bg.StartInit(ctx)
	if !ok {
		return err
	}
	s.bg.Go(func(ctx context.Context) {
		service.Every(ctx, time.Millisecond, func(context.Context) { s.ticks.Add(1) })
	})
	return nil
}

func (s *ticker) Stop(ctx context.Context) error { return s.bg.Stop(ctx) }

func TestAServiceStoppedBeforeItStartsNeverStarts(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := &ticker{}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatalf("stop before start: %v", err)
	}
	if err := s.Start(context.Background()); !errors.Is(err, service.ErrStopped) {
		t.Fatalf("start after stop: %v, want ErrStopped", err)
	}
	if s.bg.Go(func(context.Context) { t.Error("ran after stop") }) {
		t.Fatal("Go accepted work on a stopped service")
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatalf("second stop: %v", err)
	}
}

func TestStopEndsEveryGoroutineAndASecondStopWaitsToo(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := &ticker{}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("a second start of a running service: %v", err)
	}
	for s.ticks.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	var wg sync.WaitGroup
	for range 3 { // concurrent stops: each returns once the goroutine ended
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Stop(context.Background()); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	n := s.ticks.Load()
	time.Sleep(5 * time.Millisecond)
	if s.ticks.Load() != n {
		t.Fatal("the service still ticks after Stop returned")
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A goroutine that ignores its context holds Stop only until Stop's own deadline; a later Stop
// with time to spare waits for it to end.
func TestStopGivesUpAtItsDeadlineAndSaysSo(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var b service.Base
	if _, ok, err := b.StartInit(context.Background()); !ok || err != nil {
		t.Fatal(ok, err)
	}
	release := make(chan struct{})
	b.Go(func(context.Context) { <-release })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := b.Stop(ctx); err == nil || !strings.Contains(err.Error(), "still running") {
		t.Fatalf("stop with a stuck goroutine: %v", err)
	}
	close(release)
	if err := b.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// The context a service runs under ends with the caller's, and with Stop (cause ErrStopped).
func TestTheRunContextEndsAtStopWithItsCause(t *testing.T) {
	var b service.Base
	run, _, _ := b.StartInit(context.Background())
	if run.Err() != nil {
		t.Fatal("ended before Stop")
	}
	if !b.StopInit() || b.StopInit() {
		t.Fatal("StopInit reports the stop of a running service once")
	}
	if !errors.Is(context.Cause(run), service.ErrStopped) {
		t.Fatalf("cause %v", context.Cause(run))
	}
	var never service.Base
	if err := never.Wait(context.Background()); err == nil {
		t.Fatal("Wait before StopInit waited")
	}
}

// recorder is a service that records its stop in a shared list.
type recorder struct {
	name    string
	stopped *[]string
	err     error
}

func (r recorder) Start(context.Context) error { return nil }
func (r recorder) Stop(context.Context) error {
	*r.stopped = append(*r.stopped, r.name)
	return r.err
}

func TestStopAllStopsInTheReverseOrderAndReportsEveryFailure(t *testing.T) {
	var order []string
	a, b, c := recorder{"a", &order, nil}, recorder{"b", &order, errors.New("b stuck")}, recorder{"c", &order, errors.New("c stuck")}
	err := service.StopAll(context.Background(), a, b, c)
	if strings.Join(order, ",") != "c,b,a" {
		t.Fatalf("stop order %v", order)
	}
	if err == nil || !strings.Contains(err.Error(), "b stuck") || !strings.Contains(err.Error(), "c stuck") {
		t.Fatalf("err %v", err)
	}
}
