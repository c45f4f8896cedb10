package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/filterplan"
)

type bytesSource []byte

func (b bytesSource) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(b)
	return int64(n), err
}

// writeCheckpoints commits two checkpoints for each of two partitions of
// group g / topic orders below dir.
func writeCheckpoints(t *testing.T, dir string) {
	t.Helper()
	ctx := context.Background()
	store, err := checkpoint.Open(ctx, "file://"+dir, checkpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for p := 0; p < 2; p++ {
		part := store.Partition("g", "orders", p)
		if err := part.Claim(ctx, "test/1"); err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 2; i++ {
			_, err := part.Commit(ctx, checkpoint.Checkpoint{
				InputOffset:   int64(1000 * i),
				OutputOffsets: map[string]map[int]int64{"orders-unique": {p: int64(800 * i)}},
				Filter:        checkpoint.FilterParams{Params: filterplan.Params{Window: time.Hour, Generations: 2, Capacity: 5000, FPR: 0.01}},
				Owner:         "test/1",
				Generations: []checkpoint.Generation{{
					ID: 7, Start: start, End: start.Add(time.Hour), Inserts: uint64(800 * i), EstKeys: uint64(800 * i),
					Fill: 0.1, EstFPR: 0.001, Stacks: 1,
					Source: bytesSource(bytes.Repeat([]byte{byte(i)}, 4096*i)),
				}},
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestInspectText(t *testing.T) {
	dir := t.TempDir()
	writeCheckpoints(t, dir)
	code, stdout, stderr := runInProcess("inspect", "file://"+dir)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{
		"(2 partitions)",
		"g / orders / 0: seq 3",
		"g / orders / 1: seq 3",
		"input offset    2000",
		"orders-unique 1:1600",
		"window 1h, 2 generations, capacity 5k",
		"by test/1",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("report lacks %q:\n%s", want, stdout)
		}
	}
	// A relative directory and flags after the URL work too.
	wd, _ := os.Getwd()
	rel, err := filepath.Rel(wd, dir)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runInProcess("inspect", rel, "--timeout", "5s"); code != exitOK {
		t.Fatalf("relative path: exit %d, %q", code, stderr)
	}
}

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// TestInspectTextGolden pins the text report, rendered from reports as
// --json prints them. The first is checkpoint's own golden report, so
// store, data and text are pinned end to end; the second covers what it
// lacks: a key identity, output offsets of several partitions, an empty
// claim, a corrupt manifest, sizes from bytes to PiB; the third an exact
// store, with a generation from before exact mode; the last the claim of a
// partial restore, with a lost generation (no object).
func TestInspectTextGolden(t *testing.T) {
	for _, tc := range []struct{ report, golden string }{
		{filepath.Join("..", "..", "internal", "checkpoint", "testdata", "inspect.json"), "inspect.txt"},
		{filepath.Join("testdata", "inspect-states.json"), "inspect-states.txt"},
		{filepath.Join("testdata", "inspect-exact.json"), "inspect-exact.txt"},
		{filepath.Join("testdata", "inspect-log.json"), "inspect-log.txt"},
		{filepath.Join("testdata", "inspect-partial.json"), "inspect-partial.txt"},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			b, err := os.ReadFile(tc.report)
			if err != nil {
				t.Fatal(err)
			}
			var rep checkpoint.Report
			if err := json.Unmarshal(b, &rep); err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := writeInspectText(&got, &rep); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", tc.golden)
			if *update {
				if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Fatalf("%s changed:\n%s", path, got.Bytes())
			}
		})
	}
}

// TestInspectTextWriteError: the first failed write ends the report and is
// the renderer's error.
func TestInspectTextWriteError(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "inspect-states.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep checkpoint.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	w := &failAfter{n: 3}
	if err := writeInspectText(w, &rep); !errors.Is(err, errWriteFailed) {
		t.Fatalf("error %v, want %v", err, errWriteFailed)
	}
	if w.calls != 4 {
		t.Errorf("%d writes, want 4 (none after the failed one)", w.calls)
	}
}

var errWriteFailed = errors.New("write failed")

// failAfter accepts n writes and fails every later one.
type failAfter struct{ n, calls int }

func (f *failAfter) Write(b []byte) (int, error) {
	f.calls++
	if f.calls > f.n {
		return 0, errWriteFailed
	}
	return len(b), nil
}

func TestInspectJSON(t *testing.T) {
	dir := t.TempDir()
	writeCheckpoints(t, dir)
	code, stdout, stderr := runInProcess("inspect", "--json", "file://"+dir)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	var rep checkpoint.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, stdout)
	}
	if len(rep.Partitions) != 2 {
		t.Fatalf("%d partitions, want 2", len(rep.Partitions))
	}
	for _, p := range rep.Partitions {
		if p.Group != "g" || p.Topic != "orders" || p.InputOffset != 2000 || p.Generations[0].RawBytes != 8192 || len(p.Generations) != 1 {
			t.Errorf("partition %d: %+v", p.Partition, p)
		}
	}
}

func TestInspectErrors(t *testing.T) {
	empty := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"empty directory", []string{"file://" + empty}, exitEmpty, "holds no checkpoints"},
		{"missing directory", []string{"file://" + filepath.Join(empty, "nope")}, exitRuntime, "no such file or directory"},
		{"unreachable s3", []string{"--timeout", "20s", "s3://bucket/p?endpoint=http://" + closed + "&region=us-east-1"}, exitRuntime, "connection refused"},
		{"bad scheme", []string{"ftp://x/y"}, exitUsage, "unsupported scheme"},
		{"no URL", nil, exitUsage, "want exactly one checkpoint URL"},
		{"two URLs", []string{"file:///a", "file:///b"}, exitUsage, "want exactly one checkpoint URL"},
		{"bad flag", []string{"--frob", "file:///a"}, exitUsage, "frob"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			code, _, stderr := runInProcess(append([]string{"inspect"}, tc.args...)...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d (want %d), stderr %q (want %q)", code, tc.code, stderr, tc.want)
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("took %v to report", d)
			}
		})
	}
}

