package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"bindery/internal/testkit/proc"
)

// footprintSection: binary size against hello-world binaries built the same way, start-to-ready
// on SQLite against an exec of `bindery version`, idle RSS against a hello-world HTTP server,
// and RSS under the HTTP load of section 2.
func footprintSection(ctx context.Context, e *env) (string, []goal, error) {
	bin, err := e.buildBindery(ctx)
	if err != nil {
		return "", nil, err
	}
	hello, helloHTTP, err := buildHellos(ctx, e)
	if err != nil {
		return "", nil, err
	}
	size := func(p string) float64 {
		fi, err := os.Stat(p)
		if err != nil {
			return 0
		}
		return float64(fi.Size())
	}
	bs, hs, hhs := size(bin), size(hello), size(helloHTTP)

	dir := filepath.Join(e.work, "footprint")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	// The simulators are up so that nothing in serve's start waits on an unreachable service;
	// they are not part of what is timed.
	simAddr, err := proc.FreeAddr()
	if err != nil {
		return "", nil, err
	}
	sim, err := proc.Start(ctx, e.work, nil, "sim", bin, "sim", "-addr", simAddr)
	if err != nil {
		return "", nil, err
	}
	defer sim.Stop()
	if err := proc.WaitReady(ctx, sim, "http://"+simAddr+"/healthz", 30*time.Second); err != nil {
		return "", nil, err
	}

	// Idle: after start-up work and the first heartbeat (a short wait in -quick).
	settle := quickOr(e, 3*time.Second, 300*time.Millisecond)
	var first, restart, version, idle, helloIdle []float64
	for run := range e.runs {
		runDir := filepath.Join(dir, fmt.Sprintf("run-%d", run))
		if err := os.MkdirAll(runDir, 0o755); err != nil {
			return "", nil, err
		}
		db, _ := newDatabase(ctx, e, "sqlite", runDir)
		addr, err := proc.FreeAddr()
		if err != nil {
			return "", nil, err
		}
		cfg := filepath.Join(runDir, "config.yaml")
		if err := os.WriteFile(cfg, []byte(configYAML(stackConfig{addr: addr, simURL: "http://" + simAddr, db: db, approvalFirst: true})), 0o600); err != nil {
			return "", nil, err
		}
		// First start: an empty database, every migration applied. Then a restart on it, which
		// is what a deployment does; the idle RSS is read from the restarted process.
		for i, into := range []*[]float64{&first, &restart} {
			d, p, err := startToReady(ctx, e, bin, "http://"+addr+"/readyz", "serve", "-config", cfg)
			if err != nil {
				return "", nil, err
			}
			*into = append(*into, d)
			if i == 1 {
				time.Sleep(settle)
				cur, _, err := rssOf(p)
				if err != nil {
					p.Stop()
					return "", nil, err
				}
				idle = append(idle, cur)
			}
			p.Stop()
		}
		d, err := execTime(ctx, bin, "version")
		if err != nil {
			return "", nil, err
		}
		version = append(version, d)

		haddr, err := proc.FreeAddr()
		if err != nil {
			return "", nil, err
		}
		_, hp, err := startToReady(ctx, e, helloHTTP, "http://"+haddr+"/", haddr)
		if err != nil {
			return "", nil, err
		}
		time.Sleep(settle)
		cur, _, err := rssOf(hp)
		hp.Stop()
		if err != nil {
			return "", nil, err
		}
		helloIdle = append(helloIdle, cur)
	}

	one := func(v float64) []float64 { return []float64{v} }
	rows := [][]string{{"", ">bindery", ">baseline", ">bindery ÷ baseline", "baseline is"}}
	rows = append(rows,
		[]string{"binary size", byteSize(bs), byteSize(hs), ratios(one(bs), one(hs)).show(times), "hello world (`fmt.Println`), built the same way"},
		[]string{"binary size", byteSize(bs), byteSize(hhs), ratios(one(bs), one(hhs)).show(times), "hello-world HTTP server (`net/http`), built the same way"},
		[]string{"start to ready, restart (migrated database)", distOf(restart).show(nanos), distOf(version).show(nanos), ratios(restart, version).show(times), "exec of `bindery version` to its exit"},
		[]string{"start to ready, first start (empty database, every migration)", distOf(first).show(nanos), distOf(version).show(nanos), ratios(first, version).show(times), "exec of `bindery version` to its exit"},
		[]string{fmt.Sprintf("idle RSS (%s after ready)", settle), distOf(idle).show(byteSize), distOf(helloIdle).show(byteSize), ratios(idle, helloIdle).show(times), fmt.Sprintf("hello-world HTTP server, %s after it answered", settle)},
	)
	if len(e.rssUnderLoad) > 0 {
		rows = append(rows, []string{"RSS under load (largest during section 2's loads on SQLite)", distOf(e.rssUnderLoad).show(byteSize), distOf(idle).show(byteSize),
			ratios(e.rssUnderLoad, idle).show(times), "idle RSS of bindery above"})
	} else {
		rows = append(rows, []string{"RSS under load", "not measured (section 2 did not run)", "", "", ""})
	}
	body := "Binaries are built as README.md says (`CGO_ENABLED=0 go build`). Start to ready: from the exec of " +
		"`bindery serve -config …` (SQLite) to the first 200 of `/readyz`, polled every 2 ms. RSS is `VmRSS` from " +
		"`/proc/<pid>/status`.\n\n" + table(rows)
	goals := []goal{
		{"start to ready on SQLite (restart)", "≤ 300 ms", nanos(distOf(restart).med), check(distOf(restart).med <= 300e6)},
		{"idle RSS", "≤ 40 MB", byteSize(distOf(idle).med), check(distOf(idle).med <= 40e6)},
	}
	return body, goals, nil
}

