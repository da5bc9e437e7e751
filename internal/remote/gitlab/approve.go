package gitlab

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	gl "gitlab.com/gitlab-org/api/client-go/v2"

	"bindery/internal/remote/outbound"
)

// The approve component (docs/gitlab.md, 'Approving'; docs/workflow.md, 'The approve step').
//
// GitLab is adding a required field to the approve call: a checklist, each item confirmed. The
// client library cannot express it, so approving has two implementations, chosen at each call
// by approval.checklistMode:
//   - approveWithLibrary: the library's ApproveMergeRequest (no checklist);
//   - approveWithChecklist: a raw HTTP call carrying the project's checklist, read from
//     GET /projects/:id/approval_checklist and cached per project. A 422 whose body carries the
//     current list (the project changed it) rebuilds the request from that body and retries
//     once, saving a read.
// Both report failure the same way: an *outbound.Error with the real status whose cause is the
// library's *gitlab.ErrorResponse, so the retry loop and the 401 handling below do not care
// which one ran.

// Approve has every reviewer account approve the MR, one after the other and each with its own
// retry loop: the two approvals are not one atomic act, and retrying them as a pair would submit
// the first account's approval again.
func (c *Client) Approve(ctx context.Context, project string, iid int64, sha string) error {
	reviewers := reviewerAccounts(c.cfg.Current())
	if len(reviewers) == 0 {
		return outbound.NewError(system, "approve", outbound.KindNotConfigured, errors.New("gitlab.reviewerTokens is empty"))
	}
	// One wait budget for the whole call: the reviewers' loops share it, so a worker never
	// sleeps longer than it in here, whatever the number of reviewers.
	budget := cmp.Or(c.opts.ApproveWaitBudget, DefaultApproveWaitBudget)
	for _, r := range reviewers {
		if err := c.approveAs(ctx, r, project, iid, sha, &budget); err != nil {
			return fmt.Errorf("approve %s!%d as %s: %w", project, iid, r.name, err)
		}
	}
	return nil
}

// approveAs is the per-reviewer loop: before each attempt read the approvers (an earlier
// attempt may have landed while its answer was lost), approve, back off exponentially on
// failure, up to approval.maxRetries retries; after the last failure read once more. The waits
// inside the call stop when the call's wait budget (what is left of ApproveWaitBudget) is spent:
// the retries left are then the step's, which is due again by its own backoff — the answer is a
// temporary error.
func (c *Client) approveAs(ctx context.Context, acct account, project string, iid int64, sha string, budget *time.Duration) error {
	snap := c.cfg.Current()
	retries := max(0, snap.ApprovalMaxRetries()) // the getter already maps negative to 0; stay safe
	backoff := snap.ApprovalBackoff()
	var last error
	var waited time.Duration
	deferred := false
	for attempt := 0; attempt <= retries; attempt++ {
		if attempt > 0 {
			wait := backoff << (attempt - 1)
			if wait <= 0 || wait > *budget {
				deferred = true
				break
			}
			if !sleep(ctx, wait) {
				break
			}
			waited += wait
			*budget -= wait
		}
		if c.hasApproved(ctx, acct, project, iid) {
			return nil
		}
		err := c.approveOnce(ctx, acct, project, iid, sha)
		if err == nil {
			return nil
		}
		last = err
		c.log.Warn("gitlab approve failed", "account", acct.name, "project", project, "mr", iid, "attempt", attempt+1, "err", err)
		if !worthRetrying(err) {
			break
		}
	}
	// Older GitLab answers 401 both to "already approved" and to "not allowed"; newer GitLab
	// answers 304 to a repeat; a dropped answer hides a success. After the last attempt there
	// is no next pre-read to settle it, so read once more.
	if c.hasApproved(ctx, acct, project, iid) {
		return nil
	}
	if last == nil {
		last = ctx.Err()
	}
	if deferred {
		return outbound.NewError(system, "approve", outbound.KindUnavailable,
			fmt.Errorf("the approve retries left after %s of waiting are the step's: %w", waited, last))
	}
	return last
}

// hasApproved reads whether acct approved the MR. A failed read counts as "not yet": the check
// must never become a new way for the step to fail.
func (c *Client) hasApproved(ctx context.Context, acct account, project string, iid int64) bool {
	_, mine, err := c.approvalsAs(ctx, acct, project, iid)
	return err == nil && mine
}

