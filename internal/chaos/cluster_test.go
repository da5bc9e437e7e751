//go:build e2e || chaos

package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"bindery/internal/testkit/proc"
)

// Identities: users are email-shaped accounts (no directory entry needed); ops is the operator
// of authz.opsRule in the static permission rules.
const (
	loginHeader = "X-Forwarded-User"
	opsIdentity = "ops@chaos.example"
	botToken    = "chaos-bot-token"
)

// projects are the catalog's GitLab projects: partitions that batch in parallel, two targets
// each. Four by default; BINDERY_CHAOS_PROJECTS makes hundreds (hundreds of batches at once).
func projects(n int) []string {
	names := []string{"chaos/alpha", "chaos/beta", "chaos/gamma", "chaos/delta"}
	for i := len(names); i < n; i++ {
		names = append(names, fmt.Sprintf("chaos/p%03d", i))
	}
	return names[:n]
}

func targetKeys(n int) []string {
	var keys []string
	for _, p := range projects(n) {
		name := strings.TrimPrefix(p, "chaos/")
		keys = append(keys, name+"-read", name+"-write")
	}
	return keys
}

// configYAML is the one configuration file of the sim and the three serve instances (each serve
// gets its own -addr). faults switches the sim.* fault knobs; the sim watches the file, so
// rewriting it with faults=false turns them off.
func configYAML(r run, dsn, proxyURL, simURL string, faults bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, `server:
  addr: 127.0.0.1:0
  publicURL: %s
  trustedProxies: [127.0.0.1/32]
  shutdownTimeout: 3s
database:
  dsn: %q
  maxOpenConns: 10
  maxIdleConns: 5
log:
  level: info
workers:
  size: 8
  first: 4
  idlePoll: 200ms
ratelimit:
  apply: 0
  revoke: 0
  renew: 0
identity:
  loginHeader: %s
apply:
  mode: OPEN
authz:
  opsRule: bindery-ops
workflow:
  approvalFirst: true
  leaseTTL: 5s
batch:
  maxRequests: 20
  leaseTTL: 5s
  flakyRetries: 1
  train: %d # cars tested on top of one another …
  isolationCars: %d # … and a failure's bisection beside the train
approval:
  maxRetries: 3
  backoff: 100ms
  pollAfter: 3s # a decision whose callback was lost (callbackLossRate) is read from its ticket
hooks:
  approvalSecret: chaos-approval-secret
  deployToken: chaos-deploy-token
  gitlabToken: chaos-gitlab-token
gitlab:
  baseURL: %s/sim/gitlab
  botToken: %s
  reviewerTokens: [chaos-reviewer-1-token, chaos-reviewer-2-token]
  timeout: 3s
approvalSystem:
  url: %s/sim/approval
  timeout: 3s
permission:
  rules:
    bindery-ops: [%s]
breaker:
  failures: 5
  cooldown: 2s
poll:
  short: 200ms
  shortCount: 20
  long: 500ms
  timeout: %s
reconcile:
  minAge: 2s
  deployOverdue: 30s # internal/chaos/check_test.go deployOverdue
notify:
  timeout: 2s
  webhooks: # the sim's receiver counts each delivery by webhook-id (internal/chaos/notify_check_test.go)
    - {name: chaos, url: "%[11]s/sim/webhooks/chaos", secrets: [%[12]s], events: "*"}
cron:
  rounds: "@every 1s"
  drift: "@every 2s"
  reconcile: "@every 2s"
  sweep: "@every 2s"
  expiry: "@every 1m"
  purge: "@every 1h"
`, proxyURL, dsn, loginHeader, trainCars, besideCars, simURL, botToken, simURL, opsIdentity, pollTimeout(r), simURL, chaosWebhookSecret)
	fmt.Fprintf(&b, `sim:
  timeScale: 4
  gitlab:
    pipelineDuration: %s
    rebaseDuration: 1s
    approvalsRequired: 2
    mergeMethod: merge # GitLab's default: it merges a branch whose base is behind (internal/chaos/check_test.go mergedAsTested)
`, r.pipeline)
	if faults {
		fmt.Fprintf(&b, `    latency: 20ms
    errorRate: 0.03
    dropRate: 0.02
    pipelineFailRate: 0.15
    pipelineStuckRate: 0.02
    needRebaseRate: 0.2
    rebaseConflictRate: 0.1
  approval:
    autoApprove: true
    callbackDelay: 0s
    errorRate: 0.05
    dropRate: %s
    duplicateRate: 0.1
    callbackLossRate: 0.1
    reorder: true
  deploy:
    delay: 2s
    dropRate: 0.2
    withOperationIds: false
    exactRate: 0.5
`, approvalDropRate)
	} else {
		b.WriteString(`  approval:
    autoApprove: true
    callbackDelay: 0s
  deploy:
    delay: 2s
    dropRate: 0
`)
	}
	b.WriteString("targets:\n")
	for _, p := range projects(r.projects) {
		name := strings.TrimPrefix(p, "chaos/")
		for _, k := range []string{"read", "write"} {
			fmt.Fprintf(&b, "  - key: %s-%s\n    title: %s %s\n    project: %s\n    branch: main\n    path: bindings/%s-%s/{subject}.yaml\n    ruleCodes: []\n",
				name, k, name, k, p, name, k)
			if k == "read" {
				// Bindings that expire, renewed by their holders (internal/chaos/access_test.go).
				b.WriteString("    ttl: 30d\n    maxTtl: 365d\n")
			}
		}
	}
	return b.String()
}

