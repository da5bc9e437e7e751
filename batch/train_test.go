package batch_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"bindery/batch"
	"bindery/internal/testkit"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// The merge train (batch.train): cars tested on top of one another, merged in order at the heads
// their pipelines passed; a failure costs only what depends on it; a commit from outside the
// train is never merged untested beside a car.

// claimCar admits one request per subject, runs a round and waits until the new car has written
// its branch (it waits at its pipeline).
func (e *env) claimCar(t *testing.T, svc *batch.Service, subjects ...string) store.Batch {
	t.Helper()
	for _, s := range subjects {
		e.admit(t, "op-"+s, s, "t1", "needs access for "+s)
	}
	o := e.round(t, svc, projectA)
	if o.Result != state.RoundClaimed {
		t.Fatalf("round for %v: %+v", subjects, o)
	}
	return e.batchWhen(t, o.BatchID, "to write its branch", func(b store.Batch) bool { return b.HeadSHA != "" && b.MRIID != 0 })
}

// waitQuiet advances the simulator's clock past every pipeline and runs a round, until every
// listed request is merged or failed.
func (e *env) waitQuiet(t *testing.T, svc *batch.Service, ops ...string) {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			for _, op := range ops {
				r := e.request(t, op)
				t.Logf("%s: %s / %s", op, r.Binding.Status, r.Operation.Step)
			}
		}
	})
	// Each look that finds the train still moving moves the simulated pipelines' clock on and
	// runs a round: the train is driven by its rounds and GitLab's time, not by waiting.
	testkit.Eventually(t, "the train to come to rest", func() bool {
		done := true
		for _, op := range ops {
			if st := e.request(t, op).Binding.Status; st != state.StatusMerged && !st.Failed() {
				done = false
			}
		}
		if done {
			return true
		}
		e.clock.Advance(11 * time.Minute)
		if _, err := svc.Round(bg); err != nil {
			t.Fatal(err)
		}
		return false
	})
}

// mergedAt is the head an MR was merged at (the simulator's word for the MR's sha).
func (e *env) mergedInOrder(t *testing.T, batches ...int64) {
	t.Helper()
	var last int64
	for _, id := range batches {
		b := e.settled(t, id)
		if b.Status != state.BatchSucceeded {
			t.Fatalf("batch %d: %+v", id, b)
		}
		var seq int64
		if err := e.db.Raw().QueryRowContext(bg, "SELECT seq FROM mr_merge WHERE project = ? AND mr_iid = ?", projectA, b.MRIID).Scan(&seq); err != nil {
			t.Fatalf("merge of batch %d: %v", id, err)
		}
		if seq <= last {
			t.Fatalf("batch %d merged at %d, not after the one before it (%d)", id, seq, last)
		}
		last = seq
	}
}

