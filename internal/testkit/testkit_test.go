package testkit

import (
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fatalRecorder is a testing.TB whose Fatalf records the message and ends the goroutine, as the
// real one does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}
func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// failure runs fn with a recorder and returns what it failed with ("" when it did not).
func failure(t *testing.T, fn func(tb testing.TB)) string {
	r := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); fn(r) }()
	<-done
	return r.msg
}

func TestTheDeadlineIsAMinuteScaledByTheEnvironment(t *testing.T) {
	base := time.Minute
	if raceEnabled {
		base *= 3
	}
	if got := Timeout(); got != base {
		t.Fatalf("Timeout() = %s, want %s", got, base)
	}
	t.Setenv(ScaleEnv, "2.5")
	if got := Timeout(); got != base*5/2 {
		t.Fatalf("scaled by 2.5: %s", got)
	}
	for _, bad := range []string{"0", "-1", "fast"} {
		t.Setenv(ScaleEnv, bad)
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s=%q was taken", ScaleEnv, bad)
				}
			}()
			Timeout()
		}()
	}
}

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	var calls atomic.Int32
	start := time.Now()
	if msg := failure(t, func(tb testing.TB) {
		Eventually(tb, "the third look", func() bool { return calls.Add(1) >= 3 })
	}); msg != "" {
		t.Fatalf("failed: %s", msg)
	}
	if calls.Load() != 3 {
		t.Fatalf("%d looks, want 3", calls.Load())
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("three looks took %s: the polls are too far apart", took)
	}
}

func TestEventuallyFailsNamingWhatItWaitedFor(t *testing.T) {
	t.Setenv(ScaleEnv, "0.0005") // 30 ms
	msg := failure(t, func(tb testing.TB) { Eventually(tb, "a pig to fly", func() bool { return false }) })
	if !strings.Contains(msg, "gave up waiting for a pig to fly") {
		t.Fatalf("failed with %q", msg)
	}
}

func TestReceiveGivesTheValueAndFailsOnAClosedOrSilentChannel(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	if got := Receive(t, "seven", ch); got != 7 {
		t.Fatalf("got %d", got)
	}
	close(ch)
	if msg := failure(t, func(tb testing.TB) { Receive(tb, "more", ch) }); !strings.Contains(msg, "closed") {
		t.Fatalf("a closed channel: %q", msg)
	}
	t.Setenv(ScaleEnv, "0.0005")
	if msg := failure(t, func(tb testing.TB) { Receive(tb, "a word", make(chan string)) }); !strings.Contains(msg, "gave up waiting for a word") {
		t.Fatalf("a silent channel: %q", msg)
	}
}

func TestTheClockMovesOnlyWhenTold(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	c := NewClock(t0)
	if !c.Now().Equal(t0) {
		t.Fatalf("starts at %s", c.Now())
	}
	c.Advance(90 * time.Second)
	if got := c.Now(); !got.Equal(t0.Add(90 * time.Second)) {
		t.Fatalf("after 90 s: %s", got)
	}
}

func TestAFreeAddressCanBeListenedOn(t *testing.T) {
	addr := FreeAddr(t)
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("address %q", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	ln.Close()
}
