package gitlab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	gl "gitlab.com/gitlab-org/api/client-go/v2"
	"golang.org/x/time/rate"

	"bindery/internal/platform/config"
	"bindery/internal/remote/outbound"
)

const system = "gitlab"

// Options configure New.
type Options struct {
	Metrics *metrics.Set // per-endpoint metrics go here (nil: a private set)
	Log     *slog.Logger // breaker changes and approve retries (nil: discarded)
	// DefaultBaseURL is used while gitlab.baseURL is blank. Demo mode passes its simulator
	// (<bindery URL>/sim/gitlab); serve mode passes nothing, so a blank key is an error.
	DefaultBaseURL string
	// HTTPClient overrides the dedicated client (nil: outbound.NewHTTPClient()).
	HTTPClient *http.Client
	// ApproveWaitBudget bounds the backoff waits inside one Approve call, all reviewers together
	// (0: DefaultApproveWaitBudget). Retries beyond it are the calling step's: see approveAs.
	ApproveWaitBudget time.Duration
}

// DefaultApproveWaitBudget: a step may back off a few seconds in the call, never for long — a
// worker does not sleep where the step's task could be due again instead (waiting is data).
const DefaultApproveWaitBudget = 5 * time.Second

// Client implements API. The base URL, the tokens and every limit are read from the
// configuration at each call, so a token rotation or a new timeout applies without a restart.
type Client struct {
	cfg   *config.Source
	opts  Options
	log   *slog.Logger
	guard *outbound.Guard
	hc    *http.Client

	mu   sync.Mutex
	libs map[libKey]*gl.Client

	checklists sync.Map // base URL + "\x00" + project → []ChecklistItem
}

type libKey struct{ base, token string }

var _ API = (*Client)(nil)

