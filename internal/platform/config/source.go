package config

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/fsnotify/fsnotify"

	"bindery/internal/work/service"
)

// Source holds the current Snapshot and replaces it when the file changes. Readers call
// Current() at each use; a reload swaps an atomic pointer, so a reader never sees a
// half-applied configuration.
type Source struct {
	path string
	log  *slog.Logger

	cur     atomic.Pointer[Snapshot]
	lastErr atomic.Pointer[LoadError]
	gen     atomic.Int64

	mu       sync.Mutex // serialises reloads
	lastHash [sha256.Size]byte
	hooks    []func(old, cur *Snapshot)
	refused  []func(err error)

	reloadErrors *metrics.Counter
	reads        atomic.Int64 // file reads by reloads, for tests of the watch's filtering

	// PollInterval is how often Watch re-reads the file even without an fsnotify event, so a
	// change is seen when the watched directory itself was replaced. Set before Watch.
	PollInterval time.Duration
}

// LoadError is the last reload that failed, kept for the ops console until a reload succeeds.
type LoadError struct {
	At      time.Time `json:"at"`
	Message string    `json:"message"`
}

// Open loads path and returns a Source for it. The first load must succeed: there is no last
// good configuration to fall back to yet. set receives the reload metrics (nil: none).
func Open(path string, log *slog.Logger, set *metrics.Set) (*Source, error) {
	src := &Source{path: path, log: log, PollInterval: 2 * time.Second}
	if set != nil {
		src.reloadErrors = set.NewCounter("bindery_config_reload_errors_total")
		set.NewGauge("bindery_config_generation", func() float64 { return float64(src.gen.Load()) })
	}
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	snap, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	src.lastHash = sha256.Sum256(data)
	src.install(snap)
	return src, nil
}

// NewStatic returns a Source holding snap that never reloads from a file, for tests and tools.
func NewStatic(snap *Snapshot) *Source {
	src := &Source{log: slog.New(slog.DiscardHandler)}
	src.install(snap)
	return src
}

// MustParse parses YAML text or panics; for tests and the embedded sample.
func MustParse(yamlText string) *Snapshot {
	s, err := Parse([]byte(yamlText))
	if err != nil {
		panic(err)
	}
	return s
}

// Current returns the configuration in force. Call it at each use; do not keep the result.
func (s *Source) Current() *Snapshot { return s.cur.Load() }

// LastError returns the last failed reload since the last successful one, or nil.
func (s *Source) LastError() *LoadError { return s.lastErr.Load() }

// Path is the watched file ("" for a static source).
func (s *Source) Path() string { return s.path }

// OnChange registers fn to run after each successful reload. Register before Watch.
func (s *Source) OnChange(fn func(old, cur *Snapshot)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hooks = append(s.hooks, fn)
}

