package sim

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Webhooks of the simulated GitLab: "Merge Request Hook" and "Pipeline Hook" deliveries to
// <bindery>/hooks/gitlab with GitLab's headers, a 10 s timeout, the auto-disable backoff
// (4th consecutive failure: off for 1 min, doubling up to 24 h; 40th: off for good) and, when
// sim.gitlab.hookRedeliver is on, one redelivery of a failed hook with the same Idempotency-Key.

const (
	hookTimeout   = 10 * time.Second
	hookQueueSize = 10000
	gitlabVersion = "17.6.0-sim"
)

// HookDelivery is one webhook delivery attempt, for tests and the demo.
type HookDelivery struct {
	Event          string // X-Gitlab-Event
	Action         string // object_attributes.action or the pipeline status
	IdempotencyKey string
	Status         int // bindery's answer; 0: none (timeout, refused)
}

// HookStats summarises webhook delivery.
type HookStats struct {
	Delivered  int
	Failed     int
	Skipped    int // events not sent: no bindery URL, or the hook was disabled
	Disabled   bool
	Permanent  bool
	Deliveries []HookDelivery // the latest attempts, oldest first
}

type hookEvent struct {
	url, token   string // where it goes and the secret it carries (X-Gitlab-Token)
	kind, action string
	body         []byte
	eventUUID    string
	idemKey      string
}

type hooks struct {
	g           *GitLab
	hc          *http.Client
	webhookUUID string
	base        atomic.Pointer[string] // instance URL, learnt from requests when Options.PublicURL is empty

	mu            sync.Mutex
	queue         []hookEvent
	wake          chan struct{}
	consecutive   int
	disabledUntil time.Time
	stats         HookStats
}

func newHooks(g *GitLab) *hooks {
	return &hooks{g: g, hc: &http.Client{Timeout: hookTimeout}, webhookUUID: newUUID(), wake: make(chan struct{}, 1)}
}

