package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/bloomgate/bloomgate/internal/config"
)

// runWorker runs the dedup worker until ctx ends. This file is replaced when
// the worker package is wired in.
func runWorker(ctx context.Context, cfg *config.Run, logger *slog.Logger) error {
	_, _, _ = ctx, cfg, logger
	return errors.New("the worker is not available in this build")
}
