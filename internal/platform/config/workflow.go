package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Workflow timing: batch rounds and their size/age rule, the lease that makes work resumable
// after a crash, staged polling of pipelines and rebases, reconciliation of lost deploy
// callbacks, and the schedules of every cron job. All dynamic: read at each round, step or tick.

type workflowSettings struct {
	batchMaxWait        time.Duration
	batchFlakyRetries   int
	batchTrain          int
	batchIsolationCars  int
	batchLeaseTTL       time.Duration
	batchBlockedTimeout time.Duration
	stepLeaseTTL        time.Duration
	pollShort           time.Duration
	pollShortCount      int
	pollLong            time.Duration
	pollTimeout         time.Duration
	reconcileMinAge     time.Duration
	reconcileMaxAge     time.Duration
	deployOverdue       time.Duration
	approvalTimeout     time.Duration
	approvalPollAfter   time.Duration
	schedules           map[string]string
	driftEnabled        bool
}

// Cron job names, each with its schedule key "cron.<name>".
const (
	JobRounds    = "rounds"
	JobReconcile = "reconcile"
	JobSweep     = "sweep"
	JobExpiry    = "expiry"
	JobPurge     = "purge"
	JobDrift     = "drift"
	JobReviews   = "reviews"
)

var defaultSchedules = map[string]string{
	JobRounds:    "@every 10s",
	JobReconcile: "@every 1m",
	JobSweep:     "@every 30s",
	JobExpiry:    "@every 1m",
	JobPurge:     "@every 1h",
	JobDrift:     "@every 10m",
	JobReviews:   "@every 10m",
}

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseSchedule parses a cron schedule as bindery's jobs accept it: five fields or a
// descriptor such as "@every 10s" (at least 1s: the cron library would round a shorter or
// negative one up silently).
func ParseSchedule(spec string) (cron.Schedule, error) {
	if every, ok := strings.CutPrefix(strings.TrimSpace(spec), "@every "); ok {
		if d, err := time.ParseDuration(strings.TrimSpace(every)); err != nil || d < time.Second {
			return nil, fmt.Errorf("schedule %q: @every needs a duration of at least 1s", spec)
		}
	}
	return cronParser.Parse(spec)
}

func durationKey(name, def, doc, misconfig string, field func(*Snapshot) *time.Duration, minimum time.Duration) Key {
	d, err := time.ParseDuration(def)
	if err != nil {
		panic(err)
	}
	return Key{
		Name: name, Type: "duration", Default: def, Doc: doc, Misconfig: misconfig,
		apply: func(s *Snapshot, v value) (string, string, error) {
			got, note := durationOr(v, d)
			if minimum == 0 && note != "" {
				// A key whose minimum is 0 takes 0 as a value of its own (batch.maxWait: no
				// waiting), not as a mistake replaced by the default.
				got, note = nonNegativeDurationOr(v, d)
			}
			if got < minimum {
				got, note = d, fmt.Sprintf("below the minimum %s", minimum)
			}
			*field(s) = got
			return got.String(), note, nil
		},
	}
}

// intKey is an integer key: missing, blank or unparsable → def; below lo → lo (the note says
// below why), above hi → hi.
func intKey(name, doc, misconfig string, def, lo, hi int, below string, field func(*Snapshot) *int) Key {
	return Key{
		Name: name, Type: "int", Default: strconv.Itoa(def), Doc: doc, Misconfig: misconfig,
		apply: func(s *Snapshot, v value) (string, string, error) {
			n, note := intOr(v, def, def)
			switch {
			case n < lo:
				n, note = lo, below
			case n > hi:
				n, note = hi, fmt.Sprintf("capped at %d", hi)
			}
			*field(s) = n
			return strconv.Itoa(n), note, nil
		},
	}
}

