package change

import (
	"context"
	"time"
)

// Stages is a staged polling schedule: Short intervals for the first ShortCount checks, then
// Long ones, until Timeout from the start. Most pipelines and rebases finish quickly, so early
// checks are cheap and frequent; slow ones are not hammered.
type Stages struct {
	Short      time.Duration
	ShortCount int
	Long       time.Duration
	Timeout    time.Duration
}

// interval is the wait before check number n (0-based).
func (s Stages) interval(n int) time.Duration {
	if n < s.ShortCount {
		return s.Short
	}
	return s.Long
}

// Outcome of a poll.
type Outcome int

const (
	Pending  Outcome = iota // not decided yet (only returned by a check)
	Passed                  // the awaited thing succeeded
	Failed                  // it failed: deterministic, retrying the same MR gives the same result
	TimedOut                // no answer within the timeout: unknown, the same MR can be retried
)

func (o Outcome) String() string {
	return [...]string{"pending", "passed", "failed", "timed out"}[o]
}

// Poll calls check until it answers Passed or Failed, or until st.Timeout. A check error is
// treated as Pending (a read that failed tells nothing about the outcome) and remembered; when
// the poll times out the last error is returned beside TimedOut. wake, when not nil, triggers an
// immediate check (a webhook saying the pipeline finished). At the timeout one last check runs. A cancelled ctx returns its error:
// the caller must not write a failure for an interrupted poll.
func Poll(ctx context.Context, st Stages, wake <-chan struct{}, check func(ctx context.Context) (Outcome, error)) (Outcome, error) {
	deadline := time.NewTimer(st.Timeout)
	defer deadline.Stop()
	var lastErr error
	for n := 0; ; n++ {
		out, err := check(ctx)
		if ctx.Err() != nil {
			return Pending, ctx.Err()
		}
		switch {
		case err != nil:
			lastErr = err
		case out == Passed || out == Failed:
			return out, nil
		}
		wait := time.NewTimer(st.interval(n))
		select {
		case <-ctx.Done():
			wait.Stop()
			return Pending, ctx.Err()
		case <-deadline.C:
			wait.Stop()
			// One last look: the answer may have arrived during the final wait.
			if out, err := check(ctx); err == nil && (out == Passed || out == Failed) {
				return out, nil
			} else if err != nil {
				lastErr = err
			}
			return TimedOut, lastErr
		case <-wake:
			wait.Stop()
		case <-wait.C:
		}
	}
}
