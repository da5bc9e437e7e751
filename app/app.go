// Package app wires bindery together: configuration, database, HTTP server and background
// services. main parses the command line and calls New then Run; tests boot the whole product
// the same way on :0 with a temporary database.
package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"bindery/config"
	"bindery/logging"
	"bindery/metric"
	"bindery/ratelimit"
	"bindery/server"
	"bindery/sim"
	"bindery/store"
)

// Version is stamped at build time (-ldflags "-X bindery/app.Version=…").
var Version = "dev"

// Mode selects defaults that differ between production and demo.
type Mode string

const (
	ModeServe Mode = "serve"
	ModeDemo  Mode = "demo"
)

// Assets are the embedded files the binary carries.
type Assets struct {
	Schema fs.FS // migrations: mysql/*.sql, sqlite/*.sql
	UI     fs.FS // SPA build, index.html at the root
}

// Options configure New. ConfigPath is required; Addr and DSN override the file's static keys.
type Options struct {
	Mode       Mode
	ConfigPath string
	Addr       string
	DSN        string
	Assets     Assets
	LogOutput  io.Writer // default os.Stderr
	// Services builds the workflow and the permission service once the database is open; it is
	// where the integrator wires package workflow and package permission. Nil, or nil results:
	// the workflow routes answer 503 UNAVAILABLE and every permission check is refused (403).
	Services func(ctx context.Context, a *App) (server.Workflow, server.Permissions, error)
}

// App is one running bindery instance.
type App struct {
	opts     Options
	cfg      *config.Source
	db       *store.DB
	log      *slog.Logger
	level    *slog.LevelVar
	metrics  *metrics.Set
	listener net.Listener
	http     *http.Server
	// metricsLn and metricsHTTP serve /metrics alone on server.metricsAddr (nil: not set).
	metricsLn   net.Listener
	metricsHTTP *http.Server
	instance    string
	sims        *sim.Sims // demo only: the simulators mounted under /sim/
	limiter     *ratelimit.Limiter
	share       *ratelimit.Share
	// notifications serves the notification routes (set by Services; nil: they answer 503).
	notifications server.Notifications

	// starts run when Run starts serving (the cron). drains run first at shutdown, in order,
	// while the HTTP server and the demo simulators still answer, so that steps in flight can
	// finish their calls (the cron stops, the worker pool drains). stops run in order after the
	// HTTP server stopped accepting requests.
	starts []func(context.Context)
	drains []func(context.Context) error
	stops  []func(context.Context) error

	closeOnce sync.Once
	closeErr  error
}

