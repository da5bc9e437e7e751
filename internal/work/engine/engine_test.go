package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"bindery/internal/remote/outbound"
	"bindery/internal/testkit"
	"bindery/internal/testkit/enginekit"
	"bindery/internal/work/engine"
	"bindery/internal/work/service/servicetest"
	"bindery/store"
	"bindery/store/storetest"
)

var bg = context.Background()

// put makes a task due (an outside writer's reschedule).
func put(t *testing.T, db *store.DB, kind, ref, lane, step string) {
	t.Helper()
	enginekit.On(t, db).Put(store.TaskSpec{Kind: kind, Ref: ref, Lane: lane, Step: step})
}

func start(t *testing.T, db *store.DB, instance string, lanes map[string]int, kinds ...engine.Kind) *engine.Engine {
	t.Helper()
	if lanes == nil {
		lanes = map[string]int{} // one worker per lane
	}
	return enginekit.On(t, db).Engine(enginekit.Options{Instance: instance, Lanes: lanes, IdlePoll: 20 * time.Millisecond, Kinds: kinds})
}

func gone(db *store.DB, kind, ref string) func() bool {
	return func() bool { _, err := db.Task(bg, kind, ref); return errors.Is(err, store.ErrNotFound) }
}

// finish is a kind whose every run ends its task.
func finish(name string, ran *atomic.Int32) engine.Kind {
	return engine.Kind{Name: name, Run: func(ctx context.Context, r *engine.Run) error {
		ran.Add(1)
		return r.Finish(ctx, nil)
	}, Fail: func(ctx context.Context, r *engine.Run, err error) error { return r.Finish(ctx, nil) }}
}

// No number of busy background workers delays the first-steps lane: with every background
// worker stuck in an action, a first step still runs at once.
func TestTheFirstLaneRunsWhileTheBackgroundLaneIsBusy(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		release := make(chan struct{})
		var entered atomic.Int32
		slow := engine.Kind{Name: "slow", Run: func(ctx context.Context, r *engine.Run) error {
			entered.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
			return r.Finish(ctx, nil)
		}, Fail: func(ctx context.Context, r *engine.Run, err error) error { return r.Finish(ctx, nil) }}
		var firsts atomic.Int32
		e := start(t, db, "i1", map[string]int{engine.LaneFirst: 1, engine.LaneBackground: 2}, slow, finish("quick", &firsts))
		for i := range 5 {
			put(t, db, "slow", fmt.Sprint(i), engine.LaneBackground, "wait")
		}
		e.NudgeAll()
		testkit.Eventually(t, "both background workers to be busy", func() bool { return entered.Load() == 2 })
		put(t, db, "quick", "op-1", engine.LaneFirst, "ticket")
		e.Nudge(engine.LaneFirst)
		testkit.Eventually(t, "the first step to run", gone(db, "quick", "op-1"))
		if entered.Load() != 2 {
			t.Fatalf("%d background actions started with 2 workers", entered.Load())
		}
		close(release)
		for i := range 5 {
			testkit.Eventually(t, "the background tasks", gone(db, "slow", fmt.Sprint(i)))
		}
	})
}

// The lease scenario of the durable-execution issue: two attempts at one piece of work on one
// instance (the same owner name: a sweep tick and an operator's retry, two ticks behind a busy
// pool), and another instance. Only one attempt runs at a time; the one that loses writes
// nothing and orphans nothing: the work is never left without a due time.
func TestTwoAttemptsOnOneInstanceNeitherRunTwiceNorOrphanTheWork(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		var running, overlaps, runs atomic.Int32
		work := engine.Kind{Name: "request", Run: func(ctx context.Context, r *engine.Run) error {
			if running.Add(1) > 1 {
				overlaps.Add(1)
			}
			n := runs.Add(1)
			time.Sleep(5 * time.Millisecond) // the remote call
			// Out of the work before its outcome commits: once it has, the next attempt may
			// start at once, and a deferred count would call that an overlap.
			running.Add(-1)
			if n < 20 {
				return r.Next(ctx, store.TaskNext{}, nil) // due again at once: many attempts race
			}
			return r.Finish(ctx, nil)
		}, Fail: func(ctx context.Context, r *engine.Run, err error) error { return r.Finish(ctx, nil) }}
		lanes := map[string]int{engine.LaneFirst: 4, engine.LaneBackground: 4}
		a1 := start(t, db, "instance-a", lanes, work)
		a2 := start(t, db, "instance-a", lanes, work) // the same name: one process, two dispatchers
		b := start(t, db, "instance-b", lanes, work)
		put(t, db, "request", "op-1", engine.LaneFirst, "ticket")
		for range 10 {
			for _, e := range []*engine.Engine{a1, a2, b} {
				e.NudgeAll()
			}
			// Outside reschedules race the runs too (an operator's retry of a step that is
			// running is refused; of one that is not, it makes it due now).
			_ = db.InTx(bg, func(tx *store.Tx) error {
				return tx.PutTask(bg, store.TaskSpec{Kind: "request", Ref: "op-1", Lane: engine.LaneFirst, Step: "ticket"}, true)
			})
			time.Sleep(3 * time.Millisecond) // the behaviour: reschedules spread over the runs
		}
		testkit.Eventually(t, "the work to finish", gone(db, "request", "op-1"))
		if overlaps.Load() != 0 {
			t.Fatalf("%d runs overlapped", overlaps.Load())
		}
		if runs.Load() < 20 {
			t.Fatalf("the work finished after %d runs", runs.Load())
		}
	})
}

