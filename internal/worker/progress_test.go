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

// TestProgressLine: the periodic line reports the rates of the last
// interval and where the partitions stand.
func TestProgressLine(t *testing.T) {
	// On synctest's clock: the ticks come when the test says, however
	// loaded the machine is.
	synctest.Test(t, func(t *testing.T) {
		var buf lockedBuffer
		cfg := testConfig([]string{"127.0.0.1:1"})
		w, err := New(cfg, Deps{Logger: slog.New(slog.NewTextHandler(&buf, nil)), State: newMemStore(), Extractor: keyExtractor{}})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Unix(1_000_000, 0)
		var mu sync.Mutex
		w.deps.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		w.status.Joined, w.status.Generation, w.status.Assigned = true, 7, []int{0, 1}
		w.updatePartition(0, func(ps *PartitionStatus) {
			ps.State, ps.Lag, ps.LastCheckpoint = "running", 40, now.Add(-90*time.Second)
		})
		w.updatePartition(1, func(ps *PartitionStatus) { ps.State, ps.Lag = "replaying", 2 })

		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); w.logProgress(ctx, 20*time.Millisecond) }()
		time.Sleep(5 * time.Millisecond)
		w.count.consumed.Add(1000)
		w.count.forwarded.Add(800)
		w.count.duplicates.Add(200)
		mu.Lock()
		now = now.Add(10 * time.Second)
		mu.Unlock()
		time.Sleep(30 * time.Millisecond) // a tick of the bubble's clock
		synctest.Wait()
		cancel()
		<-done
		line := ""
		for _, l := range strings.Split(buf.String(), "\n") {
			if strings.Contains(l, "msg=progress") && strings.Contains(l, "consumed=100.0/s") {
				line = l
			}
		}
		if line == "" {
			t.Fatalf("no progress line with consumed=100.0/s in:\n%s", buf.String())
		}
		for _, want := range []string{"forwarded=80.0/s", "duplicates=20.0/s", "lag=42", "partitions_running=1",
			"partitions_assigned=2", "generation=7", "oldest_checkpoint_age=1m40s"} {
			if !strings.Contains(line, want) {
				t.Errorf("progress line lacks %q: %s", want, line)
			}
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
