//go:build !nodev

package main

import (
	"context"
	"errors"
	"flag"
	"io"

	"github.com/bloomgate/bloomgate/internal/demo"
)

// cmdDev runs the local demo (internal/demo): an in-process broker, the
// worker and a producer of events with a known number of duplicates, with
// live progress and a summary once everything produced has been consumed.
func cmdDev(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	o := demo.Flags(fs)
	if done, code := parseFlags(fs, args, demo.Usage, stdout, stderr); done {
		return code
	}
	wire := demo.Wiring{NewWorker: newWorker, NewRepartition: newRepartition, CloseState: closeState, StatusHandler: statusHandler}
	err := o.Resolve()
	if err == nil {
		err = demo.Run(ctx, o, wire, stdout, stderr)
	}
	var ue demo.UsageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		return exitCode(stderr, "dev", usageError{ue.Err})
	}
	return exitCode(stderr, "dev", workerErr(err))
}