// New loads the configuration, opens and migrates the database and binds the listen address.
// Nothing runs until Run.
func New(ctx context.Context, opts Options) (_ *App, err error) {
	if opts.LogOutput == nil {
		opts.LogOutput = os.Stderr
	}
	a := &App{opts: opts, metrics: metrics.NewSet(), level: new(slog.LevelVar)}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()

	// The log format is static, so peek at the file before the logger exists; the real load
	// below reports any problem with it.
	format := "json"
	if opts.Mode == ModeDemo {
		format = "text"
	}
	if data, err := os.ReadFile(opts.ConfigPath); err == nil {
		if snap, err := config.Parse(data); err == nil && snap.LogFormat() != "" {
			format = snap.LogFormat()
		}
	}
	a.log = logging.New(opts.LogOutput, format, a.level)

	a.cfg, err = config.Open(opts.ConfigPath, a.log, a.metrics)
	if err != nil {
		return nil, err
	}
	snap := a.cfg.Current()
	a.level.Set(snap.LogLevel())
	a.cfg.OnChange(func(_, cur *config.Snapshot) { a.level.Set(cur.LogLevel()) })

	dsn := opts.DSN
	if dsn == "" {
		dsn = snap.DSN()
	}
	a.db, err = store.Open(ctx, dsn, store.Options{MaxOpenConns: snap.MaxOpenConns(), MaxIdleConns: snap.MaxIdleConns()})
	if err != nil {
		return nil, err
	}
	applied, err := a.db.Migrate(ctx, opts.Assets.Schema)
	if err != nil {
		return nil, err
	}
	if len(applied) > 0 {
		a.log.Info("database migrated", "applied", applied)
	}

	addr := opts.Addr
	if addr == "" {
		addr = snap.ListenAddr()
	}
	a.listener, err = net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (server.addr or -addr): %w", addr, err)
	}
	a.instance = instanceID(a.listener.Addr().String())

	var mounts map[string]http.Handler
	if opts.Mode == ModeDemo {
		// The simulators run in process; bindery's real clients reach them over HTTP at
		// <URL>/sim/gitlab, <URL>/sim/approval and <URL>/sim/permission.
		a.sims = sim.New(sim.Options{
			Config: a.cfg, BinderyURL: a.URL(), PublicURL: a.URL() + "/sim", Log: a.log.With("component", "sim"),
			StateFile: filepath.Join(filepath.Dir(opts.ConfigPath), "sim-state.json"), // beside config.yaml and bindery.db
		})
		mounts = map[string]http.Handler{"/sim/": a.sims.Handler()}
		// The mailbox's SMTP sink, on a loopback port of its own: the demo's email goes there.
		if err := a.sims.Mailbox.Listen(); err != nil {
			return nil, fmt.Errorf("demo mailbox: %w", err)
		}
	}
	var wf server.Workflow
	var perms server.Permissions
	if opts.Services != nil {
		if wf, perms, err = opts.Services(ctx, a); err != nil {
			return nil, err
		}
	}
	if wf == nil || perms == nil {
		a.log.Warn("services not wired: workflow routes answer 503 and permission checks are refused", "workflow", wf != nil, "permissions", perms != nil)
	}
	// Each instance enforces its share of every rate limit: ⌈limit ÷ live instances⌉, the count
	// refreshed with the heartbeat so that no request waits on the database for it.
	a.limiter = ratelimit.New(ratelimit.Options{})
	a.share = ratelimit.NewShare(func(ctx context.Context) (int, error) { return a.db.LiveInstances(ctx, liveWithin) })
	a.metrics.NewGauge("bindery_ratelimit_live_instances", func() float64 { return float64(a.share.Live()) })
	srv := server.New(server.Deps{
		Config:        a.cfg,
		DB:            a.db,
		Metrics:       a.metrics,
		Log:           a.log,
		UI:            opts.Assets.UI,
		Version:       Version,
		Demo:          opts.Mode == ModeDemo,
		Workflow:      wf,
		Permissions:   perms,
		Notifications: a.notifications,
		Limiter:       a.limiter,
		Share:         a.share,
		Recorder:      metric.New(metric.SetSink(a.metrics), a.log),
		Mounts:        mounts,
		ListenAddr:    a.listener.Addr().String(),
		AddrFlag:      opts.Addr != "",
	})
	if maddr := snap.MetricsAddr(); maddr != "" {
		if a.metricsLn, err = net.Listen("tcp", maddr); err != nil {
			return nil, fmt.Errorf("listen on %s (server.metricsAddr): %w", maddr, err)
		}
		a.metricsHTTP = &http.Server{Handler: srv.MetricsHandler(), ReadHeaderTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second,
			ErrorLog: slog.NewLogLogger(a.log.Handler(), slog.LevelWarn)}
	}
	a.http = &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
	}
	return a, nil
}

// instanceID names this process for heartbeats and lease ownership: host, pid and address for
// people, and randomness because a restarted process may get the same pid and address and must
// not believe it owns the leases of the process that crashed.
func instanceID(addr string) string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := host + "-" + strconv.Itoa(os.Getpid()) + "-" + addr + "-" + hex.EncodeToString(b[:])
	if len(id) > 64 {
		id = id[len(id)-64:]
	}
	return id
}

// URL is the base URL the server listens on.
func (a *App) URL() string { return "http://" + a.listener.Addr().String() }

// MetricsURL is the URL of /metrics on server.metricsAddr ("" when it is not set: /metrics is on
// URL()).
func (a *App) MetricsURL() string {
	if a.metricsLn == nil {
		return ""
	}
	return "http://" + a.metricsLn.Addr().String() + "/metrics"
}

// Config is the live configuration source.
func (a *App) Config() *config.Source { return a.cfg }

// DB is the database handle.
func (a *App) DB() *store.DB { return a.db }

// Log is the process logger.
func (a *App) Log() *slog.Logger { return a.log }

