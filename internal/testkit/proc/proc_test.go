package proc

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestAChildThatExitsBeforeItIsReadyIsReportedWithItsOutput(t *testing.T) {
	p, err := Start(context.Background(), t.TempDir(), []string{"GREETING=bye"}, "early", "/bin/sh", "-c", `echo "$GREETING from the child"; exit 3`)
	if err != nil {
		t.Fatal(err)
	}
	err = WaitReady(context.Background(), p, "http://127.0.0.1:1/readyz", time.Minute)
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") || !strings.Contains(err.Error(), "bye from the child") {
		t.Fatalf("got %v", err)
	}
	if done, err := p.Exited(); !done || err == nil {
		t.Fatalf("exited %t, %v; want the exit status", done, err)
	}
}

func TestWaitReadyGivesUpAtItsTimeoutAndStopEndsTheChild(t *testing.T) {
	p, err := Start(context.Background(), t.TempDir(), nil, "sleeper", "/bin/sh", "-c", "echo waiting; exec sleep 60")
	if err != nil {
		t.Fatal(err)
	}
	notReady := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) }))
	defer notReady.Close()
	if err := WaitReady(context.Background(), p, notReady.URL, 50*time.Millisecond); err == nil || !strings.Contains(err.Error(), "not ready") {
		t.Fatalf("got %v", err)
	}
	p.Stop() // SIGTERM ends sleep
	if done, _ := p.Exited(); !done {
		t.Fatal("still running after Stop")
	}
}

func TestAnEndedContextStopsTheChild(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p, err := Start(ctx, t.TempDir(), nil, "sleeper", "/bin/sh", "-c", "exec sleep 60")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if done, _ := p.Exited(); done {
			return
		}
		if time.Now().After(deadline) {
			p.Kill()
			t.Fatal("the child outlived its context")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStartOfAMissingBinaryIsAnError(t *testing.T) {
	if _, err := Start(context.Background(), t.TempDir(), nil, "missing", "/nonexistent/bindery"); err == nil || !strings.Contains(err.Error(), "start missing") {
		t.Fatalf("got %v", err)
	}
}
