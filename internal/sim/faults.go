package sim

import (
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"bindery/internal/platform/config"
)

// Fault is one injected misbehaviour of a simulated endpoint.
type Fault struct {
	kind    faultKind
	status  int
	message string
	body    any
}

type faultKind int

const (
	faultNone faultKind = iota
	faultError
	faultHang
	faultDrop
	faultStatus
)

var (
	// FaultError answers 500 before the call has any effect.
	FaultError = Fault{kind: faultError}
	// FaultHang never answers; only the caller's timeout (or the simulator's stop) ends the call.
	FaultHang = Fault{kind: faultHang}
	// FaultDrop lets the call take effect, then closes the connection instead of answering:
	// the caller cannot tell whether anything happened.
	FaultDrop = Fault{kind: faultDrop}
)

// FaultStatus answers status with {"message": message} before the call has any effect.
func FaultStatus(status int, message string) Fault {
	return Fault{kind: faultStatus, status: status, message: message}
}

// FaultAnswer answers status with body (JSON) before the call has any effect.
func FaultAnswer(status int, body any) Fault {
	return Fault{kind: faultStatus, status: status, body: body}
}

// faultCounts counts the faults a simulator injected, by kind, so that a test or an operator
// can tell how much misbehaviour a run survived (GET /sim/faults).
type faultCounts struct {
	mu sync.Mutex
	m  map[string]int
}

func (f *faultCounts) add(kind string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[string]int{}
	}
	f.m[kind]++
}

func (f *faultCounts) snapshot() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := maps.Clone(f.m)
	if out == nil {
		out = map[string]int{}
	}
	return out
}

// gate applies transport faults to one simulator's endpoints and counts the calls and the
// faults it injected.
type gate struct {
	mu     sync.Mutex
	queue  map[string][]Fault
	calls  map[string]int
	faults faultCounts
	stopCh chan struct{}
	once   sync.Once
}

func newGate() *gate {
	return &gate{queue: map[string][]Fault{}, calls: map[string]int{}, stopCh: make(chan struct{})}
}

// inject queues f for the next times calls of endpoint, ahead of the configured rates.
func (g *gate) inject(endpoint string, f Fault, times int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for range times {
		g.queue[endpoint] = append(g.queue[endpoint], f)
	}
}

// count is how many calls of endpoint arrived (faulted or not).
func (g *gate) count(endpoint string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls[endpoint]
}

// counts is a copy of the call count of every endpoint called so far.
func (g *gate) counts() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return maps.Clone(g.calls)
}

func (g *gate) stop() { g.once.Do(func() { close(g.stopCh) }) }

// pick decides the fault of one call: an injected one first, else the configured rates.
func (g *gate) pick(endpoint string, t config.SimTransport) (Fault, time.Duration) {
	g.mu.Lock()
	g.calls[endpoint]++
	if q := g.queue[endpoint]; len(q) > 0 {
		g.queue[endpoint] = q[1:]
		g.mu.Unlock()
		return q[0], 0
	}
	g.mu.Unlock()
	if len(t.Endpoints) > 0 && !slices.Contains(t.Endpoints, endpoint) {
		return Fault{}, 0
	}
	switch {
	case t.Hang:
		g.faults.add("hang")
		return FaultHang, t.Latency
	case chance(t.ErrorRate):
		g.faults.add("error_500")
		return FaultError, t.Latency
	case chance(t.DropRate):
		g.faults.add("answer_dropped")
		return FaultDrop, t.Latency
	}
	return Fault{}, t.Latency
}

func chance(rate float64) bool { return rate > 0 && rand.Float64() < rate }

// serve runs handle for one call of endpoint under the faults in force. handle writes the
// answer to the writer it is given; with a drop fault that writer discards and the connection
// is closed after the effect.
func (g *gate) serve(w http.ResponseWriter, r *http.Request, endpoint string, t config.SimTransport, errorBody func(status int, msg string) any, handle func(w http.ResponseWriter)) {
	f, latency := g.pick(endpoint, t)
	if latency > 0 {
		select {
		case <-time.After(latency):
		case <-r.Context().Done():
			return
		case <-g.stopCh:
			return
		}
	}
	switch f.kind {
	case faultHang:
		select {
		case <-r.Context().Done():
		case <-g.stopCh:
		}
		return
	case faultError:
		writeJSON(w, http.StatusInternalServerError, errorBody(500, "500 Internal Server Error"))
		return
	case faultStatus:
		if f.body != nil {
			writeJSON(w, f.status, f.body)
			return
		}
		msg := f.message
		if msg == "" {
			msg = strconv.Itoa(f.status) + " " + http.StatusText(f.status)
		}
		writeJSON(w, f.status, errorBody(f.status, msg))
		return
	case faultDrop:
		handle(discardWriter{h: http.Header{}})
		dropConnection(w)
		return
	}
	handle(w)
}

// dropConnection closes the connection without an answer. Hijacking works through wrapping
// writers that expose Unwrap; where it cannot, aborting the handler has the same effect on
// HTTP/1 (net/http closes the connection when nothing was written).
func dropConnection(w http.ResponseWriter) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		_ = conn.Close()
		return
	}
	panic(http.ErrAbortHandler)
}

type discardWriter struct{ h http.Header }

func (d discardWriter) Header() http.Header         { return d.h }
func (d discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d discardWriter) WriteHeader(int)             {}
