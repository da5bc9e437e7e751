// Package testkit is what bindery's tests share: one way to wait for a condition with one
// deadline rule (Eventually, Receive, Timeout), a clock a test moves by hand (Clock), free
// loopback ports (FreeAddr), and the package entry that lets a package's tests overlap (Main).
// The engine-plus-store harness for both databases is its sub-package enginekit; leakcheck and
// proc are the other sub-packages.
//
// A test waits for what it expects to happen, never for a fixed time: a time.Sleep in a test is
// only ever the behaviour under test (a backoff, a delay being measured), and says so in a
// comment on its line.
package testkit

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// ScaleEnv names the environment variable that stretches every wait of the tests on a slow or
// loaded machine: a factor (e.g. 3 or 0.5), 1 when unset. A wait is a hang guard, never a timing
// assertion, so a larger factor only makes a hanging test take longer to fail.
const ScaleEnv = "BINDERY_TEST_TIMEOUT_SCALE"

// baseTimeout is a wait's deadline on an unloaded machine without the race detector: far above
// anything a passing test waits for (a few seconds under two CPU hogs).
const baseTimeout = time.Minute

// Timeout is the one deadline of every wait in bindery's tests: a minute, times ScaleEnv's factor,
// times 3 under the race detector (which slows the code it watches 2 to 10 times).
func Timeout() time.Duration {
	d := baseTimeout
	if raceEnabled {
		d *= 3
	}
	if v := os.Getenv(ScaleEnv); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 {
			panic(fmt.Sprintf("%s=%q: want a positive factor such as 2 or 0.5", ScaleEnv, v))
		}
		d = time.Duration(float64(d) * f)
	}
	return d
}

// Eventually polls cond until it holds and fails the test, naming what it waited for, when it
// still does not after Timeout. The polls start 1 ms apart and back off to 40 ms, so a test
// ends soon after its condition holds and a long wait costs little: a condition is often a
// database read, and at 10 ms the suite's waits were a large share of MariaDB's work.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if err := Poll(Timeout(), cond); err != nil {
		t.Fatalf("gave up waiting for %s after %s", what, Timeout())
	}
}

// Poll is Eventually for code without a testing.TB (a helper process, a tool): it polls cond
// until it holds or within has passed, and then returns an error.
func Poll(within time.Duration, cond func() bool) error {
	deadline := time.Now().Add(within)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("condition still false after %s", within)
		}
		time.Sleep(pause) // the poll's interval, not a wait for something to happen
		pause = min(2*pause, 40*time.Millisecond)
	}
	return nil
}

// Receive waits for a value on ch and returns it; it fails the test, naming what it waited for,
// after Timeout or when ch is closed.
func Receive[T any](t testing.TB, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v, ok := <-ch:
		if !ok {
			t.Fatalf("waiting for %s: the channel was closed", what)
		}
		return v
	case <-time.After(Timeout()):
		t.Fatalf("gave up waiting for %s after %s", what, Timeout())
	}
	panic("unreachable")
}

// Main runs a package's tests (call it from TestMain: os.Exit(testkit.Main(m))). Most of
// bindery's tests wait on a database, a simulator or a child process rather than compute, so
// unless -test.parallel is given it lets 4 parallel tests run per CPU instead of go test's one:
// the tests that call t.Parallel overlap their waits.
func Main(m *testing.M) int {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", strconv.Itoa(4*runtime.GOMAXPROCS(0)))
	}
	return m.Run()
}
