package config

import (
	"testing"
	"time"
)

func init() {
	type durRow struct {
		key     string
		get     func(*Snapshot) time.Duration
		def     time.Duration
		zeroIs  time.Duration // what "0s"/"-1s" gives
		valid   string
		validIs time.Duration
	}
	for _, r := range []durRow{
		{"batch.maxWait", (*Snapshot).BatchMaxWait, 0, 0, "30s", 30 * time.Second},
		{"batch.leaseTTL", (*Snapshot).BatchLeaseTTL, 2 * time.Minute, 2 * time.Minute, "45s", 45 * time.Second},
		{"batch.blockedTimeout", (*Snapshot).BatchBlockedTimeout, 24 * time.Hour, 24 * time.Hour, "2h", 2 * time.Hour},
		{"workflow.leaseTTL", (*Snapshot).StepLeaseTTL, 2 * time.Minute, 2 * time.Minute, "10s", 10 * time.Second},
		{"poll.short", func(s *Snapshot) time.Duration { d, _, _, _ := s.PollStages(); return d }, 5 * time.Second, 5 * time.Second, "1s", time.Second},
		{"poll.long", func(s *Snapshot) time.Duration { _, _, d, _ := s.PollStages(); return d }, 30 * time.Second, 30 * time.Second, "1m", time.Minute},
		{"poll.timeout", func(s *Snapshot) time.Duration { _, _, _, d := s.PollStages(); return d }, time.Hour, time.Hour, "10m", 10 * time.Minute},
		{"reconcile.minAge", func(s *Snapshot) time.Duration { d, _ := s.ReconcileWindow(); return d }, 2 * time.Minute, 2 * time.Minute, "5m", 5 * time.Minute},
		{"reconcile.maxAge", func(s *Snapshot) time.Duration { _, d := s.ReconcileWindow(); return d }, 168 * time.Hour, 168 * time.Hour, "24h", 24 * time.Hour},
		{"reconcile.deployOverdue", (*Snapshot).DeployOverdue, 30 * time.Minute, 30 * time.Minute, "2h", 2 * time.Hour},
		{"approval.timeout", (*Snapshot).ApprovalTimeout, 72 * time.Hour, 72 * time.Hour, "24h", 24 * time.Hour},
		{"approval.pollAfter", (*Snapshot).ApprovalPollAfter, 15 * time.Minute, 15 * time.Minute, "1m", time.Minute},
	} {
		get := r.get
		probes[r.key] = func(s *Snapshot) any { return get(s) }
		misconfigTable[r.key] = []misconfigCase{
			{"missing", nil, r.def}, {"blank", nil, r.def}, {"garbage", str("soonish"), r.def},
			{"negative/zero", str("-1s"), r.zeroIs}, {"valid", str(r.valid), r.validIs},
		}
	}
	probes["batch.flakyRetries"] = func(s *Snapshot) any { return s.BatchFlakyRetries() }
	misconfigTable["batch.flakyRetries"] = []misconfigCase{
		{"missing", nil, 1}, {"blank", nil, 1}, {"garbage", str("once"), 1},
		{"negative/zero", str("-1"), 0}, {"valid", str("9"), 3},
	}
	probes["batch.train"] = func(s *Snapshot) any { return s.BatchTrain() }
	misconfigTable["batch.train"] = []misconfigCase{
		{"missing", nil, 1}, {"blank", nil, 1}, {"garbage", str("long"), 1},
		{"negative/zero", str("0"), 1}, {"valid", str("50"), 20},
	}
	probes["batch.isolationCars"] = func(s *Snapshot) any { return s.BatchIsolationCars() }
	misconfigTable["batch.isolationCars"] = []misconfigCase{
		{"missing", nil, 0}, {"blank", nil, 0}, {"garbage", str("some"), 0},
		{"negative/zero", str("-2"), 0}, {"valid", str("3"), 3},
	}
	probes["poll.shortCount"] = func(s *Snapshot) any { _, n, _, _ := s.PollStages(); return n }
	misconfigTable["poll.shortCount"] = []misconfigCase{
		{"missing", nil, 12}, {"blank", nil, 12}, {"garbage", str("few"), 12},
		{"negative/zero", str("-3"), 12}, {"valid", str("0"), 0},
	}
	probes["drift.enabled"] = func(s *Snapshot) any { return s.DriftEnabled() }
	misconfigTable["drift.enabled"] = []misconfigCase{
		{"missing", nil, true}, {"blank", nil, true}, {"garbage", str("maybe"), true},
		{"negative/zero", str("false"), false}, {"valid", str("true"), true},
	}
	for job, def := range defaultSchedules {
		job := job
		probes["cron."+job] = func(s *Snapshot) any { return s.Schedule(job) }
		misconfigTable["cron."+job] = []misconfigCase{
			{"missing", nil, def}, {"blank", nil, def}, {"garbage", str("every so often"), def},
			{"negative/zero", str("'@every -1s'"), def}, {"valid", str("'*/5 * * * *'"), "*/5 * * * *"},
		}
	}
}

// batch.maxWait: 0s is the documented default ("every round takes what waits"): written out,
// it is a valid value, not one reported as "not positive" and replaced at every load. Only a
// negative wait is a mistake.
func TestAZeroMaxWaitIsValid(t *testing.T) {
	t.Parallel()
	for _, written := range []string{"0s", "0"} {
		snap, err := Parse([]byte("batch:\n  maxWait: " + written + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		if r := reportFor(t, snap, "batch.maxWait"); r.Status != StatusSet || r.Note != "" || snap.BatchMaxWait() != 0 {
			t.Errorf("maxWait %s: %+v, effective %s; want set, no note, 0s", written, r, snap.BatchMaxWait())
		}
	}
	snap, err := Parse([]byte("batch:\n  maxWait: -1s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r := reportFor(t, snap, "batch.maxWait"); r.Status != StatusFallback || r.Note == "" {
		t.Errorf("maxWait -1s: %+v; want a fallback with a note", r)
	}
}
