package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"bindery/internal/app"
	"bindery/internal/ops/doctor"
)

// errDoctorFailed: a check failed; the report above says which and what to do.
var errDoctorFailed = errors.New("a check failed: fix the FAIL lines above")

// runDoctor checks the deployment a configuration file describes against the systems it names,
// writing nothing anywhere (docs/install.md, 'Check the setup').
func runDoctor(ctx context.Context, args []string, stdout, stderr io.Writer, assets app.Assets) error {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	configPath := fs.String("config", "", "config file (required)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	sendTest := fs.Bool("send-test", false, "send a test email to notify.email's from address (otherwise nothing is sent)")
	timeout := fs.Duration("timeout", 10*time.Second, "timeout of each remote call")
	if err := parseFlags(fs, args, stderr, "doctor -config FILE [-json] [-send-test] [-timeout 10s]"); err != nil {
		return err
	}
	if *configPath == "" {
		fmt.Fprintln(stderr, "-config is required")
		fs.Usage()
		return errUsage
	}
	report, err := doctor.Run(ctx, doctor.Options{ConfigPath: *configPath, Schema: assets.Schema, SendTest: *sendTest, Timeout: *timeout})
	if err != nil {
		return err
	}
	if *asJSON {
		err = report.WriteJSON(stdout)
	} else {
		err = report.WriteText(stdout)
	}
	if err != nil {
		return err
	}
	if report.Failed() {
		return errDoctorFailed
	}
	return nil
}
