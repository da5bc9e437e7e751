package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

func TestPoolRejectsWhenFullInsteadOfBlockingOrRunningInline(t *testing.T) {
	p := NewPool(1, 2, slog.New(slog.DiscardHandler), metrics.NewSet())
	release := make(chan struct{})
	started := make(chan struct{})
	var ranOn sync.Map
	caller := goid()
	// One task occupies the worker, two fill the queue.
	if err := p.Submit("block", func(context.Context) { close(started); <-release }); err != nil {
		t.Fatal(err)
	}
	<-started
	for i := range 2 {
		if err := p.Submit("queued", func(context.Context) { ranOn.Store(goid(), true) }); err != nil {
			t.Fatalf("queued %d: %v", i, err)
		}
	}
	if err := p.Submit("overflow", func(context.Context) { t.Error("a rejected task ran") }); !errors.Is(err, ErrPoolFull) {
		t.Fatalf("overflow: %v, want ErrPoolFull", err)
	}
	close(release)
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, inline := ranOn.Load(caller); inline {
		t.Fatal("a task ran on the submitting goroutine")
	}
	if err := p.Submit("late", func(context.Context) {}); !errors.Is(err, ErrPoolStopped) {
		t.Fatalf("after shutdown: %v", err)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatalf("second shutdown: %v", err)
	}
}

func TestPoolDrainsQueuedWorkOnShutdown(t *testing.T) {
	p := NewPool(2, 100, slog.New(slog.DiscardHandler), nil)
	var done atomic.Int32
	for range 50 {
		if err := p.Submit("work", func(context.Context) { done.Add(1) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if done.Load() != 50 {
		t.Fatalf("drained %d of 50", done.Load())
	}
}

func TestPoolCancelsStragglersWhenTheDeadlinePasses(t *testing.T) {
	p := NewPool(1, 1, slog.New(slog.DiscardHandler), nil)
	started := make(chan struct{})
	var sawCancel atomic.Bool
	p.Submit("long", func(ctx context.Context) {
		close(started)
		<-ctx.Done()
		sawCancel.Store(true)
	})
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := p.Shutdown(ctx); err == nil {
		t.Fatal("want an error: the task did not finish before the deadline")
	}
	if !sawCancel.Load() {
		t.Fatal("the running task was not told to stop")
	}
}

func TestPoolSurvivesAPanickingTask(t *testing.T) {
	set := metrics.NewSet()
	p := NewPool(1, 4, slog.New(slog.DiscardHandler), set)
	var after atomic.Bool
	p.Submit("panics", func(context.Context) { panic("boom") })
	p.Submit("after", func(context.Context) { after.Store(true) })
	p.Shutdown(context.Background())
	if !after.Load() {
		t.Fatal("the worker died with the panicking task")
	}
}

func TestPoolIsSafeUnderConcurrentSubmitAndShutdown(t *testing.T) {
	p := NewPool(4, 16, slog.New(slog.DiscardHandler), nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				_ = p.Submit("x", func(context.Context) {})
			}
		}()
	}
	time.Sleep(time.Millisecond)
	p.Shutdown(context.Background())
	wg.Wait()
}