// Hooks returns the webhook delivery statistics.
func (g *GitLab) Hooks() HookStats {
	h := g.hooks
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.stats
	s.Disabled = s.Permanent || time.Now().Before(h.disabledUntil)
	s.Deliveries = append([]HookDelivery(nil), s.Deliveries...)
	return s
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// enqueue queues one event for each of the project's webhooks that subscribes to it (project
// hooks, gitlab_admin.go). A project nobody added a hook to sends to Options.BinderyURL when set,
// with hooks.gitlabToken: the hook the demo and the tests would otherwise add to every project.
func (h *hooks) enqueue(p *project, kind, action string, payload any) { // holds g.mu
	body, err := json.Marshal(payload)
	if err != nil {
		return
	}
	type target struct{ url, token string }
	var targets []target
	for _, ph := range p.hooks {
		if ph.wants(kind) {
			targets = append(targets, target{ph.URL, ph.token})
		}
	}
	if len(p.hooks) == 0 && h.g.opts.BinderyURL != "" {
		targets = append(targets, target{h.g.opts.BinderyURL + "/hooks/gitlab", h.g.cfg.Current().GitLabHookToken()})
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(targets) == 0 {
		h.stats.Skipped++
		return
	}
	eventUUID := newUUID()
	for _, t := range targets {
		if len(h.queue) >= hookQueueSize {
			h.queue = h.queue[1:]
			h.stats.Skipped++
		}
		h.queue = append(h.queue, hookEvent{url: t.url, token: t.token, kind: kind, action: action, body: body, eventUUID: eventUUID, idemKey: newUUID()})
	}
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

func (h *hooks) run(ctx context.Context) {
	for {
		h.mu.Lock()
		var ev *hookEvent
		if len(h.queue) > 0 {
			ev = &h.queue[0]
			h.queue = h.queue[1:]
		}
		h.mu.Unlock()
		if ev == nil {
			select {
			case <-ctx.Done():
				return
			case <-h.wake:
			}
			continue
		}
		h.deliver(ctx, *ev)
	}
}

func (h *hooks) deliver(ctx context.Context, ev hookEvent) {
	h.mu.Lock()
	if h.stats.Permanent || time.Now().Before(h.disabledUntil) {
		h.stats.Skipped++ // GitLab does not queue events for a disabled hook
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	ok := h.send(ctx, ev)
	if !ok && ctx.Err() == nil && h.g.Faults().HookRedeliver {
		h.send(ctx, ev)
	}
}

// send makes one delivery attempt and applies the auto-disable rules to its outcome.
func (h *hooks) send(ctx context.Context, ev hookEvent) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ev.url, bytes.NewReader(ev.body))
	if err != nil {
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "GitLab/"+gitlabVersion)
	req.Header.Set("X-Gitlab-Event", ev.kind)
	if ev.token != "" { // GitLab sends the header only when the hook has a secret token
		req.Header.Set("X-Gitlab-Token", ev.token)
	}
	req.Header.Set("X-Gitlab-Event-UUID", ev.eventUUID)
	req.Header.Set("X-Gitlab-Webhook-UUID", h.webhookUUID)
	req.Header.Set("X-Gitlab-Instance", h.instance())
	req.Header.Set("Idempotency-Key", ev.idemKey)
	status := 0
	if resp, err := h.hc.Do(req); err == nil {
		status = resp.StatusCode
		resp.Body.Close()
	}
	ok := status >= 200 && status < 300
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stats.Deliveries = append(h.stats.Deliveries, HookDelivery{Event: ev.kind, Action: ev.action, IdempotencyKey: ev.idemKey, Status: status})
	if len(h.stats.Deliveries) > 200 {
		h.stats.Deliveries = h.stats.Deliveries[1:]
	}
	if ok {
		h.stats.Delivered++
		h.consecutive = 0
		return true
	}
	if ctx.Err() != nil {
		return false
	}
	h.stats.Failed++
	h.consecutive++
	switch {
	case h.consecutive >= 40:
		h.stats.Permanent = true
	case h.consecutive >= 4:
		backoff := time.Minute << min(h.consecutive-4, 11)
		backoff = min(backoff, 24*time.Hour)
		h.disabledUntil = time.Now().Add(scaled(h.g.cfg, backoff))
	}
	return false
}

func (h *hooks) instance() string {
	if h.g.opts.PublicURL != "" {
		return h.g.opts.PublicURL + "/gitlab"
	}
	if b := h.base.Load(); b != nil {
		return *b
	}
	return ""
}

// ---- payloads (built with g.mu held, so they show the state at the event) ----

func hookTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }

func (g *GitLab) hookUser(id int64) map[string]any {
	u := g.userByID(id)
	return map[string]any{"id": u.ID, "name": u.Name, "username": u.Username, "avatar_url": "", "email": "[REDACTED]"}
}

func (g *GitLab) hookProject(p *project) map[string]any {
	web := g.hooks.instance() + "/" + p.path
	return map[string]any{"id": p.id, "name": p.path, "path_with_namespace": p.path, "web_url": web, "default_branch": p.defaultBranch, "http_url": web + ".git"}
}

func (g *GitLab) lastCommit(p *project, sha string) map[string]any {
	c := p.commits[sha]
	if c == nil {
		return nil
	}
	return map[string]any{"id": c.id, "message": c.message, "title": c.title, "timestamp": c.at.UTC().Format(time.RFC3339), "url": g.hooks.instance() + "/" + p.path + "/-/commit/" + c.id}
}

func (g *GitLab) mrHook(mr *mergeRequest, action string, userID int64, oldrev string, now time.Time) { // holds g.mu
	p := mr.project
	ds := g.detailedStatus(mr, now, false)
	attrs := map[string]any{
		"id": mr.id, "iid": mr.iid, "title": mr.title, "description": mr.description, "state": mr.state, "action": action,
		"source_branch": mr.source, "target_branch": mr.target, "source_project_id": p.id, "target_project_id": p.id,
		"author_id": mr.authorID, "merge_status": mergeStatus(ds, ds == "conflict"), "detailed_merge_status": ds,
		"merge_commit_sha": optString(mr.mergeCommit), "merge_error": optString(mr.mergeError),
		"last_commit": g.lastCommit(p, mr.head()), "draft": ds == "draft_status",
		"url":        g.hooks.instance() + "/" + p.path + "/-/merge_requests/" + itoa64(mr.iid),
		"created_at": mr.createdAt.UTC().Format(time.RFC3339), "updated_at": now.UTC().Format(time.RFC3339),
	}
	if pl := mr.headPipeline(); pl != nil {
		attrs["head_pipeline_id"] = pl.id
	} else {
		attrs["head_pipeline_id"] = nil
	}
	if oldrev != "" {
		attrs["oldrev"] = oldrev
	}
	g.hooks.enqueue(p, "Merge Request Hook", action, map[string]any{
		"object_kind": "merge_request", "event_type": "merge_request", "user": g.hookUser(userID),
		"project": g.hookProject(p), "object_attributes": attrs, "labels": []any{}, "changes": map[string]any{},
		"assignees": []any{}, "reviewers": []any{},
	})
}

func (g *GitLab) pipelineHook(pl *pipeline, now time.Time) { // holds g.mu
	p := pl.project
	st := pl.status(now)
	attrs := map[string]any{
		"id": pl.id, "iid": pl.iid, "name": nil, "ref": pl.ref, "tag": false, "sha": pl.sha,
		"before_sha": "0000000000000000000000000000000000000000", "source": pl.source, "status": st,
		"detailed_status": st, "stages": []string{"test"}, "created_at": hookTime(pl.createdAt), "finished_at": nil,
		"duration": nil, "queued_duration": nil, "url": g.hooks.instance() + "/" + p.path + "/-/pipelines/" + itoa64(pl.id),
	}
	if f := pl.finishedAt(now); f != nil {
		attrs["finished_at"] = hookTime(*f)
		attrs["duration"] = int64((pl.dur - pl.dur/4).Seconds())
	}
	payload := map[string]any{
		"object_kind": "pipeline", "object_attributes": attrs, "user": g.hookUser(pl.userID),
		"project": g.hookProject(p), "commit": g.lastCommit(p, pl.sha), "builds": []any{},
	}
	// GitLab names the MR of MR pipelines only; a branch pipeline's hook has merge_request null.
	payload["merge_request"] = nil
	if mr := p.mr(pl.mrIID); mr != nil && pl.source == sourceMergeRequest {
		ds := g.detailedStatus(mr, now, false)
		payload["merge_request"] = map[string]any{
			"id": mr.id, "iid": mr.iid, "title": mr.title, "source_branch": mr.source, "target_branch": mr.target,
			"state": mr.state, "merge_status": mergeStatus(ds, ds == "conflict"), "detailed_merge_status": ds,
			"url": g.hooks.instance() + "/" + p.path + "/-/merge_requests/" + itoa64(mr.iid),
		}
	}
	g.hooks.enqueue(p, "Pipeline Hook", st, payload)
}