// Three cars are in CI at once, each built on the one ahead of it: car 3's pipeline runs on the
// target plus cars 1 and 2 plus its own. A fourth waits (the train is full). They merge in order,
// each at the head its pipeline passed, without a rebase or a second pipeline — under a merge
// commit and under fast-forward merges alike.
func TestThreeCarsInCIAtOnceMergeInOrderAtTheirTestedSHAs(t *testing.T) {
	t.Parallel()
	for _, method := range []string{"merge", "ff"} {
		t.Run(method, func(t *testing.T) {
			storetest.Each(t, func(t *testing.T, db *store.DB) {
				e := setup(t, db, settings{manualClock: true, pipelineTime: 10 * time.Minute, pollTimeout: time.Hour, train: 3, mergeMethod: method})
				svc := e.service(t, "i1")
				car1 := e.claimCar(t, svc, "a1", "a2")
				car2 := e.claimCar(t, svc, "b1")
				car3 := e.claimCar(t, svc, "c1", "c2")
				e.admit(t, "op-d1", "d1", "t1", "waits for a free place")
				if o := e.round(t, svc, projectA); o.Result != state.RoundSlotOccupied {
					t.Fatalf("a fourth car with batch.train 3: %+v", o)
				}
				if n := e.count(t, "SELECT COUNT(*) FROM merge_batch WHERE partition_key = ? AND status IN ('RUNNING', 'BLOCKED')", projectA); n != 3 {
					t.Fatalf("%d cars active, want 3", n)
				}
				if car1.BaseBatch != 0 || car2.BaseBatch != car1.ID || car2.BaseSHA != car1.HeadSHA || car3.BaseBatch != car2.ID || car3.BaseSHA != car2.HeadSHA {
					t.Fatalf("cars not built on one another:\n%+v\n%+v\n%+v", car1, car2, car3)
				}
				// What car 3's pipeline tests: everything ahead of it and its own.
				for _, s := range []string{"a1", "a2", "b1", "c1", "c2"} {
					if _, ok := e.gl.File(projectA, fmt.Sprintf("bindery/batch-%d", car3.ID), "bindings/t1/"+s+".yaml"); !ok {
						t.Errorf("car 3's branch lacks %s's file", s)
					}
				}
				if _, ok := e.gl.File(projectA, fmt.Sprintf("bindery/batch-%d", car1.ID), "bindings/t1/b1.yaml"); ok {
					t.Error("car 1's branch carries car 2's change")
				}

				e.waitQuiet(t, svc, "op-a1", "op-a2", "op-b1", "op-c1", "op-c2")
				e.mergedInOrder(t, car1.ID, car2.ID, car3.ID)
				for _, c := range []store.Batch{car1, car2, car3} {
					b := e.settled(t, c.ID)
					if b.TestedSHA != c.HeadSHA {
						t.Errorf("batch %d merged %q, built and tested %q", c.ID, b.TestedSHA, c.HeadSHA)
					}
				}
				if n := e.gl.Calls("rebase"); n != 0 {
					t.Errorf("%d rebases: a car built on the one ahead needs none", n)
				}
				for _, s := range []string{"a1", "a2", "b1", "c1", "c2"} {
					if !e.onMain(t, "t1", s) {
						t.Errorf("%s's file is not on main", s)
					}
				}
				// The fourth request goes into a car of its own once there is room.
				e.waitQuiet(t, svc, "op-d1")
				e.expect(t, "op-d1", state.StatusMerged, state.StepHandleMerged, state.NextWait)
			})
		})
	}
}

// A poison pill in car 2 fails car 2's pipeline and, since car 3 carries car 2's changes, car
// 3's too. While car 1 is still in CI neither failure is decided (either could be car 1's): not
// retried, not bisected. Once car 1 passed, car 2's failure is its own: it is bisected and goes
// to the end of the train; car 3 — whose failure was car 2's — is rebuilt on car 1 without car
// 2's members, never bisected; car 1 merges, then car 3; the culprit fails alone and everyone
// else merges. (The queue is paused while car 1 passes so that it is still ahead when the
// failure is decided.)
func TestAPoisonPillInCarTwoCostsOnlyWhatDependsOnIt(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{manualClock: true, pipelineTime: 10 * time.Minute, pollTimeout: time.Hour, train: 3, mergeMethod: "merge", flakyRetries: -1})
		f := e.gl.Faults()
		f.PipelineFailOn = []string{"poison"}
		e.gl.SetFaults(f)
		svc := e.service(t, "i1")
		e.pause(t, projectA)
		slow := f
		slow.PipelineDuration = 20 * time.Minute // car 1 is still in CI when cars 2 and 3 end
		e.gl.SetFaults(slow)
		car1 := e.claimCarPaused(t, svc, "a1")
		e.gl.SetFaults(f)
		// Three wait for two free places: a round shares them out (car 2: the pill and b1; car 3: c1).
		e.admit(t, "op-p", "p", "t1", "poison")
		car2 := e.claimCarPaused(t, svc, "b1", "c1")
		car3 := e.claimCarPaused(t, svc)
		if n := e.count(t, "SELECT COUNT(*) FROM merge_batch_request WHERE batch_id = ?", car2.ID); n != 2 {
			t.Fatalf("car 2 holds %d requests, want the pill and b1", n)
		}
		if car3.BaseBatch != car2.ID || car2.BaseBatch != car1.ID {
			t.Fatalf("cars not built on one another: %+v %+v", car2, car3)
		}

		e.clock.Advance(11 * time.Minute) // cars 2 and 3 fail; car 1 runs on
		for _, c := range []store.Batch{car2, car3} {
			testkit.Eventually(t, fmt.Sprintf("batch %d to hold its failure", c.ID), func() bool {
				return strings.Contains(e.task(t, c.ID).Note, "decided once the batches ahead")
			})
			if b, _ := db.Batch(bg, c.ID); b.Bisections != 0 || b.Failing != "" {
				t.Fatalf("batch %d decided a failure while car 1 was untested: %+v", c.ID, b)
			}
		}

		e.clock.Advance(10 * time.Minute) // car 1 passes (and waits for the resume to merge)
		e.batchWhen(t, car2.ID, "to be bisected and sent to the end of the train", func(b store.Batch) bool { return b.Bisections == 1 && b.TrainSeq > car3.TrainSeq })
		e.batchWhen(t, car3.ID, "to be rebuilt on car 1", func(b store.Batch) bool { return b.BaseBatch == car1.ID && b.BaseSHA == car1.HeadSHA })
		if b1 := e.request(t, "op-b1"); b1.Binding.Status != state.StatusMRCreating || b1.Operation.Step != state.StepQueued {
			t.Fatalf("the returned half: %+v", b1.Operation)
		}
		if a1 := e.request(t, "op-a1"); a1.Binding.Status == state.StatusMerged {
			t.Fatal("car 1 merged while its queue was paused")
		}

		e.resume(t, projectA)
		e.waitQuiet(t, svc, "op-a1", "op-p", "op-b1", "op-c1")
		e.expect(t, "op-p", state.StatusCreateFailed, state.StepCreatePipelineFailed, state.NextContactSupport)
		for _, op := range []string{"op-a1", "op-b1", "op-c1"} {
			e.expect(t, op, state.StatusMerged, state.StepHandleMerged, state.NextWait)
		}
		e.mergedInOrder(t, car1.ID, car3.ID)
		if b := e.settled(t, car3.ID); b.Bisections != 0 || b.BaseBatch != car1.ID {
			t.Fatalf("car 3 paid for car 2's failure: %+v", b)
		}
		var culprit string
		if err := db.Raw().QueryRowContext(bg, "SELECT culprit FROM merge_batch WHERE culprit <> '' ORDER BY id LIMIT 1").Scan(&culprit); err != nil || culprit != "op-p" {
			t.Fatalf("the culprit named: %q %v", culprit, err)
		}
	})
}

