package main

import (
	"context"
	"errors"
	"io"

	"github.com/bloomgate/bloomgate/internal/buildinfo"
	"github.com/bloomgate/bloomgate/internal/config"
)

// cmdRun parses and validates the settings, then runs the worker until a
// signal cancels ctx.
func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := config.Load(args, stdout)
	if errors.Is(err, config.ErrHelp) {
		return exitOK
	}
	if err != nil {
		printUsageError(stderr, "run", err, "setting")
		return exitUsage
	}
	logger, err := cfg.NewLogger(stderr)
	if err != nil {
		return exitCode(stderr, "run", usageError{err})
	}
	logger.Info("starting bloomgate", "version", buildinfo.String(), "config", cfg)
	if err := runWorker(ctx, cfg, logger); err != nil {
		logger.Error("worker stopped", "err", err)
		var ue usageError
		if errors.As(err, &ue) {
			return exitUsage
		}
		return exitRuntime
	}
	logger.Info("stopped")
	return exitOK
}
