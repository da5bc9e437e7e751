package store

import "sync"

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
}

type member[T any] struct {
	item T
	turn chan struct{} // closed when this member is to write the next group
	done chan struct{} // closed when its group has been written
}

// join returns once a group holding item has been written by write, which gets the group's
// items (item among them) and records each one's outcome in it.
//
// No giving up while waiting: the item may already be in a group being written, and its caller
// must learn whether it was. write decides what to do with items whose callers have gone.
func (g *groups[T]) join(item T, write func([]T)) {
	m := &member[T]{item: item, turn: make(chan struct{}), done: make(chan struct{})}
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

	items := make([]T, len(group))
	for i, gm := range group {
		items[i] = gm.item
	}
	write(items)
	for _, gm := range group {
		close(gm.done)
	}

	g.mu.Lock()
	if len(g.waiting) > 0 {
		next := g.waiting[0]
		g.waiting = g.waiting[1:]
		close(next.turn)
	} else {
		g.writers--
	}
	g.mu.Unlock()
}

// size is how many callers wait for a group now.
func (g *groups[T]) size() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.waiting)
}