// OnRefused registers fn to run after each reload that was refused (the last good configuration
// stays in force). Register before Watch.
func (s *Source) OnRefused(fn func(err error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refused = append(s.refused, fn)
}

// Replace installs snap as if it had been loaded from the file; for tests of dynamic keys.
func (s *Source) Replace(snap *Snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.swap(snap)
}

func (s *Source) install(snap *Snapshot) {
	snap.Generation = s.gen.Add(1)
	snap.LoadedAt = time.Now()
	s.cur.Store(snap)
}

// swap installs snap, logs static keys that need a restart and runs the hooks. Holds s.mu.
func (s *Source) swap(snap *Snapshot) {
	old := s.cur.Load()
	s.install(snap)
	s.lastErr.Store(nil)
	for _, k := range staticChanges(old, snap) {
		s.log.Warn("config key changed; restart needed to apply it", "key", k)
	}
	for _, name := range snap.Unknown {
		s.log.Warn("unknown config key; nothing reads it", "key", name)
	}
	for _, r := range snap.Report {
		if r.Status == StatusFallback {
			s.log.Warn("config value invalid; documented fallback applies", "key", r.Key, "effective", r.Effective, "note", r.Note)
		}
	}
	s.log.Info("config loaded", "generation", snap.Generation, "path", s.path)
	for _, fn := range s.hooks {
		fn(old, snap)
	}
}

// Reload reads the file again. A file that fails to read, parse or validate, or holds no keys at
// all, keeps the last good snapshot in force; the error is logged, counted and kept for the ops console. An unchanged
// file is not reloaded (unless force).
func (s *Source) Reload() error { return s.reload(true) }

func (s *Source) reload(force bool) error {
	if s.path == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads.Add(1)
	data, err := readFile(s.path)
	var hash [sha256.Size]byte
	if err == nil {
		hash = sha256.Sum256(data)
	} else {
		hash = sha256.Sum256([]byte("\x00unreadable:" + err.Error()))
	}
	if !force && hash == s.lastHash {
		return nil
	}
	s.lastHash = hash
	if err == nil && blankDocument(data) {
		// An editor that truncates before it writes, or a deploy that empties the file, would
		// otherwise put every key back to its default at once: no catalog, no secrets.
		err = errors.New("the file holds no keys; keeping the last good configuration (write {} to reset every key to its default)")
	}
	if err == nil {
		var snap *Snapshot
		if snap, err = ParseOver(data, s.cur.Load()); err == nil {
			if err = halfFile(s.cur.Load(), snap); err == nil {
				s.swap(snap)
				return nil
			}
		}
	}
	err = fmt.Errorf("config %s: %w", s.path, err)
	s.lastErr.Store(&LoadError{At: time.Now(), Message: err.Error()})
	if s.reloadErrors != nil {
		s.reloadErrors.Inc()
	}
	s.log.Error("config reload failed; keeping the last good configuration",
		"generation", s.cur.Load().Generation, "err", err)
	for _, fn := range s.refused {
		fn(err)
	}
	return err
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	return data, nil
}

// debounce lets an editor finish writing (truncate, write, rename) before the file is read.
const debounce = 100 * time.Millisecond

// Watch reloads the file on change until ctx ends. It watches the directory, not the file:
// editors that write a temporary file and rename it over the original, or delete and recreate
// it, replace the inode a file watch would hold. An event on the file's name triggers a
// debounced read; an unchanged file (same hash) is not reloaded. A periodic re-read covers a
// watch lost with its directory. A process runs it as a service: Watcher.
func (s *Source) Watch(ctx context.Context) error {
	if s.path == "" {
		<-ctx.Done()
		return nil
	}
	w, err := s.openWatch()
	if err != nil {
		return err
	}
	s.watch(ctx, w)
	return nil
}

// openWatch sets up the directory watch: the part of Watch that can fail.
func (s *Source) openWatch() (*fsnotify.Watcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("config watch: %w", err)
	}
	dir := filepath.Dir(s.path)
	if err := w.Add(dir); err != nil {
		w.Close()
		return nil, fmt.Errorf("config watch %s: %w", dir, err)
	}
	return w, nil
}

// watch is Watch's loop over an open watch, which it closes when ctx ends.
func (s *Source) watch(ctx context.Context, w *fsnotify.Watcher) {
	defer w.Close()
	dir, base := filepath.Dir(s.path), filepath.Base(s.path)
	poll := time.NewTicker(s.PollInterval)
	defer poll.Stop()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			// Only the file's own entry, and the "..data"-style symlink swaps of mounted config
			// volumes: the directory may hold busy neighbours (the demo's database and its WAL).
			if name := filepath.Base(ev.Name); name == base || strings.HasPrefix(name, "..") {
				timer.Reset(debounce)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			s.log.Warn("config watch error", "err", err)
		case <-timer.C:
			_ = s.reload(false)
		case <-poll.C:
			// Re-adding is a no-op on a live watch and restores one lost with a replaced directory.
			if err := w.Add(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
				s.log.Warn("config watch re-add failed", "dir", dir, "err", err)
			}
			_ = s.reload(false)
		}
	}
}

// Watcher keeps a Source in step with its file (Watch) as a service of the process: Start sets
// the watch up — its error, a directory that cannot be watched, is Start's — and Stop ends it.
// A static Source has nothing to watch: its Watcher starts and stops without running anything.
type Watcher struct {
	src *Source
	bg  service.Base
}

// NewWatcher returns the watcher of src; nothing runs until Start.
func NewWatcher(src *Source) *Watcher { return &Watcher{src: src} }

// Start sets up the watch and runs it until Stop or ctx's end.
func (w *Watcher) Start(ctx context.Context) error {
	if _, ok, err := w.bg.StartInit(ctx); !ok {
		return err
	}
	if w.src.path == "" {
		return nil
	}
	fw, err := w.src.openWatch()
	if err != nil {
		w.bg.StopInit()
		return err
	}
	if !w.bg.Go(func(ctx context.Context) { w.src.watch(ctx, fw) }) {
		fw.Close() // a Stop came first
	}
	return nil
}

// Stop ends the watch and returns once it ended (or when ctx ends first, an error). Safe before
// Start and more than once.
func (w *Watcher) Stop(ctx context.Context) error { return w.bg.Stop(ctx) }
