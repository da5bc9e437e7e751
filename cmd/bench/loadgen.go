package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The load generator runs in its own process (this program again, with loadgenEnv set to its
// spec), so that its CPU is not the server's and its measurements are not disturbed by the
// bench's own work. It is a closed loop: Conc connections, each sending its next request when
// the previous answer arrived, for Warmup (not counted) plus Duration.

// loadgenEnv carries the JSON spec of a load-generator process.
const loadgenEnv = "BINDERY_BENCH_LOADGEN"

// loginHeader is the identity header the generated configuration trusts from loopback.
const loginHeader = "X-Forwarded-User"

type loadSpec struct {
	URL      string        `json:"url"`  // bindery's base URL
	Mode     string        `json:"mode"` // healthz | apply | status
	Conc     int           `json:"conc"`
	Warmup   time.Duration `json:"warmup"`
	Duration time.Duration `json:"duration"`
	// Prefix makes operationIds and identities unique per run: <prefix>-<worker>-<seq>, the
	// identity <same>@bench.example, so no application finds an active request of its own.
	Prefix  string   `json:"prefix"`
	Targets []string `json:"targets"` // apply: round-robin
	// IDs is a file of "operationId identity" lines: apply writes the accepted ones, status
	// reads them (each request is asked for by its owner).
	IDs string `json:"ids"`
}

type loadResult struct {
	Requests   int            `json:"requests"` // answered in the measured window
	Total      int            `json:"total"`    // answered, warm-up included (for CPU per request)
	OK         int            `json:"ok"`       // 2xx among them
	Statuses   map[string]int `json:"statuses"`
	Errors     int            `json:"errors"` // transport errors
	Seconds    float64        `json:"seconds"`
	RPS        float64        `json:"rps"` // 2xx per second
	P50        float64        `json:"p50ms"`
	P99        float64        `json:"p99ms"`
	Max        float64        `json:"maxms"`
	FirstError string         `json:"firstError,omitempty"` // the first non-2xx answer or transport error

	cpu float64 // the load generator's own CPU seconds (set by runLoad)
}

// runLoad starts a load-generator process and waits for its result.
func runLoad(ctx context.Context, spec loadSpec) (loadResult, error) {
	self, err := os.Executable()
	if err != nil {
		return loadResult{}, err
	}
	data, _ := json.Marshal(spec)
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), loadgenEnv+"="+string(data))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return loadResult{}, fmt.Errorf("load generator (%s): %w: %s", spec.Mode, err, tail(stderr.String(), 10))
	}
	var res loadResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		return loadResult{}, fmt.Errorf("load generator (%s) answered %q: %w", spec.Mode, tail(stdout.String(), 3), err)
	}
	res.cpu = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	return res, nil
}

// loadgenMain is the load-generator process: spec in, one JSON result out.
func loadgenMain(specJSON string, stdout, stderr io.Writer) int {
	var spec loadSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintf(stderr, "loadgen: bad spec: %v\n", err)
		return 2
	}
	res, err := generate(context.Background(), spec)
	if err != nil {
		fmt.Fprintf(stderr, "loadgen: %v\n", err)
		return 1
	}
	_ = json.NewEncoder(stdout).Encode(res)
	return 0
}

type sample struct {
	start   time.Time
	latency time.Duration
	status  int // 0: transport error
}

type owned struct{ id, identity string }

