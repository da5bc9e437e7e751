package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"text/tabwriter"
	"time"

	"bindery/internal/platform/config"
	"bindery/internal/remote/gitlab"
	"bindery/store"
	"bindery/workflow"
)

// runImport adopts the binding files already in the config repository (docs/drift.md,
// 'Importing a repository'): every file under every target's path template is listed with what
// it becomes, and — unless -dry-run — those no binding owns become bindings in effect in one
// audited transaction. The database must be migrated (bindery migrate).
func runImport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("import", flag.ContinueOnError)
	configPath := fs.String("config", "", "config file: the catalog (targets), gitlab.* and database.dsn")
	dsnFlag := fs.String("dsn", "", "database DSN (overrides database.dsn)")
	dryRun := fs.Bool("dry-run", false, "list what the import would do; write nothing")
	if err := parseFlags(fs, args, stderr, "import -config FILE [-dry-run] [-dsn DSN]"); err != nil {
		return err
	}
	if *configPath == "" {
		fmt.Fprintln(stderr, "-config is required")
		fs.Usage()
		return errUsage
	}
	data, err := os.ReadFile(*configPath)
	if err != nil {
		return err
	}
	snap, err := config.Parse(data)
	if err != nil {
		return fmt.Errorf("config %s: %w", *configPath, err)
	}
	dsn := snap.DSN()
	if *dsnFlag != "" {
		dsn = *dsnFlag
	}
	db, err := store.Open(ctx, dsn, store.Options{})
	if err != nil {
		return err
	}
	defer db.Close()
	gl, err := gitlab.New(config.NewStatic(snap), gitlab.Options{})
	if err != nil {
		return err
	}
	res, err := workflow.Import(ctx, db, snap, gl, importActor(), *dryRun)
	if err != nil {
		return err
	}
	printImport(stdout, res)
	return nil
}

// importActor is who the audit record names: the account that ran the command.
func importActor() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "unknown"
	}
	return "bindery import (" + name + ")"
}

func printImport(w io.Writer, res workflow.ImportResult) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FILE\tTARGET\tSUBJECT\tEXPIRES\tBECOMES")
	bad, take := 0, 0
	for _, it := range res.Items {
		exp := "never"
		if it.ExpiresAt != nil {
			exp = it.ExpiresAt.UTC().Format(time.RFC3339)
		}
		becomes := it.Becomes
		switch {
		case it.Problem != "":
			bad++
			becomes, exp = "NOT IMPORTED: "+it.Problem, "-"
		case becomes == workflow.BecomesBinding:
			take++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", it.Path, it.TargetKey, it.Subject, exp, becomes)
	}
	tw.Flush()
	switch {
	case res.DryRun:
		fmt.Fprintf(w, "\ndry run: %d file(s), %d would become bindings in effect, %d cannot be imported; nothing was written\n", len(res.Items), take, bad)
	default:
		fmt.Fprintf(w, "\n%d file(s): %d binding(s) adopted in effect, %d cannot be imported\n", len(res.Items), res.Adopted, bad)
	}
}
