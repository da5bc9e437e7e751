// Package doctor checks a deployment against the real systems its configuration names, before
// the first request finds the mistake: the database, GitLab (tokens, scopes, accounts, projects,
// branch protection, pipelines, the merge method, the webhook), the approval system, the
// permission service, the callback secrets, notification endpoints, OIDC discovery and the
// database clock. Each check is one line — ok, warn or FAIL, what was checked, what to do — and
// nothing is written anywhere: GitLab and the approval system are only read, and no message is
// sent unless asked (Options.SendTest). `bindery doctor` prints the report; docs/install.md runs
// it before the first start.
package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"bindery/internal/platform/config"
	"bindery/internal/remote/outbound"
)

// Status is a check's outcome.
type Status string

const (
	OK   Status = "ok"
	Warn Status = "warn"
	Fail Status = "FAIL"
)

// Result is one line of the report.
type Result struct {
	Status Status `json:"status"`
	Check  string `json:"check"`         // what was checked: "gitlab: bot token"
	Detail string `json:"detail"`        // what was found
	Fix    string `json:"fix,omitempty"` // what to do (warn and FAIL)
}

// Report is every check's result, in the order they ran.
type Report struct {
	Results []Result `json:"results"`
}

// Failed reports whether any check failed: bindery doctor then exits 1.
func (r Report) Failed() bool {
	for _, res := range r.Results {
		if res.Status == Fail {
			return true
		}
	}
	return false
}

// WriteText prints one line a check: status, what, what was found, and what to do.
func (r Report) WriteText(w io.Writer) error {
	counts := map[Status]int{}
	for _, res := range r.Results {
		counts[res.Status]++
		line := fmt.Sprintf("%-4s  %s: %s", res.Status, res.Check, res.Detail)
		if res.Fix != "" {
			line += " — " + res.Fix
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "%d ok, %d warn, %d FAIL\n", counts[OK], counts[Warn], counts[Fail])
	return err
}

// WriteJSON prints the report as one JSON document.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Options configure Run.
type Options struct {
	ConfigPath string
	Schema     fs.FS // the migrations this binary carries
	// SendTest sends one test email (to notify.email's from address) and one test delivery to each
	// webhook and chat (event endpoint.test); otherwise nothing is sent.
	SendTest bool
	// HTTPClient makes every HTTP call (nil: the client bindery's outbound calls use).
	HTTPClient *http.Client
	// Timeout bounds each remote call (0: 10 s).
	Timeout time.Duration
}

// doctor is one run: the configuration, the report being written and the shared clients.
type doctor struct {
	opts Options
	cfg  *config.Source
	snap *config.Snapshot
	hc   *http.Client
	out  []Result
}

func (d *doctor) add(s Status, check, detail, fix string) {
	d.out = append(d.out, Result{Status: s, Check: check, Detail: detail, Fix: fix})
}
func (d *doctor) ok(check, detail string)        { d.add(OK, check, detail, "") }
func (d *doctor) warn(check, detail, fix string) { d.add(Warn, check, detail, fix) }
func (d *doctor) fail(check, detail, fix string) { d.add(Fail, check, detail, fix) }

// call bounds one remote call.
func (d *doctor) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d.opts.Timeout)
}

// Run checks the deployment the configuration file describes. The error is for a file that
// cannot be read at all; every other problem is a line of the report.
func Run(ctx context.Context, o Options) (Report, error) {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.HTTPClient == nil {
		o.HTTPClient = outbound.NewHTTPClient()
	}
	if _, err := os.ReadFile(o.ConfigPath); err != nil {
		return Report{}, err
	}
	d := &doctor{opts: o, hc: o.HTTPClient}
	var err error
	d.cfg, err = config.Open(o.ConfigPath, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		d.fail("config", err.Error(), "fix the file: every key is described in docs/config.md")
		return Report{Results: d.out}, nil
	}
	d.snap = d.cfg.Current()
	d.checkConfig()
	d.checkDatabase(ctx)
	d.checkSecrets()
	d.checkGitLab(ctx)
	d.checkApproval(ctx)
	d.checkPermission(ctx)
	d.checkNotify(ctx)
	d.checkSignIn(ctx)
	return Report{Results: d.out}, nil
}

func (d *doctor) checkConfig() {
	if unknown := d.snap.Unknown; len(unknown) > 0 {
		d.warn("config: keys", "unknown keys (ignored): "+strings.Join(unknown, ", "), "check their spelling against docs/config.md")
	} else {
		d.ok("config: keys", fmt.Sprintf("%s parsed, no unknown key", d.opts.ConfigPath))
	}
	switch u := d.snap.PublicURL(); {
	case u == "":
		d.fail("config: server.publicURL", "not set", "set it to the URL GitLab, the approval system and the deploy job reach bindery at (https://bindery.example.com): callbacks and the webhook are built from it")
	case strings.HasPrefix(u, "http://"):
		d.warn("config: server.publicURL", u+" is plain http", "put TLS in front of bindery (docs/install.md, 'TLS in front') and use its https URL: callback secrets travel in this URL's requests")
	default:
		d.ok("config: server.publicURL", u)
	}
}

// hint is an error's text for a report line: one line, bounded.
func hint(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
