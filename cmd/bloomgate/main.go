// Command bloomgate is a Kafka dedup worker with rotating, checkpointed
// Bloom filters, plus the tools around it: an embedded broker, a load
// generator, a local demo and a checkpoint inspector. Built with -tags
// nodev (the container image is), it leaves out the embedded broker and
// the demo on it.
//
// Exit codes: 0 success, 1 runtime error, 2 usage or configuration error.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// Exit codes.
const (
	exitOK      = 0
	exitRuntime = 1
	exitUsage   = 2
)

type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

func commands() []command {
	cmds := []command{
		{"run", "run the dedup worker (see bloomgate run --help for every setting)", cmdRun},
		{"check", "check run's settings against the brokers, topics, ACLs and checkpoints, processing nothing", cmdCheck},
	}
	cmds = append(cmds, devCommands()...)
	return append(cmds,
		command{"loadgen", "produce synthetic order or URL events with known duplicates", cmdLoadgen},
		command{"inspect", "show the checkpoints of a group/topic/partition", cmdInspect},
		command{"version", "print the version", cmdVersion},
	)
}

func main() {
	// A reader of stdout or stderr that goes away (`bloomgate run 2>&1 |
	// head`) must not end the process in the middle of its ordered shutdown:
	// with SIGPIPE ignored, writes to the closed pipe fail with EPIPE, which
	// the loggers and printers drop, and the final commits and checkpoints
	// are still written.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return exitOK
	case "-v", "-version", "--version":
		return cmdVersion(ctx, nil, stdout, stderr)
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	if notBuilt(args[0]) {
		fmt.Fprintf(stderr, "bloomgate %s: not in this executable, which was built without the embedded broker "+
			"(-tags nodev, as the container image is); use a full build: make build, or go install ./cmd/bloomgate\n", args[0])
		return exitUsage
	}
	fmt.Fprintf(stderr, "bloomgate: unknown command %q\n\n", args[0])
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprint(w, `bloomgate drops repeated Kafka events: a consumer group reads the input
topic, a Bloom filter per partition remembers the keys seen within the window,
first occurrences go to the output topic. Filter state is checkpointed to
object storage so that restarts and rebalances keep their memory.

Usage: bloomgate <command> [flags]

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Run "bloomgate <command> --help" for the flags of a command.

Quick start:
`+devQuickStart+`  bloomgate loadgen --topic orders --count 1000000 --duplicates 0.2
  bloomgate check --brokers 127.0.0.1:9092 --input orders --output deduped --key json:order_id
  bloomgate run --brokers 127.0.0.1:9092 --input orders --output deduped --key json:order_id
`)
}

// printUsageError reports a usage or configuration error without the
// usage text, which would bury it: a single problem on one line, several
// as a list, then where to find every flag (what names it: "setting" or
// "flag").
func printUsageError(w io.Writer, cmd string, err error, what string) {
	lines := strings.Split(err.Error(), "\n")
	if len(lines) == 1 {
		fmt.Fprintf(w, "bloomgate %s: %s\n", cmd, lines[0])
	} else {
		fmt.Fprintf(w, "bloomgate %s: %d problems:\n", cmd, len(lines))
		for _, l := range lines {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	fmt.Fprintf(w, "Run \"bloomgate %s --help\" for every %s.\n", cmd, what)
}

// usageError marks errors that should exit with code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// exitCode reports err on stderr and maps it to an exit code.
func exitCode(stderr io.Writer, name string, err error) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "bloomgate %s: %v\n", name, err)
	var ue usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	return exitRuntime
}
