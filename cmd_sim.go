package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"bindery/config"
	"bindery/logging"
	"bindery/sim"
)

func dsnFromConfig(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	snap, err := config.Parse(data)
	if err != nil {
		return "", fmt.Errorf("config %s: %w", path, err)
	}
	return snap.DSN(), nil
}

// runSim serves the simulators alone (GitLab, approval system, deploy pipeline, permission
// service under /sim/) so several serve instances can share them.
func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8081", "listen address")
	bindery := fs.String("bindery", "", "base URL of bindery, for GitLab webhooks and deploy callbacks (approval callbacks go to each ticket's callbackUrl); empty: none are sent")
	cfgPath := fs.String("config", "", "config file with the secrets shared with bindery (hooks.*, gitlab tokens), the catalog and the sim.* fault knobs; watched for edits. Empty: the embedded sample (demo secrets)")
	if err := parseFlags(fs, args, stderr, "sim -addr ADDR [-bindery URL] [-config FILE]"); err != nil {
		return err
	}
	if *bindery != "" && !strings.HasPrefix(*bindery, "http://") && !strings.HasPrefix(*bindery, "https://") {
		fmt.Fprintf(stderr, "-bindery %q is not an http(s) URL\n", *bindery)
		fs.Usage()
		return errUsage
	}
	log := logging.New(stderr, "text", new(slog.LevelVar))
	var src *config.Source
	if *cfgPath == "" {
		src = config.NewStatic(config.MustParse(string(config.Sample)))
	} else {
		var err error
		if src, err = config.Open(*cfgPath, log, nil); err != nil {
			return err
		}
	}
	// The services run until the shutdown below stops them, in the reverse order of their start.
	bg := context.WithoutCancel(ctx)
	watcher := config.NewWatcher(src)
	if err := watcher.Start(bg); err != nil {
		log.Error("config watch not started; edits need a restart", "err", err)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	sims := sim.New(sim.Options{Config: src, BinderyURL: *bindery, Log: log})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"status":"ok"}`+"\n")
	})
	mux.Handle("/sim/", sims.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "bindery simulators listening at http://%s\n  GitLab:          http://%[1]s/sim/gitlab (gitlab.baseURL)\n  approval system: http://%[1]s/sim/approval (approvalSystem.url), inbox /sim/approvals\n  permission:      http://%[1]s/sim/permission (permission.url)\n  deploys:         http://%[1]s/sim/deploys\n", ln.Addr())
	if err := sims.Start(bg); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		err = nil
	case err = <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The simulators first: that ends the calls a fault left hanging, which the server's
	// shutdown would otherwise wait for.
	return errors.Join(err, sims.Stop(shut), srv.Shutdown(shut), watcher.Stop(shut))
}
