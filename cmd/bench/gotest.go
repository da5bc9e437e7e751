package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// The package benchmarks (server, ratelimit, store) run through go test, each -count times, and
// their result lines are parsed here. -count repeats the whole benchmark function, so the i-th
// result of a figure and the i-th of its baseline come from the same pass.

// benchRuns maps a benchmark name (without the -GOMAXPROCS suffix) to its results in order.
type benchRuns map[string][]map[string]float64

// values are metric unit over the runs of name.
func (b benchRuns) values(name, unit string) []float64 {
	var out []float64
	for _, m := range b[name] {
		if v, ok := m[unit]; ok {
			out = append(out, v)
		}
	}
	return out
}

// goBench runs go test -bench in pkg and parses its results. env adds variables.
func goBench(ctx context.Context, e *env, pkg, pattern, benchtime string, extra []string, env ...string) (benchRuns, error) {
	args := []string{"test", pkg, "-run", "^$", "-bench", pattern, "-benchtime", benchtime, "-count", strconv.Itoa(e.runs), "-timeout", "30m"}
	args = append(args, extra...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = e.root
	cmd.Env = append(os.Environ(), env...)
	if e.mysql != "" {
		cmd.Env = append(cmd.Env, "BINDERY_TEST_MYSQL="+e.mysql, "BINDERY_REQUIRE_MYSQL=1")
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	fmt.Fprintf(e.log, "   go %s\n", strings.Join(args, " "))
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go test %s -bench %s: %w\n%s", pkg, pattern, err, tail(out.String(), 30))
	}
	runs := parseBench(out.String())
	if len(runs) == 0 {
		return nil, fmt.Errorf("go test %s -bench %s: no results\n%s", pkg, pattern, tail(out.String(), 30))
	}
	return runs, nil
}

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+(\d+)\s+(.*)$`)

// parseBench reads the standard benchmark format: name, iterations, then value-unit pairs.
func parseBench(out string) benchRuns {
	runs := benchRuns{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		fields := strings.Fields(m[3])
		metrics := map[string]float64{}
		for i := 0; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				break
			}
			metrics[fields[i+1]] = v
		}
		if len(metrics) == 0 {
			continue
		}
		name := strings.TrimPrefix(m[1], "Benchmark")
		runs[name] = append(runs[name], metrics)
	}
	return runs
}

// tail is the last n lines of s (for error messages).
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
