package notify

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"bindery/internal/platform/config"
	"bindery/internal/vocab/state"
	"bindery/internal/vocab/text"
	"bindery/internal/work/service"
	"bindery/store"
)

// The watch: the notifier's periodic look, on every instance (no leader: its news is keyed, so
// several instances finding the same thing tell it once). One run tells the news that is a
// matter of time — a merged request whose deploy callback is overdue (deploy.overdue), a request
// sent for approval longer than approval.timeout (request.needs_attention), a binding whose expiry
// nears (binding.expiring, at each of notify.expiryReminders) — refreshes the
// gauges the alert rules read, and purges the attempts older than notify.keepAttempts. It is
// self-contained: RunOnce does one look; Start and Stop run it every period.

// WatchPeriod is how often the watch looks.
const WatchPeriod = 30 * time.Second

// overdueBatch bounds the requests one look tells about per kind of news (the rest next time).
const overdueBatch = 200

// purgeBatch bounds the attempts one look purges.
const purgeBatch = 5000

// Watch runs the notifier's periodic look.
type Watch struct {
	n      *Notifier
	period time.Duration
	live   time.Duration // an instance's heartbeat is stale after this

	counts atomic.Pointer[store.OpsCounts]
	base   service.Base
}

// NewWatch returns the watch of n; live is how long a heartbeat keeps an instance live. Gauges
// registers its gauges on set (nil: none).
func (n *Notifier) NewWatch(live time.Duration, set *metrics.Set) *Watch {
	w := &Watch{n: n, period: WatchPeriod, live: live}
	w.counts.Store(&store.OpsCounts{})
	if set != nil {
		g := func(name string, f func(c *store.OpsCounts) float64) {
			set.NewGauge(name, func() float64 { return f(w.counts.Load()) })
		}
		g("bindery_batches_blocked", func(c *store.OpsCounts) float64 { return float64(c.BatchesBlocked) })
		g("bindery_batch_blocked_longest_seconds", func(c *store.OpsCounts) float64 { return c.BlockedLongest.Seconds() })
		g("bindery_requests_needing_attention", func(c *store.OpsCounts) float64 { return float64(c.NeedingAttention) })
		g("bindery_deploys_overdue", func(c *store.OpsCounts) float64 { return float64(c.DeploysOverdue) })
		g("bindery_instances_stale", func(c *store.OpsCounts) float64 { return float64(c.InstancesStale) })
		g("bindery_notify_endpoints_failing", func(c *store.OpsCounts) float64 { return float64(c.EndpointsFailing) })
		g("bindery_notify_endpoints_disabled", func(c *store.OpsCounts) float64 { return float64(c.EndpointsOff) })
		g("bindery_notify_deliveries_pending", func(c *store.OpsCounts) float64 { return float64(c.PendingSends) })
		set.NewGauge("bindery_config_refused_keys", func() float64 { return float64(len(n.cfg.Current().RefusedKeys())) })
	}
	return w
}

// Counts is what the last look counted.
func (w *Watch) Counts() store.OpsCounts { return *w.counts.Load() }

// RunOnce is one look; it returns how many pieces of news it told and attempts it purged.
func (w *Watch) RunOnce(ctx context.Context) (int, error) {
	n := w.n
	snap := n.cfg.Current()
	deploy, approval := snap.DeployOverdue(), snap.ApprovalTimeout()
	c, err := n.db.OpsCounts(ctx, deploy, approval, w.live)
	if err != nil {
		return 0, err
	}
	w.counts.Store(&c)
	told := 0
	var errs []error
	for _, o := range []struct {
		status state.BindingStatus
		after  time.Duration
		typ    state.EventType
		reason string
	}{
		{state.StatusMerged, deploy, state.EventDeployOverdue, store.AttentionDeploy},
		{state.StatusApprovalSent, approval, state.EventRequestNeedsAttention, store.AttentionApproval},
	} {
		if o.after <= 0 {
			continue
		}
		k, err := w.tellOverdue(ctx, o.status, o.after, o.typ, o.reason)
		told += k
		errs = append(errs, err)
	}
	k, err := w.tellExpiring(ctx, snap)
	told += k
	errs = append(errs, err)
	purged, err := n.db.PurgeAttempts(ctx, snap.NotifyKeepAttempts(), purgeBatch)
	errs = append(errs, err, n.refreshChosen(ctx))
	if told > 0 {
		n.engine.Nudge(state.NotifyLane)
	}
	return told + int(purged), errors.Join(errs...)
}

