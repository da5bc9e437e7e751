package workflow_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"bindery/batch"
	"bindery/internal/platform/config"
	"bindery/internal/vocab/state"
	"bindery/internal/work/service/servicetest"
	"bindery/store"
	"bindery/store/storetest"
	"bindery/workflow"
)

// idleCron schedules every job once a year: a test that runs the cron drives the runs itself.
const idleCron = "cron:\n  rounds: \"0 0 1 1 *\"\n  reconcile: \"0 0 1 1 *\"\n  sweep: \"0 0 1 1 *\"\n  expiry: \"0 0 1 1 *\"\n  purge: \"0 0 1 1 *\"\n"

var cronJobs = []string{config.JobRounds, config.JobReconcile, config.JobSweep, config.JobExpiry, config.JobPurge}

// Every job of internal/platform/config/workflow.go runs from the cron with the schedule in force; a change of
// the configuration re-schedules.
func TestCronSchedulesEveryJobAndFollowsTheConfiguration(t *testing.T) {
	h := setup(t, storetest.SQLite(t), options{approvalFirst: true})
	c := workflow.NewCron(h.wf, h.db)
	if err := c.Start(bg); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(bg)
	got := c.Schedules()
	for _, job := range cronJobs {
		if got[job] == "" || got[job] != h.cfg.Current().Schedule(job) {
			t.Fatalf("job %s scheduled %q, config says %q", job, got[job], h.cfg.Current().Schedule(job))
		}
	}
	h.reconfigure(true, fastSims+"cron:\n  rounds: \"@every 7s\"\n  purge: \"0 3 * * *\"\n")
	got = c.Schedules()
	if got[config.JobRounds] != "@every 7s" || got[config.JobPurge] != "0 3 * * *" || got[config.JobSweep] != h.cfg.Current().Schedule(config.JobSweep) {
		t.Fatalf("after the change: %v", got)
	}
}

// Each job's one pass is the workflow's own code: the round asks the batch service, the sweep
// repairs an orphan, the purge deletes expired idempotency records.
func TestCronJobsRunTheWorkflowsOwnCode(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true})
		h.fake.outcome = []batch.Outcome{{Partition: project, Result: state.RoundNothingWaiting}}
		c := workflow.NewCron(h.wf, h.db)
		// An orphan for the sweep: in-flight work without its task (an old database, a hand edit).
		orphan := h.apply("bob", "db-read")
		h.waitState(orphan, state.StatusApprovalSent, state.StepApprovalSent)
		if _, err := db.Raw().Exec("UPDATE operation SET status = 'APPROVAL_SENDING', step = ? WHERE operation_id = ?", state.StepApprovalSending, orphan); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Raw().Exec("UPDATE binding SET status = 'APPROVAL_SENDING' WHERE operation_id = ?", orphan); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Raw().Exec("DELETE FROM task WHERE kind = 'request' AND ref = ?", orphan); err != nil {
			t.Fatal(err)
		}
		for _, job := range cronJobs {
			n, err := c.RunOnce(bg, job)
			if err != nil {
				t.Fatalf("%s: %v", job, err)
			}
			if want := map[string]int{config.JobSweep: 1}[job]; n != want {
				t.Fatalf("%s did %d, want %d", job, n, want)
			}
		}
		if h.fake.rounds != 1 {
			t.Fatalf("rounds %d", h.fake.rounds)
		}
		// The sweep gave the orphan its task: the ticket is sent (again: idempotent by operationId).
		h.waitState(orphan, state.StatusApprovalSent, state.StepApprovalSent)
		if !strings.Contains(h.logs.String(), "in-flight work had no task") {
			t.Fatal("the repair was not logged")
		}
		// The purge removes expired idempotency records (an apply left one).
		h.apply("alice", "db-read")
		expired := "datetime('now', '-1 hour')"
		if db.Dialect() == store.MySQL {
			expired = "NOW(6) - INTERVAL 1 HOUR"
		}
		if _, err := db.Raw().Exec("UPDATE idempotency_record SET expires_at = " + expired); err != nil {
			t.Fatal(err)
		}
		if n, err := c.RunOnce(bg, config.JobPurge); err != nil || n < 1 {
			t.Fatalf("purge: %d %v", n, err)
		}
		var n int
		db.Raw().QueryRow("SELECT COUNT(*) FROM idempotency_record").Scan(&n)
		if n != 0 {
			t.Fatalf("%d idempotency records left", n)
		}
	})
}