// startToReady execs bin with args and polls readyURL until it answers 200; it returns the time
// from the exec and the running process (the caller stops it).
func startToReady(ctx context.Context, e *env, bin, readyURL string, args ...string) (float64, *proc.Process, error) {
	start := time.Now()
	p, err := proc.Start(ctx, e.work, nil, filepath.Base(bin), bin, args...)
	if err != nil {
		return 0, nil, err
	}
	if err := proc.WaitReady(ctx, p, readyURL, 30*time.Second); err != nil {
		p.Stop()
		return 0, nil, err
	}
	return float64(time.Since(start)), p, nil
}

// execTime is the time from the exec of bin to its exit.
func execTime(ctx context.Context, bin string, args ...string) (float64, error) {
	start := time.Now()
	if out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("%s %v: %w: %s", bin, args, err, out)
	}
	return float64(time.Since(start)), nil
}

// buildHellos builds the baselines: a hello world and a hello-world HTTP server (its first
// argument is the listen address), in their own module, the same way as bindery.
func buildHellos(ctx context.Context, e *env) (hello, helloHTTP string, err error) {
	for _, h := range []struct {
		name, src string
		out       *string
	}{
		{"hello", "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello, world\") }\n", &hello},
		{"hellohttp", `package main

import (
	"io"
	"net/http"
	"os"
)

func main() {
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello, world\n") })
	if err := http.ListenAndServe(os.Args[1], nil); err != nil {
		panic(err)
	}
}
`, &helloHTTP},
	} {
		dir := filepath.Join(e.work, h.name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", "", err
		}
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module "+h.name+"\n\ngo 1.22\n"), 0o644); err != nil {
			return "", "", err
		}
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(h.src), 0o644); err != nil {
			return "", "", err
		}
		*h.out = filepath.Join(dir, h.name)
		if err := proc.Build(ctx, dir, *h.out, "."); err != nil {
			return "", "", err
		}
	}
	return hello, helloHTTP, nil
}
