package store

import (
	"context"
	"errors"
)

// FailedJob is the first failed job of a pipeline that failed for good: what the request page
// links beside the pipeline.
type FailedJob struct {
	Project    string
	PipelineID int64
	JobID      int64
	Name       string
	WebURL     string
}

// maxJobURL bounds failed_job.web_url (VARCHAR(1024)); a longer address is not kept (a cut
// address is a broken link).
const maxJobURL = 1024

// RecordFailedJob keeps j for its pipeline. The first record of a pipeline stays: a repeated
// look (a step run again) finds the same job, and a duplicate is not a failure.
func (db *DB) RecordFailedJob(ctx context.Context, j FailedJob) error {
	if len(j.WebURL) > maxJobURL {
		j.WebURL = ""
	}
	_, err := db.rw.ExecContext(ctx, "INSERT INTO failed_job (project, pipeline_id, job_id, name, web_url) VALUES (?, ?, ?, ?, ?)",
		j.Project, j.PipelineID, j.JobID, clipText(j.Name, 255), j.WebURL)
	if err = translate(err); errors.Is(err, ErrDuplicate) {
		return nil
	}
	return err
}
