package config

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"bindery/internal/work/service/servicetest"
)

// The watcher keeps the start/stop contract of every background service: a stop before the
// start leaves it stopped for good; started, it follows the file until Stop, which leaves no
// goroutine (nor fsnotify's) behind; a second Stop is harmless.
func TestTheWatcherStopsBeforeItStartsTwiceAndLeavesNoGoroutine(t *testing.T) {
	t.Run("stopped before it starts", func(t *testing.T) {
		servicetest.StoppedBeforeStart(t, NewWatcher(openTestSource(t, "ratelimit:\n  apply: 1\n").Source))
	})
	t.Run("started, following the file and stopped twice", func(t *testing.T) {
		ts := openTestSource(t, "ratelimit:\n  apply: 1\n")
		ts.PollInterval = time.Hour // fsnotify alone
		servicetest.StartedAndStoppedTwice(t, NewWatcher(ts.Source), func() {
			write(t, ts.path, "ratelimit:\n  apply: 2\n")
			waitLimit(t, ts.Source, 2)
		})
		write(t, ts.path, "ratelimit:\n  apply: 3\n")
		time.Sleep(3 * debounce)
		if got := ts.Current().RateLimit("ratelimit.apply", 10); got != 2 {
			t.Fatalf("a stopped watcher still reloads: limit %d", got)
		}
	})
	t.Run("a static source has nothing to watch", func(t *testing.T) {
		servicetest.StartedAndStoppedTwice(t, NewWatcher(NewStatic(MustParse(""))), nil)
	})
}

// A directory that cannot be watched fails Start with the reason, and nothing is left running.
func TestAWatcherThatCannotWatchFailsItsStart(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ts := openTestSource(t, "ratelimit:\n  apply: 1\n")
	if err := os.RemoveAll(filepath.Dir(ts.path)); err != nil {
		t.Fatal(err)
	}
	w := NewWatcher(ts.Source)
	if err := w.Start(context.Background()); err == nil {
		t.Fatal("a watch of a missing directory started")
	}
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}
