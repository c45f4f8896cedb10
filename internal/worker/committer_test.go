package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
)

type fakeGen struct {
	inFlight, maxInFlight atomic.Int32
	mu                    sync.Mutex
	commits               []map[int]int64
	err                   error
}

func (g *fakeGen) CommitOffsets(o map[string]map[int]int64) error {
	n := g.inFlight.Add(1)
	defer g.inFlight.Add(-1)
	for {
		m := g.maxInFlight.Load()
		if n <= m || g.maxInFlight.CompareAndSwap(m, n) {
			break
		}
	}
	time.Sleep(time.Millisecond)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return g.err
	}
	c := map[int]int64{}
	for p, off := range o["in"] {
		c[p] = off
	}
	g.commits = append(g.commits, c)
	return nil
}

func TestCommitterSerialisesAndCoalesces(t *testing.T) {
	m, _ := newMetrics(prometheus.NewRegistry())
	g := &fakeGen{}
	c := newCommitter(g, "in", 10*time.Millisecond, slog.New(slog.DiscardHandler), m, func(error) { t.Error("fenced") })
	go c.run()
	var wg sync.WaitGroup
	for p := 0; p < 8; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for o := int64(1); o <= 200; o++ {
				c.offer(context.Background(), p, o)
				if o%50 == 0 {
					if err := c.commitNow(context.Background(), p, o); err != nil {
						t.Errorf("commitNow: %v", err)
					}
				}
			}
		}(p)
	}
	wg.Wait()
	c.close()
	if g.maxInFlight.Load() != 1 {
		t.Errorf("CommitOffsets ran %d at once, want 1", g.maxInFlight.Load())
	}
	for p := 0; p < 8; p++ {
		if o, ok := c.lastCommitted(p); !ok || o != 200 {
			t.Errorf("partition %d committed %d, want 200", p, o)
		}
	}
	if len(g.commits) >= 8*200 {
		t.Errorf("%d commits for %d offers: no coalescing", len(g.commits), 8*200)
	}
}

func TestCommitterFencesOnStaleGeneration(t *testing.T) {
	m, _ := newMetrics(prometheus.NewRegistry())
	g := &fakeGen{err: kafka.IllegalGeneration}
	var fenced atomic.Bool
	c := newCommitter(g, "in", time.Hour, slog.New(slog.DiscardHandler), m, func(error) { fenced.Store(true) })
	go c.run()
	defer c.close()
	err := c.commitNow(context.Background(), 0, 10)
	if !errors.Is(err, errStaleGeneration) || !fenced.Load() {
		t.Fatalf("commitNow = %v, fenced = %v; want stale generation and fenced", err, fenced.Load())
	}
	if err := c.commitNow(context.Background(), 0, 11); !errors.Is(err, errStaleGeneration) {
		t.Fatalf("later commit = %v, want stale generation without asking the broker", err)
	}
}

// TestCommitterNoticesPause: after a pause longer than the session timeout
// (SIGSTOP, a long stall) the partitions must not write, whichever
// goroutine runs first: pausedTooLong says so before the committer's next
// tick, and the tick fences the generation.
func TestCommitterNoticesPause(t *testing.T) {
	m, _ := newMetrics(prometheus.NewRegistry())
	var fenced atomic.Pointer[error]
	c := newCommitter(&fakeGen{}, "in", 10*time.Millisecond, slog.New(slog.DiscardHandler), m, func(err error) { fenced.Store(&err) })
	c.maxGap = 200 * time.Millisecond
	go c.run()
	defer c.close()
	time.Sleep(50 * time.Millisecond)
	if c.pausedTooLong() {
		t.Fatal("pausedTooLong while the committer runs")
	}
	// As if the process had been stopped: the last run is long ago.
	c.lastRun.Store(time.Now().Add(-time.Second).UnixNano())
	if !c.pausedTooLong() {
		t.Fatal("pausedTooLong = false after a pause beyond the session timeout")
	}
	deadline := time.Now().Add(5 * time.Second)
	for fenced.Load() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if errp := fenced.Load(); errp == nil || !errors.Is(*errp, errStaleGeneration) {
		t.Fatalf("fenced with %v, want errStaleGeneration", errp)
	}
	if !c.pausedTooLong() {
		t.Error("pausedTooLong = false after the tick that noticed the pause")
	}
}
