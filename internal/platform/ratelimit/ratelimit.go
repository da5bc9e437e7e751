// Package ratelimit is a sliding-window-log limiter and the share of a global quota that one
// instance enforces (docs/api.md, 'Rate limits').
//
// A key ("bucket:subject") keeps the arrival times of its admitted requests inside the window.
// Check-prune-append runs under the key's shard lock, so it is atomic per key. A key whose log
// empties is removed; idle keys are swept; the number of keys is capped (the least recently used
// key of a full shard is evicted), so memory is bounded whatever the callers do.
package ratelimit

import (
	"hash/maphash"
	"sync"
	"time"
)

const shardCount = 64

// DefaultMaxKeys bounds the keys held (≈ 250 bytes each at the default limit of 10).
const DefaultMaxKeys = 100_000

// Limiter is safe for concurrent use. The zero value is not usable; call New.
type Limiter struct {
	shards      [shardCount]shard
	seed        maphash.Seed
	maxPerShard int
	base        time.Time
	now         func() time.Time
}

type shard struct {
	mu   sync.Mutex
	logs map[string]*window
}

// window is one key's log: a ring of arrival times (nanoseconds since Limiter.base), oldest at
// head. It never holds more than the largest limit it was checked against.
type window struct {
	ts   []int64
	head int
	n    int
}

// Options configure New. Zero values take the defaults.
type Options struct {
	MaxKeys int              // DefaultMaxKeys
	Now     func() time.Time // time.Now; tests move the clock
}

// New returns an empty Limiter.
func New(opts Options) *Limiter {
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = DefaultMaxKeys
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	l := &Limiter{seed: maphash.MakeSeed(), maxPerShard: max(1, opts.MaxKeys/shardCount), now: opts.Now}
	l.base = l.now()
	for i := range l.shards {
		l.shards[i].logs = map[string]*window{}
	}
	return l
}

// Decision is the answer to one check.
type Decision struct {
	Allowed bool
	// RetryAfter is, when refused, how long until the oldest admitted request leaves the window.
	RetryAfter time.Duration
}

// Allow checks key against limit requests per window and, when allowed, records the request.
// limit ≤ 0 or window ≤ 0 means "no limiting" and records nothing (a misconfiguration must not
// block traffic).
func (l *Limiter) Allow(key string, limit int, win time.Duration) Decision {
	if limit <= 0 || win <= 0 {
		return Decision{Allowed: true}
	}
	now := int64(l.now().Sub(l.base))
	sh := &l.shards[maphash.String(l.seed, key)%shardCount]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	w := sh.logs[key]
	if w == nil {
		if len(sh.logs) >= l.maxPerShard {
			sh.sweep(now, int64(win))
			if len(sh.logs) >= l.maxPerShard {
				sh.evictLeastRecent()
			}
		}
		w = &window{ts: make([]int64, 1)} // grows with use: most keys make one or two requests
		sh.logs[key] = w
	}
	w.prune(now, int64(win))
	if w.n >= limit {
		return Decision{RetryAfter: time.Duration(w.ts[w.head] + int64(win) - now)}
	}
	w.push(now, limit)
	return Decision{Allowed: true}
}

// prune drops the arrival times that left the window.
func (w *window) prune(now, win int64) {
	for w.n > 0 && now-w.ts[w.head] >= win {
		w.head = (w.head + 1) % len(w.ts)
		w.n--
	}
}

// push appends t, growing the ring up to limit entries.
func (w *window) push(t int64, limit int) {
	if w.n == len(w.ts) {
		grown := make([]int64, min(max(2*len(w.ts), 1), max(limit, w.n+1)))
		for i := 0; i < w.n; i++ {
			grown[i] = w.ts[(w.head+i)%len(w.ts)]
		}
		w.ts, w.head = grown, 0
	}
	w.ts[(w.head+w.n)%len(w.ts)] = t
	w.n++
}

func (w *window) newest() int64 {
	if w.n == 0 {
		return -1 << 63
	}
	return w.ts[(w.head+w.n-1)%len(w.ts)]
}

// sweep prunes every key of the shard and removes those left empty. Holds sh.mu.
func (sh *shard) sweep(now, win int64) int {
	removed := 0
	for k, w := range sh.logs {
		w.prune(now, win)
		if w.n == 0 {
			delete(sh.logs, k)
			removed++
		}
	}
	return removed
}

// evictLeastRecent drops the key whose latest request is oldest. It runs only when a shard is
// full of keys active inside the window (many distinct callers at once); the evicted caller
// starts afresh, which errs on the side of letting traffic through.
func (sh *shard) evictLeastRecent() {
	var victim string
	oldest := int64(1<<63 - 1)
	for k, w := range sh.logs {
		if t := w.newest(); t < oldest {
			victim, oldest = k, t
		}
	}
	delete(sh.logs, victim)
}

// Sweep removes every key with no request inside win and returns how many it removed. Run it
// periodically so that idle callers do not hold memory.
func (l *Limiter) Sweep(win time.Duration) int {
	now := int64(l.now().Sub(l.base))
	removed := 0
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		removed += sh.sweep(now, int64(win))
		sh.mu.Unlock()
	}
	return removed
}

// Keys reports how many keys are held.
func (l *Limiter) Keys() int {
	n := 0
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		n += len(sh.logs)
		sh.mu.Unlock()
	}
	return n
}
