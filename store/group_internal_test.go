package store

import (
	"bindery/internal/testkit"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type groupItem struct {
	id  int
	err error
	got bool // written
}

// A group's write that panics (a bug) must not leave its members waiting for ever nor tell them
// they were written, and the next caller must still find a writer: each member is told it failed,
// the panic goes on in the writer's caller, and the slot is handed on.
func TestAGroupWriteThatPanicsFailsItsMembersAndHandsTheSlotOn(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	g := &groups[*groupItem]{max: 1, take: func(n int) int { return n },
		left: func(it *groupItem, err error) { it.err = err }}
	var held atomic.Int32
	g.hook = func() {
		if held.Add(1) == 1 {
			<-gate // the first writer waits until the others queue behind it
		}
	}
	write := func(_ context.Context, items []*groupItem) {
		for _, it := range items {
			if it.id == 2 {
				panic("a bug in the write")
			}
		}
		for _, it := range items {
			it.got = true
		}
	}
	items := []*groupItem{{id: 1}, {id: 2}, {id: 3}}
	panics := make([]any, len(items))
	var wg sync.WaitGroup
	for i, it := range items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { panics[i] = recover() }()
			g.join(context.Background(), it, write)
		}()
		testkit.Eventually(t, fmt.Sprintf("caller %d to join the held group", i), func() bool { return held.Load() == 1 && g.size() == i })
	}
	close(gate)
	wg.Wait()
	if panics[0] != "a bug in the write" || panics[1] != nil || panics[2] != nil {
		t.Fatalf("panics %v: want it in the writer's caller only", panics)
	}
	for _, it := range items {
		if it.got || it.err == nil || !strings.Contains(it.err.Error(), "panicked") {
			t.Fatalf("member %d: written %t, told %v", it.id, it.got, it.err)
		}
	}
	after := &groupItem{id: 4}
	done := make(chan struct{})
	go func() { g.join(context.Background(), after, write); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer slot was not handed on after the panic")
	}
	if !after.got || after.err != nil {
		t.Fatalf("the next caller: written %t, %v", after.got, after.err)
	}
}

// A group is written in a context that no member's leaving cancels (the others must not fail
// with it), carries the first member's values, and ends at the latest of the members' deadlines
// — or never, when one member has none.
func TestAGroupsContextOutlivesItsMembersButNotTheirDeadlines(t *testing.T) {
	t.Parallel()
	type key struct{}
	now := time.Now()
	first, cancelFirst := context.WithDeadline(context.WithValue(context.Background(), key{}, "first"), now.Add(time.Second))
	second, cancelSecond := context.WithDeadline(context.Background(), now.Add(time.Hour))
	defer cancelSecond()
	ctx, cancel := groupContext([]context.Context{first, second})
	defer cancel()
	cancelFirst()
	if ctx.Err() != nil {
		t.Fatalf("a member's leaving ended the group: %v", ctx.Err())
	}
	if d, ok := ctx.Deadline(); !ok || !d.Equal(now.Add(time.Hour)) {
		t.Fatalf("deadline %v %t, want the latest member's", d, ok)
	}
	if ctx.Value(key{}) != "first" {
		t.Fatal("the first member's values are lost")
	}
	open, cancelOpen := groupContext([]context.Context{second, context.Background()})
	defer cancelOpen()
	if _, ok := open.Deadline(); ok {
		t.Fatal("a group with a member without deadline has one")
	}
}