// tellOverdue tells the requests in status for longer than after, once per stay (keyed).
func (w *Watch) tellOverdue(ctx context.Context, status state.BindingStatus, after time.Duration, t state.EventType, reason string) (int, error) {
	ops, err := w.n.db.Overdue(ctx, status, after, overdueBatch)
	if err != nil || len(ops) == 0 {
		return 0, err
	}
	evs := make([]store.Event, len(ops))
	for i, o := range ops {
		evs[i] = store.OverdueEvent(t, reason, o)
	}
	return w.tellNew(ctx, evs)
}

// tellNew tells the keyed events of evs not told yet: one read of the keys told, then each new
// one (a concurrent look's insert of the same key makes Tell answer false, never twice).
func (w *Watch) tellNew(ctx context.Context, evs []store.Event) (int, error) {
	keys := make([]string, len(evs))
	for i, e := range evs {
		keys[i] = e.Key
	}
	known, err := w.n.db.KeysTold(ctx, keys)
	if err != nil {
		return 0, err
	}
	told := 0
	for _, e := range evs {
		if known[e.Key] {
			continue
		}
		ok, err := w.n.db.Tell(ctx, e)
		if err != nil {
			return told, err
		}
		if ok {
			told++
		}
	}
	return told, nil
}

// expiringPages bounds the pages of expiring bindings one look walks (the rest next time).
const expiringPages = 10

// tellExpiring reminds the holders of bindings whose expiry nears (binding.expiring): a binding
// with time left at most d, for a reminder d of notify.expiryReminders, is reminded once for
// the smallest such d (a look after a long pause sends the reminder that is due, not every
// one it missed) — and only when its target's ttl is longer than d, so that a binding granted
// for three days is not told at once "expires in 3 days". Keyed by the request, its expiry and
// d (store.ExpiringEvent): once across looks and instances, again after a renewal.
func (w *Watch) tellExpiring(ctx context.Context, snap *config.Snapshot) (int, error) {
	offsets := snap.ExpiryReminders()
	if len(offsets) == 0 {
		return 0, nil
	}
	told := 0
	var c store.ExpiringCursor
	for range expiringPages {
		page, next, err := w.n.db.ExpiringWithin(ctx, offsets[0], c, overdueBatch)
		if err != nil {
			return told, err
		}
		var evs []store.Event
		for _, x := range page {
			if d, ok := reminderDue(offsets, x, snap); ok {
				evs = append(evs, store.ExpiringEvent(x, d))
			}
		}
		k, err := w.tellNew(ctx, evs)
		told += k
		if err != nil {
			return told, err
		}
		if next.ID == 0 {
			break
		}
		c = next
	}
	return told, nil
}

// reminderDue is the reminder of offsets (longest first) due for x: the smallest one its time
// left is within, if its target's ttl (as the request was accepted, else the catalog's) is longer.
func reminderDue(offsets []time.Duration, x store.Expiring, snap *config.Snapshot) (time.Duration, bool) {
	ttl := targetTTL(x.Operation, snap)
	for i := len(offsets) - 1; i >= 0; i-- {
		if d := offsets[i]; x.Left <= d {
			if ttl != 0 && ttl <= d {
				return 0, false
			}
			return d, true
		}
	}
	return 0, false
}

// targetTTL is the ttl of o's target as it was accepted (store.Operation.TargetDef), else as the
// catalog has it now; 0 when neither says.
func targetTTL(o store.Operation, snap *config.Snapshot) time.Duration {
	var t config.Target
	if o.TargetDef != "" && json.Unmarshal([]byte(o.TargetDef), &t) == nil {
		return t.TTL
	}
	if t, ok := snap.Target(o.TargetKey); ok {
		return t.TTL
	}
	return 0
}

// Start runs a look at once and then every period, until Stop (the service contract,
// docs/architecture.md, "Starting and stopping").
func (w *Watch) Start(ctx context.Context) error {
	run, ok, err := w.base.StartInit(ctx)
	if !ok {
		return err
	}
	w.base.Go(func(context.Context) {
		w.look(run)
		service.Every(run, w.period, w.look)
	})
	return nil
}

