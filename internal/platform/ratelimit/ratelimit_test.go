package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// clock is a manual clock for the limiter.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTestLimiter(maxKeys int) (*Limiter, *clock) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	return New(Options{MaxKeys: maxKeys, Now: c.now}), c
}

func TestSlidingWindowAdmitsLimitThenRefusesUntilTheOldestLeaves(t *testing.T) {
	l, c := newTestLimiter(0)
	for i := 0; i < 3; i++ {
		if !l.Allow("apply:alice", 3, time.Minute).Allowed {
			t.Fatalf("request %d refused", i+1)
		}
		c.advance(10 * time.Second)
	}
	d := l.Allow("apply:alice", 3, time.Minute)
	if d.Allowed || d.RetryAfter != 30*time.Second {
		t.Fatalf("4th: %+v, want refused with 30s to wait", d)
	}
	if !l.Allow("apply:bob", 3, time.Minute).Allowed {
		t.Fatal("another subject shares alice's quota")
	}
	c.advance(30 * time.Second) // the first request leaves the window: exactly one slot frees
	if !l.Allow("apply:alice", 3, time.Minute).Allowed {
		t.Fatal("slot did not free when the oldest request left the window")
	}
	if l.Allow("apply:alice", 3, time.Minute).Allowed {
		t.Fatal("a refused request was counted as a slot, or more than one slot freed")
	}
}

func TestMisconfiguredLimitDoesNotLimitOrRecord(t *testing.T) {
	l, _ := newTestLimiter(0)
	for _, limit := range []int{0, -5} {
		for i := 0; i < 100; i++ {
			if !l.Allow("k", limit, time.Minute).Allowed {
				t.Fatalf("limit %d refused a request", limit)
			}
		}
	}
	if !l.Allow("k", 1, 0).Allowed || l.Keys() != 0 {
		t.Fatalf("a zero window limited or recorded (keys=%d)", l.Keys())
	}
}

func TestLimitChangeAppliesAtTheNextCheck(t *testing.T) {
	l, _ := newTestLimiter(0)
	for i := 0; i < 2; i++ {
		l.Allow("k", 2, time.Minute)
	}
	if l.Allow("k", 2, time.Minute).Allowed {
		t.Fatal("over the limit")
	}
	if !l.Allow("k", 5, time.Minute).Allowed {
		t.Fatal("a raised limit did not admit at once")
	}
	if l.Allow("k", 1, time.Minute).Allowed {
		t.Fatal("a lowered limit did not refuse at once")
	}
}

func TestIdleKeysAreSweptAndMemoryIsBounded(t *testing.T) {
	l, c := newTestLimiter(shardCount * 4) // at most 4 keys per shard
	for i := 0; i < 1000; i++ {
		l.Allow(fmt.Sprintf("ip:%d", i), 5, time.Minute)
	}
	if n := l.Keys(); n > shardCount*4 {
		t.Fatalf("%d keys held, cap is %d", n, shardCount*4)
	}
	c.advance(time.Minute)
	if removed := l.Sweep(time.Minute); removed == 0 || l.Keys() != 0 {
		t.Fatalf("sweep removed %d, %d keys left", removed, l.Keys())
	}
	// A full shard first drops keys that went idle before evicting an active one.
	l2, c2 := newTestLimiter(shardCount)
	l2.Allow("old", 1, time.Minute)
	c2.advance(2 * time.Minute)
	for i := 0; i < 500; i++ {
		l2.Allow(fmt.Sprintf("new:%d", i), 1, time.Minute)
	}
	if l2.Keys() > shardCount {
		t.Fatalf("%d keys", l2.Keys())
	}
}

func TestCheckIsAtomicPerKey(t *testing.T) {
	l, _ := newTestLimiter(0)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if l.Allow("apply:alice", 50, time.Hour).Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if admitted.Load() != 50 {
		t.Fatalf("admitted %d of 3200 concurrent requests, want exactly 50", admitted.Load())
	}
}

func TestShareDividesTheQuotaByLiveInstancesRoundingUp(t *testing.T) {
	live, fail := 3, false
	s := NewShare(func(context.Context) (int, error) {
		if fail {
			return 0, errors.New("db down")
		}
		return live, nil
	})
	if s.Of(10) != 10 {
		t.Fatal("before the first refresh an instance believes it is alone")
	}
	if err := s.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	for limit, want := range map[int]int{10: 4, 3: 1, 1: 1, 0: 0, -1: -1, 9: 3} {
		if got := s.Of(limit); got != want {
			t.Errorf("Of(%d) with 3 live = %d, want %d", limit, got, want)
		}
	}
	fail = true
	if err := s.Refresh(context.Background()); err == nil || s.Live() != 3 {
		t.Fatalf("a failed refresh changed the count to %d", s.Live())
	}
	fail, live = false, 0
	s.Refresh(context.Background())
	if s.Live() != 1 {
		t.Fatalf("zero live instances gave %d; this one is alive", s.Live())
	}
}