// With batch.isolationCars, a failure's search runs beside the train: the failed car, bisected,
// leaves its place in the train; the half it returned is claimed into a place beside the train;
// and a newcomer takes a place in the train at once, in CI while the search runs (with
// batch.train 2 and no places beside, the two halves would hold the train and the newcomer would
// wait for the search). The culprit fails alone; the innocent half, passed, goes back into the
// train behind the newcomer's car rather than make it rebase; everyone else merges.
func TestAFailuresSearchRunsBesideTheTrain(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{manualClock: true, pipelineTime: 10 * time.Minute, pollTimeout: time.Hour, train: 2, isolation: 2, mergeMethod: "merge", flakyRetries: -1})
		f := e.gl.Faults()
		f.PipelineFailOn = []string{"poison"}
		e.gl.SetFaults(f)
		svc := e.service(t, "i1")
		e.pause(t, projectA) // the cars are claimed by hand
		car1 := e.claimCarPaused(t, svc, "c1")
		e.admit(t, "op-p", "p", "t1", "poison")
		car2 := e.claimCarPaused(t, svc, "b1")
		if n := e.count(t, "SELECT COUNT(*) FROM merge_batch_request WHERE batch_id = ?", car2.ID); n != 2 || car2.BaseBatch != car1.ID {
			t.Fatalf("car 2 holds %d requests on batch %d, want the pill and b1 on car 1", n, car2.BaseBatch)
		}

		e.clock.Advance(11 * time.Minute) // car 1 passes and merges; car 2 fails and is bisected
		e.batchWhen(t, car2.ID, "to be bisected beside the train", func(b store.Batch) bool { return b.Bisections == 1 && b.SlotNo < 0 })
		e.resume(t, projectA)
		o := e.round(t, svc, projectA)
		if o.Result != state.RoundClaimed {
			t.Fatalf("the returned half's round: %+v", o)
		}
		half := e.batchWhen(t, o.BatchID, "the returned half to write its branch", func(b store.Batch) bool { return b.HeadSHA != "" })
		if half.SlotNo >= 0 || half.BisectOf != car2.ID {
			t.Fatalf("the returned half took place %d (bisection of %d), want one beside the train", half.SlotNo, half.BisectOf)
		}
		car3 := e.claimCar(t, svc, "d1")
		if car3.SlotNo < 0 {
			t.Fatalf("the newcomer's car took place %d, want one in the train", car3.SlotNo)
		}
		if n := e.count(t, "SELECT COUNT(*) FROM merge_batch WHERE partition_key = ? AND status = 'RUNNING' AND ci_started_at IS NOT NULL AND tested_sha = ''", projectA); n != 3 {
			t.Fatalf("%d cars in CI, want 3: the newcomer's in the train, the two halves beside it", n)
		}

		e.waitQuiet(t, svc, "op-p", "op-b1", "op-c1", "op-d1")
		e.expect(t, "op-p", state.StatusCreateFailed, state.StepCreatePipelineFailed, state.NextContactSupport)
		for _, op := range []string{"op-b1", "op-c1", "op-d1"} {
			e.expect(t, op, state.StatusMerged, state.StepHandleMerged, state.NextWait)
		}
		if b := e.settled(t, car3.ID); b.Bisections != 0 || b.HeadSHA != car3.HeadSHA {
			t.Fatalf("the newcomer's car paid for car 2's failure (bisected, or rebased from %s): %+v", car3.HeadSHA, b)
		}
		// The innocent half passed beside the train with the newcomer's car in CI behind it: it
		// went back into the train at its end, so it merged after that car, which needed no
		// rebase for it.
		if b := e.settled(t, half.ID); !b.Rejoined {
			t.Fatalf("the innocent half merged beside the train: %+v", b)
		}
		e.mergedInOrder(t, car3.ID, half.ID)
	})
}

