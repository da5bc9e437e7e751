// Command bindery is a self-service, configuration-as-code change system. See README.md; the
// commands are in internal/cli.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	_ "time/tzdata" // apply.timezone must resolve on hosts without a zoneinfo database

	"bindery/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr, assets)
	stop()
	os.Exit(code)
}