// An instance that dies in the middle of an action leaves a claim that expires; another
// instance runs the work then, and the dead holder's late outcome is refused.
func TestAKilledInstancesWorkIsResumedElsewhereAndItsLateWriteRefused(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		stuck := make(chan *engine.Run, 1)
		hold := make(chan struct{})
		dying := engine.Kind{Name: "batch", Lease: func() time.Duration { return 100 * time.Millisecond },
			Run: func(ctx context.Context, r *engine.Run) error {
				stuck <- r
				<-hold // the process stops answering (and stops renewing: the claim expires)
				return nil
			}, Fail: func(ctx context.Context, r *engine.Run, err error) error { return nil }}
		a := engine.New(engine.Options{DB: db, Instance: "a", IdlePoll: 10 * time.Millisecond})
		a.Register(dying)
		if err := a.Start(bg); err != nil {
			t.Fatal(err)
		}
		put(t, db, "batch", "1", engine.LaneBackground, "pipeline")
		a.NudgeAll()
		dead := <-stuck
		task, err := db.Task(bg, "batch", "1")
		if err != nil || task.Owner != "a" {
			t.Fatalf("claimed: %+v %v", task, err)
		}
		killed := make(chan struct{})
		go func() { a.Kill(); close(killed) }() // renewals stop; the stuck action does not notice

		var ranOn atomic.Value
		survivor := engine.Kind{Name: "batch", Run: func(ctx context.Context, r *engine.Run) error {
			ranOn.Store(r.Task.Owner)
			return r.Finish(ctx, nil)
		}, Fail: func(ctx context.Context, r *engine.Run, err error) error { return r.Finish(ctx, nil) }}
		b := start(t, db, "b", nil, survivor)
		b.NudgeAll()
		testkit.Eventually(t, "the other instance to finish the work", gone(db, "batch", "1"))
		if ranOn.Load() != "b" {
			t.Fatalf("ran on %v", ranOn.Load())
		}
		if err := dead.Next(bg, store.TaskNext{Step: "late"}, nil); !errors.Is(err, store.ErrPreempted) {
			t.Fatalf("the dead holder's late outcome: %v", err)
		}
		close(hold)
		<-killed
	})
}

