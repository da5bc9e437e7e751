package batch

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"bindery/engine"
	"bindery/state"
	"bindery/store"
)

// Round runs one round over every partition with waiting requests (cron and the ops trigger call
// it, on every instance at once): honours batch.maxRequests and batch.maxWait (close by size or
// age), claims through store.Claim, writes the members' BATCHED step (in the claim's
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
	c, err := s.db.Claim(ctx, store.ClaimInput{
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

// recentPipelines is how many of a project's last pipelines its median is taken over.
const recentPipelines = 20

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
	if load.Cars > 0 && load.Waiting < most && !load.Priority {
		durations, err := s.db.PipelineDurations(ctx, partition, recentPipelines)
		if err != nil {
			return 0, false, err
		}
		// Spacing never makes a request wait longer than a spacing: one that waited that long
		// already (a backlog behind a failure, a full train) goes with the next free place.
		if len(durations) >= 3 {
			if gap := median(durations) / time.Duration(k); load.SinceNewest < gap && load.OldestWait < gap {
				return 0, true, nil
			}
		}
	}
	if free < 1 {
		return most, false, nil // the claim answers that the train is full
	}
	size = (load.Waiting + free - 1) / free
	return min(max(size, 1), most), false, nil
}

// median of ds (not empty).
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// observeWait records how long each member waited in line (admission → claim, by the database
// clock), after the claim committed.
func (s *Service) observeWait(ctx context.Context, c store.BatchClaim) {
	if s.rec == nil {
		return
	}
	now, err := s.db.Now(ctx)
	if err != nil {
		return // a metric is not worth failing the round for
	}
	for _, m := range c.Members {
		s.rec.Observe("bindery_batch_wait_seconds", now.Sub(m.QueuedAt).Seconds(), "project", c.Batch.Project)
	}
}