func scheduleKey(job, doc string) Key {
	def := defaultSchedules[job]
	return Key{
		Name: "cron." + job, Type: "cron schedule", Default: def, Doc: doc + ` Five cron fields or a descriptor ("@every 10s"). Every instance runs every job; each is safe to run concurrently.`,
		Misconfig: "blank or unparsable → the default (a broken schedule must not stop the job).",
		apply: func(s *Snapshot, v value) (string, string, error) {
			spec, note := stringOr(v, def)
			if _, err := ParseSchedule(spec); err != nil {
				spec, note = def, fmt.Sprintf("%q is not a schedule", spec)
			}
			if s.schedules == nil {
				s.schedules = map[string]string{}
			}
			s.schedules[job] = spec
			return spec, note, nil
		},
	}
}

func init() {
	register(
		durationKey("batch.maxWait", "0s",
			"A batch closes by size or by age: a round leaves a partition alone until batch.maxRequests requests wait or the oldest has waited this long. 0: every round takes what waits.",
			"blank, unparsable or negative → 0s (no waiting: a misconfiguration must not hold requests back).",
			func(s *Snapshot) *time.Duration { return &s.batchMaxWait }, 0),
		intKey("batch.flakyRetries",
			"New pipelines tried on the same commit after a failed one before the failure counts as deterministic (then a multi-member batch is bisected).",
			"negative → 0; blank or unparsable → 1; above 3 → 3.",
			1, 0, 3, "negative means no retry", func(s *Snapshot) *int { return &s.batchFlakyRetries }),
		intKey("batch.train",
			"How many batches (cars) of one project may be in CI at once, each tested on top of the ones ahead of it (a merge train; docs/architecture.md, \"The merge train\"). 1: one batch at a time. "+
				"Lowering it starts no new car until fewer are active; the cars already running finish.",
			"blank, unparsable or ≤ 0 → 1 (one batch at a time, as without a train); above 20 → 20.",
			1, 1, maxTrain, "must be > 0", func(s *Snapshot) *int { return &s.batchTrain }),
		intKey("batch.isolationCars",
			"How many more cars of one project may be in CI beside its merge train to isolate a failure: a bisection's halves (docs/architecture.md, \"The merge train\"). "+
				"0: they take places in the train, so while a failure is searched fewer new requests are tested. Above 0 they take these places first, and the train's batch.train places go on carrying new requests; a project's CI then runs up to batch.train + batch.isolationCars pipelines at once.",
			"blank, unparsable or negative → 0 (isolation takes places in the train); above 20 → 20.",
			0, 0, maxTrain, "negative means none", func(s *Snapshot) *int { return &s.batchIsolationCars }),
		durationKey("batch.leaseTTL", "2m",
			"How long an instance's claim on one action of a batch (one GitLab call or one look) lasts without renewal; the holder renews it while the action runs. When an instance dies, its batches fall due again this long after their claim, on any instance.",
			"blank, unparsable, ≤ 0 or below 5s → 2m.",
			func(s *Snapshot) *time.Duration { return &s.batchLeaseTTL }, 5*time.Second),
		durationKey("batch.blockedTimeout", "24h",
			"How long a BLOCKED batch (a pipeline that gave no answer twice, a rebase without an answer, an MR a person must clear) holds its partition before it is settled as failed; also how long a batch may keep retrying an unavailable dependency. Read when the batch is blocked (a change applies to later blocks).",
			"blank, unparsable, ≤ 0 or below 1m → 24h.",
			func(s *Snapshot) *time.Duration { return &s.batchBlockedTimeout }, time.Minute),
		durationKey("workflow.leaseTTL", "2m",
			"How long an instance's claim on one action of a single request (approval ticket, legacy MR step) lasts without renewal; the holder renews it while the action runs. When an instance dies, its requests' steps fall due again this long after their claim, on any instance.",
			"blank, unparsable, ≤ 0 or below 5s → 2m.",
			func(s *Snapshot) *time.Duration { return &s.stepLeaseTTL }, 5*time.Second),
		durationKey("poll.short", "5s", "Interval of the first, frequent checks of a pipeline or rebase.",
			"blank, unparsable or ≤ 0 → 5s.", func(s *Snapshot) *time.Duration { return &s.pollShort }, time.Millisecond),
		Key{
			Name: "poll.shortCount", Type: "int", Default: "12",
			Doc:       "How many checks use poll.short before poll.long takes over.",
			Misconfig: "blank, unparsable or negative → 12.",
			apply: func(s *Snapshot, v value) (string, string, error) {
				n, note := intOr(v, 12, 12)
				if n < 0 {
					n, note = 12, "negative"
				}
				s.pollShortCount = n
				return strconv.Itoa(n), note, nil
			},
		},
		durationKey("poll.long", "30s", "Interval of the later checks of a pipeline or rebase.",
			"blank, unparsable or ≤ 0 → 30s.", func(s *Snapshot) *time.Duration { return &s.pollLong }, time.Millisecond),
		durationKey("poll.timeout", "1h",
			"How long a pipeline or rebase may take before the step stops at a \"pending\" state (WAIT_MANUAL; the same MR can be retried).",
			"blank, unparsable or ≤ 0 → 1h.", func(s *Snapshot) *time.Duration { return &s.pollTimeout }, time.Millisecond),
		durationKey("reconcile.minAge", "2m",
			"Merged requests younger than this are left to their deploy callback, which may still be on its way.",
			"blank, unparsable or ≤ 0 → 2m.", func(s *Snapshot) *time.Duration { return &s.reconcileMinAge }, time.Millisecond),
		durationKey("reconcile.maxAge", "168h",
			"Merged requests older than this leave the reconciliation window (it bounds each run's work).",
			"blank, unparsable or ≤ 0 → 168h.", func(s *Snapshot) *time.Duration { return &s.reconcileMaxAge }, time.Millisecond),
		durationKey("reconcile.deployOverdue", "30m",
			"A merged request whose deploy callback has not come this long after its merge is listed as stuck (reconciliation cannot validate the last merged MR of a project until a later one is called back); an operator's retry then confirms the deploy.",
			"blank, unparsable or ≤ 0 → 30m.", func(s *Snapshot) *time.Duration { return &s.deployOverdue }, time.Millisecond),
		durationKey("approval.timeout", "72h",
			"A request waiting this long for its approval decision (APPROVAL_SENT) is listed for operators with its age: people may have forgotten the ticket, or its decision was lost on the way. An operator's retry sends the ticket again (the approval system opens one ticket per request).",
			"blank, unparsable or ≤ 0 → 72h.", func(s *Snapshot) *time.Duration { return &s.approvalTimeout }, time.Millisecond),
		durationKey("approval.pollAfter", "15m",
			"How long a request waits for its approval decision (APPROVAL_SENT) before bindery asks the approval system what became of the ticket, and how often it asks again after that: a decision whose callback was lost (a callback outage longer than the sender's retries) is applied as the callback would have been.",
			"blank, unparsable or ≤ 0 → 15m.", func(s *Snapshot) *time.Duration { return &s.approvalPollAfter }, time.Millisecond),
		scheduleKey(JobRounds, "Schedule of batch rounds (every partition with waiting requests gets a batch)."),
		scheduleKey(JobReconcile, "Schedule of the reconciliation of merged requests whose deploy callback was lost."),
		scheduleKey(JobSweep, "Schedule of the repair sweep: in-flight work without a task (an old database, a hand edit) gets one. Crashed instances need no sweep: their work falls due again by itself."),
		scheduleKey(JobExpiry, "Schedule of the expiry of bindings whose ttl passed (they are closed through the batch path)."),
		scheduleKey(JobPurge, "Schedule of the purge of what is over: expired idempotency records, ended sessions, unfinished sign-ins, API tokens expired or revoked 30 days ago."),
		scheduleKey(JobDrift, "Schedule of the drift check (docs/drift.md): per project, the target branch's head, and when it moved since the last look, the files under every target's path template, compared with the bindings bindery holds."),
		scheduleKey(JobReviews, "Schedule of the access reviews' job (docs/workflow.md, 'Access reviews'): a review of each target whose reviews.every passed since its last one, and a reminder to the reviewers of each open review due within a day."),
		Key{
			Name: "drift.enabled", Type: "bool", Default: "true",
			Doc:       "Whether the drift check (cron.drift) reads the config repository. Off: no round reads GitLab; the findings already recorded stay as they are.",
			Misconfig: "blank or invalid → true: the check runs unless switched off with a clear false.",
			apply: func(s *Snapshot, v value) (string, string, error) {
				var note string
				s.driftEnabled, note = boolOr(v, true, true)
				return strconv.FormatBool(s.driftEnabled), note, nil
			},
		},
	)
}

