package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"bindery/store"
)

// runBackup writes an online copy of bindery's SQLite database (docs/install.md, 'Backup and
// restore'); for MySQL it says which tool to use instead.
func runBackup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("backup", flag.ContinueOnError)
	configPath := fs.String("config", "", "config file; its database.dsn is copied (required unless -dsn)")
	dsn := fs.String("dsn", "", "database DSN (overrides database.dsn)")
	out := fs.String("out", "", "file to write the copy to; it must not exist (required)")
	if err := parseFlags(fs, args, stderr, "backup -config FILE -out FILE [-dsn DSN]"); err != nil {
		return err
	}
	if *out == "" || (*configPath == "" && *dsn == "") {
		fmt.Fprintln(stderr, "-out and -config (or -dsn) are required")
		fs.Usage()
		return errUsage
	}
	if *dsn == "" {
		d, err := dsnFromConfig(*configPath)
		if err != nil {
			return err
		}
		*dsn = d
	}
	db, err := store.Open(ctx, *dsn, store.Options{})
	if err != nil {
		return err
	}
	defer db.Close()
	start := time.Now()
	if err := db.Backup(ctx, *out); err != nil {
		return err
	}
	v, _ := db.SchemaVersion(ctx)
	fmt.Fprintf(stdout, "backup of %s written to %s (schema %04d) in %s\n", store.RedactDSN(*dsn), *out, v, time.Since(start).Round(time.Millisecond))
	return nil
}