// The two halves of a bisection beside the train, both built on the same target head, pass at
// once under the merge method `merge` — where GitLab would merge the second beside the first's
// commits, a tree no pipeline tested. Cars beside the train keep the train's rule: each goes into
// the train, in the order the database gives them, and merges only on what its pipeline tested.
// The first keeps its branch (it stands on the target, the end of the empty train); the second,
// behind it now, is rebuilt on it and merges after its new pipeline. Nothing is ever merged
// beside a commit bindery made.
func TestTwoHalvesBesideTheTrainPassingAtOnceNeverMergeOneOverTheOther(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{manualClock: true, pipelineTime: 10 * time.Minute, pollTimeout: time.Hour, train: 1, isolation: 2, mergeMethod: "merge", flakyRetries: -1})
		svc := e.service(t, "i1")
		e.service(t, "i2")        // a second instance: the halves' steps run at the same moment
		e.gl.FailNextPipelines(1) // the car's one failure: bisected, and both halves pass
		car := e.claimCar(t, svc, "a1", "a2", "a3", "a4")
		e.clock.Advance(11 * time.Minute)
		first := e.batchWhen(t, car.ID, "to be bisected beside the train and rebuilt with its half", func(b store.Batch) bool {
			return b.Bisections == 1 && b.SlotNo < 0 && b.HeadSHA != "" && b.HeadSHA != car.HeadSHA
		})
		o := e.round(t, svc, projectA)
		if o.Result != state.RoundClaimed {
			t.Fatalf("the returned half's round: %+v", o)
		}
		second := e.batchWhen(t, o.BatchID, "the returned half to write its branch", func(b store.Batch) bool { return b.HeadSHA != "" })
		if second.SlotNo >= 0 || first.BaseSHA == "" || second.BaseSHA != first.BaseSHA || second.BaseBatch != 0 || first.BaseBatch != 0 {
			t.Fatalf("the halves are not both beside the train on the same target head:\n%+v\n%+v", first, second)
		}

		// GitLab carries a merge out in the background (the MR "locked" until the clock moves):
		// the first merge accepted is not done while the other half decides whether it may merge.
		f := e.gl.Faults()
		f.MergeDuration = time.Minute
		e.gl.SetFaults(f)
		e.clock.Advance(11 * time.Minute) // both halves' pipelines pass at once
		locked := func(b store.Batch) bool { return e.gl.MergeRequestState(projectA, b.MRIID) == "locked" }
		testkit.Eventually(t, "one half's merge to be accepted, and the other half to merge too or to wait behind it in the train", func() bool {
			a, err1 := db.Batch(bg, first.ID)
			z, err2 := db.Batch(bg, second.ID)
			if err1 != nil || err2 != nil {
				return false
			}
			if locked(z) {
				a, z = z, a
			}
			return locked(a) && (locked(z) || z.Rejoined && z.TrainSeq > a.TrainSeq)
		})
		e.waitQuiet(t, svc, "op-a1", "op-a2", "op-a3", "op-a4")
		for _, op := range []string{"op-a1", "op-a2", "op-a3", "op-a4"} {
			e.expect(t, op, state.StatusMerged, state.StepHandleMerged, state.NextWait)
		}
		// The database gave them their order: the one that went into the train first merged
		// first, with the branch it passed with; the other was rebuilt on it and tested again.
		a, z := e.settled(t, first.ID), e.settled(t, second.ID)
		before := map[int64]store.Batch{first.ID: first, second.ID: second}
		if z.TrainSeq < a.TrainSeq {
			a, z = z, a
		}
		e.mergedInOrder(t, a.ID, z.ID)
		if !a.Rejoined || !z.Rejoined {
			t.Errorf("the halves merged beside the train: %+v %+v", a, z)
		}
		if was := before[a.ID]; a.HeadSHA != was.HeadSHA || a.TestedSHA != was.HeadSHA {
			t.Errorf("the first half should merge the branch it passed with (%s): %+v", was.HeadSHA, a)
		}
		// Rebuilt on the first half while that one is still in the train, or — when the rebuild's
		// turn comes after the first half's merge (the machine's pace decides which) — on the
		// target, whose head then holds the first half: built on the head it merged onto.
		onFirst := z.BaseBatch == a.ID || (z.BaseBatch == 0 && z.BaseSHA != "" && z.BaseSHA == z.MergedOn)
		if was := before[z.ID]; !onFirst || z.HeadSHA == was.HeadSHA || z.TestedSHA != z.HeadSHA {
			t.Errorf("the second half merged without being rebuilt on the first and tested again: before %+v, after %+v", was, z)
		}
		e.nothingMergedUntested(t)
	})
}

