package main

import (
	"context"
	"fmt"
	"io"

	"github.com/bloomgate/bloomgate/internal/buildinfo"
)

func cmdVersion(_ context.Context, _ []string, stdout, _ io.Writer) int {
	fmt.Fprintf(stdout, "bloomgate %s (%s)\n", buildinfo.String(), buildinfo.GoVersion())
	return exitOK
}
