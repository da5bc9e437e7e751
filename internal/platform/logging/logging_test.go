package logging_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"bindery/internal/platform/logging"
	"bindery/internal/platform/logging/logtest"
)

func jsonLogger() (*slog.Logger, *logtest.Buffer) {
	buf := &logtest.Buffer{}
	level := new(slog.LevelVar)
	level.Set(slog.LevelDebug)
	return logging.New(buf, "json", level), buf
}

// oneLine is the only line logged, checked for repeated keys and decoded.
func oneLine(t *testing.T, buf *logtest.Buffer) map[string]any {
	t.Helper()
	lines := buf.Lines()
	if len(lines) != 1 {
		t.Fatalf("%d lines: %q", len(lines), buf.String())
	}
	repeated, err := logtest.RepeatedKeys(lines[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(repeated) > 0 {
		t.Errorf("repeated keys %v in %s", repeated, lines[0])
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestALineNamesEachKeyOnceTheNewestValueWinning(t *testing.T) {
	log, buf := jsonLogger()
	cron := log.With("component", "workflow", "instance", "i-1").With("component", "cron")
	ctx := logging.WithRequestID(context.Background(), "r-old")
	ctx = logging.With(ctx, slog.String("operationId", "op-1"), slog.String("requestId", "r-new"))
	cron.InfoContext(ctx, "round", "instance", "i-2", "n", 1, "n", 2, slog.Group("", "inline", "a", "n", 3))

	m := oneLine(t, buf)
	want := map[string]any{"component": "cron", "instance": "i-2", "requestId": "r-new", "operationId": "op-1", "n": 3.0, "inline": "a", "msg": "round"}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v (line %v)", k, m[k], v, m)
		}
	}
	if got := logging.RequestID(ctx); got != "r-new" {
		t.Errorf("RequestID = %q, the log says r-new", got)
	}
}

func TestAGroupKeepsItsOwnKeysBesideTheOuterOnes(t *testing.T) {
	log, buf := jsonLogger()
	log.With("a", 1).WithGroup("g").With("a", 2).With("a", 3).Info("grouped", "b", 4, "b", 5)
	m := oneLine(t, buf)
	g, _ := m["g"].(map[string]any)
	if m["a"] != 1.0 || g["a"] != 3.0 || g["b"] != 5.0 {
		t.Fatalf("line %v", m)
	}
}

func TestDurationsAreWrittenAsText(t *testing.T) {
	log, buf := jsonLogger()
	log.With("timeout", 10*time.Second).Info("waited", "took", 1500*time.Millisecond, slog.Group("retry", "after", time.Minute))
	m := oneLine(t, buf)
	retry, _ := m["retry"].(map[string]any)
	if m["timeout"] != "10s" || m["took"] != "1.5s" || retry["after"] != "1m0s" {
		t.Fatalf("line %v", m)
	}

	text := &logtest.Buffer{}
	logging.New(text, "text", new(slog.LevelVar)).Info("waited", "timeout", 10*time.Second)
	if !strings.Contains(text.String(), "timeout=10s") {
		t.Fatalf("text line %q", text.String())
	}
}

func TestRepeatedKeysAreFoundAtAnyDepth(t *testing.T) {
	for line, want := range map[string]string{
		`{"a":1,"b":{"c":1,"c":2},"a":3}`: "b.c a",
		`{"a":[{"x":1},{"x":1,"x":2}]}`:   "a.x",
		`{"a":1,"b":{"a":2}}`:             "",
	} {
		got, err := logtest.RepeatedKeys(line)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(got, " ") != want {
			t.Errorf("%s: repeated %v, want %q", line, got, want)
		}
	}
	if _, err := logtest.RepeatedKeys(`{"a":1}{"b":2}`); err == nil {
		t.Error("two objects on one line read as one")
	}
	if _, err := logtest.RepeatedKeys(`time=now level=INFO`); err == nil {
		t.Error("a text line read as JSON")
	}
}

// BenchmarkAnAccessLine: the line every HTTP request writes (a request id from the context and
// five attributes), through the product's handler into JSON.
func BenchmarkAnAccessLine(b *testing.B) {
	log := logging.New(io.Discard, "json", new(slog.LevelVar))
	ctx := logging.WithRequestID(context.Background(), "1bf3ab179ad551f7d5e80c15")
	b.ReportAllocs()
	for b.Loop() {
		log.InfoContext(ctx, "http request", "method", "GET", "route", "/api/requests/{operationId}",
			"status", 200, "bytes", 2925, "duration", 1760*time.Microsecond)
	}
}
