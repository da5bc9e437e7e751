package ratelimit

import (
	"context"
	"sync/atomic"
)

// Share divides a global quota between the live instances (docs/api.md, 'Rate limits'): each
// enforces ⌈limit ÷ live instances⌉, so the instances together admit about the configured quota.
// The count comes from the heartbeat table, refreshed in the background; a request never waits on
// the database for it.
type Share struct {
	live  atomic.Int64
	count func(context.Context) (int, error)
}

// NewShare returns a Share that believes it is alone until the first Refresh. count reports the
// live instances (store.DB.LiveInstances bound to the heartbeat horizon); the caller refreshes
// it in the background (app does, after each heartbeat).
func NewShare(count func(context.Context) (int, error)) *Share {
	s := &Share{count: count}
	s.live.Store(1)
	return s
}

// Of returns this instance's part of limit: ⌈limit ÷ live⌉, at least 1 for a positive limit.
// limit ≤ 0 ("no limiting") stays as it is.
func (s *Share) Of(limit int) int {
	if limit <= 0 || s == nil {
		return limit
	}
	n := int(s.live.Load())
	return (limit + n - 1) / n
}

// Live is the instance count in force.
func (s *Share) Live() int { return int(s.live.Load()) }

// Refresh reads the live instance count once. On failure the last known count stays in force:
// an unreachable database must not multiply or zero the quota.
func (s *Share) Refresh(ctx context.Context) error {
	n, err := s.count(ctx)
	if err != nil {
		return err
	}
	s.live.Store(int64(max(n, 1)))
	return nil
}
