package main

import (
	"context"
	"fmt"
	"io"
)

// cmdInspect shows checkpoints. This file is replaced when the checkpoint
// package is wired in.
func cmdInspect(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	_, _, _ = ctx, args, stdout
	fmt.Fprintln(stderr, "bloomgate inspect: not available in this build")
	return exitRuntime
}
