package store

import (
	"bindery/internal/vocab/state"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"
)

// StageTime is the time a request spent in one stage, summed over every entry into it.
type StageTime struct {
	Stage string
	Spent time.Duration
}

// stageColumns are the operation columns that sum the time spent in each stage
// (schema 0057_stage_times), in the order of the way.
var stageColumns = []struct{ stage, column string }{
	{state.StageApproval, "approval_us"}, {state.StageBatch, "batch_us"}, {state.StageCI, "ci_us"}, {state.StageMerge, "merge_us"}, {state.StageDeploy, "deploy_us"},
}

// stageSteps lists, per stage of stageColumns, the steps whose time counts for it (the step
// table's Stage), sorted so that the statement text never changes.
var stageSteps = func() map[string][]state.Step {
	out := map[string][]state.Step{}
	for _, s := range state.Steps() {
		out[s.Info().Stage] = append(out[s.Info().Stage], s)
	}
	for _, list := range out {
		slices.Sort(list)
	}
	return out
}()

// stageTimeColumns is the select list of stageColumns.
func stageTimeColumns() string {
	names := make([]string, len(stageColumns))
	for i, c := range stageColumns {
		names[i] = c.column
	}
	return strings.Join(names, ", ")
}

// addStageTime is the assignment list that adds the time since the operation's last step
// (updated_at) to the column of the stage its current step counts for. It goes first in an
// UPDATE that moves the step: MySQL evaluates a single-table UPDATE's assignments left to right,
// each seeing the values assigned before it, so after "step = ?" or "updated_at = …" it would
// read the new ones (SQLite reads the old row throughout). Every transition writes it, so the
// text is built once per dialect.
func (db *DB) addStageTime() string { return stageTimeAssignments[db.dialect] }

var stageTimeAssignments = map[Dialect]string{MySQL: (&DB{dialect: MySQL}).stageTimeAssignment(), SQLite: (&DB{dialect: SQLite}).stageTimeAssignment()}

func (db *DB) stageTimeAssignment() string {
	elapsed := db.elapsed("updated_at")
	var b strings.Builder
	for i, c := range stageColumns {
		if i > 0 {
			b.WriteString(", ")
		}
		codes := make([]string, len(stageSteps[c.stage]))
		for j, s := range stageSteps[c.stage] {
			codes[j] = itoa(s)
		}
		b.WriteString(c.column + " = CASE WHEN step IN (" + strings.Join(codes, ", ") + ") THEN COALESCE(" + c.column + ", 0) + " + elapsed +
			" ELSE " + c.column + " END")
	}
	return b.String()
}

// stageTimes is what an operation read with stageTimeColumns and the clock spent in each stage
// it entered, counting its current step's stage up to now: what addStageTime writes when the
// operation leaves that step.
func stageTimes(spent []sql.NullInt64, step state.Step, since, now time.Time) []StageTime {
	var out []StageTime
	for i, c := range stageColumns {
		d, entered := time.Duration(spent[i].Int64)*time.Microsecond, spent[i].Valid
		if step.Info().Stage == c.stage {
			d += max(now.Sub(since), 0)
			entered = true
		}
		if entered {
			out = append(out, StageTime{Stage: c.stage, Spent: d})
		}
	}
	return out
}

// scanMoving scans a row of a transition's locking read (the clock, stageTimeColumns, then
// operationColumns): the operation with its Stages up to the clock.
func scanMoving(s scanner) (Operation, error) {
	var now dbTime
	spent := make([]sql.NullInt64, len(stageColumns))
	lead := []any{&now}
	for i := range spent {
		lead = append(lead, &spent[i])
	}
	o, err := scanOperation(s, lead...)
	if err != nil {
		return Operation{}, err
	}
	o.Stages = stageTimes(spent, o.Step, o.UpdatedAt, now.T)
	return o, nil
}

// ApprovalDurations returns how long the approvals of targetKey's latest n requests that left
// the approval stage took (approval_us: from the request to its decision, summed over every
// entry into the stage), newest request first: what the request view's "approvals of this target
// usually take" reads. A request still at an approval step, or one that never reached the
// approval system, is left out. One read on idx_operation_target_created, at most n rows.
func (db *DB) ApprovalDurations(ctx context.Context, targetKey string, n int) ([]time.Duration, error) {
	codes := make([]string, len(stageSteps[state.StageApproval]))
	for i, s := range stageSteps[state.StageApproval] {
		codes[i] = itoa(s)
	}
	rows, err := db.ro.QueryContext(ctx, "SELECT approval_us FROM "+db.hinted("operation", "idx_operation_target_created")+
		" WHERE target_key = ? AND approval_us > 0 AND step NOT IN ("+strings.Join(codes, ", ")+") ORDER BY created_at DESC LIMIT ?", targetKey, n)
	out, err := collect(rows, err, func(s scanner) (time.Duration, error) {
		var us int64
		err := s.Scan(&us)
		return time.Duration(us) * time.Microsecond, err
	})
	if err != nil {
		return nil, fmt.Errorf("approval durations of %s: %w", targetKey, err)
	}
	return out, nil
}
