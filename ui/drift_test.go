//go:build e2e

package ui_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"bindery/api"
	"bindery/internal/testkit"
	"bindery/internal/vocab/state"
)

// docs/drift.md, in the real demo: somebody deletes a binding's file in the config repository
// outside bindery; the drift check (cron.drift, every second here) finds it; the requester's page
// says their access was removed, by which commit and whom; an operator restores the file from the
// console's Drift section; the restore goes through a batch round, CI, the merge and the deploy,
// the file is back, the finding closed and the requester's page no longer says it.
func TestAFileDeletedOutsideBinderyIsShownToItsRequesterAndRestoredFromTheConsole(t *testing.T) {
	t.Parallel()
	s := startSite(t, set("cron.drift", "@every 1s"))
	op := s.validated("alice", "payments-db-readonly", "quarterly revenue report")
	v := s.request(op)
	path := "bindings/payments-db-readonly/" + v.Subject + ".yaml"
	gl := s.sims().GitLab
	content, ok := gl.File(v.Project, "main", path)
	if !ok {
		t.Fatalf("no file %s in %s", path, v.Project)
	}
	removed, err := gl.RemoveFromBranch(v.Project, "main", path)
	if err != nil {
		t.Fatal(err)
	}
	v = s.waitRequest(op, "the drift check finding the removal", func(v api.RequestView) bool { return v.Drift != nil })
	if v.Drift.Kind != "missing" || v.Drift.Commit != removed || v.Status != state.StatusValidated {
		t.Fatalf("the request's drift: %+v (%s)", v.Drift, v.Status)
	}

	b := newBrowser(t, 1280, 900)
	b.do("sign in as alice", chromedp.Navigate(s.URL+"/"), chromedp.Evaluate[chromedp.Void](`document.cookie = 'bindery_user=alice; Path=/'`))
	b.do("open alice's request", chromedp.Navigate(s.URL+"/requests/"+op))
	b.waitFor("the removal on alice's page", `document.querySelector('#drift-card[data-drift=missing]')`, 20*time.Second)
	said := evalJS[string](b, `document.querySelector('#drift-card').innerText`)
	if want := "was removed outside bindery by commit " + removed[:7] + " (A. Person) on "; !strings.Contains(said, want) {
		t.Fatalf("alice's page says %q, want %q", said, want)
	}
	b.screenshot("drift-requester")

	b.do("sign in as ops", chromedp.Evaluate[chromedp.Void](`document.cookie = 'bindery_user=ops; Path=/'`), chromedp.Navigate(s.URL+"/ops"))
	var list api.DriftList
	s.call("GET", "/api/ops/drift", "ops", "", 200, &list)
	if len(list.Items) != 1 {
		t.Fatalf("findings: %+v", list)
	}
	id := list.Items[0].ID
	item := fmt.Sprintf(`#drift [data-drift-id="%d"]`, id)
	b.waitFor("the finding in the console's Drift section", `document.querySelector('`+item+`[data-drift-state=open]')`, 20*time.Second)
	b.screenshot("drift-console")
	b.click(fmt.Sprintf(`#drift [data-drift-restore="%d"]`, id))
	b.waitFor("the restore on its way", `document.querySelector('`+item+` [data-drift-restore]')`, 20*time.Second)

	// The restore is a change like any other: a batch round takes it, CI and the merge follow,
	// and the deploy's callback closes the finding.
	testkit.Eventually(t, "the restore deployed", func() bool {
		var list api.DriftList
		s.call("GET", "/api/ops/drift", "ops", "", 200, &list)
		if len(list.Items) == 1 && list.Items[0].State == "closed" {
			return true
		}
		s.send("POST", "/api/ops/batches/run", "ops", `{"operationId":"`+s.opID()+`"}`)
		return false
	})
	if got, ok := gl.File(v.Project, "main", path); !ok || got != content {
		t.Fatalf("the file after the restore: %q, want %q", got, content)
	}
	b.waitFor("the finding closed in the console", `document.querySelector('`+item+`[data-drift-state=closed]')`, 20*time.Second)
	if v := s.request(op); v.Drift != nil || v.Status != state.StatusValidated {
		t.Fatalf("after the restore: %+v %s", v.Drift, v.Status)
	}

	// A file somebody added by hand: the console's import lists it (a dry run), then adopts it.
	hand := "bindings/payments-db-readonly/bob@example.com.yaml"
	if _, err := gl.PushToBranch(v.Project, "main", hand, "subject: bob@example.com\ntarget: payments-db-readonly\nreason: on call\n"); err != nil {
		t.Fatal(err)
	}
	b.click(`#import-dry-run`)
	row := `#import-items tr[data-import-path="` + hand + `"]`
	b.waitFor("the hand-made file in the dry run", `document.querySelector('`+row+`')`, 20*time.Second)
	if becomes := evalJS[string](b, `document.querySelector('`+row+` td[data-label=Becomes]').innerText`); becomes != "a binding in effect" {
		t.Fatalf("the dry run says the file becomes %q", becomes)
	}
	b.screenshot("drift-import")
	b.click(`#import-run`)
	b.waitFor("the import done", `!document.querySelector('#import-items') && document.querySelector('.notices').innerText.includes('Imported: 1 binding')`, 20*time.Second)
	if ops := s.myRequests("bob"); len(ops) != 1 || s.request(ops[0]).Status != state.StatusValidated {
		t.Fatalf("bob's requests after the import: %v", ops)
	}

	b.do("back to alice's page", chromedp.Evaluate[chromedp.Void](`document.cookie = 'bindery_user=alice; Path=/'`), chromedp.Navigate(s.URL+"/requests/"+op))
	b.waitFor("alice's page without the removal", `document.querySelector('#state-badge') && !document.querySelector('#drift-card')`, 20*time.Second)
}