// BatchMaxWait is batch.maxWait. Default 0s (each round takes what waits); blank, unparsable
// or negative → 0s.
func (s *Snapshot) BatchMaxWait() time.Duration { return s.batchMaxWait }

// BatchFlakyRetries is batch.flakyRetries. Default 1; negative → 0; blank/unparsable → 1;
// above 3 → 3.
func (s *Snapshot) BatchFlakyRetries() int { return s.batchFlakyRetries }

// maxTrain is the longest train batch.train allows (GitLab's merge trains stop at 20 too): every
// car's pipeline runs at once, and a failure ahead rebuilds every car behind it.
const maxTrain = 20

// BatchTrain is batch.train: how many batches of a project may be in CI at once. Default 1;
// blank, unparsable or ≤ 0 → 1; above 20 → 20.
func (s *Snapshot) BatchTrain() int { return s.batchTrain }

// BatchIsolationCars is batch.isolationCars: how many cars of a project may be tested beside its
// merge train (a failure's isolation) on top of batch.train. Default 0; blank, unparsable or
// negative → 0; above 20 → 20.
func (s *Snapshot) BatchIsolationCars() int { return s.batchIsolationCars }

// BatchLeaseTTL is batch.leaseTTL. Default 2m; blank, unparsable, ≤ 0 or < 5s → 2m.
func (s *Snapshot) BatchLeaseTTL() time.Duration { return s.batchLeaseTTL }

