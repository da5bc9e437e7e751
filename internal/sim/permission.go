package sim

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"

	"bindery/internal/platform/config"
)

// The simulated permission service: POST /sim/permission/check with
// {"identity","ruleCodes"} answers {"allowed","matched"} from the static rules of the
// configuration (permission.rules), so `bindery serve` instances can be tested against an HTTP
// permission service. Its faults are set through the Go API only.

// Permission simulates the permission service.
type Permission struct {
	cfg  *config.Source
	gate *gate

	mu     sync.Mutex
	faults config.SimTransport
}

func newPermission(o Options) *Permission { return &Permission{cfg: o.Config, gate: newGate()} }

// SetFaults sets the transport faults (latency, errors, hang, drop) of the permission service.
func (p *Permission) SetFaults(f config.SimTransport) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = f
}

// Inject makes the next times calls of "check" misbehave as f.
func (p *Permission) Inject(f Fault, times int) { p.gate.inject("check", f, times) }

// Calls is how many checks reached the simulator.
func (p *Permission) Calls() int { return p.gate.count("check") }

// ServeHTTP serves POST /sim/permission/check.
func (p *Permission) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.TrimPrefix(r.URL.Path, "/sim/permission") != "/check" {
		writeJSON(w, http.StatusNotFound, map[string]string{"message": "not found"})
		return
	}
	if r.Method != http.MethodPost {
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"message": "method not allowed"})
		return
	}
	p.mu.Lock()
	f := p.faults
	p.mu.Unlock()
	p.gate.serve(w, r, "check", f, messageBody, func(w http.ResponseWriter) {
		var req struct {
			Identity  string   `json:"identity"`
			RuleCodes []string `json:"ruleCodes"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil || strings.TrimSpace(req.Identity) == "" {
			writeJSON(w, http.StatusBadRequest, map[string]string{"message": "body must be {\"identity\": \"…\", \"ruleCodes\": [\"…\"]}"})
			return
		}
		matched := p.cfg.Current().PermissionMatches(req.Identity, req.RuleCodes)
		if matched == nil {
			matched = []string{}
		}
		writeJSON(w, http.StatusOK, map[string]any{"allowed": len(matched) > 0, "matched": matched})
	})
}