// Run serves until ctx ends, then shuts down gracefully within server.shutdownTimeout: stop
// accepting and finish in-flight requests, stop background services in order, close the
// database. It returns the first error that stopped serving.
func (a *App) Run(ctx context.Context) error {
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); a.watchConfig(bg) }()
	go func() { defer wg.Done(); a.heartbeat(bg) }()
	if a.sims != nil {
		a.sims.Start(bg)
	}

	serveErr := make(chan error, 1)
	go func() { serveErr <- a.http.Serve(a.listener) }()
	a.log.Info("bindery listening", "url", a.URL(), "mode", a.opts.Mode, "version", Version, "instance", a.instance)
	if a.metricsHTTP != nil {
		go func() {
			if e := a.metricsHTTP.Serve(a.metricsLn); e != nil && !errors.Is(e, http.ErrServerClosed) {
				a.log.Error("metrics listener stopped", "addr", a.metricsLn.Addr().String(), "err", e)
			}
		}()
		a.log.Info("metrics listening", "url", "http://"+a.metricsLn.Addr().String()+"/metrics")
	}
	for _, start := range a.starts {
		start(bg)
	}

	var err error
	select {
	case <-ctx.Done():
	case err = <-serveErr:
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
	}

	timeout := a.cfg.Current().ShutdownTimeout()
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	a.log.Info("shutting down", "timeout", timeout)
	stopHTTP := func() {
		if e := a.http.Shutdown(sctx); e != nil {
			a.log.Warn("http shutdown incomplete", "err", e)
		}
		if a.metricsHTTP != nil {
			_ = a.metricsHTTP.Shutdown(sctx)
		}
	}
	// Stop accepting first, then let the cron and the pool finish. In demo mode the simulators
	// that the draining steps call are served by this same listener, so it keeps answering
	// until the pool has drained; new API requests meanwhile find a stopping pool, which leaves
	// their step to the lease sweep of the next start, never in an invisible state.
	if a.sims == nil {
		stopHTTP()
	}
	for _, drain := range a.drains {
		if e := drain(sctx); e != nil {
			a.log.Warn("drain incomplete; interrupted steps resume on the next start (lease sweep)", "err", e)
		}
	}
	if a.sims != nil {
		a.sims.Stop() // before HTTP: a simulated hanging call would hold the shutdown to its timeout
		stopHTTP()
	}
	for _, stop := range a.stops {
		if e := stop(sctx); e != nil {
			a.log.Warn("stop incomplete", "err", e)
		}
	}
	stopBG()
	wg.Wait()
	if e := a.db.RemoveInstance(sctx, a.instance); e != nil {
		a.log.Warn("deregister instance", "err", e)
	}
	return errors.Join(err, a.Close())
}

func (a *App) watchConfig(ctx context.Context) {
	if err := a.cfg.Watch(ctx); err != nil {
		a.log.Error("config watch stopped; edits need a restart", "err", err)
	}
}

// heartbeatEvery is how often the instance row is refreshed; an instance is live while its
// heartbeat is younger than three periods.
const (
	heartbeatEvery = 5 * time.Second
	liveWithin     = 3 * heartbeatEvery
)

// heartbeat refreshes this instance's row, then the live-instance count the rate limits are
// divided by, and sweeps the idle rate-limit keys.
func (a *App) heartbeat(ctx context.Context) {
	t := time.NewTicker(heartbeatEvery)
	defer t.Stop()
	for {
		if err := a.db.Heartbeat(ctx, a.instance, Version); err != nil && ctx.Err() == nil {
			a.log.Warn("instance heartbeat failed", "err", err)
		}
		if err := a.share.Refresh(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn("rate limit: live instance count not refreshed; keeping the last one", "live", a.share.Live(), "err", err)
		}
		a.limiter.Sweep(a.cfg.Current().RateWindow())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Close releases the listener and the database. It is safe to call more than once.
func (a *App) Close() error {
	a.closeOnce.Do(func() {
		// Without Run (a failed start, a test), the services were never drained: stop them
		// before their database goes. After Run they are stopped already (each is idempotent).
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		for _, drain := range a.drains {
			_ = drain(ctx)
		}
		cancel()
		if a.listener != nil {
			_ = a.listener.Close()
		}
		if a.metricsLn != nil {
			_ = a.metricsLn.Close()
		}
		if a.db != nil {
			a.closeErr = a.db.Close()
		}
	})
	return a.closeErr
}

// Instance is this process's id in the instance table.
func (a *App) Instance() string { return a.instance }

// Sims are the in-process simulators in demo mode (nil otherwise). Their base URL is
// URL()+"/sim": give URL()+"/sim/gitlab" as gitlab.Options.DefaultBaseURL and
// URL()+"/sim/approval" as approval.Options.DefaultURL.
func (a *App) Sims() *sim.Sims { return a.sims }

// Metrics is the process's metric set (served at /metrics).
func (a *App) Metrics() *metrics.Set { return a.metrics }