// BatchBlockedTimeout is batch.blockedTimeout. Default 24h; blank, unparsable, ≤ 0 or < 1m → 24h.
func (s *Snapshot) BatchBlockedTimeout() time.Duration { return s.batchBlockedTimeout }

// StepLeaseTTL is workflow.leaseTTL. Default 2m; blank, unparsable, ≤ 0 or < 5s → 2m.
func (s *Snapshot) StepLeaseTTL() time.Duration { return s.stepLeaseTTL }

// PollStages are poll.short (default 5s), poll.shortCount (12), poll.long (30s) and
// poll.timeout (1h); each blank, unparsable or out-of-range value → its default.
func (s *Snapshot) PollStages() (short time.Duration, shortCount int, long, timeout time.Duration) {
	return s.pollShort, s.pollShortCount, s.pollLong, s.pollTimeout
}

// ReconcileWindow is reconcile.minAge (default 2m) and reconcile.maxAge (default 168h); blank,
// unparsable or ≤ 0 → the default.
func (s *Snapshot) ReconcileWindow() (minAge, maxAge time.Duration) {
	return s.reconcileMinAge, s.reconcileMaxAge
}

// DeployOverdue is reconcile.deployOverdue. Default 30m; blank, unparsable or ≤ 0 → 30m.
func (s *Snapshot) DeployOverdue() time.Duration { return s.deployOverdue }

// ApprovalTimeout is approval.timeout. Default 72h; blank, unparsable or ≤ 0 → 72h.
func (s *Snapshot) ApprovalTimeout() time.Duration { return s.approvalTimeout }

// ApprovalPollAfter is approval.pollAfter. Default 15m; blank, unparsable or ≤ 0 → 15m.
func (s *Snapshot) ApprovalPollAfter() time.Duration { return s.approvalPollAfter }

// DriftEnabled is drift.enabled. Default true; blank or invalid → true.
func (s *Snapshot) DriftEnabled() bool { return s.driftEnabled }

// Schedule is cron.<job>'s schedule (JobRounds, JobReconcile, JobSweep, JobExpiry, JobPurge,
// JobDrift, JobReviews).
// Blank or unparsable → the job's default.
func (s *Snapshot) Schedule(job string) string {
	if spec, ok := s.schedules[job]; ok {
		return spec
	}
	return defaultSchedules[job]
}
