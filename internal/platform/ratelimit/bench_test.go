package ratelimit

import (
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// The baseline: golang.org/x/time/rate token buckets in a mutex-guarded map, the usual way to
// key it per caller. A token bucket is not a sliding window (it admits bursts at the window
// edge), so this compares cost, not semantics.
type tokenBuckets struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter
}

func (b *tokenBuckets) allow(key string, limit int, win time.Duration) bool {
	b.mu.Lock()
	l := b.m[key]
	if l == nil {
		l = rate.NewLimiter(rate.Every(win/time.Duration(limit)), limit)
		b.m[key] = l
	}
	b.mu.Unlock()
	return l.Allow()
}

var keys = func() []string {
	k := make([]string, 10_000)
	for i := range k {
		k[i] = "apply:user" + strconv.Itoa(i) + "@example.com"
	}
	return k
}()

// BenchmarkCheck is the cost of one check: one hot key, and 10,000 keys in turn, serially and in
// parallel.
func BenchmarkCheck(b *testing.B) {
	impls := map[string]func() func(key string) bool{
		"slidinglog": func() func(string) bool {
			l := New(Options{})
			return func(k string) bool { return l.Allow(k, 10, time.Minute).Allowed }
		},
		"xtimerate": func() func(string) bool {
			t := &tokenBuckets{m: map[string]*rate.Limiter{}}
			return func(k string) bool { return t.allow(k, 10, time.Minute) }
		},
	}
	for _, name := range []string{"slidinglog", "xtimerate"} {
		b.Run(name+"/hotkey", func(b *testing.B) {
			allow := impls[name]()
			for b.Loop() {
				allow(keys[0])
			}
		})
		b.Run(name+"/10000keys", func(b *testing.B) {
			allow := impls[name]()
			i := 0
			for b.Loop() {
				allow(keys[i%len(keys)])
				i++
			}
		})
		b.Run(name+"/10000keys-parallel", func(b *testing.B) {
			allow := impls[name]()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					allow(keys[i%len(keys)])
					i += 7
				}
			})
		})
	}
}

// BenchmarkMemoryPerKey reports the live heap per key after 10,000 keys each made one (and
// ten) requests: the keys' own strings are shared with the benchmark and not counted.
func BenchmarkMemoryPerKey(b *testing.B) {
	for _, reqs := range []int{1, 10} {
		b.Run("slidinglog/"+strconv.Itoa(reqs)+"req", func(b *testing.B) {
			perKey(b, func() any {
				l := New(Options{})
				for _, k := range keys {
					for range reqs {
						l.Allow(k, 10, time.Minute)
					}
				}
				return l
			})
		})
		b.Run("xtimerate/"+strconv.Itoa(reqs)+"req", func(b *testing.B) {
			perKey(b, func() any {
				t := &tokenBuckets{m: map[string]*rate.Limiter{}}
				for _, k := range keys {
					for range reqs {
						t.allow(k, 10, time.Minute)
					}
				}
				return t
			})
		})
	}
}

func perKey(b *testing.B, fill func() any) {
	var total float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		kept := fill()
		runtime.GC()
		runtime.ReadMemStats(&after)
		total += float64(after.HeapAlloc-before.HeapAlloc) / float64(len(keys))
		runtime.KeepAlive(kept)
	}
	b.ReportMetric(total/float64(b.N), "B/key")
}
