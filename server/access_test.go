package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"bindery/api"
	"bindery/internal/platform/logging/logtest"
	"bindery/internal/vocab/state"
)

// accessLines are the access log's lines, decoded, each checked for repeated keys.
func (h *harness) accessLines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range h.logs.Lines(`"msg":"http request"`) {
		if rep, err := logtest.RepeatedKeys(line); err != nil || len(rep) > 0 {
			t.Errorf("line %s: repeated %v, %v", line, rep, err)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func TestEachRequestLeavesOneAccessLineNamingItsRoute(t *testing.T) {
	h := setup(t, options{jsonLogs: true})
	h.wf.put(api.RequestView{OperationID: "op-secret-1", Subject: "alice@example.com", TargetKey: "public-a", Status: state.StatusValidated})
	h.wf.RequestFn = func(ctx context.Context, id string) (api.RequestView, error) {
		if id == "op-panics" {
			panic("boom")
		}
		h.wf.mu.Lock()
		defer h.wf.mu.Unlock()
		return h.wf.requests[id], nil
	}
	for _, c := range []struct {
		name   string
		call   call
		route  string
		status float64
	}{
		{"an owner reads a request", call{method: "GET", path: "/api/requests/op-secret-1", user: "alice"}, "/api/requests/{operationId}", 200},
		{"a static segment registered under a wildcard", call{method: "POST", path: "/api/ops/batches/run", user: "alice", body: "{}"}, "/api/ops/batches/run", 403},
		{"a handler panics", call{method: "GET", path: "/api/requests/op-panics", user: "alice"}, "/api/requests/{operationId}", 500},
		{"an unknown API path", call{method: "GET", path: "/api/op-secret-2/nothing"}, unmatchedRoute, 404},
		{"the page", call{method: "GET", path: "/requests/op-secret-3", header: map[string]string{"Accept": "text/html"}}, unmatchedRoute, 200},
		{"a method the path lacks", call{method: "DELETE", path: "/api/me"}, unmatchedRoute, 405},
	} {
		t.Run(c.name, func(t *testing.T) {
			h.logs.Reset()
			if c.call.header == nil {
				c.call.header = map[string]string{}
			}
			c.call.header["X-Request-Id"] = "req-" + strings.ReplaceAll(c.name, " ", "-")
			if got := h.do(c.call).Code; float64(got) != c.status {
				t.Fatalf("status %d, want %v", got, c.status)
			}
			lines := h.accessLines(t)
			if len(lines) != 1 {
				t.Fatalf("%d access lines, want 1:\n%s", len(lines), h.logs.String())
			}
			l := lines[0]
			if l["level"] != "INFO" || l["method"] != c.call.method || l["route"] != c.route || l["status"] != c.status || l["requestId"] != c.call.header["X-Request-Id"] {
				t.Errorf("access line %v", l)
			}
			if d, ok := l["duration"].(string); !ok {
				t.Errorf("duration %v (%T), want text", l["duration"], l["duration"])
			} else if _, err := time.ParseDuration(d); err != nil {
				t.Errorf("duration %q: %v", d, err)
			}
			if line := h.logs.Lines(`"msg":"http request"`)[0]; strings.Contains(line, "op-secret") {
				t.Errorf("the access line copies the path: %s", line)
			}
		})
	}
}

func TestTheAccessLogCanBeSwitchedOff(t *testing.T) {
	h := setup(t, options{jsonLogs: true, config: map[string]string{"log.access": "false"}})
	for path, want := range map[string]int{"/healthz": 200, "/api/me": 200, "/api/nowhere": 404} {
		if got := h.do(call{method: "GET", path: path, user: "alice"}).Code; got != want {
			t.Fatalf("GET %s: %d, want %d", path, got, want)
		}
	}
	if lines := h.accessLines(t); len(lines) != 0 {
		t.Fatalf("%d access lines with log.access false: %v", len(lines), lines)
	}
}