// nothingMergedUntested checks the simulator's merge history: no merge gave the target a tree its
// head's pipelines did not run on.
func (e *env) nothingMergedUntested(t *testing.T) {
	t.Helper()
	for _, m := range e.gl.Merges() {
		for _, f := range m.Untested {
			t.Errorf("MR !%d was merged beside %s of %s (%q by %q), which its pipeline did not test", m.IID, f.Path, f.Commit, f.Title, f.Author)
		}
	}
}

// claimCarPaused is claimCar while the partition is paused: the claim is the store's (a paused
// partition's round claims nothing), the car then runs as any other.
func (e *env) claimCarPaused(t *testing.T, svc *batch.Service, subjects ...string) store.Batch {
	t.Helper()
	e.resume(t, projectA)
	defer e.pause(t, projectA)
	return e.claimCar(t, svc, subjects...)
}

func (e *env) pause(t *testing.T, partition string) {
	t.Helper()
	if err := e.db.InTx(bg, func(tx *store.Tx) error {
		_, err := tx.PauseTrain(bg, partition, "ops@example.com", "test")
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

func (e *env) resume(t *testing.T, partition string) {
	t.Helper()
	if err := e.db.InTx(bg, func(tx *store.Tx) error { _, err := tx.ResumeTrain(bg, partition); return err }); err != nil {
		t.Fatal(err)
	}
}

// A commit from outside the train lands on the target while the first car is in CI: the car
// is not merged beside it untested — it is rebased onto the new head and tested again — and the
// car behind it is rebuilt on the first car's new head.
func TestACommitFromOutsideTheTrainIsNeverMergedUntested(t *testing.T) {
	t.Parallel()
	for _, method := range []string{"merge", "ff"} {
		t.Run(method, func(t *testing.T) {
			storetest.Each(t, func(t *testing.T, db *store.DB) {
				e := setup(t, db, settings{manualClock: true, pipelineTime: 10 * time.Minute, pollTimeout: time.Hour, train: 2, mergeMethod: method})
				car1, car2 := e.twoCarsAndAnOutsideCommit(t)
				c1, c2 := e.settled(t, car1.ID), e.settled(t, car2.ID)
				if c1.TestedSHA == car1.HeadSHA {
					t.Fatalf("car 1 merged the head it had before the outside commit: %+v", c1)
				}
				if c2.TestedSHA == car2.HeadSHA || c2.BaseSHA == car2.BaseSHA {
					t.Fatalf("car 2 was not rebuilt on car 1's new head: before %+v, after %+v", car2, c2)
				}
				if content, ok := e.gl.File(projectA, "main", "README.md"); !ok || content != "a person's change\n" {
					t.Fatalf("the outside commit is gone from main: %q %v", content, ok)
				}
				for _, s := range []string{"a1", "b1"} {
					if !e.onMain(t, "t1", s) {
						t.Errorf("%s's file is not on main", s)
					}
				}
			})
		})
	}
}

// twoCarsAndAnOutsideCommit runs two cars (a1, then b1 built on it) while a person's commit lands
// on the target during car 1's pipeline, until both merged in order; it returns the cars as built.
func (e *env) twoCarsAndAnOutsideCommit(t *testing.T) (car1, car2 store.Batch) {
	t.Helper()
	svc := e.service(t, "i1")
	car1 = e.claimCar(t, svc, "a1")
	car2 = e.claimCar(t, svc, "b1")
	if _, err := e.gl.PushToBranch(projectA, "main", "README.md", "a person's change\n"); err != nil {
		t.Fatal(err)
	}
	e.waitQuiet(t, svc, "op-a1", "op-b1")
	e.mergedInOrder(t, car1.ID, car2.ID)
	return car1, car2
}

// A car whose pipeline passes in the merge phase — after the rebase a commit from outside the
// train made it take — records the head it tested, as a pipeline passed at its pipeline step
// would: the car built on that head finds the car it stands on merged exactly what it carries.
// It is rebuilt once (on the new head), not a second time after the merge, and none of its
// members reads that the car ahead "left the train without merging" when it merged.
func TestACarPassedAfterARebaseRecordsItsTestedSHAAndTheCarBehindStays(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{manualClock: true, pipelineTime: 10 * time.Minute, pollTimeout: time.Hour, train: 2, mergeMethod: "ff"})
		car1, car2 := e.twoCarsAndAnOutsideCommit(t)
		c1 := e.settled(t, car1.ID)
		if c1.TestedSHA == "" || c1.TestedSHA == car1.HeadSHA || c1.TestedSHA != c1.HeadSHA {
			t.Errorf("car 1 passed its pipeline after the rebase but recorded tested %q (head %q, before the rebase %q)", c1.TestedSHA, c1.HeadSHA, car1.HeadSHA)
		}
		rebuilds := 0
		for _, s := range e.steps(t, "op-b1") {
			if strings.Contains(s.Note, "left the train without merging") {
				t.Errorf("car 2's member was told car 1 left without merging, though it merged: %q", s.Note)
			}
			if strings.HasPrefix(s.Note, fmt.Sprintf("rebuilding batch %d", car2.ID)) {
				rebuilds++
			}
		}
		if rebuilds != 1 {
			t.Errorf("car 2 was rebuilt %d times, want once (on car 1's rebased head)", rebuilds)
		}
		// Car 2's one rebuild is on car 1's rebased head: on car 1 while it is still in the train,
		// or — when the rebuild's turn comes after car 1's merge (which of the two the engine runs
		// first depends on the machine's pace) — on the target, whose head is then that same
		// commit (merge method ff).
		if c2 := e.settled(t, car2.ID); (c2.BaseBatch != car1.ID && c2.BaseBatch != 0) || c2.BaseSHA != c1.TestedSHA {
			t.Errorf("car 2 merged built on %d at %q, want car 1's tested head %q", c2.BaseBatch, c2.BaseSHA, c1.TestedSHA)
		}
	})
}

