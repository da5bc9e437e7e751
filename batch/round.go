package batch

import (
	"context"
	"fmt"
	"sort"
	"time"

	"bindery/internal/vocab/state"
	"bindery/internal/work/engine"
	"bindery/store"
)

// Round runs one round over every partition with waiting requests (cron and the ops trigger call
// it, on every instance at once): honours batch.maxRequests and batch.maxWait (close by size or
// age), claims (Claim), writes the members' BATCHED step (in the claim's
// transaction, one bulk statement per 500) and the new batch's task (due now: any instance's
// background lane runs it; this one is nudged). Concurrent rounds are safe: the partition's slot (I1) lets one claim win,
// the others answer SLOT_OCCUPIED. An error of one partition is reported in its Outcome; the
// returned error is for the round as a whole (the partitions could not be listed).
func (s *Service) Round(ctx context.Context) ([]Outcome, error) {
	parts, err := s.db.PartitionsWaiting(ctx)
	if err != nil {
		return nil, fmt.Errorf("batch round: %w", err)
	}
	sort.Strings(parts)
	out := make([]Outcome, 0, len(parts))
	for _, p := range parts {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		out = append(out, s.round(ctx, p))
	}
	return out, nil
}

func (s *Service) round(ctx context.Context, partition string) Outcome {
	snap := s.cfg.Current()
	o := Outcome{Partition: partition}
	due, err := s.db.PartitionDue(ctx, partition, snap.BatchMaxRequests(), snap.BatchMaxWait())
	if err != nil {
		o.Err = err
		return o
	}
	if !due {
		o.Result = state.RoundNotDue
		return o
	}
	if _, paused, err := s.db.Paused(ctx, partition); err != nil || paused {
		o.Result, o.Err = state.RoundPaused, err
		return o
	}
	size := snap.BatchMaxRequests()
	if k := snap.BatchTrain(); k > 1 {
		var spaced bool
		if size, spaced, err = s.carSize(ctx, partition, k, size); err != nil || spaced {
			o.Result, o.Err = state.RoundSpaced, err
			return o
		}
	}
	// The partition is the target's GitLab project (docs/invariants.md, 'Partitions'), so it also
	// names the batch's project.
	task := s.task(0, stepOpen, memo{})
	c, err := Claim(ctx, s.db, store.ClaimInput{
		Partition: partition, Project: partition, Max: size, Train: snap.BatchTrain(), Beside: snap.BatchIsolationCars(), Members: &batchedStep, Task: &task,
	})
	if err != nil {
		o.Err = err
		return o
	}
	o.Result = c.Outcome
	if c.Outcome != state.RoundClaimed {
		return o
	}
	o.BatchID, o.Claimed = c.Batch.ID, len(c.Members)
	s.log.InfoContext(ctx, "batch claimed", "batch", c.Batch.ID, "partition", partition, "members", len(c.Members))
	s.engine.Nudge(engine.LaneBackground)
	s.observeWait(ctx, c)
	return o
}

// RecentPipelines is how many of a project's last pipelines the spacing of its cars reads the
// median of.
const RecentPipelines = 20

// spacingMinimum is how many recorded pipelines a median needs before the cars are spaced.
const spacingMinimum = 3

// Spacing is how far apart a merge train of k cars starts its cars: a k-th of the median of the
// project's recent pipelines (ok false: too few are recorded to space anything).
func Spacing(durations []time.Duration, k int) (gap time.Duration, ok bool) {
	if k < 2 || len(durations) < spacingMinimum {
		return 0, false
	}
	return Median(durations) / time.Duration(k), true
}

// SpacingLeft is how much longer the rounds of a merge train of k cars hold partition's waiting
// set for the spacing of its cars, given the load a round read and the project's recent
// pipelines (0: the next round claims). Never longer than a spacing for any request: one that
// waited that long already goes with the next free place, and so does an empty train,
// batch.maxRequests (most) waiting, or a suspect group or a request sent next.
func SpacingLeft(l store.TrainLoad, durations []time.Duration, k, most int) time.Duration {
	gap, ok := Spacing(durations, k)
	if !ok || l.Cars == 0 || l.Waiting >= most || l.Priority || l.SinceNewest >= gap || l.OldestWait >= gap {
		return 0
	}
	left := gap - l.OldestWait
	if l.SinceNewest > 0 { // 0: the newest car is not built yet, its spacing not begun
		left = min(left, gap-l.SinceNewest)
	}
	return left
}

// carSize decides a round of a merge train's partition (k > 1 cars). Cars are spread over a
// pipeline: the next car is claimed once the newest has been in CI for a k-th of the project's
// median pipeline (spaced: not yet), so a free place is taken when a request arriving at any
// moment waits least for it — claiming as soon as a car merges keeps the first cars' phases and
// lets requests that just missed a clump of cars wait most of a pipeline. An empty train,
// batch.maxRequests waiting, a suspect group or a request sent next, or a request that waited a
// spacing already claims at once. A backlog is shared among the free places (size:
// the waiting requests over the free places), so no one car carries it all — nor, with it,
// the next poison pill.
func (s *Service) carSize(ctx context.Context, partition string, k, most int) (size int, spaced bool, err error) {
	load, err := s.db.TrainLoad(ctx, partition, most*k)
	if err != nil {
		return 0, false, err
	}
	free := k - load.Cars
	if load.Cars > 0 && load.Waiting < most && !load.Priority { // else nothing is spaced: no read
		durations, err := s.db.PipelineDurations(ctx, partition, RecentPipelines)
		if err != nil {
			return 0, false, err
		}
		if SpacingLeft(load, durations, k, most) > 0 {
			return 0, true, nil
		}
	}
	if free < 1 {
		return most, false, nil // the claim answers that the train is full
	}
	size = (load.Waiting + free - 1) / free
	return min(max(size, 1), most), false, nil
}

// observeWait records how long each member waited in line (admission → claim, by the database
// clock), after the claim committed (a nil recorder, no metrics, records nothing).
func (s *Service) observeWait(ctx context.Context, c store.BatchClaim) {
	now, err := s.db.Now(ctx)
	if err != nil {
		return // a metric is not worth failing the round for
	}
	for _, m := range c.Members {
		s.rec.Observe("bindery_batch_wait_seconds", now.Sub(m.QueuedAt).Seconds(), "project", c.Batch.Project)
	}
}
