package workflow

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"bindery/api"
	"bindery/batch"
	"bindery/internal/vocab/apperr"
	"bindery/internal/vocab/explain"
	"bindery/internal/vocab/state"
	"bindery/internal/work/engine"
	"bindery/store"
)

// The merge train as people see it (docs/workflow.md, 'The merge train'; docs/operations.md,
// 'Merge trains'): the car a request rides in and the cars ahead of it, an estimate of its merge,
// each project's train in the ops console, and the operators' steering — pause and resume a
// project's queue, send a waiting request into the next car.

// trainCacheTTL is how long a request view reuses its project's train as read for another one.
// The train is the same for every request of the project, and every waiting requester's page
// reads it every two seconds: read once per project and instance per TTL, it costs the status
// read nothing (which stays at most two queries, docs/architecture.md) — at the price of a view
// up to this much older than its request's own state. An operator's pause, resume or merge-next
// drops the cached train of the instance that ran it at once.
const trainCacheTTL = 2 * time.Second

// trainQueueShown bounds the waiting requests the ops console lists per project.
const trainQueueShown = 10

// trainSnapshot is a project's train as read at one moment, with what its views and estimates
// need.
type trainSnapshot struct {
	cars      []store.Batch
	tasks     map[string]store.Task // the cars' tasks by batch id
	durations []time.Duration       // the project's latest passed pipelines (batch.RecentPipelines), newest first
	pause     *store.Pause          // nil: it runs
	// load is what a round weighs (its cars, its waiting set), read at loadAt (this process's
	// clock): whether a round holds the waiting set back, and until when.
	load   store.TrainLoad
	loadAt time.Time
}

// readTrain reads partition's train: its cars, their tasks, its recent pipelines, its pause.
func (w *Workflow) readTrain(ctx context.Context, partition string) (trainSnapshot, error) {
	var s trainSnapshot
	var err error
	if s.cars, err = w.db.Train(ctx, partition); err != nil {
		return s, err
	}
	if s.tasks, err = w.carTasks(ctx, s.cars); err != nil {
		return s, err
	}
	// As many as the rounds read: the hold a view tells is the one they decide.
	if s.durations, err = w.db.PipelineDurations(ctx, partition, batch.RecentPipelines); err != nil {
		return s, err
	}
	snap := w.cfg.Current()
	if s.load, err = w.db.TrainLoad(ctx, partition, snap.BatchMaxRequests()*max(1, snap.BatchTrain())); err != nil {
		return s, err
	}
	s.loadAt = time.Now()
	p, paused, err := w.db.Paused(ctx, partition)
	if paused {
		s.pause = &p
	}
	return s, err
}

func (w *Workflow) carTasks(ctx context.Context, cars []store.Batch) (map[string]store.Task, error) {
	if len(cars) == 0 {
		return map[string]store.Task{}, nil
	}
	refs := make([]string, len(cars))
	for i, c := range cars {
		refs[i] = strconv.FormatInt(c.ID, 10)
	}
	return w.db.TasksOf(ctx, state.TaskBatch, refs)
}

// trainCache keeps each project's train for trainCacheTTL (see there). Concurrent views of one
// project wait for one read instead of each reading.
type trainCache struct {
	mu      sync.Mutex
	entries map[string]*trainEntry
}

type trainEntry struct {
	mu   sync.Mutex // held while the train is read
	snap trainSnapshot
	at   time.Time // zero: not read
	used time.Time
}

// get returns partition's train, read by read when the cached one is older than trainCacheTTL
// or fresh is asked for.
func (c *trainCache) get(ctx context.Context, partition string, fresh bool, read func(context.Context, string) (trainSnapshot, error)) (trainSnapshot, error) {
	now := time.Now()
	c.mu.Lock()
	if c.entries == nil {
		c.entries = map[string]*trainEntry{}
	}
	e, ok := c.entries[partition]
	if !ok {
		// A project nobody looked at for a while is forgotten: the map holds what is looked at.
		for p, old := range c.entries {
			if now.Sub(old.used) > time.Minute {
				delete(c.entries, p)
			}
		}
		e = &trainEntry{}
		c.entries[partition] = e
	}
	e.used = now
	c.mu.Unlock()

	e.mu.Lock()
	defer e.mu.Unlock()
	if !fresh && !e.at.IsZero() && time.Since(e.at) < trainCacheTTL {
		return e.snap, nil
	}
	s, err := read(ctx, partition)
	if err != nil {
		return trainSnapshot{}, err
	}
	e.snap, e.at = s, time.Now()
	return s, nil
}

