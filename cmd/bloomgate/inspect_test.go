package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/checkpoint"
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
				Filter:        checkpoint.FilterParams{Window: time.Hour, Generations: 2, Capacity: 5000, FPR: 0.01},
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
		"window 1h0m0s, 2 generations, capacity 5000",
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
