package config

import (
	"strings"
	"testing"
	"time"
)

func rateRows() []misconfigCase { // faults fail off
	return []misconfigCase{
		{"missing", nil, 0.0}, {"blank", nil, 0.0}, {"garbage", str("often"), 0.0},
		{"negative/zero", str("-0.5"), 0.0}, {"valid", str("0.25"), 0.25},
	}
}

func boolRows(def bool) []misconfigCase {
	return []misconfigCase{
		{"missing", nil, def}, {"blank", nil, def}, {"garbage", str("perhaps"), def},
		{"negative/zero", str("0"), false}, {"valid", str("yes"), true},
	}
}

func listRows() []misconfigCase {
	return []misconfigCase{
		{"missing", nil, ""}, {"blank", nil, ""}, {"garbage", str("[{a: 1}]"), ""},
		{"negative/zero", str("0"), ""}, {"valid", str("[approve, merge]"), "approve,merge"},
		{"a comma string", str("approve, merge"), ""}, // not a list: nothing taken from it
	}
}

func statusRows(def, other int) []misconfigCase {
	return []misconfigCase{
		{"missing", nil, def}, {"blank", nil, def}, {"garbage", str("teapot"), def},
		{"negative/zero", str("-1"), def}, {"valid", str(itoa(other)), other},
	}
}

// choiceRows: anything but one of the choices is the default (a typo never picks another mode).
func choiceRows(def, typo, other string) []misconfigCase {
	return []misconfigCase{
		{"missing", nil, def}, {"blank", nil, def}, {"garbage", str(typo), def},
		{"negative/zero", str("0"), def}, {"valid", str(other), other},
	}
}

