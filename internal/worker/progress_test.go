package worker

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestProgressLine: the first progress line comes after 10 s, then one a
// minute; rates are per second of active time, a line without input says
// idle; the worker says once when it caught up with its input after the
// assignment, when it stayed behind for a minute, and when it caught up
// again.
func TestProgressLine(t *testing.T) {
	// On synctest's clock (the worker's default Now is time.Now): the
	// samples come when the test says, however loaded the machine is.
	synctest.Test(t, func(t *testing.T) {
		var buf lockedBuffer
		cfg := testConfig([]string{"127.0.0.1:1"})
		w, err := New(cfg, Deps{Logger: slog.New(slog.NewTextHandler(&buf, nil)), State: newMemStore(), Extractor: keyExtractor{}})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		w.mu.Lock()
		w.status.Joined, w.status.Generation, w.status.Assigned = true, 7, []int{0, 1}
		w.assignedAt = start
		w.mu.Unlock()
		w.updatePartition(0, func(ps *PartitionStatus) {
			ps.Partition, ps.Generation = 0, 7
			ps.State, ps.Lag, ps.LastCheckpoint = "running", 40, start.Add(-90*time.Second)
		})
		w.partitionRecovered(0)
		w.updatePartition(1, func(ps *PartitionStatus) { ps.Partition, ps.Generation, ps.State, ps.Lag = 1, 7, "replaying", 2 })

		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			w.logProgress(ctx, progressSchedule{first: 10 * time.Second, every: time.Minute, sample: time.Second})
		}()
		defer func() { cancel(); <-done }()
		// until sleeps to start+d, between two samples, and lets the
		// logger handle the samples before it.
		until := func(d time.Duration) {
			time.Sleep(time.Until(start.Add(d)))
			synctest.Wait()
		}
		lines := func(msg string) []string {
			var out []string
			for _, l := range strings.Split(buf.String(), "\n") {
				if strings.Contains(l, "msg="+msg+" ") || strings.Contains(l, `msg="`+msg+`"`) {
					out = append(out, l)
				}
			}
			return out
		}
		wantIn := func(line string, want ...string) {
			t.Helper()
			for _, s := range want {
				if !strings.Contains(line, s) {
					t.Errorf("line lacks %q: %s", s, line)
				}
			}
		}

		// 1000 records in 5 of the first 10 s: 200/s, not 100/s.
		for i := range 5 {
			until(time.Duration(i+2)*time.Second + 500*time.Millisecond)
			w.count.consumed.Add(200)
			w.count.forwarded.Add(160)
			w.count.duplicates.Add(40)
		}
		until(9500 * time.Millisecond)
		if got := lines("progress"); len(got) != 0 {
			t.Fatalf("progress line before 10 s: %q", got)
		}
		until(10500 * time.Millisecond)
		got := lines("progress")
		if len(got) != 1 {
			t.Fatalf("want one progress line after 10 s, got %q", got)
		}
		wantIn(got[0], "interval=10s", "active=5s", "consumed=200.0/s", "forwarded=160.0/s", "duplicates=40.0/s",
			"consumed_total=1000", "forwarded_total=800", "duplicates_total=200",
			"lag=42", "partitions_running=1", "partitions_assigned=2", "generation=7", "oldest_checkpoint_age=1m40s")
		if strings.Contains(got[0], "idle=") {
			t.Errorf("a line with input says idle: %s", got[0])
		}
		if got := lines("caught up with the input"); len(got) != 0 {
			t.Fatalf("caught up while partition 1 replays: %q", got)
		}

		// Partition 1 runs: both are within a batch of the log end.
		w.updatePartition(1, func(ps *PartitionStatus) { ps.State = "running" })
		w.partitionRecovered(1)
		until(13500 * time.Millisecond)
		got = lines("caught up with the input")
		if len(got) != 1 {
			t.Fatalf("want one caught-up line, got %q in:\n%s", got, buf.String())
		}
		wantIn(got[0], "partitions=2", "took=11s", "records=1000", "lag=42")

		// Nothing more comes: the next line, a minute after the first,
		// says idle.
		until(70500 * time.Millisecond)
		got = lines("progress")
		if len(got) != 2 {
			t.Fatalf("want two progress lines at 70 s, got %q", got)
		}
		wantIn(got[1], "interval=1m0s", "active=0s", "consumed=0.0/s", "idle=true")

		// Partition 0 stays behind for a minute, then catches up again.
		w.updatePartition(0, func(ps *PartitionStatus) { ps.Lag = 100_000 })
		until(130 * time.Second)
		if got := lines("fell behind the input"); len(got) != 0 {
			t.Fatalf("fell behind before a minute: %q", got)
		}
		until(132 * time.Second)
		got = lines("fell behind the input")
		if len(got) != 1 {
			t.Fatalf("want one fell-behind line, got %q", got)
		}
		wantIn(got[0], "partitions_behind=1", "lag=100002", "for=1m0s")
		w.updatePartition(0, func(ps *PartitionStatus) { ps.Lag = 0 })
		until(135 * time.Second)
		got = lines("caught up with the input again")
		if len(got) != 1 {
			t.Fatalf("want one caught-up-again line, got %q", got)
		}
		wantIn(got[0], "took=1m2s", "lag=2")
		if n := len(lines("caught up with the input")); n != 1 {
			t.Errorf("%d first caught-up lines, want 1", n)
		}
	})
}

func TestByteSize(t *testing.T) {
	for _, tc := range []struct {
		n    uint64
		want string
	}{{0, "0 B"}, {1023, "1023 B"}, {1024, "1.00 KiB"}, {3 << 20, "3.00 MiB"}, {5 << 30, "5.00 GiB"}, {2 << 40, "2.00 TiB"}, {3 << 50, "3.00 PiB"}} {
		if got := ByteSize(tc.n).String(); got != tc.want {
			t.Errorf("ByteSize(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