// drop forgets partition's train: the next view reads it afresh.
func (c *trainCache) drop(partition string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, partition)
}

// trainStateOf is what an estimate reads of a snapshot, at now (the database clock: the cars'
// times are its).
func (w *Workflow) trainStateOf(partition string, s trainSnapshot, now time.Time) batch.TrainState {
	t := batch.TrainState{Now: now, Project: partition, Durations: s.durations[:min(len(s.durations), batch.EstimateSample)], Length: w.cfg.Current().BatchTrain(), Paused: s.pause != nil}
	for _, c := range s.cars {
		t.Cars = append(t.Cars, batch.EstimatedCar{ID: c.ID, Started: c.CIStartedAt, State: s.carState(c)})
	}
	return t
}

func (s trainSnapshot) carState(c store.Batch) string {
	var task *store.Task
	if t, ok := s.tasks[strconv.FormatInt(c.ID, 10)]; ok {
		task = &t
	}
	return batch.CarState(c, task)
}

// describeTrain adds what the train tells about a request to its view: while it rides in a car,
// the car, the cars ahead and the estimate; while it waits in the waiting set, whether the train
// is full or paused, and the estimate. A train that cannot be read leaves the view as it is (the
// page must not fail for it).
func (w *Workflow) describeTrain(ctx context.Context, d store.RequestDetail, v *api.RequestView) {
	wt := v.Waiting
	if wt == nil {
		return
	}
	var partition string
	var carID int64
	switch {
	case d.Waiting != nil:
		partition = d.Waiting.Partition
	case d.Batch != nil && d.Batch.Status.Active():
		partition, carID = d.Batch.Partition, d.Batch.ID
	default:
		return
	}
	s, err := w.trains.get(ctx, partition, false, w.readTrain)
	at := slices.IndexFunc(s.cars, func(c store.Batch) bool { return c.ID == carID })
	if err == nil && carID != 0 && at < 0 {
		// The car was claimed after the cached read: read again, once.
		s, err = w.trains.get(ctx, partition, true, w.readTrain)
		at = slices.IndexFunc(s.cars, func(c store.Batch) bool { return c.ID == carID })
	}
	if err != nil {
		w.log.WarnContext(ctx, "the merge train was not read; the request view shows no car or estimate", "partition", partition, "err", err)
		return
	}
	ts := w.trainStateOf(partition, s, d.Now)
	if carID != 0 {
		if at < 0 {
			return // settled meanwhile: the next view says what became of it
		}
		car := &api.Car{BatchID: carID, Position: at + 1, Of: len(s.cars), Ahead: []api.CarAhead{}}
		for _, c := range s.cars[:at] {
			car.Ahead = append(car.Ahead, api.CarAhead{BatchID: c.ID, MR: w.mrLink(c.Project, c.MRIID), Pipeline: s.carState(c)})
		}
		wt.Car = car
		e := api.Estimate(batch.EstimateMerge(ts, batch.Place{Car: at}))
		wt.Estimate = &e
		if i := slices.IndexFunc(s.cars[:at], func(c store.Batch) bool { return c.Status == state.BatchBlocked }); i >= 0 && v.NextAction == state.NextWait {
			// A car ahead is BLOCKED: this one cannot merge before it is cleared or settled.
			wt.Blocker = w.behindBlocked(s.cars[i])
			wt.WaitingFor = fmt.Sprintf("its car (batch %d) to merge, %s", carID, behindWords(wt.Blocker, d.Now))
			v.NextAction, v.NextActionText = state.NextWaitManual, behindText(wt.Blocker, d.Now)
		}
	} else {
		snap := w.cfg.Current()
		round := d.Now
		if mw := snap.BatchMaxWait(); mw > 0 && d.Waiting.Ahead+1 < snap.BatchMaxRequests() {
			// A small waiting set is batched once its oldest request waited batch.maxWait: at
			// the latest when this one did.
			if at := d.Waiting.Since.Add(mw); at.After(round) {
				round = at
			}
		}
		why := waitingForACar(partition, *d.Waiting, s, ts.Length, d.Now)
		h := roundHold{}
		if why == "" && d.Waiting.BlockedBy == nil && v.NextAction == state.NextWait {
			h = w.roundHoldOf(partition, s, d.Now)
		}
		if h.why != "" {
			// The round holds the waiting set back although the train has room: say until when.
			round = h.until
			wt.HeldUntil, wt.WaitingFor, v.NextActionText = &h.until, h.why, h.text
		}
		e := api.Estimate(batch.EstimateMerge(ts, batch.Place{Car: -1, Ahead: d.Waiting.Ahead, PerCar: snap.BatchMaxRequests(), Round: round}))
		wt.Estimate = &e
		if why != "" {
			wt.WaitingFor = why
		}
	}
	if p := s.pause; p != nil && v.NextAction == state.NextWait {
		switch {
		case carID != 0 && at == 0 && s.carState(s.cars[0]) == batch.CarPassed:
			// Its car is next and ready: only the pause holds it.
			wt.WaitingFor = fmt.Sprintf("the queue of %s to be resumed — %s; its car merges next", partition, pauseOf(partition, *p).Words(d.Now))
		case carID != 0:
			wt.WaitingFor = fmt.Sprintf("%s; the queue of %s is %s, so its car does not merge until an operator resumes it", wt.WaitingFor, partition, pauseOf(partition, *p).Words(d.Now))
		}
		v.NextActionText = pauseOf(partition, *p).Requester(d.Now)
	}
}

