// Command bench measures bindery against its baselines, side by side, and rewrites
// BENCHMARKS.md. One command, about 40 minutes on the project's 2-core machine:
//
//	go run ./cmd/bench                 # every section, 3 runs each, MariaDB at 127.0.0.1:3306
//	go run ./cmd/bench -quick -out -   # a fast smoke of every section, report on stdout
//
// Every figure is shown beside its baseline measured in the same run, with the minimum, median
// and maximum over the runs. The sections reuse the package benchmarks (go test -bench) where
// one exists, and otherwise drive the built binary: `bindery sim` and `bindery serve` with a
// generated configuration, and a load generator in a separate process (this program, re-run in
// its load-generator role) on loopback.
//
// The hand-written intro of the output file (everything above the generated marker) is kept;
// everything below it is replaced.
package main

import (
	"bindery/internal/vocab/text"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"
)

func main() {
	if spec := os.Getenv(loadgenEnv); spec != "" {
		os.Exit(loadgenMain(spec, os.Stdout, os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// sections, in report order. Each measures one point of the Targets table (issue 9's list).
var sections = []struct {
	name  string
	title string
	run   func(ctx context.Context, e *env) (string, []goal, error)
}{
	{"chain", "1. Interceptor chain vs. the bare handler", chainSection},
	{"http", "2. Apply and status throughput over loopback", httpSection},
	{"enqueue", "3. Enqueue latency while a 1,000-row claim is open (MariaDB)", enqueueSection},
	{"scale", "4. Claim, hand-off, settlement and reconciliation at 10 / 1,000 / 100,000 rows", scaleSection},
	{"e2e", "5. End to end: approved requests to VALIDATED against the simulators", e2eSection},
	{"limiter", "6. Rate limiter vs. golang.org/x/time/rate", limiterSection},
	{"footprint", "7. Binary size, start-to-ready, memory", footprintSection},
	{"engine", "8. Durable execution: a first step beside 1,000 batches in CI; webhooks across instances", engineSection},
	{"train", "9. Merge train: approval to merge with batch.train 1 and 3, steady arrivals, realistic CI", trainSection},
}

// options are the command line.
type options struct {
	quick bool
	runs  int
	out   string
	only  map[string]bool
	mysql string // go-sql-driver DSN without a database; "" → MariaDB sections are skipped
	n     int    // end-to-end requests per flow
	// The end-to-end run with realistic CI: requests, projects, sim.timeScale.
	realN, realProjects int
	realScale           float64
	duration            time.Duration
	conc                int
	maxLoad             float64
	waitLoad            time.Duration
	keep                bool
	binary              string
	profile             string // directory for CPU profiles of serve under each HTTP load; "" → none

	// The merge train's runs: projects, sim.timeScale, and pipelines of arrivals before and
	// during the measurement.
	trainProjects                       int
	trainScale, trainWarm, trainMeasure float64
	trainMaxWait                        float64 // batch.maxWait in pipelines (an experiment; 0: the default)
	trainConfigs                        string  // the runs: batch.train values, "p" for poison pills
}

// env is what every section gets: the options, the module root, a scratch directory, and the
// binaries built once.
type env struct {
	options
	root    string // module root
	work    string // scratch directory, removed at the end unless -keep
	log     io.Writer
	bindery string // built bindery binary (see buildBindery)
	args    []string
	// rssUnderLoad is serve's largest resident set during each run's HTTP load on SQLite
	// (section 2), reported by the footprint section.
	rssUnderLoad []float64
}

// quickOr is full, or quick when -quick asks for a smoke of every section.
func quickOr[T any](e *env, full, quick T) T {
	if e.quick {
		return quick
	}
	return full
}

const usage = `Usage: go run ./cmd/bench [flags]

Measures bindery against its baselines and rewrites BENCHMARKS.md below its
hand-written intro. Sections: %s.

Flags:
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var names []string
	for _, s := range sections {
		names = append(names, s.name)
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, usage, strings.Join(names, ", "))
		fs.PrintDefaults()
	}
	var o options
	var only string
	fs.BoolVar(&o.quick, "quick", false, "a fast smoke: short measurements, small sizes, one run (unless -runs is given)")
	fs.IntVar(&o.runs, "runs", 3, "repetitions of every measurement (min/median/max are over these)")
	fs.StringVar(&o.out, "out", "BENCHMARKS.md", "file to rewrite below its intro (relative to the module root); - for stdout")
	fs.StringVar(&only, "only", "", "comma-separated sections to run (default: all)")
	defMySQL := os.Getenv("BINDERY_TEST_MYSQL")
	if defMySQL == "" {
		defMySQL = "root@tcp(127.0.0.1:3306)/"
	}
	fs.StringVar(&o.mysql, "mysql", defMySQL, "MariaDB/MySQL server (go-sql-driver DSN, no database; one is created and dropped per measurement); empty: SQLite only")
	fs.IntVar(&o.n, "n", 1000, "end-to-end: approved requests per flow")
	fs.IntVar(&o.realN, "real-n", 5000, "end-to-end with realistic CI: requests per flow")
	fs.IntVar(&o.realProjects, "real-projects", 50, "end-to-end with realistic CI: projects (one target each)")
	fs.Float64Var(&o.realScale, "real-scale", 300, "end-to-end with realistic CI: sim.timeScale (10-minute pipelines take 10m ÷ this)")
	fs.IntVar(&o.trainProjects, "train-projects", 20, "merge train: projects (one target each, one arrival per project every sixth of a pipeline)")
	fs.Float64Var(&o.trainScale, "train-scale", 30, "merge train: sim.timeScale (10-minute pipelines take 10m ÷ this)")
	fs.Float64Var(&o.trainWarm, "train-warmup", 2, "merge train: pipelines of arrivals before the measured ones")
	fs.Float64Var(&o.trainMeasure, "train-measure", 5, "merge train: pipelines of measured arrivals")
	fs.Float64Var(&o.trainMaxWait, "train-maxwait", 0, "merge train: batch.maxWait in pipelines, an experiment (0: the default, none)")
	fs.StringVar(&o.trainConfigs, "train-configs", "1,3,1p,3p", "merge train: the runs, one column each: batch.train values, with i for as many batch.isolationCars and p for the run with 2 % poison pills")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "HTTP load: measured time per endpoint and run (after a warm-up)")
	fs.IntVar(&o.conc, "conc", 16, "HTTP load: concurrent connections of the load generator")
	fs.Float64Var(&o.maxLoad, "maxload", 1.0, "wait until the 1-minute load average is below this before measuring (0: do not wait)")
	fs.DurationVar(&o.waitLoad, "waitload", 20*time.Minute, "give up waiting for -maxload after this long (the run goes on; the report says so)")
	fs.BoolVar(&o.keep, "keep", false, "keep the scratch directory (configs, logs, databases) and print its path")
	fs.StringVar(&o.profile, "profile", "", "write CPU profiles of bindery serve under each HTTP load to this directory (a profiling build: net/http/pprof added with go build -overlay; with -binary, that binary must serve pprof at $BINDERY_BENCH_PPROF)")
	fs.StringVar(&o.binary, "binary", "", "measure this bindery binary instead of building one from the checkout (e.g. an older build, for a before/after)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return 2
	}
	runsSet := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "runs" {
			runsSet = true
		}
	})
	if o.quick {
		if !runsSet {
			o.runs = 1
		}
		setIfDefault(fs, "n", func() { o.n = 20 })
		setIfDefault(fs, "real-n", func() { o.realN = 100 })
		setIfDefault(fs, "real-projects", func() { o.realProjects = 5 })
		setIfDefault(fs, "real-scale", func() { o.realScale = 600 })
		setIfDefault(fs, "train-projects", func() { o.trainProjects = 2 })
		setIfDefault(fs, "train-scale", func() { o.trainScale = 600 })
		setIfDefault(fs, "train-warmup", func() { o.trainWarm = 1 })
		setIfDefault(fs, "train-measure", func() { o.trainMeasure = 1 })
		setIfDefault(fs, "duration", func() { o.duration = time.Second })
		setIfDefault(fs, "maxload", func() { o.maxLoad = 0 })
	}
	if o.runs < 1 || o.n < 1 || o.duration <= 0 || o.conc < 1 || o.realN < 1 || o.realProjects < 1 || o.realScale <= 0 ||
		o.trainProjects < 1 || o.trainScale <= 0 || o.trainWarm < 0 || o.trainMeasure <= 0 || o.trainMaxWait < 0 {
		fmt.Fprintln(stderr, "-runs, -n, -duration, -conc, -real-* and -train-* must be positive (-train-warmup and -train-maxwait may be 0)")
		return 2
	}
	if _, err := parseTrainConfigs(o.trainConfigs); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if o.profile != "" {
		abs, err := filepath.Abs(o.profile)
		if err != nil {
			fmt.Fprintf(stderr, "-profile: %v\n", err)
			return 2
		}
		o.profile = abs
	}
	if only != "" {
		o.only = map[string]bool{}
		for _, n := range strings.Split(only, ",") {
			n = strings.TrimSpace(n)
			found := false
			for _, s := range sections {
				found = found || s.name == n
			}
			if !found {
				fmt.Fprintf(stderr, "-only: unknown section %q (sections: %s)\n", n, strings.Join(names, ", "))
				return 2
			}
			o.only[n] = true
		}
	}
	if err := bench(ctx, o, args, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	return 0
}

// setIfDefault applies a -quick default to a flag the user did not set.
func setIfDefault(fs *flag.FlagSet, name string, apply func()) {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	if !set {
		apply()
	}
}

// bench runs the selected sections and writes the report. A section that fails is reported as
// such in the file and makes the command fail, after the other sections ran.
func bench(ctx context.Context, o options, args []string, stdout, stderr io.Writer) error {
	root, err := moduleRoot(ctx)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "bindery-bench-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Fprintf(stderr, "scratch directory: %s\n", work)
	} else {
		defer os.RemoveAll(work)
	}
	e := &env{options: o, root: root, work: work, log: stderr, args: args, bindery: o.binary}
	if o.mysql != "" {
		if err := pingMySQL(ctx, o.mysql); err != nil {
			return fmt.Errorf("MariaDB at %s: %w (give -mysql '' to measure SQLite only)", o.mysql, err)
		}
	}

	waited, before := waitForQuiet(ctx, e)
	m := describeMachine(ctx, e)
	m.loadBefore, m.waited = before, waited
	started := time.Now()

	var out strings.Builder
	var goals []goal
	var failed []string
	bodies := map[string]string{} // title → text, for a -only run into an existing report
	for _, s := range sections {
		if o.only != nil && !o.only[s.name] {
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		fmt.Fprintf(stderr, "== %s\n", s.title)
		t0 := time.Now()
		body, gs, err := s.run(ctx, e)
		if err != nil {
			failed = append(failed, s.name)
			fmt.Fprintf(stderr, "   FAILED: %v\n", err)
			body += fmt.Sprintf("\n**Not measured: %s**\n", oneLine(err.Error()))
		}
		fmt.Fprintf(stderr, "   %s\n", time.Since(t0).Round(time.Second))
		goals = append(goals, gs...)
		fmt.Fprintf(&out, "\n## %s\n\n%s", s.title, strings.TrimLeft(body, "\n"))
		bodies[s.title] = body
	}
	m.loadAfter = loadAverage()
	m.elapsed = time.Since(started)

	report := renderHeader(e, m) + renderGoals(goals) + out.String()
	if o.only != nil && o.out != "-" {
		if merged, ok := mergeOnly(generatedPart(e), bodies, goals, onlyNote(e, m)); ok {
			report = merged
		}
	}
	if err := writeReport(e, report, stdout); err != nil {
		return err
	}
	if len(failed) > 0 {
		return fmt.Errorf("sections failed: %s", strings.Join(failed, ", "))
	}
	return nil
}

// moduleRoot is the directory of bindery's go.mod (the bench builds and tests from there).
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the bindery module: run from its checkout (go run ./cmd/bench)")
	}
	return filepath.Dir(mod), nil
}

// marker separates the hand-written intro of the report from the generated figures.
const marker = "<!-- Everything below this line is written by `go run ./cmd/bench`; edit the intro above it. -->"

// defaultIntro is used when the output file has no intro yet.
const defaultIntro = `# Benchmarks

Written by ` + "`go run ./cmd/bench`" + `. Every figure is a median with its minimum and maximum
over the runs, beside its baseline measured in the same run.
`

// writeReport keeps the intro of the existing file (everything above the marker, or all of a
// file without one) and replaces the rest.
func writeReport(e *env, report string, stdout io.Writer) error {
	if e.out == "-" {
		_, err := io.WriteString(stdout, report)
		return err
	}
	path := e.out
	if !filepath.IsAbs(path) {
		path = filepath.Join(e.root, path)
	}
	intro := defaultIntro
	if old, err := os.ReadFile(path); err == nil {
		// Hand-written text is never dropped: without the marker the whole file is the intro.
		intro = string(old)
		if i := strings.Index(intro, marker); i >= 0 {
			intro = intro[:i]
		}
	}
	text := strings.TrimRight(intro, "\n") + "\n\n" + marker + "\n" + report
	return os.WriteFile(path, []byte(text), 0o644)
}

// waitForQuiet waits until the 1-minute load average is below -maxload (up to -waitload): the
// machine is shared, and figures taken under another engineer's build mean little.
func waitForQuiet(ctx context.Context, e *env) (waited time.Duration, load [3]float64) {
	start := time.Now()
	for {
		load = loadAverage()
		if e.maxLoad <= 0 || load[0] < e.maxLoad || time.Since(start) >= e.waitLoad {
			return time.Since(start), load
		}
		fmt.Fprintf(e.log, "load average %.2f ≥ %.2f: waiting (%s so far, up to %s)\n", load[0], e.maxLoad, time.Since(start).Round(time.Second), e.waitLoad)
		select {
		case <-ctx.Done():
			return time.Since(start), load
		case <-time.After(30 * time.Second):
		}
	}
}

func loadAverage() [3]float64 {
	var l [3]float64
	data, err := os.ReadFile("/proc/loadavg")
	if err == nil {
		fmt.Sscanf(string(data), "%f %f %f", &l[0], &l[1], &l[2])
	}
	return l
}

func oneLine(s string) string {
	return text.Clip(strings.Join(strings.Fields(s), " "), 400+len(text.Ellipsis), text.Bytes, text.Ellipsis)
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// gomaxprocs is the parallelism the benchmarks run with.
func gomaxprocs() int { return runtime.GOMAXPROCS(0) }
