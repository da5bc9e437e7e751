package workflow_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"bindery/api"
	"bindery/internal/testkit"
	"bindery/internal/vocab/state"
	"bindery/store/storetest"
)

// The chaos run's third defect: /hooks/gitlab answered 503 when MariaDB chose the webhook's
// wake of a task as the victim of a deadlock (Error 1213), and its message blamed a timeout;
// GitLab disables a hook that keeps failing. The deadlock here is a real one: a transaction
// holds the task's row and then asks for the unique-key entry the webhook's update holds while
// it waits for that row. The webhook's handling is tried again inside the request and answers
// 200.
func TestAWebhookThatLosesADeadlockIsTriedAgain(t *testing.T) {
	t.Parallel()
	db := storetest.MySQL(t)
	// The pipeline never ends and is looked at rarely: no claim of the engine's takes part.
	extra := strings.NewReplacer("pipelineDuration: 0s", "pipelineDuration: 1h", "short: 5ms", "short: 1h", "long: 20ms", "long: 1h").Replace(fastSims)
	h := setup(t, db, options{extra: extra})
	op := h.apply("alice", "db-read")
	v := h.waitState(op, state.StatusMRCreating, state.StepCreateStarted)
	h.waitFor("the pipeline wait", func() bool { task, ok := h.task(op); return ok && task.Step == "create_pipeline" && task.Owner == "" })
	task, _ := h.task(op)
	v = h.view(op)
	if v.MR == nil {
		t.Fatalf("no MR while its pipeline is waited for: %+v", v)
	}

	// The simulated GitLab's own webhooks wake the same task: let them pass first, so that the
	// webhook waiting below is this test's.
	quiet := 0
	h.waitFor("the simulator's webhooks to pass", func() bool {
		before := h.sims.GitLab.Hooks()
		time.Sleep(100 * time.Millisecond) // the window the simulator's webhooks must stay quiet through
		after := h.sims.GitLab.Hooks()
		if after.Delivered+after.Failed+after.Skipped == before.Delivered+before.Failed+before.Skipped {
			quiet++
		} else {
			quiet = 0
		}
		return quiet >= 3
	})

	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	holder, err := db.Raw().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.ExecContext(ctx, "UPDATE task SET memo = memo WHERE id = ?", task.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.ExecContext(ctx, "UPDATE task SET failures = failures + 1 WHERE id = ?", task.ID); err != nil {
		t.Fatal(err)
	}

	type answer struct {
		code int
		res  api.CallbackResult
	}
	done := make(chan answer, 1)
	go func() {
		body := fmt.Sprintf(`{"object_kind":"merge_request","project":{"path_with_namespace":%q},"object_attributes":{"iid":%d,"state":"opened","action":"update"}}`, project, v.MR.ID)
		var a answer
		a.code, _ = h.hookJSON("/hooks/gitlab", []byte(body), map[string]string{"X-Gitlab-Token": "test-gitlab-token"}, &a.res)
		done <- a
	}()
	// InnoDB's transaction tables are a cache refreshed only when not read for 0.1s: look slower.
	// The waiter looked for is the webhook's wake-up, not any update of the table: the engine's
	// own claims and lease renewals may queue behind the holder too, and the deadlock below is
	// then not the webhook's.
	for deadline := time.Now().Add(testkit.Timeout()); count(t, db, "SELECT COUNT(*) FROM information_schema.innodb_trx t "+
		"JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id "+
		"WHERE t.trx_state = 'LOCK WAIT' AND p.db = DATABASE() AND t.trx_query LIKE '%SET wakes = wakes + 1%'") == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the webhook never waited for the task's row")
		}
		time.Sleep(200 * time.Millisecond) // MariaDB's refresh interval: a look sooner reads a stale table
	}
	// The cycle: the holder now wants the unique-key entry the waiting webhook holds. MariaDB
	// rolls back the lighter transaction, the webhook's, which changed nothing yet.
	if _, err := holder.ExecContext(ctx, "SELECT id FROM task FORCE INDEX (uk_task_ref) WHERE kind = ? AND ref = ? FOR UPDATE", state.TaskRequest, op); err != nil {
		t.Fatalf("the holder lost the deadlock instead of the webhook: %v", err)
	}
	if err := holder.Commit(); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.code != 200 || a.res.Code != api.CallbackAccepted {
		t.Fatalf("the webhook that lost a deadlock: %d %+v; want 200 ACCEPTED", a.code, a.res)
	}
	if !strings.Contains(h.logs.String(), "1213") {
		t.Fatal("no deadlock happened: the test did not test anything")
	}
}