// roundHold is why a batch round holds a partition's waiting set back although its train has
// room, and until when (why "": it does not).
type roundHold struct {
	until     time.Time
	why, text string // what the request waits for; the requester's sentence
}

// roundHoldOf says whether the next round takes partition's waiting set, as batch.Service.round
// and carSize decide it (docs/workflow.md, 'Batch rounds'; 'The merge train'), at now (the
// database clock): a small waiting set waits for more requests to share a pipeline until its
// oldest request waited batch.maxWait; a merge train's next car waits for the train's spacing
// (the newest car in CI for a k-th of the median pipeline, or the oldest request waiting that
// long). A suspect group or a request sent next is taken at once.
func (w *Workflow) roundHoldOf(partition string, s trainSnapshot, now time.Time) roundHold {
	snap := w.cfg.Current()
	l, k, most := s.load, snap.BatchTrain(), snap.BatchMaxRequests()
	if l.Priority || l.Waiting == 0 || l.Cars >= k {
		return roundHold{}
	}
	// The load was read up to trainCacheTTL ago: its ages grew since.
	aged := time.Since(s.loadAt)
	l.OldestWait += aged
	if l.SinceNewest > 0 {
		l.SinceNewest += aged
	}
	if mw := snap.BatchMaxWait(); mw > 0 && l.Waiting < most && l.OldestWait < mw {
		until := wholeMinute(now.Add(mw - l.OldestWait))
		return roundHold{until: until,
			why: fmt.Sprintf("more requests of %s to share a pipeline with, until %s at the latest (%d of up to %d waiting)",
				partition, clockWords(until, now), l.Waiting, most),
			text: fmt.Sprintf("Your request waits until %s for more requests to share a pipeline; then a batch takes it.", clockWords(until, now))}
	}
	if left := batch.SpacingLeft(l, s.durations, k, most); left > 0 {
		gap, _ := batch.Spacing(s.durations, k)
		until := wholeMinute(now.Add(left))
		return roundHold{until: until,
			why: fmt.Sprintf("the next car of %s, until %s at the latest: the merge train starts its cars spaced over a pipeline (every %s, a %s of the usual pipeline)",
				partition, clockWords(until, now), explain.Duration(gap), ordinalWords(k)),
			text: fmt.Sprintf("Your request waits until %s for the next car of the merge train of %s; its cars start spaced over a pipeline.", clockWords(until, now), partition)}
	}
	return roundHold{}
}