func TestInspectHelp(t *testing.T) {
	code, stdout, _ := runInProcess("inspect", "--help")
	if code != exitOK || !strings.Contains(stdout, "Usage: bloomgate inspect") || !strings.Contains(stdout, "-json") {
		t.Fatalf("exit %d, %q", code, stdout)
	}
}

// TestInspectFingerprint: a memory of the fingerprint filter shows its kind
// and, per table, its level, load and age histogram.
func TestInspectFingerprint(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	store, err := checkpoint.Open(ctx, "file://"+dir, checkpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	part := store.Partition("g", "urls", 0)
	if err := part.Claim(ctx, "test/1"); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := part.Commit(ctx, checkpoint.Checkpoint{
		InputOffset: 5000,
		Filter:      checkpoint.FilterParams{Kind: checkpoint.FilterFingerprint, Params: filterplan.Params{Window: 7 * time.Hour, Generations: 8, Capacity: 70_000, FPR: 0.01}},
		Owner:       "test/1",
		Generations: []checkpoint.Generation{{
			ID: 1, Start: start, End: start.Add(3 * time.Hour), Inserts: 30_000, EstKeys: 29_000,
			Fill: 0.34, EstFPR: 0.0027, Ages: []uint64{9_000, 10_000, 10_000},
			ExactGens: []checkpoint.ExactSpan{
				{Start: start.UnixNano(), End: start.Add(time.Hour).UnixNano(), Gen: 1},
				{Start: start.Add(time.Hour).UnixNano(), End: start.Add(2 * time.Hour).UnixNano(), Gen: 2},
				{Start: start.Add(2 * time.Hour).UnixNano(), End: start.Add(3 * time.Hour).UnixNano(), Gen: 3},
			},
			Source: bytesSource(bytes.Repeat([]byte{1}, 4096)),
		}},
		Exact: &checkpoint.ExactCheckpoint{Layout: "bloomgate-exact-runs-v1", Floor: 1, NextGen: 4, Keys: 29_000},
	}); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runInProcess("inspect", "file://"+dir)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"fingerprint, window 7h, 8 generations", "table  state", "level", "entries per generation", "9000 10000 10000",
		"exact store", "1 2 3"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("report lacks %q:\n%s", want, stdout)
		}
	}
}
