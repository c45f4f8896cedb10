package main

import (
	"context"
	"fmt"
	"io"
)

// cmdDev runs the local demo. This file is replaced when the worker package
// is wired in.
func cmdDev(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	_, _, _ = ctx, args, stdout
	fmt.Fprintln(stderr, "bloomgate dev: not available in this build")
	return exitRuntime
}
