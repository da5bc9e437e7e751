package workflow_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"bindery/internal/remote/gitlab"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// BENCHMARKS.md, 'Drift': one drift round over P projects of F binding files each, every file a
// binding of bindery's (adopted, so nothing drifts): the first round (every branch moved: it reads
// every tree), a round when nothing moved (one branch read per project), a round after every
// branch moved (an unrelated commit on each: every tree read again, every file compared), and a
// round after one file was removed (found in that round: within one cron.drift interval). GitLab
// calls and time of each. Run with
//
//	go test ./workflow -run '^$' -bench DriftRound -benchtime 1x
func BenchmarkDriftRound(b *testing.B) {
	for _, size := range []struct{ projects, files int }{{5, 200}, {50, 2000}} {
		b.Run(fmt.Sprintf("%dx%d", size.projects, size.files), func(b *testing.B) {
			for range b.N {
				driftRound(b, size.projects, size.files)
			}
		})
	}
}

func driftRound(b *testing.B, projects, files int) {
	var targets strings.Builder
	targets.WriteString("targets:\n")
	for i := range projects {
		fmt.Fprintf(&targets, "  - {key: t%d, title: T%d, project: infra/p%d, path: \"bindings/t%d/{subject}.yaml\"}\n", i, i, i, i)
	}
	db := storetest.SQLite(b)
	h := setup(b, db, options{realBatch: true, extra: fastSims + targets.String()})
	var adopt []store.Adoption
	for i := range projects {
		proj := fmt.Sprintf("infra/p%d", i)
		if _, err := h.gl.GetBranch(bg, proj, "main"); err != nil { // the simulator makes a project at its first read
			b.Fatal(err)
		}
		fs := map[string]string{}
		for j := range files {
			subject := fmt.Sprintf("u%05d@example.com", j)
			path := fmt.Sprintf("bindings/t%d/%s.yaml", i, subject)
			fs[path] = "subject: " + subject + "\n"
			adopt = append(adopt, store.Adoption{OperationID: fmt.Sprintf("adopted-%d-%d", i, j), SubjectID: subject, TargetKey: fmt.Sprintf("t%d", i),
				Project: proj, Reason: "bench", Note: "bench", Path: path, Blob: gitlab.BlobID([]byte(fs[path]))})
		}
		if _, err := h.sims.GitLab.PushFilesToBranch(proj, "main", fs); err != nil {
			b.Fatal(err)
		}
	}
	if err := db.InTx(bg, func(tx *store.Tx) error {
		return tx.Adopt(bg, adopt, store.Change{To: state.StatusValidated, Step: state.StepCalledBack})
	}); err != nil {
		b.Fatal(err)
	}
	round := func(name string, wantRead, wantOpened int) {
		before := h.sims.GitLab.Usage().TotalCalls()
		start := time.Now()
		res, err := h.wf.Drift(bg)
		took := time.Since(start)
		if err != nil || res.Read != wantRead || res.Opened != wantOpened {
			b.Fatalf("%s: %+v %v, want %d read, %d opened", name, res, err, wantRead, wantOpened)
		}
		b.ReportMetric(took.Seconds(), name+"-s")
		b.ReportMetric(float64(h.sims.GitLab.Usage().TotalCalls()-before), name+"-calls")
	}
	round("first", projects, 0)
	round("still", 0, 0)
	for i := range projects {
		if _, err := h.sims.GitLab.PushToBranch(fmt.Sprintf("infra/p%d", i), "main", "README.md", "moved\n"); err != nil {
			b.Fatal(err)
		}
	}
	round("moved", projects, 0)
	if _, err := h.sims.GitLab.RemoveFromBranch("infra/p0", "main", "bindings/t0/u00000@example.com.yaml"); err != nil {
		b.Fatal(err)
	}
	round("removed", 1, 1)
}