// wholeMinute rounds an "at the latest" time up to its minute: people read minutes.
func wholeMinute(t time.Time) time.Time {
	if m := t.Truncate(time.Minute); !m.Equal(t) {
		return m.Add(time.Minute)
	}
	return t
}

// ordinalWords names a fraction's denominator: "half", "third", "4th".
func ordinalWords(k int) string {
	switch k {
	case 2:
		return "half"
	case 3:
		return "third"
	}
	return strconv.Itoa(k) + "th"
}

// pauseOf is partition's pause as people read it (explain.Pause).
func pauseOf(partition string, p store.Pause) explain.Pause {
	return explain.Pause{Project: partition, By: p.By, Reason: p.Reason, Since: p.At}
}

// waitingForACar is what a request in the waiting set waits for when the train says more than
// "the next batch round" ("": it does not): the queue is paused, the request was sent into the
// next car, or the train is full.
func waitingForACar(partition string, w store.WaitingPlace, s trainSnapshot, length int, now time.Time) string {
	what := ""
	if w.Action == state.ActionDelete {
		what = " to remove the file"
	}
	ahead := fmt.Sprintf("%d ahead in the queue", w.Ahead)
	switch {
	case s.pause != nil:
		return fmt.Sprintf("the queue of %s to be resumed%s — %s (%s)", partition, what, pauseOf(partition, *s.pause).Words(now), ahead)
	case w.NextBy != "" && len(s.cars) >= length:
		return fmt.Sprintf("the next car of %s%s, sent ahead of the queue by %s; the merge train is full (%d of %d cars), so it waits for the first car to merge",
			partition, what, w.NextBy, len(s.cars), length)
	case w.NextBy != "":
		return fmt.Sprintf("the next car of %s%s, sent ahead of the queue by %s", partition, what, w.NextBy)
	case w.BlockedBy != nil:
		return "" // the view says which car holds it and why
	case len(s.cars) >= length:
		return fmt.Sprintf("a free car in the merge train of %s%s: it is full (%d of %d cars in CI; %s)", partition, what, len(s.cars), length, ahead)
	}
	return ""
}

// Trains is each project's merge train for the ops console: the catalog's projects and every
// other one with cars, waiting requests or a pause; BLOCKED, failed and paused projects first.
func (w *Workflow) Trains(ctx context.Context) (api.Page[api.Train], error) {
	all, err := w.db.Trains(ctx)
	if err != nil {
		return api.Page[api.Train]{}, err
	}
	pauses, err := w.db.Pauses(ctx)
	if err != nil {
		return api.Page[api.Train]{}, err
	}
	counts, err := w.db.WaitingCounts(ctx)
	if err != nil {
		return api.Page[api.Train]{}, err
	}
	projects := map[string]*trainRead{}
	read := func(p string) *trainRead {
		if projects[p] == nil {
			projects[p] = &trainRead{}
		}
		return projects[p]
	}
	for _, t := range w.cfg.Current().Targets() {
		read(t.Project)
	}
	var cars []store.Batch
	for p, cs := range all {
		read(p).cars = cs
		cars = append(cars, cs...)
	}
	for _, p := range pauses {
		read(p.Partition).pause = &p
	}
	for p, n := range counts {
		read(p).count = n
	}
	tasks, err := w.carTasks(ctx, cars)
	if err != nil {
		return api.Page[api.Train]{}, err
	}
	members, err := w.carMembers(ctx, cars)
	if err != nil {
		return api.Page[api.Train]{}, err
	}
	now, err := w.db.Now(ctx)
	if err != nil {
		return api.Page[api.Train]{}, err
	}
	out := api.Page[api.Train]{Items: []api.Train{}}
	for p, r := range projects {
		r.tasks, r.members = tasks, members
		if err := w.readQueue(ctx, p, r); err != nil {
			return api.Page[api.Train]{}, err
		}
		out.Items = append(out.Items, w.trainView(ctx, p, *r, now))
	}
	slices.SortFunc(out.Items, func(a, b api.Train) int {
		return cmp.Or(cmp.Compare(trainRank(a), trainRank(b)), strings.Compare(a.Project, b.Project))
	})
	return out, nil
}