// What a step returns is classified once for every kind: an unavailable dependency is retried
// after a backoff at least as long as its Retry-After, then the kind gives up and the declared
// failure is written; a panic is a failure too; a preempted write only lets go.
func TestStepOutcomesAreClassifiedForEveryKind(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		var mu sync.Mutex
		attempts := map[string][]time.Time{}
		failedWith := map[string]string{}
		kind := engine.Kind{Name: "request",
			Run: func(ctx context.Context, r *engine.Run) error {
				mu.Lock()
				attempts[r.Task.Ref] = append(attempts[r.Task.Ref], time.Now())
				n := len(attempts[r.Task.Ref])
				mu.Unlock()
				switch r.Task.Ref {
				case "unavailable":
					return outbound.NewStatusError("gitlab", "get_mr", 429, "rate_limited", "Retry later", nil).WithRetryAfter("1", time.Now())
				case "panics":
					panic("boom")
				case "preempted":
					if n == 1 {
						return fmt.Errorf("the request moved on: %w", store.ErrPreempted)
					}
					return r.Finish(ctx, nil)
				}
				return errors.New("deterministic")
			},
			Fail: func(ctx context.Context, r *engine.Run, err error) error {
				mu.Lock()
				failedWith[r.Task.Ref] = err.Error()
				mu.Unlock()
				return r.Finish(ctx, nil)
			},
			Retry: engine.Attempts(2, time.Millisecond),
		}
		e := start(t, db, "i", nil, kind)
		for _, ref := range []string{"unavailable", "panics", "preempted", "deterministic"} {
			put(t, db, "request", ref, engine.LaneFirst, "first")
		}
		e.NudgeAll()
		for _, ref := range []string{"unavailable", "panics", "preempted", "deterministic"} {
			testkit.Eventually(t, ref+" to end", gone(db, "request", ref))
		}
		mu.Lock()
		defer mu.Unlock()
		if a := attempts["unavailable"]; len(a) != 2 || a[1].Sub(a[0]) < 900*time.Millisecond {
			t.Errorf("unavailable: attempts %v (want 2, a Retry-After of 1s apart)", a)
		}
		if _, ok := failedWith["unavailable"]; !ok {
			t.Error("unavailable: no failure written after the last attempt")
		}
		if f := failedWith["panics"]; f == "" || len(attempts["panics"]) != 1 {
			t.Errorf("panics: failure %q after %d attempts", f, len(attempts["panics"]))
		}
		if _, ok := failedWith["preempted"]; ok || len(attempts["preempted"]) != 2 {
			t.Errorf("preempted: failed %v, %d attempts (want no failure: released and run again)", ok, len(attempts["preempted"]))
		}
		if f := failedWith["deterministic"]; f != "deterministic" || len(attempts["deterministic"]) != 1 {
			t.Errorf("deterministic: %q after %d attempts", f, len(attempts["deterministic"]))
		}
	})
}

// Polling is data: each look is one run, the schedule follows the checks recorded on the task
// (short, then long), and the look after the timeout is the last.
func TestAPollIsOneLookPerRunOnTheStagedSchedule(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		// The schedule is read from what each look asks for (Poll's next), not counted in a
		// window of wall time: how many looks fit in a window depends on how loaded the
		// machine is, the schedule does not.
		st := engine.Stages{Short: time.Millisecond, ShortCount: 3, Long: 30 * time.Millisecond, Timeout: time.Hour}
		const enough = 8 // 3 short looks, then long ones
		var mu sync.Mutex
		var looks []time.Time
		var waits []time.Duration
		var checks []int
		done := make(chan struct{}, 1)
		kind := engine.Kind{Name: "batch", Run: func(ctx context.Context, r *engine.Run) error {
			next, out := r.Poll(st, "waiting")
			mu.Lock()
			looks = append(looks, time.Now())
			waits = append(waits, next.In)
			checks = append(checks, r.Task.Checks)
			n := len(looks)
			mu.Unlock()
			if out || n == enough {
				done <- struct{}{}
				return r.Finish(ctx, nil)
			}
			return r.Next(ctx, next, nil)
		}, Fail: func(ctx context.Context, r *engine.Run, err error) error { return r.Finish(ctx, nil) }}
		startWaiting(t, db, kind)
		testkit.Receive(t, "the looks", done)
		mu.Lock()
		defer mu.Unlock()
		for i := range looks {
			want := st.Long
			if i < st.ShortCount {
				want = st.Short
			}
			if checks[i] != i || (i < enough-1 && waits[i] != want) {
				t.Fatalf("look %d: checks %d, next in %s; want %d, %s (checks %v, waits %v)", i, checks[i], waits[i], i, want, checks, waits)
			}
			// A long wait is waited: never a busy loop.
			if i > st.ShortCount {
				if gap := looks[i].Sub(looks[i-1]); gap < 25*time.Millisecond {
					t.Fatalf("look %d came %s after the one before (want poll.long)", i, gap)
				}
			}
		}
	})
}

// startWaiting starts an instance running kind and gives it batch 1's task, waiting from now.
func startWaiting(t *testing.T, db *store.DB, kind engine.Kind) {
	t.Helper()
	e := start(t, db, "i", nil, kind)
	enginekit.On(t, db).Put(store.TaskSpec{Kind: "batch", Ref: "1", Lane: engine.LaneBackground, Step: "pipeline", Wait: true})
	e.NudgeAll()
}