func init() {
	gl := func(s *Snapshot) SimGitLab { return s.SimGitLab() }
	ap := func(s *Snapshot) SimApproval { return s.SimApproval() }
	join := func(l []string) string { return strings.Join(l, ",") }
	rows := map[string]struct {
		probe func(*Snapshot) any
		rows  []misconfigCase
	}{
		"sim.timeScale": {func(s *Snapshot) any { return s.SimTimeScale() }, []misconfigCase{
			{"missing", nil, 1.0}, {"blank", nil, 1.0}, {"garbage", str("fast"), 1.0},
			{"negative/zero", str("0"), 1.0}, {"valid", str("10"), 10.0},
		}},
		"sim.gitlab.latency":             {func(s *Snapshot) any { return gl(s).Latency }, durationRows(0, 30*time.Millisecond)},
		"sim.gitlab.errorRate":           {func(s *Snapshot) any { return gl(s).ErrorRate }, rateRows()},
		"sim.gitlab.hang":                {func(s *Snapshot) any { return gl(s).Hang }, boolRows(false)},
		"sim.gitlab.dropRate":            {func(s *Snapshot) any { return gl(s).DropRate }, rateRows()},
		"sim.gitlab.faultEndpoints":      {func(s *Snapshot) any { return join(gl(s).Endpoints) }, listRows()},
		"sim.gitlab.pipelineDuration":    {func(s *Snapshot) any { return gl(s).PipelineDuration }, durationRows(20*time.Second, time.Second)},
		"sim.gitlab.pipelineFailRate":    {func(s *Snapshot) any { return gl(s).PipelineFailRate }, rateRows()},
		"sim.gitlab.pipelineStuckRate":   {func(s *Snapshot) any { return gl(s).PipelineStuckRate }, rateRows()},
		"sim.gitlab.pipelineFailOn":      {func(s *Snapshot) any { return join(gl(s).PipelineFailOn) }, listRows()},
		"sim.gitlab.rebaseDuration":      {func(s *Snapshot) any { return gl(s).RebaseDuration }, durationRows(3*time.Second, time.Second)},
		"sim.gitlab.mergeDuration":       {func(s *Snapshot) any { return gl(s).MergeDuration }, durationRows(0, time.Second)},
		"sim.gitlab.needRebaseRate":      {func(s *Snapshot) any { return gl(s).NeedRebaseRate }, rateRows()},
		"sim.gitlab.rebaseConflictRate":  {func(s *Snapshot) any { return gl(s).RebaseConflictRate }, rateRows()},
		"sim.gitlab.repeatApprove":       {func(s *Snapshot) any { return gl(s).RepeatApprove }, statusRows(401, 304)},
		"sim.gitlab.deniedApprovers":     {func(s *Snapshot) any { return join(gl(s).DeniedApprovers) }, listRows()},
		"sim.gitlab.deniedApproveStatus": {func(s *Snapshot) any { return gl(s).DeniedApproveStatus }, statusRows(403, 401)},
		"sim.gitlab.checklist":           {func(s *Snapshot) any { return join(gl(s).Checklist) }, listRows()},
		"sim.gitlab.approvalsRequired": {func(s *Snapshot) any { return gl(s).ApprovalsRequired }, []misconfigCase{
			{"missing", nil, 2}, {"blank", nil, 2}, {"garbage", str("two"), 2},
			{"negative/zero", str("0"), 0}, {"valid", str("1"), 1},
		}},
		"sim.gitlab.hookRedeliver":       {func(s *Snapshot) any { return gl(s).HookRedeliver }, boolRows(false)},
		"sim.gitlab.pipelineSource":      {func(s *Snapshot) any { return gl(s).PipelineSource }, choiceRows(PipelineMergeRequest, "MERGED", PipelinePush)},
		"sim.gitlab.mergeBlocker":        {func(s *Snapshot) any { return gl(s).MergeBlocker }, choiceRows("", "discussion", "discussions_not_resolved")},
		"sim.gitlab.checkingFor":         {func(s *Snapshot) any { return gl(s).CheckingFor }, durationRows(0, 5*time.Second)},
		"sim.gitlab.version":             {func(s *Snapshot) any { return gl(s).Version }, choiceRows("17", "14", "15.5")},
		"sim.gitlab.rateLimitRate":       {func(s *Snapshot) any { return gl(s).RateLimitRate }, rateRows()},
		"sim.gitlab.pipelineMustSucceed": {func(s *Snapshot) any { return gl(s).PipelineMustSucceed }, boolRows(true)},
		"sim.gitlab.edition":             {func(s *Snapshot) any { return gl(s).Edition }, choiceRows("ee", "premium", "ce")},
		"sim.gitlab.mergeMethod":         {func(s *Snapshot) any { return gl(s).MergeMethod }, choiceRows("rebase_merge", "fast-forward", "ff")},
		"sim.approval.latency":           {func(s *Snapshot) any { return ap(s).Latency }, durationRows(0, time.Second)},
		"sim.approval.errorRate":         {func(s *Snapshot) any { return ap(s).ErrorRate }, rateRows()},
		"sim.approval.hang":              {func(s *Snapshot) any { return ap(s).Hang }, boolRows(false)},
		"sim.approval.dropRate":          {func(s *Snapshot) any { return ap(s).DropRate }, rateRows()},
		"sim.approval.faultEndpoints":    {func(s *Snapshot) any { return join(ap(s).Endpoints) }, listRows()},
		"sim.approval.autoApprove":       {func(s *Snapshot) any { return ap(s).AutoApprove }, boolRows(false)},
		"sim.approval.callbackDelay":     {func(s *Snapshot) any { return ap(s).CallbackDelay }, durationRows(0, 2*time.Second)},
		"sim.approval.duplicateRate":     {func(s *Snapshot) any { return ap(s).DuplicateRate }, rateRows()},
		"sim.approval.callbackLossRate":  {func(s *Snapshot) any { return ap(s).CallbackLossRate }, rateRows()},
		"sim.approval.reorder":           {func(s *Snapshot) any { return ap(s).Reorder }, boolRows(false)},
		"sim.deploy.delay":               {func(s *Snapshot) any { return s.SimDeploy().Delay }, durationRows(3*time.Second, 10*time.Second)},
		"sim.deploy.dropRate":            {func(s *Snapshot) any { return s.SimDeploy().DropRate }, rateRows()},
		"sim.deploy.exactRate":           {func(s *Snapshot) any { return s.SimDeploy().ExactRate }, rateRows()},
		"sim.deploy.withOperationIds":    {func(s *Snapshot) any { return s.SimDeploy().WithOperationIDs }, boolRows(true)},
	}
	for k, r := range rows {
		probes[k], misconfigTable[k] = r.probe, r.rows
	}
}

func TestSimRatesAboveOneAreCapped(t *testing.T) {
	s := MustParse("sim:\n  gitlab:\n    errorRate: 7\n")
	if got := s.SimGitLab().ErrorRate; got != 1 {
		t.Fatalf("errorRate = %v, want 1", got)
	}
	if r := reportFor(t, s, "sim.gitlab.errorRate"); r.Status != StatusFallback {
		t.Fatalf("report %+v", r)
	}
}

func TestSimSettingsAreCopiesNotShared(t *testing.T) {
	s := MustParse("sim:\n  gitlab:\n    checklist: [a, b]\n")
	g := s.SimGitLab()
	g.Checklist[0] = "changed"
	if s.SimGitLab().Checklist[0] != "a" {
		t.Fatal("a caller's edit reached the snapshot")
	}
}
