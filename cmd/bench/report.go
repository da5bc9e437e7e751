package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"time"
)

// dist is a figure over the runs: its minimum, median and maximum.
type dist struct {
	min, med, max float64
	n             int
}

func distOf(xs []float64) dist {
	if len(xs) == 0 {
		return dist{min: math.NaN(), med: math.NaN(), max: math.NaN()}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return dist{min: s[0], med: med, max: s[len(s)-1], n: len(s)}
}

// ratios pairs the i-th figure with the i-th baseline of the same run.
func ratios(xs, base []float64) dist {
	var r []float64
	for i := range min(len(xs), len(base)) {
		if base[i] != 0 {
			r = append(r, xs[i]/base[i])
		}
	}
	return distOf(r)
}

// show formats a dist with unit: "9.8 µs (9.5–10.2)"; one run shows the value alone.
func (d dist) show(unit func(float64) string) string {
	if d.n == 0 {
		return "—"
	}
	if d.n == 1 || unit(d.min) == unit(d.max) {
		return unit(d.med)
	}
	return fmt.Sprintf("%s (%s–%s)", unit(d.med), unit(d.min), unit(d.max))
}

// Units. Durations are given in nanoseconds, sizes in bytes.
func nanos(ns float64) string {
	switch a := math.Abs(ns); {
	case a >= 1e9:
		return trim(ns/1e9, 2) + " s"
	case a >= 1e6:
		return trim(ns/1e6, 3) + " ms"
	case a >= 1e3:
		return trim(ns/1e3, 3) + " µs"
	}
	return trim(ns, 3) + " ns"
}

func millis(ms float64) string { return nanos(ms * 1e6) }

func byteSize(b float64) string {
	switch a := math.Abs(b); {
	case a >= 1<<30:
		return trim(b/(1<<30), 3) + " GiB"
	case a >= 1<<20:
		return trim(b/(1<<20), 3) + " MiB"
	case a >= 1<<10:
		return trim(b/(1<<10), 3) + " KiB"
	}
	return trim(b, 3) + " B"
}

func times(r float64) string { return trim(r, 3) + "×" }

func percent(r float64) string {
	if r == 0 {
		return "0 %"
	}
	return trim(r*100, 2) + " %"
}

func perSecond(v float64) string { return count(v) + "/s" }

// count shows a number with thousands separators, and up to two decimals below 100.
func count(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	if math.Abs(v) < 100 && v != math.Trunc(v) {
		return trim(v, 3)
	}
	s := fmt.Sprintf("%.0f", v)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// trim rounds v to sig significant digits and drops trailing zeros.
func trim(v float64, sig int) string {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Sprint(v)
	}
	decimals := max(sig-1-int(math.Floor(math.Log10(math.Abs(v)))), 0)
	s := fmt.Sprintf("%.*f", decimals, v)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// table renders a Markdown table; the first row is the header. Columns whose header starts with
// a digit-free right-align mark ">" are right-aligned (the mark is dropped).
func table(rows [][]string) string {
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	head := rows[0]
	align := make([]string, len(head))
	for i, h := range head {
		align[i] = "---"
		if strings.HasPrefix(h, ">") {
			head[i], align[i] = strings.TrimPrefix(h, ">"), "---:"
		}
	}
	b.WriteString("| " + strings.Join(head, " | ") + " |\n")
	b.WriteString("|" + strings.Join(align, "|") + "|\n")
	for _, r := range rows[1:] {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
}

// goal is one target of the report's Targets table and what this run measured for it.
type goal struct {
	what, target, measured string
	status                 goalStatus
}

type goalStatus int

const (
	notMeasured goalStatus = iota
	met
	missed
)

func (s goalStatus) String() string {
	switch s {
	case met:
		return "met"
	case missed:
		return "**missed**"
	}
	return "not measured"
}

func check(ok bool) goalStatus {
	if ok {
		return met
	}
	return missed
}

func renderGoals(goals []goal) string {
	if len(goals) == 0 {
		return ""
	}
	rows := [][]string{{"target", "goal", "measured (median of the runs)", "status"}}
	for _, g := range goals {
		rows = append(rows, []string{g.what, g.target, g.measured, g.status.String()})
	}
	return "\n## Targets\n\n" + table(rows)
}

// machine describes where and when the figures were taken.
type machine struct {
	cpu, memory, kernel, goVersion, mariadb, commit string
	loadBefore, loadAfter                           [3]float64
	waited, elapsed                                 time.Duration
}

func describeMachine(ctx context.Context, e *env) machine {
	m := machine{cpu: "unknown CPU", goVersion: runtime.Version(), mariadb: "not used (-mysql '')"}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		for _, l := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(l, "MemTotal:") {
				fmt.Sscanf(strings.TrimPrefix(l, "MemTotal:"), "%f", &kb)
			}
		}
		m.memory = byteSize(kb * 1024)
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.kernel = runtime.GOOS + " " + strings.TrimSpace(string(data))
	}
	if out, err := exec.CommandContext(ctx, "go", "version").Output(); err == nil {
		m.goVersion = strings.TrimPrefix(strings.TrimSpace(string(out)), "go version ")
	}
	if e.mysql != "" {
		if v, err := mysqlVersion(ctx, e.mysql); err == nil {
			m.mariadb = v
		} else {
			m.mariadb = "unknown: " + err.Error()
		}
	}
	rev := exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD")
	rev.Dir = e.root
	if out, err := rev.Output(); err == nil {
		m.commit = strings.TrimSpace(string(out))
		st := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no")
		st.Dir = e.root
		if out, err := st.Output(); err == nil && len(strings.TrimSpace(string(out))) > 0 {
			m.commit += " with uncommitted changes"
		}
	}
	return m
}

func renderHeader(e *env, m machine) string {
	load := func(l [3]float64) string { return fmt.Sprintf("%.2f / %.2f / %.2f (1 / 5 / 15 min)", l[0], l[1], l[2]) }
	before := load(m.loadBefore)
	switch {
	case e.maxLoad > 0 && m.loadBefore[0] >= e.maxLoad:
		before += fmt.Sprintf(", still ≥ %.2f after waiting %s: read the figures with care", e.maxLoad, m.waited.Round(time.Second))
	case m.waited >= time.Second:
		before += fmt.Sprintf(", after waiting %s for it to drop below %.2f", m.waited.Round(time.Second), e.maxLoad)
	}
	rows := [][]string{
		{"", ""},
		{"command", "`" + commandLine(e.args) + "`"},
		{"date", time.Now().UTC().Format("2006-01-02 15:04 UTC")},
		{"commit", m.commit},
		{"CPU", fmt.Sprintf("%s, %d cores (GOMAXPROCS %d)", m.cpu, runtime.NumCPU(), gomaxprocs())},
		{"memory", m.memory},
		{"OS", m.kernel},
		{"Go", m.goVersion},
		{"MariaDB", m.mariadb},
		{"runs", fmt.Sprintf("%d per figure (median, with min–max in brackets)", e.runs)},
		{"load average before", before},
		{"load average after", load(m.loadAfter)},
		{"wall time", m.elapsed.Round(time.Second).String()},
	}
	intro := "The machine is shared with other engineers' builds and tests; ratios against a baseline " +
		"taken in the same run are steadier than the absolute figures.\n\n"
	if e.quick {
		intro = "**Quick run (-quick): short measurements and small sizes, a smoke of the command — not figures to quote.**\n\n"
	}
	return "\n## Run\n\n" + intro + table(rows)
}

// commandLine is how this run was invoked, as a user would type it.
func commandLine(args []string) string {
	out := []string{"go", "run", "./cmd/bench"}
	for _, a := range args {
		if strings.ContainsAny(a, " '\"") || a == "" {
			a = "'" + a + "'"
		}
		out = append(out, a)
	}
	return strings.Join(out, " ")
}
