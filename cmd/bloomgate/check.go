package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bloomgate/bloomgate/internal/config"
	"github.com/bloomgate/bloomgate/internal/preflight"
)

const checkHeader = `Usage: bloomgate check [--json] [--timeout DURATION] [--broker-wait DURATION] [settings of bloomgate run]

Checks, before a deploy, what bloomgate run with the same settings (flags,
BLOOMGATE_* variables, --config file) would find wrong, and processes
nothing:

  brokers, topics    the brokers answer; every topic exists, with the partition
                     counts --partitioning and --seed-topic need
  acl                the principal may read the input, read and write the
                     written topics and commit in the group: the brokers'
                     authorized operations, else a probe the group coordinator
                     refuses for its member (nothing is committed), else the ACL
                     listing
  max.message.bytes  the written topics take the records the input takes
  memory             the planned filter memory, against the cgroup's limit
  checkpoint store   it answers and honours create-only writes (a probe object
                     under _probe/ is created and deleted, as at every start)
  checkpoints        the newest checkpoint of every partition was written with
                     this key definition (--key, --normalize, --url-rules,
                     --url-strip-params, hash); changes of
                     --window, --generations and --fpr are listed (carried over)
  exact-dir          with --exact: writable, with room for the planned stores

Exit codes: 0 nothing fails (warnings allowed), 1 something fails,
2 usage or configuration error.

Flags of check:
  --json              print the report as JSON
  --timeout duration  bound of the whole check (default 1m10s)
  --broker-wait duration
                      how long brokers that do not answer are retried
                      (default 5s; run retries for one minute)

Settings (as bloomgate run takes them):
`

// checkOptions are the preflight's seams; tests replace the system's
// memory limit.
var checkOptions preflight.Options

// cmdCheck runs the preflight of `bloomgate run`'s settings.
func cmdCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	asJSON, timeout, brokerWait, rest, err := checkFlags(args)
	if err != nil {
		printUsageError(stderr, "check", err, "setting")
		return exitUsage
	}
	for _, a := range rest {
		if a == "-h" || a == "-help" || a == "--help" {
			fmt.Fprint(stdout, checkHeader)
			cfg := config.Default()
			config.WriteSettings(stdout, cfg.FlagSet("run"))
			return exitOK
		}
	}
	cfg, err := config.Load(rest, io.Discard)
	if err != nil {
		printUsageError(stderr, "check", err, "setting")
		return exitUsage
	}
	if cfg.LogLevel != "debug" {
		// The report says what failed: retries of unreachable brokers
		// logged as they happen would only interleave with it.
		cfg.LogLevel = "error"
	}
	logger, err := cfg.NewLogger(stderr)
	if err != nil {
		return exitCode(stderr, "check", usageError{err})
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	opts := checkOptions
	opts.Logger = logger
	opts.BrokerWait = brokerWait
	rep, err := preflight.Run(ctx, cfg, opts)
	if err != nil {
		return exitCode(stderr, "check", usageError{err})
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = writeCheckText(stdout, cfg, rep)
	}
	if err != nil {
		return exitCode(stderr, "check", fmt.Errorf("writing the report: %w", err))
	}
	if !rep.OK {
		return exitRuntime
	}
	return exitOK
}

// checkFlags takes check's own flags out of args; the rest are run's.
func checkFlags(args []string) (asJSON bool, timeout, brokerWait time.Duration, rest []string, err error) {
	timeout, brokerWait = preflight.Timeout, preflight.DefaultBrokerWait
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || a == "-" || a == "--" {
			rest = append(rest, a)
			continue
		}
		switch name {
		case "json":
			asJSON = true
			if hasValue {
				if asJSON, err = parseBool(value); err != nil {
					return false, 0, 0, nil, fmt.Errorf("--json: %q is not true or false", value)
				}
			}
		case "timeout", "broker-wait":
			if !hasValue {
				if i+1 == len(args) {
					return false, 0, 0, nil, fmt.Errorf("--%s: needs a value, e.g. --%s 2m", name, name)
				}
				i++
				value = args[i]
			}
			d, err := config.ParseDuration(value)
			if err != nil {
				return false, 0, 0, nil, fmt.Errorf("--%s: %w", name, err)
			}
			if d <= 0 {
				return false, 0, 0, nil, fmt.Errorf("--%s: %s is not above zero", name, value)
			}
			if name == "timeout" {
				timeout = d
			} else {
				brokerWait = d
			}
		default:
			rest = append(rest, a)
		}
	}
	return asJSON, timeout, brokerWait, rest, nil
}

func parseBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	}
	return false, errors.New("not a boolean")
}

// writeCheckText writes the report as a table: status, what was checked,
// what was found; the fix on the line below.
func writeCheckText(w io.Writer, cfg *config.Run, rep *preflight.Report) error {
	bw := &errWriter{w: w}
	fmt.Fprintf(bw, "bloomgate check: group %s, input %s, output %s\n\n", cfg.Group, cfg.Input, cfg.Output)
	tw := tabwriter.NewWriter(bw, 0, 4, 2, ' ', 0)
	for _, c := range rep.Checks {
		what := c.Name
		if c.Subject != "" {
			what += " " + c.Subject
		}
		status := string(c.Status)
		if c.Status == preflight.Fail {
			status = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", status, what, c.Detail)
		if c.Fix != "" {
			fmt.Fprintf(tw, "\t\tfix: %s\n", c.Fix)
		}
	}
	tw.Flush()
	fmt.Fprintln(bw)
	switch {
	case rep.Failures > 0:
		fmt.Fprintf(bw, "%s, %s: bloomgate run would not start, or would stop or stall partitions, with these settings.\n",
			plural(rep.Failures, "failure"), plural(rep.Warnings, "warning"))
	case rep.Warnings > 0:
		fmt.Fprintf(bw, "no failures, %s: bloomgate run would start with these settings.\n", plural(rep.Warnings, "warning"))
	default:
		fmt.Fprintln(bw, "no failures, no warnings: bloomgate run would start with these settings.")
	}
	return bw.err
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
