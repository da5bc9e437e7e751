package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"bindery/internal/app"
	"bindery/internal/platform/config"
)

// databaseDSN is the database a command works on (migrate, backup): -dsn, else the -config
// file's database.dsn; neither is a usage error.
func databaseDSN(fs *flag.FlagSet, stderr io.Writer, configPath, dsn string) (string, error) {
	switch {
	case dsn != "":
		return dsn, nil
	case configPath == "":
		fmt.Fprintln(stderr, "-config or -dsn is required")
		fs.Usage()
		return "", errUsage
	}
	return dsnFromConfig(configPath)
}

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

// runSim serves the simulators alone, so several serve instances can share them.
func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8081", "listen address")
	bindery := fs.String("bindery", "", "base URL of bindery, for GitLab webhooks and deploy callbacks (approval callbacks go to each ticket's callbackUrl); empty: none are sent")
	cfgPath := fs.String("config", "", "config file with the secrets shared with bindery (hooks.*, gitlab tokens, the identity.oidc client, registered for server.publicURL's /auth/callback), the catalog and the sim.* fault knobs; watched for edits. Empty: the embedded sample (demo secrets)")
	runJobs := fs.Bool("run-jobs", false, "after a merge, run the jobs of the project's .gitlab-ci.yml on this machine (sh), as a shell runner would: how the deploy job of deploy/gitlab is rehearsed")
	adminToken := fs.String("admin-token", "", "token of a GitLab administrator (user root, Owner of every project) for the setup calls of docs/install.md; empty: no such account")
	if err := parseFlags(fs, args, stderr, "sim -addr ADDR [-bindery URL] [-config FILE] [-run-jobs] [-admin-token TOKEN]"); err != nil {
		return err
	}
	if *bindery != "" && !strings.HasPrefix(*bindery, "http://") && !strings.HasPrefix(*bindery, "https://") {
		fmt.Fprintf(stderr, "-bindery %q is not an http(s) URL\n", *bindery)
		fs.Usage()
		return errUsage
	}
	return app.RunSim(ctx, app.SimOptions{Addr: *addr, BinderyURL: *bindery, ConfigPath: *cfgPath, RunJobs: *runJobs, AdminToken: *adminToken, Stdout: stdout, LogOutput: stderr})
}
