package change

import (
	"context"
	"errors"
	"testing"
	"time"
)

var fast = Stages{Short: time.Millisecond, ShortCount: 3, Long: 5 * time.Millisecond, Timeout: time.Second}

func TestPollReturnsTheDecidedOutcome(t *testing.T) {
	for _, want := range []Outcome{Passed, Failed} {
		n := 0
		got, err := Poll(context.Background(), fast, nil, func(context.Context) (Outcome, error) {
			n++
			if n < 5 {
				return Pending, nil
			}
			return want, nil
		})
		if got != want || err != nil || n != 5 {
			t.Fatalf("got %v %v after %d checks, want %v", got, err, n, want)
		}
	}
}

func TestPollTimesOutWithTheLastReadError(t *testing.T) {
	st := Stages{Short: time.Millisecond, ShortCount: 1, Long: time.Millisecond, Timeout: 20 * time.Millisecond}
	readErr := errors.New("gitlab 502")
	got, err := Poll(context.Background(), st, nil, func(context.Context) (Outcome, error) { return Pending, readErr })
	if got != TimedOut || !errors.Is(err, readErr) {
		t.Fatalf("got %v %v", got, err)
	}
}

func TestPollReadErrorsDoNotDecide(t *testing.T) {
	n := 0
	got, err := Poll(context.Background(), fast, nil, func(context.Context) (Outcome, error) {
		n++
		if n < 3 {
			return Failed, errors.New("read failed") // an erroring read is no answer
		}
		return Passed, nil
	})
	if got != Passed || err != nil {
		t.Fatalf("got %v %v", got, err)
	}
}

func TestPollUsesShortThenLongIntervals(t *testing.T) {
	st := Stages{Short: time.Second, ShortCount: 2, Long: time.Hour}
	for n, want := range []time.Duration{time.Second, time.Second, time.Hour, time.Hour} {
		if got := st.interval(n); got != want {
			t.Errorf("interval(%d) = %v, want %v", n, got, want)
		}
	}
}

func TestPollWakesEarlyAndStopsOnCancel(t *testing.T) {
	slow := Stages{Short: time.Hour, ShortCount: 1, Long: time.Hour, Timeout: 2 * time.Hour}
	wake := make(chan struct{}, 1)
	n := 0
	done := make(chan Outcome)
	go func() {
		out, _ := Poll(context.Background(), slow, wake, func(context.Context) (Outcome, error) {
			n++
			if n == 2 {
				return Passed, nil
			}
			return Pending, nil
		})
		done <- out
	}()
	wake <- struct{}{}
	if out := <-done; out != Passed {
		t.Fatalf("woken poll: %v", out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(5 * time.Millisecond); cancel() }()
	out, err := Poll(ctx, slow, nil, func(context.Context) (Outcome, error) { return Pending, nil })
	if out != Pending || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled poll: %v %v", out, err)
	}
}
