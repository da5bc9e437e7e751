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

	"bindery/internal/platform/config"
	"bindery/internal/platform/logging"
	"bindery/internal/platform/metric"
	"bindery/internal/platform/ratelimit"
	"bindery/internal/sim"
	"bindery/internal/work/engine"
	"bindery/internal/work/notify"
	"bindery/internal/work/service"
	"bindery/server"
	"bindery/store"
	"bindery/workflow"
)

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
	// notifications serves the notification routes (set by wire; nil: they answer 503).
	notifications server.Notifications

	// The background services, built by New and started by Run (see Run for their order).
	watcher *config.Watcher
	beat    *heartbeat
	engine  *engine.Engine
	cron    *workflow.Cron
	watch   *notify.Watch // the notifier's periodic look
	// serveErr receives the error that ended the HTTP server's Serve (not a shutdown).
	serveErr chan error

	mu      sync.Mutex
	started []service.Service // in the order they started; Close stops them in the reverse

	closeOnce sync.Once
	closeErr  error
}

// New loads the configuration, opens and migrates the database and binds the listen address.
// Nothing runs until Run.
func New(ctx context.Context, opts Options) (_ *App, err error) {
	if opts.LogOutput == nil {
		opts.LogOutput = os.Stderr
	}
	a := &App{opts: opts, metrics: metrics.NewSet(), level: new(slog.LevelVar), serveErr: make(chan error, 1)}
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
	wf, perms, err := a.wire()
	if err != nil {
		return nil, err
	}
	// Each instance enforces its share of every rate limit: ⌈limit ÷ live instances⌉, the count
	// refreshed with the heartbeat so that no request waits on the database for it.
	a.limiter = ratelimit.New(ratelimit.Options{})
	a.share = ratelimit.NewShare(func(ctx context.Context) (int, error) { return a.db.LiveInstances(ctx, liveWithin) })
	a.metrics.NewGauge("bindery_ratelimit_live_instances", func() float64 { return float64(a.share.Live()) })
	a.watcher = config.NewWatcher(a.cfg)
	a.beat = &heartbeat{db: a.db, instance: a.instance, version: Version, cfg: a.cfg, share: a.share, limiter: a.limiter,
		log: a.log, every: heartbeatEvery}
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

// Run starts the background services and serves until ctx ends, then shuts down (Close):
// every service stops, in the reverse order of its start, within server.shutdownTimeout. It
// returns the first error that stopped serving.
//
// The order is what each service needs of the others while it stops. The configuration watcher
// and the heartbeat come first and go last. In serve mode the HTTP server starts last, so it is
// the first to stop accepting: then the cron stops (no new round) and the engine lets the steps
// in flight finish until the deadline (one cut there writes nothing and runs again on any
// instance). In demo mode the simulators those steps call are served by this same listener, so
// the listener starts before them and the engine after them: the engine stops first, then the
// simulators (their calls left hanging by a fault end, or the listener would wait for them),
// then the listener.
func (a *App) Run(ctx context.Context) error {
	// The services run until Close stops them, not until ctx: the shutdown orders their ends.
	bg := context.WithoutCancel(ctx)
	if err := a.start(bg, "config watcher", a.watcher); err != nil {
		a.log.Error("config watch not started; edits need a restart", "err", err)
	}
	web := []named{{name: "http", Service: &httpServer{srv: a.http, ln: a.listener, failed: func(err error) { a.serveErr <- err }}}}
	if a.metricsHTTP != nil {
		web = append(web, named{name: "metrics listener", Service: &httpServer{srv: a.metricsHTTP, ln: a.metricsLn, failed: func(err error) {
			a.log.Error("metrics listener stopped", "addr", a.metricsLn.Addr().String(), "err", err)
		}}})
	}
	order := []named{{name: "heartbeat", Service: a.beat}}
	if a.sims != nil {
		order = append(append(order, web...), named{name: "simulators", Service: a.sims})
	}
	order = append(order, named{name: "engine", Service: a.engine}, named{name: "cron", Service: a.cron}, named{name: "notify watch", Service: a.watch})
	if a.sims == nil {
		order = append(order, web...)
	}
	for _, s := range order {
		if err := a.start(bg, s.name, s.Service); err != nil {
			return errors.Join(err, a.Close())
		}
	}
	a.log.Info("bindery listening", "url", a.URL(), "mode", a.opts.Mode, "version", Version, "instance", a.instance)
	if a.metricsHTTP != nil {
		a.log.Info("metrics listening", "url", "http://"+a.metricsLn.Addr().String()+"/metrics")
	}

	var err error
	select {
	case <-ctx.Done():
	case err = <-a.serveErr:
	}
	a.log.Info("shutting down", "timeout", a.cfg.Current().ShutdownTimeout())
	return errors.Join(err, a.Close())
}

// Close stops the services Run started, in the reverse order of their start, within
// server.shutdownTimeout, then releases the listeners and the database. It is safe to call more
// than once, and without Run.
func (a *App) Close() error {
	a.closeOnce.Do(func() {
		timeout := time.Second // New failed before the configuration was loaded
		if a.cfg != nil {
			timeout = a.cfg.Current().ShutdownTimeout()
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := a.stopServices(ctx); err != nil {
			a.log.Warn("shutdown incomplete: work cut short resumes on any instance", "err", err)
		}
		if a.sims != nil {
			a.sims.Mailbox.Close() // bound by New, before any service started
		}
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
