package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	"bindery/internal/ops/smoke"
)

// errSmokeFailed is a check that failed: exit 1, after the report says which.
var errSmokeFailed = fmt.Errorf("checks failed")

// runSmoke checks a running deployment's SPA serving rules (docs/api.md, 'Serving the page') and
// the browser protections of its page and API, and fails on a mismatch.
func runSmoke(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("smoke", flag.ContinueOnError)
	base := fs.String("url", "", "base URL of the deployment, e.g. http://127.0.0.1:8080 (required)")
	timeout := fs.Duration("timeout", 10*time.Second, "timeout of each request")
	if err := parseFlags(fs, args, stderr, "smoke -url URL [-timeout 10s]"); err != nil {
		return err
	}
	if *base == "" {
		fmt.Fprintln(stderr, "-url is required")
		fs.Usage()
		return errUsage
	}
	results, err := smoke.Run(ctx, *base, &http.Client{Timeout: *timeout})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return errUsage
	}
	smoke.Report(stdout, results)
	if n := smoke.Failed(results); n > 0 {
		return fmt.Errorf("%d of %d %w", n, len(results), errSmokeFailed)
	}
	fmt.Fprintf(stdout, "all %d checks passed\n", len(results))
	return nil
}