func (w *Watch) look(ctx context.Context) {
	if _, err := w.RunOnce(ctx); err != nil && ctx.Err() == nil {
		w.n.log.Warn("notify watch: look failed; next look in a while", "err", err)
	}
}

// Stop ends the looks and waits for a running one until ctx ends; safe before Start and twice.
func (w *Watch) Stop(ctx context.Context) error { return w.base.Stop(ctx) }

// tellConfigRefused tells operators that a configuration (a file, or keys of one) was refused:
// once an hour per distinct message, however many instances refuse it.
func (n *Notifier) tellConfigRefused(why string, keys []string) {
	sum := sha256.Sum256([]byte(why + "\x00" + strings.Join(keys, ",")))
	key := fmt.Sprintf("config.refused:%x:%s", sum[:8], time.Now().UTC().Format("2006010215"))
	// Within the reload (the config's lock held): a database that does not answer delays the
	// next reload by this much, never a request.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	e := store.Event{Type: state.EventConfigRefused, Key: key, Facts: store.EventFacts{Why: clipWhy(why), Note: strings.Join(keys, ","), Instance: n.inst}}
	if _, err := n.db.Tell(ctx, e); err != nil {
		n.log.Warn("the refused configuration was not told to operators", "err", err)
		return
	}
	n.engine.Nudge(state.NotifyLane)
}

// watchConfig tells operators of every refused reload, every reload that refused keys and every
// reload that removed targets bindings still use.
func (n *Notifier) watchConfig() {
	n.cfg.OnRefused(func(err error) { n.tellConfigRefused(err.Error(), nil) })
	n.cfg.OnChange(func(old, cur *config.Snapshot) {
		n.refusedKeys(cur)
		n.tellTargetsRemoved(old, cur)
	})
	n.refusedKeys(n.cfg.Current())
}

// tellTargetsRemoved tells operators that a reload removed targets which bindings still use —
// in flight or in effect (config.targets_removed, with the keys and counts). Those bindings lose
// nothing (they go on with the target as they were accepted for it, batch.TargetOf), but a file
// cut short inside `targets:` is still valid YAML and looks just like this: a person must know.
// Told once per set of keys and hour, however many instances take the reload.
func (n *Notifier) tellTargetsRemoved(old, cur *config.Snapshot) {
	if old == nil {
		return
	}
	gone := map[string]bool{}
	for _, t := range old.Targets() {
		if _, ok := cur.Target(t.Key); !ok {
			gone[t.Key] = true
		}
	}
	if len(gone) == 0 {
		return
	}
	// Within the reload (the config's lock held), like tellConfigRefused.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	used, err := n.db.TargetsInUse(ctx)
	if err != nil {
		n.log.Warn("targets removed from the catalog were not checked for bindings in use", "err", err)
		return
	}
	var removed []store.TargetUse
	var keys []string
	for _, u := range used {
		if gone[u.Key] {
			removed = append(removed, u)
			keys = append(keys, u.Key)
		}
	}
	if len(removed) == 0 {
		return
	}
	n.log.Warn("a reload removed targets that bindings still use; they finish with the target as accepted, new applications are refused", "targets", keys)
	sum := sha256.Sum256([]byte(strings.Join(keys, ",")))
	key := fmt.Sprintf("config.targets_removed:%x:%s", sum[:8], time.Now().UTC().Format("2006010215"))
	e := store.Event{Type: state.EventTargetsRemoved, Key: key, Facts: store.EventFacts{Targets: removed, Instance: n.inst}}
	if _, err := n.db.Tell(ctx, e); err != nil {
		n.log.Warn("the targets removed from the catalog were not told to operators", "err", err)
		return
	}
	n.engine.Nudge(state.NotifyLane)
}

func (n *Notifier) refusedKeys(snap *config.Snapshot) {
	keys := snap.RefusedKeys()
	if len(keys) == 0 {
		return
	}
	var notes []string
	for _, r := range snap.Report {
		for _, k := range keys {
			if r.Key == k {
				notes = append(notes, k+": "+r.Note)
			}
		}
	}
	n.log.Warn("configuration keys refused; their last good values stay in force", "keys", keys)
	n.tellConfigRefused(strings.Join(notes, "; "), keys)
}

// clipWhy bounds a refusal's text (a file's error may quote a long value).
func clipWhy(s string) string { return text.Clip(s, 480+len(text.Ellipsis), text.Bytes, text.Ellipsis) }