// A commit that lands on the target after the car's turn found the target as it was built on —
// between that look and the merge call — is not merged beside under the merge method `merge`:
// the merge reads the target once more right before its call, and the car is rebased onto the
// new head and tested again.
func TestACommitLandingAfterTheCarsTurnIsNotMergedBesideIt(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{manualClock: true, pipelineTime: 10 * time.Minute, pollTimeout: time.Hour, mergeMethod: "merge"})
		svc := e.service(t, "i1")
		var once sync.Once
		push := func(r *http.Request) {
			if r.Method == http.MethodGet && strings.HasSuffix(r.URL.EscapedPath(), "/repository/branches/main") {
				once.Do(func() {
					if _, err := e.gl.PushToBranch(projectA, "main", "README.md", "a person's change\n"); err != nil {
						t.Error(err)
					}
				})
			}
		}
		e.afterServe.Store(&push) // right after the turn's look at the target
		car := e.claimCar(t, svc, "a1")
		e.waitQuiet(t, svc, "op-a1")
		e.expect(t, "op-a1", state.StatusMerged, state.StepHandleMerged, state.NextWait)
		if b := e.settled(t, car.ID); b.TestedSHA == car.HeadSHA || b.TestedSHA != b.HeadSHA {
			t.Errorf("the car merged the head it had before the push (%s), not one rebased onto it and tested: %+v", car.HeadSHA, b)
		}
		e.nothingMergedUntested(t)
		if content, ok := e.gl.File(projectA, "main", "README.md"); !ok || content != "a person's change\n" {
			t.Fatalf("the outside commit is gone from main: %q %v", content, ok)
		}
	})
}