// trainRank orders the ops console's trains: what needs an operator first — a BLOCKED car, a
// failed pipeline, a pause (docs/operations.md, 'The console at a glance').
func trainRank(t api.Train) int {
	switch {
	case t.Blocked != nil:
		return 0
	case slices.ContainsFunc(t.Cars, func(c api.TrainCar) bool { return c.PipelineState == batch.CarFailed }), t.Failed != nil:
		return 1
	case t.Paused != nil:
		return 2
	case len(t.Cars) > 0 || t.Waiting > 0:
		return 3
	}
	return 4
}

// trainRead is what the ops console's view of one project's train is made of.
type trainRead struct {
	cars      []store.Batch
	tasks     map[string]store.Task
	members   map[int64][]store.Operation
	durations []time.Duration
	pause     *store.Pause
	failed    *store.Batch // the newest batch, when it FAILED
	count     store.WaitingCount
	queue     []store.Queued
}

func (w *Workflow) carMembers(ctx context.Context, cars []store.Batch) (map[int64][]store.Operation, error) {
	ids := make([]int64, len(cars))
	for i, c := range cars {
		ids[i] = c.ID
	}
	return w.db.CarMembers(ctx, ids)
}

// readQueue reads what waits in project's waiting set and its recent pipelines, when there is
// something to show them for.
func (w *Workflow) readQueue(ctx context.Context, project string, r *trainRead) error {
	newest, ok, err := w.db.NewestBatch(ctx, project)
	if err != nil {
		return err
	}
	if ok && newest.Status == state.BatchFailed {
		r.failed = &newest
	}
	if r.count.Waiting > 0 {
		if r.queue, err = w.db.WaitingQueue(ctx, project, trainQueueShown); err != nil {
			return err
		}
	}
	if len(r.cars) > 0 || r.count.Waiting > 0 {
		r.durations, err = w.db.PipelineDurations(ctx, project, batch.EstimateSample)
	}
	return err
}

// trainOf is one project's train for the ops console (the answer of a pause or a resume).
func (w *Workflow) trainOf(ctx context.Context, project string) (api.Train, error) {
	var r trainRead
	var err error
	if r.cars, err = w.db.Train(ctx, project); err != nil {
		return api.Train{}, err
	}
	if r.tasks, err = w.carTasks(ctx, r.cars); err != nil {
		return api.Train{}, err
	}
	if r.members, err = w.carMembers(ctx, r.cars); err != nil {
		return api.Train{}, err
	}
	p, paused, err := w.db.Paused(ctx, project)
	if err != nil {
		return api.Train{}, err
	}
	if paused {
		r.pause = &p
	}
	counts, err := w.db.WaitingCounts(ctx)
	if err != nil {
		return api.Train{}, err
	}
	r.count = counts[project]
	if err := w.readQueue(ctx, project, &r); err != nil {
		return api.Train{}, err
	}
	now, err := w.db.Now(ctx)
	if err != nil {
		return api.Train{}, err
	}
	return w.trainView(ctx, project, r, now), nil
}

// trainView is the ops console's view of project's train as r read it, at now (database clock).
func (w *Workflow) trainView(ctx context.Context, project string, r trainRead, now time.Time) api.Train {
	s := trainSnapshot{cars: r.cars, tasks: r.tasks, durations: r.durations, pause: r.pause}
	ts := w.trainStateOf(project, s, now)
	t := api.Train{Project: project, Length: ts.Length, Cars: []api.TrainCar{}, Waiting: r.count.Waiting, MergeNext: r.count.Next, Queue: []api.QueuedRequest{}}
	if len(r.durations) > 0 || len(r.cars) > 0 || r.count.Waiting > 0 {
		t.Pipelines = pipelinesBasis(ts)
	}
	var ops []store.Operation
	for _, c := range r.cars {
		ops = append(ops, r.members[c.ID]...)
	}
	for _, q := range r.queue {
		ops = append(ops, q.Operation)
	}
	cutoff := w.deployCutoff(ctx, ops...)
	for i, c := range r.cars {
		car := api.TrainCar{BatchID: c.ID, Position: i + 1, Status: string(c.Status), MR: w.mrLink(c.Project, c.MRIID), Pipeline: w.pipelineLink(c.Project, c.PipelineID),
			PipelineState: s.carState(c), Members: w.summaries(r.members[c.ID], cutoff), Since: c.CreatedAt, CISince: c.CIStartedAt}
		car.WaitingFor = w.carWaiting(c, r.tasks)
		if car.PipelineState != batch.CarBlocked && car.PipelineState != batch.CarFailed {
			e := api.Estimate(batch.EstimateMerge(ts, batch.Place{Car: i}))
			car.Estimate = &e
		}
		t.Cars = append(t.Cars, car)
		if c.Status == state.BatchBlocked && t.Blocked == nil {
			t.Blocked = &api.TrainBlock{BatchID: c.ID, Since: c.UpdatedAt, Why: w.behindBlocked(c).Text}
		}
	}
	for _, q := range r.queue {
		t.Queue = append(t.Queue, api.QueuedRequest{RequestSummary: w.summary(q.Operation, cutoff), Since: q.Since, NextBy: q.NextBy})
	}
	if p := r.pause; p != nil {
		t.Paused = &api.TrainPause{By: p.By, Reason: p.Reason, Since: p.At}
	}
	if f := r.failed; f != nil {
		t.Failed = &api.TrainBlock{BatchID: f.ID, Since: f.UpdatedAt, Why: failedWords(*f)}
	}
	return t
}

