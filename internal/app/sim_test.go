package app_test

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"

	"bindery/internal/remote/approval"
	"bindery/internal/remote/gitlab"
	"bindery/store/storetest"
)

const demoSims = `
gitlab:
  botToken: demo-bot-token
  reviewerTokens: [demo-reviewer-1-token, demo-reviewer-2-token]
targets:
  - key: t1
    project: infra/access-config
    path: "bindings/{subject}.yaml"
`

// In demo mode the simulators are mounted under /sim/ and bindery's real clients reach them
// over HTTP; their fault knobs follow edits of the config file.
func TestDemoServesTheSimulatorsToTheRealClients(t *testing.T) {
	t.Parallel()
	b := boot(t, storetest.SQLiteDSN(t), demoSims)
	if b.Sims() == nil {
		t.Fatal("demo mode without simulators")
	}
	gl, err := gitlab.New(b.Config(), gitlab.Options{DefaultBaseURL: b.URL() + "/sim/gitlab", Metrics: b.Metrics()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := gl.CreateBranch(ctx, "infra/access-config", "demo-branch", "main"); err != nil {
		t.Fatalf("CreateBranch through the mounted simulator: %v", err)
	}
	ap, err := approval.New(b.Config(), approval.Options{DefaultURL: b.URL() + "/sim/approval"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ap.Open(ctx, approval.Ticket{OperationID: "op-1", Subject: "alice@example.com", TargetKey: "t1", CallbackURL: b.URL() + "/hooks/approval"}); err != nil {
		t.Fatalf("open ticket: %v", err)
	}
	if code, body := get(t, b.URL()+"/sim/approvals"); code != 200 || !strings.Contains(body, `"operationId":"op-1"`) {
		t.Fatalf("inbox %d %s", code, body)
	}
	// A fault switched on in the file applies to the next call, and off again.
	write := func(extra string) {
		if err := os.WriteFile(b.configPath, []byte(demoSims+extra), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := b.Config().Reload(); err != nil {
			t.Fatal(err)
		}
	}
	write("sim:\n  gitlab:\n    errorRate: 1\n    faultEndpoints: [get_branch]\n")
	if _, err := gl.GetBranch(ctx, "infra/access-config", "demo-branch"); err == nil {
		t.Fatal("errorRate 1 from the config file did not apply")
	}
	write("sim: {}\n") // the section dropped on purpose (a file that merely lacks it is refused as cut short)
	if _, err := gl.GetBranch(ctx, "infra/access-config", "demo-branch"); err != nil {
		t.Fatalf("after switching the fault off: %v", err)
	}
	if code, body := get(t, b.URL()+"/metrics"); code != 200 || !strings.Contains(body, `bindery_outbound_requests_total{system="gitlab",endpoint="get_branch",status="5xx"} 1`) {
		t.Fatalf("GitLab call metrics not on the app's /metrics")
	}
	resp, err := http.Get(b.URL() + "/sim/nothing-here")
	if err != nil || resp.StatusCode != 404 {
		t.Fatalf("unknown simulator path: %v %v", resp, err)
	}
	resp.Body.Close()
}

func TestServeModeHasNoSimulators(t *testing.T) {
	t.Parallel()
	b := bootServe(t, storetest.SQLiteDSN(t), "")
	if b.Sims() != nil {
		t.Fatal("serve mode mounted simulators")
	}
	if code, _ := get(t, b.URL()+"/sim/approvals"); code != 404 {
		t.Fatalf("/sim/approvals in serve mode: %d", code)
	}
}