// The staged schedule's timeout ends the wait: the first look past it is told so, after a
// bounded number of looks (never a busy loop).
func TestAPollPastItsTimeoutIsTimedOut(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		st := engine.Stages{Short: time.Millisecond, ShortCount: 3, Long: 30 * time.Millisecond, Timeout: 100 * time.Millisecond}
		var looks atomic.Int32
		timedOut := make(chan int, 1)
		kind := engine.Kind{Name: "batch", Run: func(ctx context.Context, r *engine.Run) error {
			looks.Add(1)
			next, out := r.Poll(st, "waiting")
			if out {
				timedOut <- r.Task.Checks
				return r.Finish(ctx, nil)
			}
			return r.Next(ctx, next, nil)
		}, Fail: func(ctx context.Context, r *engine.Run, err error) error { return r.Finish(ctx, nil) }}
		startWaiting(t, db, kind)
		checks := testkit.Receive(t, "the timeout", timedOut)
		// 3 short looks, then long ones until 100 ms: at most 3 + 100/30 + the one that timed out.
		if n := int(looks.Load()); n != checks+1 || n > 8 {
			t.Fatalf("%d looks, %d checks", n, checks)
		}
	})
}

// A wake makes waiting work run now, on an instance that did not receive it (its idle poll sees
// it); a wake that arrives during a run is not lost.
func TestAWakeRunsWaitingWorkNowOnAnyInstance(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		var runs atomic.Int32
		kind := engine.Kind{Name: "batch", Run: func(ctx context.Context, r *engine.Run) error {
			if runs.Add(1) == 1 {
				// A webhook arrives while this look runs; the look then asks for an hour.
				if _, err := db.WakeTasks(bg, []store.TaskRef{{Kind: "batch", Ref: "1"}}); err != nil {
					return err
				}
			}
			return r.Next(ctx, store.TaskNext{In: time.Hour, Wait: store.WaitKeep, Checks: r.Task.Checks + 1}, nil)
		}, Fail: func(ctx context.Context, r *engine.Run, err error) error { return r.Finish(ctx, nil) }}
		start(t, db, "other", nil, kind)
		if err := db.InTx(bg, func(tx *store.Tx) error {
			return tx.PutTask(bg, store.TaskSpec{Kind: "batch", Ref: "1", Lane: engine.LaneBackground, Step: "pipeline", Wait: true}, false)
		}); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, "the second run, brought forward by the wake", func() bool { return runs.Load() >= 2 })
		time.Sleep(50 * time.Millisecond) // the behaviour: no third run in this window (an idle poll is 20 ms)
		if n := runs.Load(); n != 2 {
			t.Fatalf("%d runs, want 2 (the wake's, then an hour)", n)
		}
		if _, err := db.WakeTasks(bg, []store.TaskRef{{Kind: "batch", Ref: "1"}}); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, "the run a wake from elsewhere makes due", func() bool { return runs.Load() == 3 })
	})
}

// A clean shutdown lets running actions finish until its deadline, then cancels them: a
// cancelled action writes nothing but gives its claim back, so another instance need not wait
// for it to expire.
func TestAShutdownWritesNothingAndGivesTheClaimBack(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		entered := make(chan struct{})
		kind := engine.Kind{Name: "batch", Lease: func() time.Duration { return time.Hour },
			Run: func(ctx context.Context, r *engine.Run) error {
				close(entered)
				<-ctx.Done()
				return ctx.Err()
			}, Fail: func(ctx context.Context, r *engine.Run, err error) error {
				t.Error("a shutdown wrote a failure")
				return nil
			}}
		e := engine.New(engine.Options{DB: db, Instance: "i", IdlePoll: 10 * time.Millisecond})
		e.Register(kind)
		if err := e.Start(bg); err != nil {
			t.Fatal(err)
		}
		put(t, db, "batch", "1", engine.LaneBackground, "pipeline")
		e.NudgeAll()
		<-entered
		ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
		defer cancel()
		if err := e.Stop(ctx); err == nil {
			t.Fatal("a stop that cancelled an action reported nothing")
		}
		task, err := db.Task(bg, "batch", "1")
		if err != nil || task.Owner != "" || !task.Queued() || task.Step != "pipeline" {
			t.Fatalf("after the shutdown: %+v %v", task, err)
		}
	})
}

