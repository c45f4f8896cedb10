package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/config"
)

// cmdInspect prints what a checkpoint location holds: per group, topic and
// partition the newest manifest, its offsets and its filter generations.
//
// Exit codes: 0 report printed, 1 the location could not be read, 3 the
// location is reachable but holds no checkpoints, 2 usage.
func cmdInspect(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the report as JSON instead of text")
	timeout := fs.Duration("timeout", 30*time.Second, "give up reading the location after this long")
	header := `Usage: bloomgate inspect [flags] <checkpoint-url>

Shows the checkpoints stored at a location: for every group / topic /
partition the newest manifest (sequence, age, owner, input offset, output
offsets), the filter settings and each generation (event-time span,
estimated keys, fill, estimated false-positive rate, bytes).

  bloomgate inspect file://./.bloomgate/checkpoints
  bloomgate inspect --json 's3://bucket/prefix?endpoint=http://127.0.0.1:7070&region=us-east-1'

For s3, credentials come from the standard AWS chain (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, shared config, IAM role).

Exit codes: 0 report printed, 1 location unreadable, 2 usage,
3 location reachable but empty.

Flags:
`
	// Flags may follow the URL: move them in front for the flag package.
	var flags, rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") && a != "-" {
			flags = append(flags, a)
			if (a == "--timeout" || a == "-timeout") && i+1 < len(args) {
				flags = append(flags, args[i+1])
				i++
			}
			continue
		}
		rest = append(rest, a)
	}
	if done, code := parseFlags(fs, flags, header, stdout, stderr); done {
		return code
	}
	if len(rest) != 1 {
		fmt.Fprintf(stderr, "bloomgate inspect: want exactly one checkpoint URL, got %d\n", len(rest))
		fmt.Fprintln(stderr, `Example: bloomgate inspect file://./.bloomgate/checkpoints (see "bloomgate inspect --help")`)
		return exitUsage
	}
	raw := absFileURLArg(rest[0])

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	rep, err := inspectLocation(ctx, raw)
	switch {
	case errors.Is(err, checkpoint.ErrEmptyLocation):
		fmt.Fprintf(stderr, "bloomgate inspect: %s holds no checkpoints (no worker has written one there yet)\n", raw)
		return exitEmpty
	case err != nil:
		return exitCode(stderr, "inspect", err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = rep.WriteText(stdout)
	}
	if err != nil {
		return exitCode(stderr, "inspect", fmt.Errorf("writing the report: %w", err))
	}
	return exitOK
}

// exitEmpty is inspect's exit code for a reachable location without
// checkpoints, so scripts can tell "nothing yet" from "cannot read".
const exitEmpty = 3

// inspectLocation opens the store and builds its report. A file location
// that does not exist is an error (not an empty report): a mistyped path
// should not look like "no checkpoints yet".
func inspectLocation(ctx context.Context, raw string) (*checkpoint.Report, error) {
	if u, err := url.Parse(raw); err == nil && u.Scheme == "file" && u.Path != "" {
		st, err := os.Stat(u.Path)
		if err != nil {
			return nil, fmt.Errorf("checkpoint location %s: %w", raw, err)
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("checkpoint location %s: %s is not a directory", raw, u.Path)
		}
	}
	store, err := checkpoint.Open(ctx, raw, checkpoint.Options{
		// Report unreachable stores quickly instead of retrying for minutes.
		MaxAttempts:    2,
		RequestTimeout: 10 * time.Second,
	})
	if err != nil {
		return nil, usageError{err}
	}
	defer store.Close()
	return checkpoint.Inspect(ctx, store)
}

// absFileURLArg is config.AbsFileURL that also takes a plain directory
// path, as a command-line argument may be.
func absFileURLArg(raw string) string {
	if raw != "" && !strings.Contains(raw, ":") {
		raw = "file:" + raw
	}
	return config.AbsFileURL(raw)
}
