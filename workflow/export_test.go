package workflow

import (
	"context"
	"fmt"
)

// RunOnce runs one pass of the cron job name itself — its runOnce, without the runner's guards,
// metrics or schedule — so a test drives each job like a function.
func (c *Cron) RunOnce(ctx context.Context, name string) (int, error) {
	for _, j := range c.jobs {
		if j.name == name {
			return j.job.runOnce(ctx)
		}
	}
	return 0, fmt.Errorf("no cron job %q", name)
}