// An action that outlives its lease (every outbound call's own deadline is far shorter: it is
// stuck) is cut there and tried again like an unavailable dependency, not left holding the work.
func TestAnActionThatOutlivesItsLeaseIsCutAndTriedAgain(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		var runs atomic.Int32
		var failures atomic.Int32
		kind := engine.Kind{Name: "request", Lease: func() time.Duration { return 100 * time.Millisecond },
			Run: func(ctx context.Context, r *engine.Run) error {
				if runs.Add(1) == 1 {
					<-ctx.Done() // stuck until the lease ends
					return ctx.Err()
				}
				failures.Store(int32(r.Task.Failures))
				return r.Finish(ctx, nil)
			}, Fail: func(ctx context.Context, r *engine.Run, err error) error {
				t.Errorf("failed: %v", err)
				return r.Finish(ctx, nil)
			}, Retry: engine.Attempts(3, time.Millisecond)}
		e := start(t, db, "i", nil, kind)
		put(t, db, "request", "op-1", engine.LaneFirst, "ticket")
		e.NudgeAll()
		testkit.Eventually(t, "the second attempt", gone(db, "request", "op-1"))
		if runs.Load() != 2 || failures.Load() != 1 {
			t.Fatalf("%d runs, the second after %d failures", runs.Load(), failures.Load())
		}
	})
}

// Work of a kind this instance does not know (a newer version wrote it) is put aside with a note,
// not run, failed or spun on: it is due again minutes later, and the rest of the lane goes on.
func TestWorkOfAnUnknownKindIsParked(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		var ran atomic.Int32
		e := start(t, db, "i", nil, finish("request", &ran))
		put(t, db, "from-the-future", "x", engine.LaneFirst, "anything")
		put(t, db, "request", "op-1", engine.LaneFirst, "ticket")
		e.NudgeAll()
		testkit.Eventually(t, "the known work to run", gone(db, "request", "op-1"))
		// The pass that ran op-1 parks x in the same loop, but op-1 may end before x is put
		// aside: wait for the note, then check x is neither run nor due soon nor held.
		var task store.Task
		testkit.Eventually(t, "the unknown kind to be parked", func() bool {
			var err error
			task, err = db.Task(bg, "from-the-future", "x")
			return err == nil && task.Note != ""
		})
		if task.Owner != "" || task.Overdue > -4*time.Minute {
			t.Fatalf("the unknown kind's task: %+v", task)
		}
	})
}

// The engine keeps the start/stop contract of every background service: a stop before the start
// leaves it stopped for good, a second stop is harmless, and once Stop returns no dispatcher or
// action of it is left running.
func TestTheEngineStopsBeforeItStartsTwiceAndLeavesNoGoroutine(t *testing.T) {
	db := storetest.SQLite(t)
	t.Run("stopped before it starts", func(t *testing.T) {
		servicetest.StoppedBeforeStart(t, engine.New(engine.Options{DB: db, Instance: "i"}))
	})
	t.Run("started, working and stopped twice", func(t *testing.T) {
		var ran atomic.Int32
		e := engine.New(engine.Options{DB: db, Instance: "i", IdlePoll: 5 * time.Millisecond})
		e.Register(finish("batch", &ran))
		servicetest.StartedAndStoppedTwice(t, e, func() {
			put(t, db, "batch", "leak-1", engine.LaneBackground, "pipeline")
			e.NudgeAll()
			testkit.Eventually(t, "the task to run", gone(db, "batch", "leak-1"))
		})
		if ran.Load() != 1 {
			t.Fatalf("ran %d times", ran.Load())
		}
	})
}

// A step's outcome is its next step and due time; a renewal of the claim that comes after the
// outcome is written (the action still returning) must not move that due time to the lease's end.
func TestARenewalAfterTheOutcomeKeepsTheNextStepsDueTime(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		written := make(chan struct{})
		kind := engine.Kind{Name: "request", Lease: func() time.Duration { return 60 * time.Millisecond },
			Run: func(ctx context.Context, r *engine.Run) error {
				if err := r.Next(ctx, store.TaskNext{Step: "later", In: time.Hour}, nil); err != nil {
					return err
				}
				// The behaviour under test: the action keeps running after its outcome is written
				// while the claim's renewal ticks every 20 ms (several ticks in these 200 ms).
				time.Sleep(200 * time.Millisecond)
				close(written)
				return nil
			}, Fail: func(ctx context.Context, r *engine.Run, err error) error {
				t.Errorf("failed: %v", err)
				return r.Finish(ctx, nil)
			}}
		e := start(t, db, "i", nil, kind)
		put(t, db, "request", "op-1", engine.LaneFirst, "ticket")
		e.NudgeAll()
		<-written
		testkit.Eventually(t, "the claim released", func() bool {
			task, err := db.Task(bg, "request", "op-1")
			return err == nil && task.Owner == ""
		})
		task, err := db.Task(bg, "request", "op-1")
		if err != nil || task.Step != "later" || task.Overdue > -50*time.Minute {
			t.Fatalf("task %+v (%v): want step later, due in an hour", task, err)
		}
	})
}