// A commit pushed to the target inside car 1's merge call is merged beside car 1 under the merge
// method `merge` — the one case nothing in GitLab's API lets bindery prevent. Car 2, built on car
// 1's head, does not merge on top of that untested tree as if the target held what it tested: car
// 1's merge commit does not stand on the target car 1's merge last read, so car 2 rebases onto the
// target and is tested again.
func TestACommitInsideTheCarAheadsMergeCallMakesTheCarBehindTestAgain(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{manualClock: true, pipelineTime: 10 * time.Minute, pollTimeout: time.Hour, train: 2, mergeMethod: "merge"})
		svc := e.service(t, "i1")
		car1 := e.claimCar(t, svc, "a1")
		car2 := e.claimCar(t, svc, "b1")
		var once sync.Once
		inCall := func(r *http.Request) {
			if r.Method == http.MethodPut && strings.HasSuffix(r.URL.EscapedPath(), fmt.Sprintf("/merge_requests/%d/merge", car1.MRIID)) {
				once.Do(func() {
					if _, err := e.gl.PushToBranch(projectA, "main", "README.md", "a person's change\n"); err != nil {
						t.Error(err)
					}
				})
			}
		}
		e.beforeServe.Store(&inCall)
		e.waitQuiet(t, svc, "op-a1", "op-b1")
		e.mergedInOrder(t, car1.ID, car2.ID)
		if c2 := e.settled(t, car2.ID); c2.TestedSHA == car2.HeadSHA || c2.TestedSHA != c2.HeadSHA {
			t.Errorf("car 2 merged the head it was built with on car 1 (%s), not one tested on the target car 1's merge left: %+v", car2.HeadSHA, c2)
		}
		for _, m := range e.gl.Merges() {
			for _, f := range m.Untested {
				if m.IID != car1.MRIID || f.Path != "README.md" || f.Seen {
					t.Errorf("MR !%d was merged beside %s of %s (%q), seen %v: only car 1's merge call may be", m.IID, f.Path, f.Commit, f.Title, f.Seen)
				}
			}
		}
	})
}

