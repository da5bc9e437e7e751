package app

import (
	"context"
	"log/slog"
	"time"

	"bindery/internal/platform/config"
	"bindery/internal/platform/ratelimit"
	"bindery/internal/work/service"
	"bindery/store"
)

// heartbeatEvery is how often the instance row is refreshed; an instance is live while its
// heartbeat is younger than three periods.
const (
	heartbeatEvery = 5 * time.Second
	liveWithin     = 3 * heartbeatEvery
)

// heartbeat keeps this instance's row in the instance table, as a service: each beat refreshes
// the row, then the live-instance count the rate limits are divided by, and sweeps the idle
// rate-limit keys. It owns the row: its Stop removes it, so that the other instances' shares
// grow at once instead of when the row would have aged out.
type heartbeat struct {
	db       *store.DB
	instance string
	version  string
	cfg      *config.Source
	share    *ratelimit.Share
	limiter  *ratelimit.Limiter
	log      *slog.Logger
	every    time.Duration
	bg       service.Base
}

// Start beats at once — the instance counts before it serves — then every period.
func (h *heartbeat) Start(ctx context.Context) error {
	if _, ok, err := h.bg.StartInit(ctx); !ok {
		return err
	}
	h.bg.Go(func(ctx context.Context) {
		h.runOnce(ctx)
		service.Every(ctx, h.every, h.runOnce)
	})
	return nil
}

// runOnce is one beat.
func (h *heartbeat) runOnce(ctx context.Context) {
	if err := h.db.Heartbeat(ctx, h.instance, h.version); err != nil && ctx.Err() == nil {
		h.log.Warn("instance heartbeat failed", "err", err)
	}
	if err := h.share.Refresh(ctx); err != nil && ctx.Err() == nil {
		h.log.Warn("rate limit: live instance count not refreshed; keeping the last one", "live", h.share.Live(), "err", err)
	}
	h.limiter.Sweep(h.cfg.Current().RateWindow())
}

// Stop ends the beats, then (once, and only after a start) removes the instance's row.
func (h *heartbeat) Stop(ctx context.Context) error {
	first := h.bg.StopInit()
	if err := h.bg.Wait(ctx); err != nil {
		return err
	}
	if first {
		return h.db.RemoveInstance(ctx, h.instance)
	}
	return nil
}