// failedWords say why a project's newest batch failed, for the ops console: its culprit when a
// bisection isolated one, else its note.
func failedWords(b store.Batch) string {
	if b.Culprit != "" {
		return "its change of request " + b.Culprit + " made the pipeline fail"
	}
	if b.Note == "" {
		return "it failed"
	}
	return b.Note
}

// carWaiting says what a car waits for, as a phrase: its task's note (bindery's words of the step:
// "waiting for car 12 ahead of it to merge", a pause), else its step's; a BLOCKED car's reason.
func (w *Workflow) carWaiting(c store.Batch, tasks map[string]store.Task) string {
	if c.Status == state.BatchBlocked {
		return "blocked: " + blockedWords(c)
	}
	t, ok := tasks[strconv.FormatInt(c.ID, 10)]
	if !ok {
		return ""
	}
	if t.Note != "" {
		return t.Note
	}
	mr := "its merge request"
	if c.MRIID != 0 {
		mr = fmt.Sprintf("merge request !%d", c.MRIID)
	}
	if words := w.batches.Waiting(t.Step); words != "" {
		return "waiting for " + strings.ReplaceAll(words, "{mr}", mr)
	}
	return ""
}

// pipelinesBasis is what a project's estimates stand on, in the words of their basis.
func pipelinesBasis(t batch.TrainState) string {
	t.Paused, t.Cars = false, nil
	return batch.EstimateMerge(t, batch.Place{Car: -1, PerCar: 1, Round: t.Now}).Basis
}

// knownProject refuses a project bindery knows nothing of: not in the catalog, never batched,
// queued or paused.
func (w *Workflow) knownProject(ctx context.Context, project string) error {
	for _, t := range w.cfg.Current().Targets() {
		if t.Project == project {
			return nil
		}
	}
	known, err := w.db.PartitionKnown(ctx, project)
	switch {
	case err != nil:
		return err
	case !known:
		return apperr.New(apperr.NotFound, "No such project: %s is not in the catalog and bindery has no batches of it.", project)
	}
	return nil
}

// PauseTrain pauses project's queue (an operator's action): no new car is claimed, and no car
// merges — the cars in CI finish their pipelines and wait at their turn, each at its next look.
// Every requester waiting for the project reads who paused it and why. A pause already there
// takes the new reason.
func (w *Workflow) PauseTrain(ctx context.Context, project, reason, actor string) (api.Train, error) {
	if err := w.knownProject(ctx, project); err != nil {
		return api.Train{}, err
	}
	err := retryPreempted(ctx, func() error {
		return w.db.InTx(ctx, func(tx *store.Tx) error {
			_, err := tx.PauseTrain(ctx, project, actor, reason)
			return err
		})
	})
	if err != nil {
		return api.Train{}, err
	}
	w.trains.drop(project)
	w.log.InfoContext(ctx, "merge train paused", "project", project, "actor", actor, "reason", reason)
	return w.trainOf(ctx, project)
}