// New builds the GitLab client from the configuration in force. It fails with a clear error
// when GitLab cannot be reached as configured: no base URL (and no default), no bot token, no
// reviewer token.
func New(src *config.Source, o Options) (*Client, error) {
	snap := src.Current()
	switch {
	case baseURL(snap, o) == "":
		return nil, errors.New("gitlab.baseURL is not set: bindery cannot reach GitLab; set it in the config file (e.g. https://gitlab.example.com)")
	case snap.GitLabBotToken() == "":
		return nil, errors.New("gitlab.botToken is not set: bindery needs the bot account's token to create branches, commits and merge requests")
	case len(snap.GitLabReviewerTokens()) == 0:
		return nil, errors.New("gitlab.reviewerTokens is not set: bindery needs the reviewer accounts' tokens to approve merge requests")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.HTTPClient == nil {
		o.HTTPClient = outbound.NewHTTPClient()
	}
	return &Client{
		cfg: src, opts: o, log: o.Log, guard: outbound.NewGuard(system, o.Metrics, o.Log),
		hc: o.HTTPClient, libs: map[libKey]*gl.Client{},
	}, nil
}

func baseURL(snap *config.Snapshot, o Options) string {
	if u := snap.GitLabBaseURL(); u != "" {
		return u
	}
	return strings.TrimRight(o.DefaultBaseURL, "/")
}

// account is who a call runs as.
type account struct {
	name  string // for logs: "bot", "reviewer-1", …
	token string
}

func botAccount(snap *config.Snapshot) account { return account{"bot", snap.GitLabBotToken()} }

func reviewerAccounts(snap *config.Snapshot) []account {
	toks := snap.GitLabReviewerTokens()
	out := make([]account, len(toks))
	for i, t := range toks {
		out[i] = account{"reviewer-" + strconv.Itoa(i+1), t}
	}
	return out
}

// lib returns the library client for a base URL and token, built once: retries off (the
// workflow retries), no self-throttling from RateLimit headers (the engine's lanes bound our
// concurrency, and a hidden wait would eat the call's deadline), our HTTP client.
func (c *Client) lib(base, token string) (*gl.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := libKey{base, token}
	if l := c.libs[k]; l != nil {
		return l, nil
	}
	if len(c.libs) > 16 { // tokens or URL rotated many times: forget the old clients
		clear(c.libs)
	}
	l, err := gl.NewClient(token,
		gl.WithBaseURL(base),
		gl.WithHTTPClient(c.hc),
		gl.WithoutRetries(),
		gl.WithCustomLimiter(rate.NewLimiter(rate.Inf, 0)),
		gl.WithURLWarningLogger(slog.New(slog.DiscardHandler)),
		gl.WithUserAgent("bindery"),
	)
	if err != nil {
		return nil, err
	}
	c.libs[k] = l
	return l, nil
}

func (c *Client) limits(snap *config.Snapshot) outbound.Limits {
	return outbound.Limits{Timeout: snap.GitLabTimeout(), Failures: snap.BreakerFailures(), Cooldown: snap.BreakerCooldown()}
}

// call runs one library call as acct under the guard (deadline, breaker, metrics) and turns
// its failure into an *outbound.Error.
func (c *Client) call(ctx context.Context, acct account, endpoint string, fn func(l *gl.Client, ctxOpt gl.RequestOptionFunc) (*gl.Response, error)) error {
	snap := c.cfg.Current()
	base := baseURL(snap, c.opts)
	if base == "" || acct.token == "" {
		return outbound.NewError(system, endpoint, outbound.KindNotConfigured, fmt.Errorf("no base URL or token for the %s account", acct.name))
	}
	l, err := c.lib(base, acct.token)
	if err != nil {
		return outbound.NewError(system, endpoint, outbound.KindNotConfigured, err)
	}
	return c.guard.Call(ctx, base, endpoint, c.limits(snap), func(ctx context.Context) (int, error) {
		resp, err := fn(l, gl.WithContext(ctx))
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		if err == nil {
			return status, nil
		}
		return status, classify(endpoint, status, err)
	})
}

// classify turns a library error into an *outbound.Error when GitLab answered. Transport
// errors are returned as they are; the guard classifies them (timeout, no answer).
func classify(endpoint string, status int, err error) error {
	var er *gl.ErrorResponse
	switch {
	case errors.As(err, &er):
		e := statusError(endpoint, er.StatusCode, er.Message)
		if er.Response != nil {
			e = e.WithRetryAfter(er.Response.Header.Get("Retry-After"), time.Now())
		}
		return e
	case status == http.StatusNotModified:
		// The library counts 304 as success and then fails to decode the empty body (io.EOF).
		// A repeated approve on newer GitLab answers exactly this: report it with its status,
		// like any refusal, so the approve loop treats 304 and 401 alike.
		return statusError(endpoint, status, "")
	case status >= 200 && status < 300 && isDecodeError(err):
		return outbound.NewStatusError(system, endpoint, status, ReasonMalformed, err.Error(), err)
	}
	return err
}

func isDecodeError(err error) bool {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	return errors.As(err, &se) || errors.As(err, &te) || errors.Is(err, io.EOF)
}

// statusError is the error of an HTTP answer with status and upstream message. Its cause is
// the library's error type with the real status and no body, so callers may errors.As to
// *gl.ErrorResponse while no upstream text travels further than the log.
func statusError(endpoint string, status int, upstream string) *outbound.Error {
	return outbound.NewStatusError(system, endpoint, status, reason(endpoint, status, upstream), upstream, &gl.ErrorResponse{StatusCode: status})
}

// reason classifies an answer by endpoint, status and GitLab's message (see
// docs/gitlab.md; the texts are those of GitLab's lib/api/ and app/services/).
func reason(endpoint string, status int, msg string) string {
	has := func(s string) bool { return strings.Contains(msg, s) }
	switch {
	case status == 400 && has("Branch already exists"), status == 400 && has("already exists. Switch to that branch"):
		return ReasonBranchExists
	case status == 400 && has("Branch name is invalid"):
		return ReasonInvalidName
	case status == 400 && (has("invalid reference name") || has("start_sha '") || has("Could not find ref")):
		return ReasonInvalidRef
	case status == 400 && has("A file with this name already exists"):
		return ReasonFileExists
	case status == 400 && has("A directory with this name already exists"):
		return ReasonFileExists
	case status == 400 && has("A file with this name doesn't exist"):
		return ReasonFileMissing
	case status == 400 && has("has changed since you started editing"):
		return ReasonFileChanged
	case status == 400 && has("only create or edit files when you are on a branch"):
		return ReasonNoBranch
	case status == 409 && endpoint == "create_mr":
		return ReasonMRExists
	case status == 422 && endpoint == "create_mr":
		return ReasonInvalidMR
	case status == 409 && (endpoint == "approve" || endpoint == "merge"):
		return ReasonSHAMismatch
	case status == 405 && endpoint == "merge":
		return ReasonNotMergeable
	case (status == 422 || status == 406) && endpoint == "merge":
		return ReasonMergeFailed
	case status == 422 && endpoint == "approve":
		return ReasonChecklist
	case endpoint == "create_mr_pipeline" && (status == 405 || status == 400 && (has("No stages / jobs") || has("at least one visible job"))):
		// The project's CI has no jobs for MR pipelines (branch pipelines only). Any other 400
		// (a broken CI config, an MR that is not open) is not that: a branch pipeline would not help.
		return ReasonNoMRPipelines
	case status == 403 && endpoint == "rebase":
		return ReasonRebaseRefused
	case status == 409 && endpoint == "rebase":
		return ReasonRebaseBusy
	case status == 304:
		return ReasonNotModified
	case status == 401:
		return ReasonUnauthorized
	case status == 403:
		return ReasonForbidden
	case status == 404:
		return ReasonNotFound
	case status == 429:
		return ReasonRateLimited
	case status >= 500:
		return ReasonServerError
	}
	return ""
}

var existingIID = regexp.MustCompile(`!(\d+)`)

// ExistingMergeRequest returns the iid of the open MR a CreateMergeRequest collided with
// (ErrMergeRequestExists), read from GitLab's 409 message.
func ExistingMergeRequest(err error) (int64, bool) {
	var oe *outbound.Error
	if !errors.As(err, &oe) || oe.Reason != ReasonMRExists {
		return 0, false
	}
	m := existingIID.FindStringSubmatch(oe.Upstream())
	if m == nil {
		return 0, false
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	return n, err == nil
}

// BreakerState is the state of the circuit breaker of the configured GitLab ("closed",
// "half-open", "open"), for the ops console and tests.
func (c *Client) BreakerState() string {
	snap := c.cfg.Current()
	return c.guard.BreakerState(baseURL(snap, c.opts), c.limits(snap))
}
