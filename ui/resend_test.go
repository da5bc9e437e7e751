//go:build e2e

package ui_test

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A receiver that answered 410 Gone is disabled: in the real demo's ops console its failed
// deliveries offer no "Send again" (it would send nothing) but say to enable the receiver first,
// and the API refuses the resend with those words. Enabled again, "Send again" is offered and
// sends.
func TestSendAgainIsOfferedOnlyWhereItCanSend(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	gone := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusGone)
	}))
	t.Cleanup(gone.Close)
	url, configPath := bootDemoAt(t)
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32)))
	editDemoConfig(t, url, configPath, "workflow:\n",
		"notify:\n  webhooks:\n    - {name: gone, url: \""+gone.URL+"/\", secrets: ["+secret+"], events: \"*\"}\nworkflow:\n", `"key":"notify.webhooks","effective":"1 `)
	demoApply(t, url, "alice", "grafana-editor", "dashboards for the incident review")
	demoWaitAPI(t, url+"/api/ops/notify", `"disabledReason":"it answered 410 Gone`)

	b := newBrowser(t, 1280, 900)
	openOpsConsole(b, url)
	const receiver = `#notify [data-endpoint="webhook:gone"]`
	b.waitFor("the disabled receiver's failed delivery", `document.querySelector('`+receiver+` [data-resend-after-enable]')`, 30*time.Second)
	if n := evalJS[int](b, `document.querySelectorAll('`+receiver+` [data-resend]').length`); n != 0 {
		t.Fatalf("a disabled receiver offers %d Send again buttons", n)
	}
	if txt := evalJS[string](b, `document.querySelector('`+receiver+` [data-resend-after-enable]').innerText`); !strings.Contains(txt, "Enable the receiver first") {
		t.Fatalf("the row says %q", txt)
	}
	id := evalJS[string](b, `document.querySelector('`+receiver+` [data-resend-after-enable]').dataset.resendAfterEnable`)
	if code, text := demoCall(t, "POST", url+"/api/ops/notify/deliveries/"+id+"/resend", "ops", `{"operationId":"resend-disabled"}`); code != 409 || !strings.Contains(text, "enable the receiver first") {
		t.Fatalf("a resend to the disabled receiver: %d %s", code, text)
	}

	b.click(`[data-enable="webhook:gone"]`)
	b.waitFor("Send again offered once enabled", `document.querySelector('`+receiver+` [data-resend]')`, 20*time.Second)
	before := hits.Load()
	b.click(receiver + ` [data-resend]`)
	b.waitFor("the notice", `[...document.querySelectorAll('.notice')].some((n) => n.innerText.includes('sent again'))`, 10*time.Second)
	demoWaitAPI(t, url+"/api/ops/notify", `"disabledReason":"it answered 410 Gone`)
	if hits.Load() <= before {
		t.Fatal("the delivery sent again never reached the receiver")
	}
}
