package main

import (
	"bindery/internal/testkit"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The test binary is also the load generator of the smoke run: the bench re-runs its own
// executable with the spec in loadgenEnv.
func TestMain(m *testing.M) {
	if spec := os.Getenv(loadgenEnv); spec != "" {
		os.Exit(loadgenMain(spec, os.Stdout, os.Stderr))
	}
	os.Exit(testkit.Main(m))
}

func TestBenchmarkLinesAreParsed(t *testing.T) {
	t.Parallel()
	out := `goos: linux
BenchmarkChainOverhead/targets-2         	   19880	     52373 ns/op	     10655 bare-ns/op	     15003 chain-ns/op	         1.408 chain/bare	   16158 B/op	      81 allocs/op
BenchmarkChainOverhead/targets-2         	   43179	     30346 ns/op	      6754 bare-ns/op	      8322 chain-ns/op	         1.232 chain/bare	   16163 B/op	      81 allocs/op
BenchmarkScale/mysql/rows=100000-2          	       1	      9654 ns/op	      3739 claim-ms	       403.0 claim-stmts
BenchmarkMemoryPerKey/slidinglog/10req 	 5	 1 ns/op	 170.5 B/key
--- SKIP: BenchmarkSomething
PASS
`
	runs := parseBench(out)
	if got := runs.values("ChainOverhead/targets", "chain/bare"); len(got) != 2 || got[0] != 1.408 || got[1] != 1.232 {
		t.Errorf("chain/bare: %v", got)
	}
	if got := runs.values("Scale/mysql/rows=100000", "claim-stmts"); len(got) != 1 || got[0] != 403 {
		t.Errorf("claim-stmts: %v", got)
	}
	if got := runs.values("MemoryPerKey/slidinglog/10req", "B/key"); len(got) != 1 || got[0] != 170.5 {
		t.Errorf("B/key without a GOMAXPROCS suffix: %v", got)
	}
	if len(runs) != 3 {
		t.Errorf("parsed %d benchmarks: %v", len(runs), runs)
	}
}

func TestFiguresShowMedianAndRange(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		xs   []float64
		unit func(float64) string
		want string
	}{
		{[]float64{3e6, 1e6, 2e6}, nanos, "2 ms (1 ms–3 ms)"},
		{[]float64{1500}, nanos, "1.5 µs"},
		{[]float64{1, 2, 3, 4}, times, "2.5× (1×–4×)"},
		{[]float64{1234567}, count, "1,234,567"},
		{[]float64{40 << 20}, byteSize, "40 MiB"},
		{nil, count, "—"},
	} {
		if got := distOf(c.xs).show(c.unit); got != c.want {
			t.Errorf("%v: %q, want %q", c.xs, got, c.want)
		}
	}
	if got := ratios([]float64{2, 9}, []float64{1, 3}); got.min != 2 || got.max != 3 {
		t.Errorf("paired ratios: %+v", got)
	}
}

func TestBadFlagsAreUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-runs", "0"}, {"-only", "nope"}, {"-train-configs", "2x"}, {"-train-maxwait", "-1"}, {"extra"}, {"-duration", "-1s"}} {
		var stderr strings.Builder
		if code := run(context.Background(), args, os.Stdout, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, stderr.String())
		}
	}
}

// A file without the marker is all intro: hand-written text is never dropped.
func TestAFileWithoutTheMarkerIsKeptAsTheIntro(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "B.md")
	if err := os.WriteFile(out, []byte("# Mine\n\nnotes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := &env{options: options{out: out}}
	if err := writeReport(e, "\n## Run\n\nfigures\n", os.Stdout); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(out)
	if want := "# Mine\n\nnotes\n\n" + marker + "\n\n## Run\n\nfigures\n"; string(data) != want {
		t.Fatalf("got:\n%s\nwant:\n%s", data, want)
	}
}