// A merge train spreads its cars over a pipeline: with room in the train, the next car is claimed
// once the newest has been in CI for a batch.train-th of the project's median pipeline (SPACED
// before), and at once when batch.maxRequests wait; a backlog is shared among the free places.
func TestARoundSpreadsCarsOverAPipelineAndSharesABacklog(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{manualClock: true, pipelineTime: time.Hour, pollTimeout: 2 * time.Hour, train: 3, maxRequests: 5})
		svc, _ := e.held(t, "i1") // nothing runs: the cars stay as claimed
		// The project's recent pipelines took 9 minutes.
		for i := range 3 {
			if _, err := db.Raw().ExecContext(bg, "INSERT INTO merge_batch (partition_key, project, status, ci_started_at, ci_passed_at) VALUES (?, ?, ?, ?, ?)",
				projectA, projectA, state.BatchSucceeded, fmt.Sprintf("2026-01-0%d 10:00:00", i+1), fmt.Sprintf("2026-01-0%d 10:09:00", i+1)); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 6 {
			e.admit(t, fmt.Sprintf("op-%d", i), fmt.Sprintf("s%d", i), "t1", "backlog")
		}
		first := e.round(t, svc, projectA)
		if first.Result != state.RoundClaimed || first.Claimed != 2 {
			t.Fatalf("an empty train with 6 waiting and 3 places: %+v, want a car of 2", first)
		}
		started := func(ago time.Duration) {
			now, err := db.Now(bg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.Raw().ExecContext(bg, "UPDATE merge_batch SET ci_started_at = ? WHERE id = ?", now.Add(-ago).UTC().Format("2006-01-02 15:04:05.000000"), first.BatchID); err != nil {
				t.Fatal(err)
			}
		}
		started(time.Minute)
		if o := e.round(t, svc, projectA); o.Result != state.RoundSpaced {
			t.Fatalf("a minute into the newest car's pipeline: %+v, want SPACED", o)
		}
		// Requests that waited a spacing already go at once, whatever the newest car.
		now, err := db.Now(bg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Raw().ExecContext(bg, "UPDATE merge_batch_request SET created_at = ? WHERE batch_id IS NULL",
			now.Add(-4*time.Minute).UTC().Format("2006-01-02 15:04:05.000000")); err != nil {
			t.Fatal(err)
		}
		if o := e.round(t, svc, projectA); o.Result != state.RoundClaimed || o.Claimed != 2 {
			t.Fatalf("requests that waited a third of a pipeline: %+v, want a car sharing the 4 left over 2 places", o)
		}
		// batch.maxRequests waiting do not wait for the spacing.
		for i := 6; i < 10; i++ {
			e.admit(t, fmt.Sprintf("op-%d", i), fmt.Sprintf("s%d", i), "t1", "a burst")
		}
		if o := e.round(t, svc, projectA); o.Result != state.RoundClaimed {
			t.Fatalf("with batch.maxRequests waiting: %+v, want a car at once", o)
		}
	})
}

// A car whose pipeline fails while the car behind it failed too — it carries the first one's
// changes — has failed twice: no flaky retry runs, its failure is decided at once (alone, its
// member fails), and the car behind is rebuilt without it and passes, instead of waiting through
// a retry and the bisection.
func TestAFailureThatFailsTheCarBehindTooIsDecidedAtOnce(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{manualClock: true, pipelineTime: 10 * time.Minute, pollTimeout: time.Hour, train: 3, mergeMethod: "merge", flakyRetries: 1})
		f := e.gl.Faults()
		f.PipelineFailOn = []string{"poison"}
		e.gl.SetFaults(f)
		svc := e.service(t, "i1")
		e.admit(t, "op-p", "p", "t1", "poison")
		slow := f
		slow.PipelineDuration = 12 * time.Minute // car 2's pipeline ends first
		e.gl.SetFaults(slow)
		car1 := e.claimCar(t, svc)
		e.gl.SetFaults(f)
		car2 := e.claimCar(t, svc, "b1")
		if car2.BaseBatch != car1.ID {
			t.Fatalf("car 2 not built on car 1: %+v", car2)
		}
		e.clock.Advance(11 * time.Minute) // car 2 fails (it carries the pill): held behind car 1
		testkit.Eventually(t, "car 2 to hold its failure", func() bool { return strings.HasSuffix(e.task(t, car2.ID).Note, "their changes are in its branch)") })
		e.clock.Advance(2 * time.Minute) // car 1 fails
		failed := e.batchWhen(t, car1.ID, "to fail without a retry", func(b store.Batch) bool { return b.Status == state.BatchFailed })
		rebuilt := e.batchWhen(t, car2.ID, "to be rebuilt without car 1", func(b store.Batch) bool { return b.BaseBatch == 0 && b.HeadSHA != car2.HeadSHA })
		if n := e.count(t, "SELECT COUNT(*) FROM merge_batch WHERE id = ? AND note LIKE '%failure twice%'", failed.ID); n != 1 {
			t.Fatalf("car 1's failure does not say it failed twice: %q", failed.Note)
		}
		e.waitQuiet(t, svc, "op-p", "op-b1")
		e.expect(t, "op-b1", state.StatusMerged, state.StepHandleMerged, state.NextWait)
		e.expect(t, "op-p", state.StatusCreateFailed, state.StepCreatePipelineFailed, state.NextContactSupport)
		if b := e.settled(t, car2.ID); b.Status != state.BatchSucceeded || b.Bisections != 0 {
			t.Fatalf("car 2 after car 1 left: %+v (rebuilt %+v)", b, rebuilt)
		}
	})
}