// ResumeTrain ends project's pause (an operator's action) and wakes its cars, so the ones whose
// turn it is merge at once; the next round claims again. Resuming a queue that runs changes
// nothing.
func (w *Workflow) ResumeTrain(ctx context.Context, project, actor string) (api.Train, error) {
	if err := w.knownProject(ctx, project); err != nil {
		return api.Train{}, err
	}
	var was bool
	err := w.db.InTx(ctx, func(tx *store.Tx) error {
		var err error
		was, err = tx.ResumeTrain(ctx, project)
		return err
	})
	if err != nil {
		return api.Train{}, err
	}
	w.trains.drop(project)
	if was {
		w.log.InfoContext(ctx, "merge train resumed", "project", project, "actor", actor)
		w.wakeCars(ctx, project)
	}
	return w.trainOf(ctx, project)
}

// wakeCars makes project's cars look again now: a car waiting for its turn merges at once. Best
// effort: a car not woken looks again at its next scheduled look (poll.long).
func (w *Workflow) wakeCars(ctx context.Context, project string) {
	cars, err := w.db.Train(ctx, project)
	var n int
	if err == nil && len(cars) > 0 {
		refs := make([]store.TaskRef, len(cars))
		for i, c := range cars {
			refs[i] = store.TaskRef{Kind: state.TaskBatch, Ref: strconv.FormatInt(c.ID, 10)}
		}
		n, err = w.db.WakeTasks(ctx, refs)
	}
	if err != nil {
		w.log.WarnContext(ctx, "the cars of a resumed train were not woken; they look again at their next check", "project", project, "err", err)
		return
	}
	if n > 0 {
		w.engine.Nudge(engine.LaneBackground)
	}
}

// errNotWaiting: the request left the waiting set between its read and the write (a claim took it).
var errNotWaiting = errors.New("the request is not in a waiting set")

// MergeNext sends a request waiting in its project's waiting set into the next car, ahead of the
// requests admitted before it (an operator's action: a hotfix). Its timeline says who did.
func (w *Workflow) MergeNext(ctx context.Context, operationID, actor string) (api.RequestView, error) {
	d, err := w.db.RequestDetail(ctx, operationID)
	if err != nil {
		return api.RequestView{}, notFound(err)
	}
	switch {
	case d.Binding == nil:
		return api.RequestView{}, apperr.New(apperr.Conflict, "This request was replaced by a newer application; there is nothing to send.")
	case d.Waiting == nil:
		return api.RequestView{}, apperr.New(apperr.Conflict, "This request is not waiting for a car (it is %s): only a request in a project's waiting set can be sent into the next car.", d.Binding.Status)
	case d.Waiting.NextBy != "":
		return api.RequestView{}, apperr.New(apperr.Conflict, "This request was already sent into the next car of %s by %s.", d.Waiting.Partition, d.Waiting.NextBy)
	}
	project := d.Waiting.Partition
	note := fmt.Sprintf("sent into the next car of %s by %s", project, actor)
	err = retryPreempted(ctx, func() error {
		return w.db.InTx(ctx, func(tx *store.Tx) error {
			// The waiting row first: batch rows before operation and binding (the claim's order).
			sent, err := tx.SendNext(ctx, operationID, actor)
			if err != nil {
				return err
			}
			if !sent {
				return errNotWaiting
			}
			cur, err := tx.Request(ctx, operationID)
			if err != nil {
				return err
			}
			// A step of its own in the timeline, in the status and step it waits at.
			_, err = tx.Transition(ctx, cur, noted(cur, note))
			return err
		})
	})
	switch {
	case errors.Is(err, errNotWaiting):
		return api.RequestView{}, apperr.Wrap(err, apperr.Conflict, "This request just left the waiting set (a batch round took it); look at it again.")
	case errors.Is(err, store.ErrPreempted):
		return api.RequestView{}, apperr.Wrap(err, apperr.Conflict, "The request changed meanwhile; look at it again.")
	case err != nil:
		return api.RequestView{}, err
	}
	w.trains.drop(project)
	w.log.InfoContext(ctx, "request sent into the next car", "operation", operationID, "project", project, "actor", actor)
	return w.Request(ctx, operationID)
}