// The merge train of each project (batch.train) and the places beside it for a failure's
// bisection (batch.isolationCars): what the checks of I1 bound the active batches by.
const trainCars, besideCars = 3, 2

// pollTimeout is poll.timeout: 12 s, or three real pipeline lengths when pipelines are longer
// (a pipeline that outlives it blocks its batch — that is the stuck faults' job, not the rule).
func pollTimeout(r run) time.Duration {
	return max(12*time.Second, 3*r.pipeline/4)
}

// approvalDropRate is the share of tickets the approval simulator opens but whose answer it
// loses. The ticket step retries a lost answer (the approval system opens one ticket per
// operationId), and a decision that arrives after the send looked failed is still taken.
const approvalDropRate = "0.05"

// writeConfig replaces the file in one rename, as an editor would, so a watcher never reads
// half a file.
func writeConfig(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// instance is one `bindery serve` slot: a fixed address, restarted in place after a kill.
type instance struct {
	idx  int
	addr string
	mu   sync.Mutex
	p    *proc.Process
	logs []string // every incarnation's log file
}

func (in *instance) url() string { return "http://" + in.addr }

func (in *instance) current() *proc.Process {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.p
}

func (in *instance) start(dir, bin, cfg string) error {
	p, err := proc.Start(context.Background(), dir, nil, fmt.Sprintf("serve%d", in.idx), bin, "serve", "-config", cfg, "-addr", in.addr)
	if err != nil {
		return err
	}
	in.mu.Lock()
	in.p = p
	in.logs = append(in.logs, p.Log)
	in.mu.Unlock()
	return proc.WaitReady(context.Background(), p, in.url()+"/readyz", 60*time.Second)
}

// proxy is a round-robin reverse proxy in front of the instances, as a load balancer would be:
// a request whose connection is refused (the instance is down) goes to the next instance, so
// users, the simulators' callbacks and the operator survive a kill. Any other transport error
// (the instance died mid-request) answers 502: the caller cannot know whether it took effect,
// and resends (idempotency keys, signed callbacks and deploy callbacks make that safe).
type proxy struct {
	backends []*instance
	next     atomic.Uint64
	rt       http.RoundTripper
	failover atomic.Int64 // requests sent on to another instance after a refused connection
}

func newProxy(backends []*instance) *proxy {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	return &proxy{backends: backends, rt: tr}
}

func (p *proxy) handler() http.Handler {
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = "http", "backend"
			r.SetXForwarded()
		},
		Transport: p,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			w.WriteHeader(http.StatusBadGateway)
		},
	}
}

// RoundTrip picks the next instance; a refused dial moves on to the one after.
func (p *proxy) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
	}
	start := p.next.Add(1)
	var last error
	for i := range uint64(len(p.backends)) {
		b := p.backends[(start+i)%uint64(len(p.backends))]
		out := req.Clone(req.Context())
		out.URL = &url.URL{Scheme: "http", Host: b.addr, Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery}
		out.Host = b.addr
		if body != nil {
			out.Body = io.NopCloser(bytes.NewReader(body))
			out.ContentLength = int64(len(body))
		}
		resp, err := p.rt.RoundTrip(out)
		if err == nil {
			return resp, nil
		}
		last = err
		var op *net.OpError
		if !errors.As(err, &op) || op.Op != "dial" {
			return nil, err
		}
		p.failover.Add(1)
	}
	return nil, last
}

// serveProxy listens on a free port and serves the proxy until ctx ends.
func serveProxy(ctx context.Context, t *testing.T, p *proxy) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: p.handler(), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	return "http://" + ln.Addr().String()
}
