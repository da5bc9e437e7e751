package notify

import (
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"bindery/internal/platform/config"
	"bindery/internal/remote/gitlab"
	"bindery/internal/sim"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

const gitlabConfig = `
gitlab:
  botToken: bot-token
  reviewerTokens: [rev1-token]
  timeout: 5s
sim:
  gitlab:
    pipelineDuration: 0s
notify:
  timeout: 2s
targets:
  - {key: team-a, project: infra/acl, path: "acl/{subject}.yaml"}
`

// The batch's merge request gets one note from the bot when it opens, listing its members with
// links to their requests, and the same note is edited when a bisection isolates the change
// that fails — through bindery's GitLab client, against the simulated GitLab over HTTP.
func TestTheBatchMergeRequestNote(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		src := config.NewStatic(config.MustParse(gitlabConfig))
		sims := sim.New(sim.Options{Config: src})
		srv := httptest.NewServer(sims.Handler())
		ctx, cancel := context.WithCancel(context.Background())
		if err := sims.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cancel(); _ = sims.Stop(context.Background()); srv.Close() })
		gl, err := gitlab.New(src, gitlab.Options{DefaultBaseURL: srv.URL + "/sim/gitlab"})
		if err != nil {
			t.Fatal(err)
		}
		const project = "infra/acl"
		if _, err := gl.CreateCommit(bg, project, gitlab.CommitRequest{Branch: "bindery/batch-5", StartBranch: "main", Message: "batch 5",
			Actions: []gitlab.FileAction{{Action: gitlab.ActionCreate, Path: "acl/a.yaml", Content: "a\n"}}}); err != nil {
			t.Fatal(err)
		}
		mr, err := gl.CreateMergeRequest(bg, project, gitlab.MergeRequestRequest{SourceBranch: "bindery/batch-5", TargetBranch: "main", Title: "Batch 5"})
		if err != nil {
			t.Fatal(err)
		}
		startEnv(t, db, src, "i-1", func(o *Options) { o.Notes = gl })

		if _, err := db.Tell(bg, store.Event{Type: state.EventBatchOpened, BatchID: 5,
			Facts: store.EventFacts{BatchID: 5, Project: project, MRIID: mr.IID, Members: []string{"op-1", "op-2"}}}); err != nil {
			t.Fatal(err)
		}
		settled(t, db)
		notes := sims.GitLab.Notes(project, mr.IID)
		if len(notes) != 1 || notes[0].Author == "" || notes[0].Edited {
			t.Fatalf("notes after the opening %+v", notes)
		}
		for _, want := range []string{"batch 5 carries 2 changes", "[op-1](http://bindery.test/requests/op-1)", "[op-2](http://bindery.test/requests/op-2)"} {
			if !strings.Contains(notes[0].Body, want) {
				t.Fatalf("note without %q:\n%s", want, notes[0].Body)
			}
		}
		// Batch 7 (of the bisection batch 5 started) isolates op-2: the same note is edited.
		if _, err := db.Tell(bg, store.Event{Type: state.EventBatchCulprit, BatchID: 7,
			Facts: store.EventFacts{BatchID: 7, Project: project, MRIID: 99, RootBatch: 5, RootMRIID: mr.IID, Culprit: "op-2", Bisections: 1}}); err != nil {
			t.Fatal(err)
		}
		settled(t, db)
		notes = sims.GitLab.Notes(project, mr.IID)
		if len(notes) != 1 || !notes[0].Edited || !strings.Contains(notes[0].Body, "[op-1](") ||
			!strings.Contains(notes[0].Body, "isolated the change that fails:** [op-2](http://bindery.test/requests/op-2) — batch 7 failed with it alone, after 1 bisection") {
			t.Fatalf("notes after the culprit %+v", notes)
		}
		ds := deliveries(t, db)
		if len(ds) != 2 || ds[0].Channel != ChannelMRNote || ds[0].Target != project+"!"+itoa(mr.IID) || ds[0].Status != store.DeliveryDelivered {
			t.Fatalf("deliveries %+v", ds)
		}
		// The culprit told again (a later bisection of the same root): the note is edited, not
		// doubled, and names the culprit once.
		if _, err := db.Tell(bg, store.Event{Type: state.EventBatchCulprit, BatchID: 8,
			Facts: store.EventFacts{BatchID: 8, Project: project, RootBatch: 5, RootMRIID: mr.IID, Culprit: "op-2", Bisections: 2}}); err != nil {
			t.Fatal(err)
		}
		settled(t, db)
		if notes = sims.GitLab.Notes(project, mr.IID); len(notes) != 1 || strings.Count(notes[0].Body, "isolated the change") != 1 || !strings.Contains(notes[0].Body, "batch 8") {
			t.Fatalf("a second note: %+v", notes)
		}
	})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
