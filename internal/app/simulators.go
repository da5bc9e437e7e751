package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"bindery/internal/platform/config"
	"bindery/internal/platform/logging"
	"bindery/internal/sim"
	"bindery/internal/work/service"
)

// SimOptions configure RunSim.
type SimOptions struct {
	Addr string
	// BinderyURL is where GitLab webhooks and deploy callbacks go ("" sends none).
	BinderyURL string
	// ConfigPath is the file with the secrets shared with bindery, the catalog and the sim.*
	// fault knobs, watched for edits; "" is the embedded sample.
	ConfigPath string
	// RunJobs runs the jobs of a project's .gitlab-ci.yml after a merge (sim.Options.RunJobs).
	RunJobs bool
	// AdminToken is the simulated GitLab's administrator token (sim.Options.AdminToken).
	AdminToken string
	Stdout     io.Writer // where the URLs are printed
	LogOutput  io.Writer
}

// RunSim serves the simulators alone (GitLab, approval system, deploy pipeline, permission
// service under /sim/), so several serve instances can share one simulated GitLab, until ctx
// ends. Its services start and stop like the app's: the config watcher first, the listener
// next, the simulators last — so they stop first, ending the calls a fault left hanging, which
// the listener's shutdown would otherwise wait for.
func RunSim(ctx context.Context, o SimOptions) error {
	log := logging.New(o.LogOutput, "text", new(slog.LevelVar))
	var src *config.Source
	if o.ConfigPath == "" {
		src = config.NewStatic(config.MustParse(string(config.Sample)))
	} else {
		var err error
		if src, err = config.Open(o.ConfigPath, log, nil); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.Addr, err)
	}
	defer ln.Close()
	sims := sim.New(sim.Options{Config: src, BinderyURL: o.BinderyURL, RunJobs: o.RunJobs, AdminToken: o.AdminToken, Log: log})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"status":"ok"}`+"\n")
	})
	mux.Handle("/sim/", sims.Handler())
	serveErr := make(chan error, 1)
	web := &httpServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, ln: ln, failed: func(err error) { serveErr <- err }}

	// The services run until the shutdown below stops them, not until ctx.
	bg := context.WithoutCancel(ctx)
	var started []service.Service
	stop := func() error {
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return service.StopAll(shut, started...)
	}
	watcher := config.NewWatcher(src)
	if err := watcher.Start(bg); err != nil {
		log.Error("config watch not started; edits need a restart", "err", err)
	} else {
		started = append(started, watcher)
	}
	for _, s := range []named{{name: "http", Service: web}, {name: "simulators", Service: sims}} {
		s.log = log
		if err := s.Start(bg); err != nil {
			return errors.Join(err, stop())
		}
		started = append(started, s)
	}
	fmt.Fprintf(o.Stdout, "bindery simulators listening at http://%s\n  GitLab:          http://%[1]s/sim/gitlab (gitlab.baseURL)\n  approval system: http://%[1]s/sim/approval (approvalSystem.url), inbox /sim/approvals\n  permission:      http://%[1]s/sim/permission (permission.url)\n  identity:        http://%[1]s/sim/oidc (identity.oidc.issuer)\n  deploys:         http://%[1]s/sim/deploys\n", ln.Addr())
	select {
	case <-ctx.Done():
		err = nil
	case err = <-serveErr:
	}
	return errors.Join(err, stop())
}
