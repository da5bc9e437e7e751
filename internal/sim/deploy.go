package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"bindery/api"
	"bindery/internal/platform/config"
	"bindery/internal/work/service"
)

// The simulated deploy pipeline: sim.deploy.delay after each merge in the simulated GitLab it
// calls POST <bindery>/hooks/deploy with "Authorization: Bearer <hooks.deployToken>" and
// {"project","mrIid","sha","operationIds"} — sha the merge commit it deployed, operationIds when
// sim.deploy.withOperationIds (or, without it, for the share sim.deploy.exactRate); a share of
// the callbacks (sim.deploy.dropRate) is never sent, so that reconciliation has work to do.

// DeployFaults are the deploy simulator's knobs; the struct the sim.deploy.* keys fill.
type DeployFaults = config.SimDeploy

// Deploy record statuses.
const (
	DeployPending  = "PENDING"
	DeploySent     = "SENT"
	DeployDropped  = "DROPPED"
	DeployFailed   = "FAILED"    // bindery did not answer 2xx after 3 attempts
	DeployNoTarget = "NO_TARGET" // no bindery URL configured
)

// DeployRecord is one deploy after a merge.
type DeployRecord struct {
	Project      string   `json:"project"`
	MRIID        int64    `json:"mrIid"`
	SHA          string   `json:"sha"`
	OperationIDs []string `json:"operationIds"` // what the merge carried (the files' operationIds)
	Exact        bool     `json:"exact"`        // the callback names them
	Status       string   `json:"status"`
	Answer       int      `json:"answer"` // bindery's HTTP status; 0: none
	// Job is what the branch pipeline's jobs printed, when the project's .gitlab-ci.yml ran
	// (Options.RunJobs): then Status is SENT when every job passed, FAILED otherwise.
	Job string    `json:"job,omitempty"`
	At  time.Time `json:"at"`
}

// Deploy simulates the deploy pipeline.
type Deploy struct {
	opts Options
	cfg  *config.Source
	log  *slog.Logger
	hc   *http.Client

	mu       sync.Mutex
	override *DeployFaults
	records  []*DeployRecord
	injected faultCounts

	bg *service.Base // the simulators' service: timed callbacks are its goroutines
}

func newDeploy(o Options, bg *service.Base) *Deploy {
	return &Deploy{opts: o, cfg: o.Config, log: o.Log, hc: &http.Client{Timeout: 10 * time.Second}, bg: bg}
}

// SetFaults pins the knobs for a test, instead of the sim.deploy.* configuration.
func (d *Deploy) SetFaults(f DeployFaults) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.override = &f
}

// ResetFaults returns to the sim.deploy.* configuration.
func (d *Deploy) ResetFaults() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.override = nil
}

func (d *Deploy) faults() DeployFaults { // holds d.mu
	if d.override != nil {
		return *d.override
	}
	return d.cfg.Current().SimDeploy()
}

// Records lists the deploys, oldest first.
func (d *Deploy) Records() []DeployRecord {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]DeployRecord, len(d.records))
	for i, r := range d.records {
		out[i] = *r
	}
	return out
}

// merged schedules the deploy of a merge. It runs with the GitLab simulator locked, so it only
// records and starts a timer. While the simulators do not run (before Start, after Stop) the
// deploy stays PENDING: nothing is sent.
func (d *Deploy) merged(info MergeInfo) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f := d.faults()
	rec := &DeployRecord{Project: info.Project, MRIID: info.IID, SHA: info.SHA, OperationIDs: info.OperationIDs,
		Exact: f.WithOperationIDs || chance(f.ExactRate), Status: DeployPending, At: time.Now()}
	d.records = append(d.records, rec)
	drop := chance(f.DropRate)
	if drop {
		d.injected.add("callback_dropped")
	}
	delay := scaled(d.cfg, f.Delay)
	if d.opts.RunJobs && info.CIConfig != "" {
		// The project's own pipeline deploys and calls back, as in production: the knobs that
		// stand in for it (delay, drops, operationIds) do not apply.
		d.bg.Go(func(ctx context.Context) {
			ok, out := runJobs(ctx, info)
			d.mu.Lock()
			defer d.mu.Unlock()
			rec.Status, rec.Job, rec.At = DeploySent, out, time.Now()
			if !ok {
				rec.Status = DeployFailed
				d.log.Warn("simulated runner: the branch pipeline failed", "project", rec.Project, "sha", rec.SHA, "output", out)
			}
		})
		return
	}
	d.bg.Go(func(ctx context.Context) {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		d.deliver(ctx, rec, drop)
	})
}

func (d *Deploy) deliver(ctx context.Context, rec *DeployRecord, drop bool) {
	status := DeploySent
	answer := 0
	switch {
	case drop:
		status = DeployDropped
	case d.opts.BinderyURL == "":
		status = DeployNoTarget
	default:
		cb := api.DeployCallback{Project: rec.Project, MRIID: rec.MRIID, SHA: rec.SHA}
		if rec.Exact {
			cb.OperationIDs = rec.OperationIDs
		}
		body, _ := json.Marshal(cb)
		for attempt := 0; attempt < 3; attempt++ {
			if answer = d.post(ctx, body); answer >= 200 && answer < 300 {
				break
			}
			select {
			case <-time.After(scaled(d.cfg, 500*time.Millisecond) << attempt):
			case <-ctx.Done():
				attempt = 3
			}
		}
		if answer < 200 || answer > 299 {
			status = DeployFailed
			d.log.Warn("deploy simulator: callback not accepted", "project", rec.Project, "mrIid", rec.MRIID, "status", answer)
		}
	}
	d.mu.Lock()
	rec.Status, rec.Answer, rec.At = status, answer, time.Now()
	d.mu.Unlock()
}

func (d *Deploy) post(ctx context.Context, body []byte) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.opts.BinderyURL+"/hooks/deploy", bytes.NewReader(body))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+d.cfg.Current().DeployToken())
	resp, err := d.hc.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// ServeHTTP serves GET /sim/deploys: the deploys, newest first.
func (d *Deploy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"message": "method not allowed"})
		return
	}
	recs := d.Records()
	items := make([]DeployRecord, 0, len(recs))
	for i := len(recs) - 1; i >= 0; i-- {
		items = append(items, recs[i])
	}
	writeJSON(w, http.StatusOK, map[string][]DeployRecord{"items": items})
}
