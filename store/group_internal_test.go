package store

import (
	"context"
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
		deadline := time.Now().Add(10 * time.Second)
		for (held.Load() != 1 || g.size() != i) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
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
