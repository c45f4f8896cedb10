package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/config"
	"github.com/bloomgate/bloomgate/internal/quantity"
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
estimated keys, fill, estimated false-positive rate, bytes), and in exact
mode the exact store (keys, files, bytes, the store generation of each
filter generation).

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
	raw := config.AbsFileURLArg(rest[0])

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	rep, err := inspectLocation(ctx, raw)
	switch {
	case errors.Is(err, checkpoint.ErrEmptyLocation):
		fmt.Fprintf(stderr, "bloomgate inspect: %s holds no checkpoints (no worker has written one there yet)\n", checkpoint.RedactURL(raw))
		return exitEmpty
	case err != nil:
		return exitCode(stderr, "inspect", err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = writeInspectText(stdout, rep)
	}
	if err != nil {
		return exitCode(stderr, "inspect", fmt.Errorf("writing the report: %w", err))
	}
	return exitOK
}

// writeInspectText writes the report for people: one block per partition
// with its generations. --json prints the report's own encoding instead.
func writeInspectText(w io.Writer, r *checkpoint.Report) error {
	bw := &errWriter{w: w}
	kv := func(k, format string, args ...any) {
		fmt.Fprintf(bw, "  %-15s %s\n", k, fmt.Sprintf(format, args...))
	}
	fmt.Fprintf(bw, "location %s (%d partitions)\n", r.URL, len(r.Partitions))
	for _, p := range r.Partitions {
		fmt.Fprintf(bw, "\n%s / %s / %d: seq %d (%d manifests kept)\n", p.Group, p.Topic, p.Partition, p.Seq, p.Manifests)
		if p.Error != "" {
			kv("error", "%s", p.Error)
			continue
		}
		kv("created", "%s (%s ago) by %s", p.CreatedAt.Format(time.RFC3339), p.AgeText, p.Owner)
		if p.Empty {
			// A worker claims a partition without a checkpoint and stores
			// its empty memory right after: a claim that stays empty is one
			// whose owner could not store a checkpoint.
			kv("state", "claimed, no checkpoint yet (the owner stores one right after the claim, and one with its first records within 10 s; if this stays, its checkpoints fail: see its log)")
			continue
		}
		kv("input offset", "%d", p.InputOffset)
		for _, topic := range slices.Sorted(maps.Keys(p.OutputOffsets)) {
			offsets := p.OutputOffsets[topic]
			var b strings.Builder
			for i, part := range slices.Sorted(maps.Keys(offsets)) {
				if i > 0 {
					b.WriteString(" ")
				}
				fmt.Fprintf(&b, "%d:%d", part, offsets[part])
			}
			kv("output offsets", "%s %s", topic, b.String())
		}
		kind, unit := "", "gen"
		if p.Filter.Kind == checkpoint.FilterFingerprint {
			kind, unit = "fingerprint, ", "table"
		}
		kv("filter", "%swindow %s, %d generations, capacity %s, fpr %s", kind, quantity.Duration(p.Filter.Window), p.Filter.Generations,
			quantity.Count(p.Filter.Capacity), quantity.Rate(p.Filter.FPR))
		if p.Key != nil {
			kv("key", "%s", p.Key)
		}
		kv("keyed hash", "%v", p.KeyedHash)
		kv("estimate", "%d keys, fpr %.3g", p.EstKeys, p.EstFPR)
		kv("bytes", "%s referenced, %s stored in %d objects", byteSize(p.Bytes), byteSize(p.StoredBytes), p.Objects)
		if e := p.Exact; e != nil {
			kv("exact store", "%d keys in %d files, %s; store generations from %d, next %d", e.Keys, len(e.Files), byteSize(p.ExactBytes), e.Floor, e.NextGen)
		}
		tw := tabwriter.NewWriter(bw, 0, 4, 2, ' ', 0)
		exactCol := ""
		if p.Exact != nil {
			exactCol = "\texact"
		}
		// A table of the fingerprint filter: its level instead of stacks,
		// its load as fill, and its entries per generation (oldest first).
		stacks, ages := "stacks", ""
		if unit == "table" {
			stacks, ages = "level", "\tentries per generation"
		}
		fmt.Fprintf(tw, "  %s\tstate\tevent time\testimated keys\tfill\test. fpr\t%s\tbytes%s%s\n", unit, stacks, exactCol, ages)
		for _, g := range p.Generations {
			state := "live"
			if g.Sealed {
				state = "sealed"
			}
			if g.IsLost() {
				// Restored empty by a partial restore: no object (see the log).
				state += ", lost"
			}
			exactGen := ""
			if p.Exact != nil {
				// 0: filled before exact mode; its positives are unverified.
				exactGen = "\t-"
				if g.ExactGen != 0 {
					exactGen = fmt.Sprintf("\t%d", g.ExactGen)
				}
				if len(g.ExactGens) > 0 {
					// A table: the store generation of each of its
					// generations, oldest first.
					gs := make([]string, len(g.ExactGens))
					for i, e := range g.ExactGens {
						gs[i] = strconv.FormatUint(e.Gen, 10)
					}
					exactGen = "\t" + strings.Join(gs, " ")
				}
			}
			size := byteSize(g.Bytes)
			if g.IsLost() {
				size = "–"
			}
			if len(g.Log) > 0 {
				// A chain: the base object and the log segments replayed onto it.
				size = fmt.Sprintf("%s + %d log segments (%s, %d keys)", size, len(g.Log), byteSize(g.LogBytes()), g.LogEntries())
			}
			hist := ""
			if unit == "table" {
				hist = "\t" + strings.Trim(fmt.Sprint(g.Ages), "[]")
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s .. %s\t%d\t%.3f\t%.3g\t%d\t%s%s%s\n", g.ID, state,
				g.Start.Format(time.RFC3339), g.End.Format(time.RFC3339), g.EstKeys, g.Fill, g.EstFPR, g.Stacks, size, exactGen, hist)
		}
		tw.Flush()
		if e := p.Exact; e != nil {
			tw := tabwriter.NewWriter(bw, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "  exact file\tbytes\tsha256\tuploaded for\n")
			for _, f := range e.Files {
				sum := f.SHA256
				if len(sum) > 16 {
					sum = sum[:16] + "…"
				}
				fmt.Fprintf(tw, "  %s\t%s\t%s\tseq %d\n", f.Name, byteSize(f.Size), sum, f.Seq)
			}
			tw.Flush()
		}
	}
	return bw.err
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
			return nil, fmt.Errorf("checkpoint location %s: %w", checkpoint.RedactURL(raw), err)
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("checkpoint location %s: %s is not a directory", checkpoint.RedactURL(raw), u.Path)
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
