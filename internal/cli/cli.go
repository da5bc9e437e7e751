// Package cli is bindery's command line: each command's flags, its usage text and its exit code.
// The work itself is the app's (internal/app) and the tools' it calls; main only hands the
// embedded files down and exits with the code Run returns.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"bindery/internal/app"
	"bindery/store"
)

const usage = `bindery — self-service configuration-as-code changes

Usage:
  bindery demo    [-addr 127.0.0.1:8080] [-data ./bindery-demo] [-dsn DSN]   everything local, one command
  bindery serve   -config FILE [-addr ADDR]                                  production (MySQL, real GitLab)
  bindery sim     -addr ADDR [-bindery URL] [-config FILE]                   the simulators alone
  bindery migrate -config FILE [-dsn DSN]                                    apply database migrations (forward-only)
  bindery doctor  -config FILE [-json] [-send-test]                          check the setup against the systems it names
  bindery backup  -config FILE -out FILE                                     an online copy of a SQLite database
  bindery import  -config FILE [-dry-run] [-dsn DSN]                         adopt the binding files already in the config repository
  bindery smoke   -url URL                                                   check a deployment's SPA serving rules and headers
  bindery version

Run "bindery <command> -h" for a command's flags.
`

// Run executes one command and returns the process exit code: 0 ok, 1 failure, 2 usage.
// assets are the files the binary carries (the migrations and the SPA build).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, assets app.Assets) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	var err error
	switch cmd {
	case "demo":
		err = runDemo(ctx, rest, stdout, stderr, assets)
	case "serve":
		err = runServe(ctx, rest, stderr, assets)
	case "sim":
		err = runSim(ctx, rest, stdout, stderr)
	case "migrate":
		err = runMigrate(ctx, rest, stdout, stderr, assets)
	case "smoke":
		err = runSmoke(ctx, rest, stdout, stderr)
	case "doctor":
		err = runDoctor(ctx, rest, stdout, stderr, assets)
	case "backup":
		err = runBackup(ctx, rest, stdout, stderr)
	case "import":
		err = runImport(ctx, rest, stdout, stderr)
	case "version":
		if len(rest) > 0 && rest[0] != "-h" && rest[0] != "--help" {
			fmt.Fprint(stderr, usage)
			return 2
		}
		fmt.Fprint(stdout, app.BuildInfo())
		return 0
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "bindery: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	fmt.Fprintf(stderr, "bindery %s: %v\n", cmd, err)
	return 1
}

var errUsage = errors.New("usage")

// parseFlags parses a command's flags; -h prints them (exit 0), a bad flag prints them (exit 2).
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer, synopsis string) error {
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: bindery %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	return nil
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer, assets app.Assets) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address")
	data := fs.String("data", "./bindery-demo", "data directory (config.yaml and bindery.db)")
	dsn := fs.String("dsn", "", "database DSN instead of the SQLite file, e.g. mysql://root@tcp(127.0.0.1:3306)/bindery")
	if err := parseFlags(fs, args, stderr, "demo [-addr ADDR] [-data DIR] [-dsn DSN]"); err != nil {
		return err
	}
	configPath, fileDSN, err := app.PrepareDemo(*data)
	if err != nil {
		return err
	}
	if *dsn == "" {
		*dsn = fileDSN
	}
	a, err := app.New(ctx, app.Options{Mode: app.ModeDemo, ConfigPath: configPath, Addr: *addr, DSN: *dsn, Assets: assets, LogOutput: stderr})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "bindery demo is running at %s\n  config:   %s (edits apply live)\n  database: %s\nPress Ctrl-C to stop.\n",
		a.URL(), configPath, store.RedactDSN(*dsn))
	return a.Run(ctx)
}

func runServe(ctx context.Context, args []string, stderr io.Writer, assets app.Assets) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	configPath := fs.String("config", "", "config file (required)")
	addr := fs.String("addr", "", "listen address (overrides server.addr)")
	if err := parseFlags(fs, args, stderr, "serve -config FILE [-addr ADDR]"); err != nil {
		return err
	}
	if *configPath == "" {
		fmt.Fprintln(stderr, "-config is required")
		fs.Usage()
		return errUsage
	}
	a, err := app.New(ctx, app.Options{Mode: app.ModeServe, ConfigPath: *configPath, Addr: *addr, Assets: assets, LogOutput: stderr})
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer, assets app.Assets) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	configPath := fs.String("config", "", "config file; its database.dsn is used unless -dsn is given")
	dsnFlag := fs.String("dsn", "", "database DSN (overrides database.dsn)")
	if err := parseFlags(fs, args, stderr, "migrate -config FILE [-dsn DSN]"); err != nil {
		return err
	}
	dsn, err := databaseDSN(fs, stderr, *configPath, *dsnFlag)
	if err != nil {
		return err
	}
	db, err := store.Open(ctx, dsn, store.Options{})
	if err != nil {
		return err
	}
	defer db.Close()
	applied, err := db.Migrate(ctx, assets.Schema)
	if err != nil {
		return err
	}
	v, _ := db.SchemaVersion(ctx)
	fmt.Fprintf(stdout, "applied %d migration(s) %v; schema version %d\n", len(applied), applied, v)
	return nil
}
