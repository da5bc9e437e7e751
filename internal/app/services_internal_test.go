package app

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"bindery/internal/platform/config"
	"bindery/internal/platform/ratelimit"
	"bindery/internal/work/service/servicetest"
	"bindery/store"
	"bindery/store/storetest"
)

// The app's own services — the heartbeat and the HTTP listeners — keep the start/stop contract of
// every background service: a stop before the start leaves them stopped for good; started, they
// run until Stop, which leaves no goroutine behind; a second Stop is harmless.

func newHeartbeat(db *store.DB) *heartbeat {
	return &heartbeat{db: db, instance: "beat-test", version: "test", cfg: config.NewStatic(config.MustParse("")),
		share:   ratelimit.NewShare(func(ctx context.Context) (int, error) { return db.LiveInstances(ctx, liveWithin) }),
		limiter: ratelimit.New(ratelimit.Options{}), log: slog.New(slog.DiscardHandler), every: time.Millisecond}
}

func instances(t *testing.T, db *store.DB) int {
	t.Helper()
	var n int
	if err := db.Raw().QueryRow("SELECT COUNT(*) FROM instance WHERE id = 'beat-test'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestTheHeartbeatStopsBeforeItStartsTwiceAndLeavesNoGoroutine(t *testing.T) {
	db := storetest.SQLite(t)
	t.Run("stopped before it starts", func(t *testing.T) {
		servicetest.StoppedBeforeStart(t, newHeartbeat(db))
		if instances(t, db) != 0 {
			t.Fatal("a heartbeat that never started wrote its row")
		}
	})
	t.Run("started, beating, stopped twice", func(t *testing.T) {
		servicetest.StartedAndStoppedTwice(t, newHeartbeat(db), func() {
			deadline := time.Now().Add(10 * time.Second)
			for instances(t, db) != 1 { // its own row, written by a beat
				if time.Now().After(deadline) {
					t.Fatal("no beat wrote the instance row")
				}
				time.Sleep(time.Millisecond)
			}
		})
		if instances(t, db) != 0 {
			t.Fatal("the instance row outlived the heartbeat's stop")
		}
	})
}

func TestAnHTTPServerStopsBeforeItStartsTwiceAndLeavesNoGoroutine(t *testing.T) {
	listen := func(t *testing.T) (*httpServer, chan error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		failed := make(chan error, 1)
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })}
		return &httpServer{srv: srv, ln: ln, failed: func(err error) { failed <- err }}, failed
	}
	t.Run("stopped before it starts", func(t *testing.T) {
		h, _ := listen(t)
		defer h.ln.Close()
		servicetest.StoppedBeforeStart(t, h)
	})
	t.Run("started, serving, stopped twice", func(t *testing.T) {
		h, failed := listen(t)
		client := &http.Client{Transport: &http.Transport{}}
		servicetest.StartedAndStoppedTwice(t, h, func() {
			defer client.CloseIdleConnections()
			resp, err := client.Get("http://" + h.ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) != "ok" {
				t.Fatalf("served %q", body)
			}
		})
		select {
		case err := <-failed:
			t.Fatalf("a shutdown reported as a failure: %v", err)
		default:
		}
		if _, err := client.Get("http://" + h.ln.Addr().String()); err == nil {
			t.Fatal("still serving after Stop")
		}
	})
}