func generate(ctx context.Context, spec loadSpec) (loadResult, error) {
	if spec.Conc < 1 || spec.Duration <= 0 {
		return loadResult{}, fmt.Errorf("conc %d, duration %s: want positive values", spec.Conc, spec.Duration)
	}
	var known []owned
	if spec.Mode == "status" {
		var err error
		if known, err = readOwned(spec.IDs); err != nil {
			return loadResult{}, err
		}
		if len(known) == 0 {
			return loadResult{}, fmt.Errorf("status: no accepted requests in %s", spec.IDs)
		}
	}
	client := &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{MaxIdleConns: spec.Conc, MaxIdleConnsPerHost: spec.Conc, MaxConnsPerHost: spec.Conc,
			DisableCompression: true, IdleConnTimeout: time.Minute},
	}
	begin := time.Now()
	measureFrom, end := begin.Add(spec.Warmup), begin.Add(spec.Warmup+spec.Duration)
	var (
		mu       sync.Mutex
		samples  []sample
		accepted []owned
		firstErr string
		wg       sync.WaitGroup
	)
	for w := range spec.Conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []sample
			var ok []owned
			for seq := 0; time.Now().Before(end); seq++ {
				req, own, err := spec.request(w, seq, known)
				if err != nil {
					mu.Lock()
					firstErr = err.Error()
					mu.Unlock()
					return
				}
				start := time.Now()
				status, body, err := send(client, req)
				mine = append(mine, sample{start, time.Since(start), status})
				switch {
				case err != nil || status < 200 || status > 299:
					mu.Lock()
					if firstErr == "" {
						if err != nil {
							firstErr = err.Error()
						} else {
							firstErr = fmt.Sprintf("%d %s", status, oneLine(string(body)))
						}
					}
					mu.Unlock()
				case spec.Mode == "apply" && status == http.StatusAccepted:
					ok = append(ok, own)
				}
			}
			mu.Lock()
			samples = append(samples, mine...)
			accepted = append(accepted, ok...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res := summarize(samples, measureFrom, end)
	res.FirstError = firstErr
	if spec.Mode == "apply" && spec.IDs != "" {
		if err := writeOwned(spec.IDs, accepted); err != nil {
			return res, err
		}
	}
	return res, nil
}

// request builds worker w's seq-th request.
func (s loadSpec) request(w, seq int, known []owned) (*http.Request, owned, error) {
	switch s.Mode {
	case "healthz":
		r, err := http.NewRequest("GET", s.URL+"/healthz", nil)
		return r, owned{}, err
	case "apply":
		id := fmt.Sprintf("%s-%d-%d", s.Prefix, w, seq)
		o := owned{id: id, identity: id + "@bench.example"}
		body := fmt.Sprintf(`{"operationId":%q,"targetKey":%q,"reason":"benchmark load"}`, id, s.Targets[(w+seq)%len(s.Targets)])
		r, err := http.NewRequest("POST", s.URL+"/api/apply", strings.NewReader(body))
		if err == nil {
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set(loginHeader, o.identity)
		}
		return r, o, err
	case "status":
		o := known[(w*7919+seq)%len(known)]
		r, err := http.NewRequest("GET", s.URL+"/api/requests/"+o.id, nil)
		if err == nil {
			r.Header.Set(loginHeader, o.identity)
		}
		return r, o, err
	}
	return nil, owned{}, fmt.Errorf("unknown mode %q", s.Mode)
}

func send(c *http.Client, req *http.Request) (int, []byte, error) {
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// summarize keeps the requests started in [from, to) and computes throughput and percentiles.
func summarize(all []sample, from, to time.Time) loadResult {
	res := loadResult{Statuses: map[string]int{}, Seconds: to.Sub(from).Seconds(), Total: len(all)}
	var lat []time.Duration
	for _, s := range all {
		if s.start.Before(from) || !s.start.Before(to) {
			continue
		}
		res.Requests++
		if s.status == 0 {
			res.Errors++
			continue
		}
		res.Statuses[strconv.Itoa(s.status)]++
		if s.status >= 200 && s.status <= 299 {
			res.OK++
			lat = append(lat, s.latency)
		}
	}
	if res.Seconds > 0 {
		res.RPS = float64(res.OK) / res.Seconds
	}
	if len(lat) > 0 {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / float64(time.Millisecond) }
		res.P50, res.P99, res.Max = pct(0.50), pct(0.99), pct(1)
	}
	return res
}

func writeOwned(path string, list []owned) error {
	var b strings.Builder
	for _, o := range list {
		b.WriteString(o.id + " " + o.identity + "\n")
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func readOwned(path string) ([]owned, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []owned
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if id, who, ok := strings.Cut(sc.Text(), " "); ok {
			out = append(out, owned{id, who})
		}
	}
	return out, sc.Err()
}
