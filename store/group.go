package store

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// groups gathers concurrent callers into groups that are written together (group commit). A
// caller that finds a free writer slot writes its group at once; the others wait, and each
// finished group hands its slot to the first caller still waiting, which writes the next group:
// its own item and those queued behind it. Alone, a caller writes at once; callers only wait when
// the writers are busy anyway.
type groups[T any] struct {
	mu      sync.Mutex
	waiting []*member[T]
	writers int // groups being written now, at most max
	max     int
	// take is how many of n waiting items (the writer's own included) one group takes, ≥ 1.
	take func(n int) int
	// hook, when set, is called by a writer before it takes its group (tests).
	hook func()
	// left is told of a member whose context ended before its group was written: nothing is
	// written for it (its caller is gone or out of time).
	left func(item T, err error)
}

type member[T any] struct {
	ctx  context.Context
	item T
	turn chan struct{} // closed when this member is to write the next group
	done chan struct{} // closed when its group has been written
}

// join returns once a group holding item has been written by write, which gets the group's
// items (item among them), records each one's outcome in it, and runs in ctx: the member's own
// context when it is alone, else groupContext of the members'. Members whose context ended
// before their group began are left out of it (g.left).
//
// No giving up while waiting: the item may already be in a group being written, and its caller
// must learn whether it was.
func (g *groups[T]) join(ctx context.Context, item T, write func(ctx context.Context, items []T)) {
	m := &member[T]{ctx: ctx, item: item, turn: make(chan struct{}), done: make(chan struct{})}
	g.mu.Lock()
	lead := g.writers < g.max
	if lead {
		g.writers++
	} else {
		g.waiting = append(g.waiting, m)
	}
	g.mu.Unlock()
	if !lead {
		select {
		case <-m.done:
			return
		case <-m.turn:
		}
	}
	if g.hook != nil {
		g.hook()
	}
	g.mu.Lock()
	n := g.take(1 + len(g.waiting))
	group := append([]*member[T]{m}, g.waiting[:n-1]...)
	g.waiting = append(g.waiting[:0:0], g.waiting[n-1:]...)
	g.mu.Unlock()

	defer g.handOn(group)
	var items []T
	var ctxs []context.Context
	for _, gm := range group {
		if err := gm.ctx.Err(); err != nil {
			g.left(gm.item, err)
			continue
		}
		items, ctxs = append(items, gm.item), append(ctxs, gm.ctx)
	}
	defer func() {
		// A write that panics (a bug) must not leave its group waiting, nor tell it it was
		// written: each member is told it failed, and the panic goes on in the writer's caller.
		if p := recover(); p != nil {
			for _, it := range items {
				g.left(it, fmt.Errorf("store: the group's write panicked: %v", p))
			}
			panic(p)
		}
	}()
	switch len(items) {
	case 0:
	case 1:
		write(ctxs[0], items)
	default:
		gctx, cancel := groupContext(ctxs)
		defer cancel()
		write(gctx, items)
	}
}

// handOn tells the group's members that their outcome is known, then hands the writer slot to
// the first caller still waiting, or frees it.
func (g *groups[T]) handOn(group []*member[T]) {
	for _, gm := range group {
		close(gm.done)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.waiting) > 0 {
		next := g.waiting[0]
		g.waiting = g.waiting[1:]
		close(next.turn)
	} else {
		g.writers--
	}
}

// size is how many callers wait for a group now.
func (g *groups[T]) size() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.waiting)
}

// groupContext is the context a group is written in: the first member's values, none of the
// members' cancellations (one caller leaving must not fail the others), and the latest of
// their deadlines — none when one of them has none.
func groupContext(members []context.Context) (context.Context, context.CancelFunc) {
	ctx := context.WithoutCancel(members[0])
	var latest time.Time
	for _, m := range members {
		d, ok := m.Deadline()
		if !ok {
			return context.WithCancel(ctx)
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(ctx, latest)
}