// The runner around the jobs: every run is counted; a run that is still going skips the next
// tick; a panic is contained; Stop cancels the runs and gives up at its deadline on one that
// does not end, and a later Stop waits for it; nothing runs before Start or after Stop.
func TestACronRunStillGoingSkipsTheNextTickAndAPanicIsContained(t *testing.T) {
	h := setup(t, storetest.SQLite(t), options{approvalFirst: true, extra: fastSims + idleCron})
	c := workflow.NewCron(h.wf, h.db)
	if err := c.RunNow(config.JobSweep); err == nil || !strings.Contains(err.Error(), "not started") {
		t.Fatalf("a run before Start: %v", err)
	}
	if err := c.Start(bg); err != nil {
		t.Fatal(err)
	}
	for _, job := range cronJobs {
		if err := c.RunNow(job); err != nil {
			t.Fatalf("%s: %v", job, err)
		}
		if got := h.metric(`bindery_cron_runs_total{job="` + job + `",outcome="ok"}`); got != "1" {
			t.Fatalf("%s runs: %q", job, got)
		}
	}
	release, inside := make(chan struct{}), make(chan struct{})
	h.fake.onRound = func() { close(inside); <-release }
	done := make(chan error)
	go func() { done <- c.RunNow(config.JobRounds) }()
	<-inside
	if err := c.RunNow(config.JobRounds); err == nil {
		t.Fatal("an overlapping run was not skipped")
	}
	if got := h.metric(`bindery_cron_runs_total{job="rounds",outcome="skipped"}`); got != "1" {
		t.Fatalf("skipped runs %q", got)
	}
	// Stop waits for the running job until its deadline (this one ignores its context).
	ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
	defer cancel()
	if err := c.Stop(ctx); err == nil {
		t.Fatal("Stop returned while a job was still running")
	}
	// Once stopping, nothing new starts.
	if err := c.RunNow(config.JobSweep); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Fatalf("a run after Stop: %v", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(bg); err != nil {
		t.Fatalf("a second Stop once the run ended: %v", err)
	}

	c2 := workflow.NewCron(h.wf, h.db)
	if err := c2.Start(bg); err != nil {
		t.Fatal(err)
	}
	defer c2.Stop(bg)
	h.fake.onRound = func() { panic("round exploded") }
	if err := c2.RunNow(config.JobRounds); err == nil {
		t.Fatal("a panicking job reported success")
	}
	h.fake.onRound = nil
	if err := c2.RunNow(config.JobRounds); err != nil {
		t.Fatalf("the job after a panic: %v", err)
	}
	if err := c2.RunNow("no-such-job"); err == nil || errors.Is(err, context.Canceled) {
		t.Fatalf("unknown job: %v", err)
	}
}

// The cron keeps the start/stop contract: stopped before it starts it never schedules anything;
// started, run and stopped twice, it leaves no goroutine behind.
func TestTheCronStopsBeforeItStartsTwiceAndLeavesNoGoroutine(t *testing.T) {
	h := setup(t, storetest.SQLite(t), options{approvalFirst: true, extra: fastSims + idleCron})
	t.Run("stopped before it starts", func(t *testing.T) {
		c := workflow.NewCron(h.wf, h.db)
		servicetest.StoppedBeforeStart(t, c)
		if got := c.Schedules(); got[config.JobRounds] != "" {
			t.Fatalf("a stopped cron scheduled: %v", got)
		}
	})
	t.Run("started, run and stopped twice", func(t *testing.T) {
		c := workflow.NewCron(h.wf, h.db)
		servicetest.StartedAndStoppedTwice(t, c, func() {
			if err := c.RunNow(config.JobPurge); err != nil {
				t.Fatal(err)
			}
		})
	})
}