// worthRetrying: another attempt may succeed. 401 and 304 are retried because they may mean
// "already approved" (the next pre-read sees it); 403 (no right to approve), 404, 409 (the head
// moved) and a 422 that survived the self-heal will not change by waiting.
func worthRetrying(err error) bool {
	var oe *outbound.Error
	if !errors.As(err, &oe) {
		return true
	}
	switch oe.Kind {
	case outbound.KindNotConfigured, outbound.KindCanceled:
		return false
	case outbound.KindStatus:
		return oe.Status == 401 || oe.Status == 304 || oe.Temporary()
	}
	return true
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// approveOnce is one approve attempt with the implementation approval.checklistMode selects
// now, so switching the key changes the next call without a restart.
func (c *Client) approveOnce(ctx context.Context, acct account, project string, iid int64, sha string) error {
	if c.cfg.Current().ChecklistMode() {
		return c.approveWithChecklist(ctx, acct, project, iid, sha)
	}
	return c.approveWithLibrary(ctx, acct, project, iid, sha)
}

func (c *Client) approveWithLibrary(ctx context.Context, acct account, project string, iid int64, sha string) error {
	return c.call(ctx, acct, "approve", func(l *gl.Client, o gl.RequestOptionFunc) (*gl.Response, error) {
		_, resp, err := l.MergeRequestApprovals.ApproveMergeRequest(project, iid, &gl.ApproveMergeRequestOptions{SHA: &sha}, o)
		return resp, err
	})
}

func (c *Client) approveWithChecklist(ctx context.Context, acct account, project string, iid int64, sha string) error {
	key := baseURL(c.cfg.Current(), c.opts) + "\x00" + project
	var items []ChecklistItem
	if v, ok := c.checklists.Load(key); ok {
		items = v.([]ChecklistItem)
	} else {
		var err error
		if items, err = c.ChecklistItems(ctx, project); err != nil {
			return err
		}
		c.checklists.Store(key, items)
	}
	current, err := c.rawApprove(ctx, acct, project, iid, sha, items)
	if current != nil {
		// The project's checklist changed since we cached it; the 422 carried the new one.
		c.checklists.Store(key, current)
		_, err = c.rawApprove(ctx, acct, project, iid, sha, current)
	}
	return err
}

type checklistAnswer struct {
	ID      string `json:"id"`
	Checked bool   `json:"checked"`
}

// rawApprove sends the approve call with a checklist. On a 422 carrying the current checklist
// it returns that list (and the 422), for the caller's one retry.
func (c *Client) rawApprove(ctx context.Context, acct account, project string, iid int64, sha string, items []ChecklistItem) ([]ChecklistItem, error) {
	answers := make([]checklistAnswer, len(items))
	for i, it := range items {
		answers[i] = checklistAnswer{ID: it.ID, Checked: true}
	}
	body := map[string]any{"sha": sha, "checklist": answers}
	var current []ChecklistItem
	err := c.raw(ctx, acct, "approve", http.MethodPost, "/merge_requests/"+strconv.FormatInt(iid, 10)+"/approve", project, body, nil,
		func(status int, data []byte) {
			var e struct {
				Checklist []ChecklistItem `json:"checklist"`
			}
			if status == http.StatusUnprocessableEntity && json.Unmarshal(data, &e) == nil && e.Checklist != nil {
				current = e.Checklist
			}
		})
	if err == nil {
		return nil, nil
	}
	return current, err
}

// ChecklistItems reads the approval checklist the project requires (an endpoint of the
// upstream approve-API change; the client library does not know it).
func (c *Client) ChecklistItems(ctx context.Context, project string) ([]ChecklistItem, error) {
	var items []ChecklistItem
	err := c.raw(ctx, botAccount(c.cfg.Current()), "checklist", http.MethodGet, "/approval_checklist", project, nil, &items, nil)
	if err != nil {
		return nil, err
	}
	if items == nil {
		items = []ChecklistItem{}
	}
	return items, nil
}

// raw makes a call the library cannot express, under the same guard as every other call, and
// reports a refusal exactly as the library path does: the real status, the library's error type
// as cause, the upstream text for the log only. onError sees the refusal's status and body.
func (c *Client) raw(ctx context.Context, acct account, endpoint, method, suffix, project string, in, out any, onError func(int, []byte)) error {
	snap := c.cfg.Current()
	base := baseURL(snap, c.opts)
	if base == "" || acct.token == "" {
		return outbound.NewError(system, endpoint, outbound.KindNotConfigured, fmt.Errorf("no base URL or token for the %s account", acct.name))
	}
	req := outbound.Request{
		System: system, Endpoint: endpoint, Method: method, Body: in,
		URL:    base + "/api/v4/projects/" + gl.PathEscape(project) + suffix,
		Header: http.Header{"Private-Token": {acct.token}, "User-Agent": {"bindery"}},
	}
	return c.guard.Call(ctx, base, endpoint, c.limits(snap), func(ctx context.Context) (int, error) {
		status, data, err := outbound.DoJSON(ctx, c.hc, req, out)
		var oe *outbound.Error
		if errors.As(err, &oe) && oe.Kind == outbound.KindStatus && (status < 200 || status > 299) {
			if onError != nil {
				onError(status, data)
			}
			return status, statusError(endpoint, status, string(data))
		}
		return status, err
	})
}
