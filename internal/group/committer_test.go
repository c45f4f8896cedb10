package group

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
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
	synctest.Test(t, func(t *testing.T) {
		m := prometheus.NewCounter(prometheus.CounterOpts{Name: "commit_failures"})
		g := &fakeGen{}
		c := NewCommitter(g, "in", 10*time.Millisecond, slog.New(slog.DiscardHandler), m, func(error) { t.Error("fenced") })
		go c.Run()
		var wg sync.WaitGroup
		for p := 0; p < 8; p++ {
			wg.Add(1)
			go func(p int) {
				defer wg.Done()
				for o := int64(1); o <= 200; o++ {
					c.Offer(context.Background(), p, o)
					if o%50 == 0 {
						if err := c.CommitNow(context.Background(), p, o); err != nil {
							t.Errorf("commitNow: %v", err)
						}
					}
				}
			}(p)
		}
		wg.Wait()
		c.Close()
		if g.maxInFlight.Load() != 1 {
			t.Errorf("CommitOffsets ran %d at once, want 1", g.maxInFlight.Load())
		}
		for p := 0; p < 8; p++ {
			if o, ok := c.LastCommitted(p); !ok || o != 200 {
				t.Errorf("partition %d committed %d, want 200", p, o)
			}
		}
		if len(g.commits) >= 8*200 {
			t.Errorf("%d commits for %d offers: no coalescing", len(g.commits), 8*200)
		}
	})
}

func TestCommitterFencesOnStaleGeneration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := prometheus.NewCounter(prometheus.CounterOpts{Name: "commit_failures"})
		g := &fakeGen{err: kafka.IllegalGeneration}
		var fenced atomic.Bool
		c := NewCommitter(g, "in", time.Hour, slog.New(slog.DiscardHandler), m, func(error) { fenced.Store(true) })
		go c.Run()
		defer c.Close()
		err := c.CommitNow(context.Background(), 0, 10)
		if !errors.Is(err, ErrStaleGeneration) || !fenced.Load() {
			t.Fatalf("commitNow = %v, fenced = %v; want stale generation and fenced", err, fenced.Load())
		}
		if err := c.CommitNow(context.Background(), 0, 11); !errors.Is(err, ErrStaleGeneration) {
			t.Fatalf("later commit = %v, want stale generation without asking the broker", err)
		}
	})
}

// TestCommitterNoticesPause: after a pause longer than the session timeout
// (SIGSTOP, a long stall) the partitions must not write, whichever
// goroutine runs first: pausedTooLong says so before the committer's next
// tick, and the tick fences the generation.
func TestCommitterNoticesPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := prometheus.NewCounter(prometheus.CounterOpts{Name: "commit_failures"})
		var fenced atomic.Pointer[error]
		c := NewCommitter(&fakeGen{}, "in", 10*time.Millisecond, slog.New(slog.DiscardHandler), m, func(err error) { fenced.Store(&err) })
		c.MaxGap = 10 * time.Second
		go c.Run()
		defer c.Close()
		time.Sleep(50 * time.Millisecond)
		if c.PausedTooLong() {
			t.Fatal("pausedTooLong while the committer runs")
		}
		// As if the process had been stopped: the last run is long ago.
		c.lastRun.Store(time.Now().Add(-2 * c.MaxGap).UnixNano())
		if !c.PausedTooLong() {
			t.Fatal("pausedTooLong = false after a pause beyond the session timeout")
		}
		time.Sleep(c.MaxGap / 4) // the next tick of the pause clock
		synctest.Wait()
		if errp := fenced.Load(); errp == nil || !errors.Is(*errp, ErrStaleGeneration) {
			t.Fatalf("fenced with %v, want ErrStaleGeneration", errp)
		}
		if !c.PausedTooLong() {
			t.Error("pausedTooLong = false after the tick that noticed the pause")
		}
	})
}

// setErr sets the error CommitOffsets returns (nil: success).
func (g *fakeGen) setErr(err error) {
	g.mu.Lock()
	g.err = err
	g.mu.Unlock()
}

func (g *fakeGen) calls() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.commits)
}

// TestCommitterLosesContact: commits that keep failing (the coordinator
// unreachable, the partition leaders not) for longer than the session
// timeout stop the generation's partitions, as a pause does; a short run
// of failures does not.
func TestCommitterLosesContact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := prometheus.NewCounter(prometheus.CounterOpts{Name: "commit_failures"})
		g := &fakeGen{}
		var fenced atomic.Pointer[error]
		c := NewCommitter(g, "in", 10*time.Millisecond, slog.New(slog.DiscardHandler), m, func(err error) { fenced.Store(&err) })
		c.MaxGap = 10 * time.Second
		go c.Run()
		defer c.Close()
		ctx := context.Background()

		// A short outage: 150 ms of failures, then commits succeed again.
		g.setErr(errors.New("dial tcp 127.0.0.1:9092: connection refused"))
		for o := int64(1); o <= 15; o++ {
			c.Offer(ctx, 0, o)
			time.Sleep(10 * time.Millisecond)
		}
		g.setErr(nil)
		if err := c.CommitNow(ctx, 0, 16); err != nil {
			t.Fatalf("commit after a short outage: %v", err)
		}
		time.Sleep(2 * c.MaxGap)
		if fenced.Load() != nil || c.PausedTooLong() {
			t.Fatalf("fenced after a %v outage (session timeout %v): %v", 150*time.Millisecond, c.MaxGap, *fenced.Load())
		}

		// A long one: writes go on, commits fail past the session timeout.
		g.setErr(errors.New("dial tcp 127.0.0.1:9092: connection refused"))
		start := time.Now()
		for o := int64(17); fenced.Load() == nil && time.Since(start) < 5*c.MaxGap; o++ {
			c.Offer(ctx, 0, o)
			time.Sleep(10 * time.Millisecond)
		}
		took := time.Since(start)
		errp := fenced.Load()
		if errp == nil || !errors.Is(*errp, ErrNoContact) || !errors.Is(*errp, ErrStaleGeneration) {
			t.Fatalf("fenced with %v, want ErrNoContact", errp)
		}
		// Fenced once commits failed for half the session timeout in a row
		// and none succeeded for a whole one (the last success, a keep-alive,
		// came up to a quarter of it before the failures began).
		if took < c.MaxGap/2 || took > 3*c.MaxGap {
			t.Errorf("fenced %v after commits began to fail, want between %v and %v", took, c.MaxGap/2, 3*c.MaxGap)
		}
		if !c.PausedTooLong() {
			t.Error("partitions may still write after the contact was lost")
		}
	})
}

// TestCommitterKeepAlive: with nothing new to commit, the last offsets are
// committed again within a session timeout, so that a lost coordinator is
// noticed also while the input is idle.
func TestCommitterKeepAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := prometheus.NewCounter(prometheus.CounterOpts{Name: "commit_failures"})
		g := &fakeGen{}
		c := NewCommitter(g, "in", 10*time.Millisecond, slog.New(slog.DiscardHandler), m, func(err error) { t.Errorf("fenced: %v", err) })
		c.MaxGap = 10 * time.Second
		go c.Run()
		defer c.Close()
		if err := c.CommitNow(context.Background(), 3, 42); err != nil {
			t.Fatal(err)
		}
		n := g.calls()
		time.Sleep(3 * c.MaxGap)
		if extra := g.calls() - n; extra < 2 {
			t.Fatalf("%d commits in %v of idleness, want a keep-alive every %v", extra, 3*c.MaxGap, c.MaxGap/4)
		}
		g.mu.Lock()
		last := g.commits[len(g.commits)-1]
		g.mu.Unlock()
		if len(last) != 1 || last[3] != 42 {
			t.Errorf("keep-alive committed %v, want the last offsets {3: 42}", last)
		}
	})
}

// TestCommitterWaitsOutRebalance: commits refused because the group is
// rebalancing stay pending and go through once it is over; they neither
// fence the member (a cooperative member keeps its partitions) nor count
// against the coordinator's contact, however long the rebalance takes.
func TestCommitterWaitsOutRebalance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &fakeGen{}
		c := NewCommitter(g, "in", time.Second, slog.New(slog.DiscardHandler), nil, func(err error) { t.Errorf("fenced: %v", err) })
		c.MaxGap = 10 * time.Second
		go c.Run()
		defer c.Close()
		g.setErr(fmt.Errorf("committing offsets: %w", ErrRebalancing))
		for o := int64(1); o <= 30; o++ { // a 30 s rebalance, three session timeouts
			c.Offer(t.Context(), 0, o)
			time.Sleep(time.Second)
		}
		if c.PausedTooLong() {
			t.Fatal("a long rebalance counted as lost contact")
		}
		g.setErr(nil)
		time.Sleep(2 * time.Second)
		if o, ok := c.LastCommitted(0); !ok || o != 30 {
			t.Errorf("after the rebalance: committed %d (%v), want 30", o, ok)
		}
	})
}

// TestCommitterForgetsAndRevives: offsets of partitions given up are
// neither committed nor re-committed by the keep-alive (they would move
// the new owner's back); after a loss, a new generation revives commits.
func TestCommitterForgetsAndRevives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &fakeGen{}
		var fenced atomic.Int32
		c := NewCommitter(g, "in", time.Second, slog.New(slog.DiscardHandler), nil, func(error) { fenced.Add(1) })
		c.MaxGap = 10 * time.Second
		go c.Run()
		defer c.Close()
		if err := c.CommitNow(t.Context(), 0, 5); err != nil {
			t.Fatal(err)
		}
		if err := c.CommitNow(t.Context(), 1, 7); err != nil {
			t.Fatal(err)
		}
		c.ForgetPartitions([]int{1})
		n := g.calls()
		time.Sleep(3 * c.MaxGap) // keep-alives
		g.mu.Lock()
		for _, cm := range g.commits[n:] {
			if _, ok := cm[1]; ok {
				t.Errorf("a partition given up was committed again: %v", cm)
			}
		}
		g.mu.Unlock()

		g.setErr(fmt.Errorf("committing offsets: %w", ErrNotMember))
		if err := c.CommitNow(t.Context(), 0, 6); err == nil || fenced.Load() != 1 {
			t.Fatalf("stale commit: %v, fenced %d times", err, fenced.Load())
		}
		g.setErr(nil)
		if err := c.CommitNow(t.Context(), 0, 6); !errors.Is(err, ErrStaleGeneration) {
			t.Fatalf("commit after the loss, before a new generation: %v", err)
		}
		c.ReviveAfterLoss()
		synctest.Wait()
		if err := c.CommitNow(t.Context(), 0, 8); err != nil {
			t.Fatalf("commit in the new generation: %v", err)
		}
	})
}

// TestCommitterRejoinRestartsContactClock: the coordinator away for longer
// than the session timeout, the member lost its partitions through its
// heartbeats before a commit noticed, and joined a new generation once the
// coordinator was back. The join is contact with the coordinator: the
// first commit of the new generation that fails (a connection the outage
// left broken) must not count the outage against it and fence the new
// partitions at once.
func TestCommitterRejoinRestartsContactClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &fakeGen{}
		var fenced atomic.Pointer[error]
		c := NewCommitter(g, "in", 10*time.Millisecond, slog.New(slog.DiscardHandler), nil, func(err error) { fenced.Store(&err) })
		c.MaxGap = 10 * time.Second
		go c.Run()
		defer c.Close()
		ctx := context.Background()
		if err := c.CommitNow(ctx, 0, 1); err != nil {
			t.Fatal(err)
		}
		outage := errors.New("dial tcp 127.0.0.1:9092: connection refused")
		g.setErr(outage)
		for o := int64(2); o <= 40; o++ { // 4 s of failed commits
			c.Offer(ctx, 0, o)
			time.Sleep(100 * time.Millisecond)
		}
		c.ForgetPartitions([]int{0}) // lost through the heartbeats
		time.Sleep(8 * time.Second)  // the rest of the outage and the rejoin
		if p := fenced.Load(); p != nil {
			t.Fatalf("fenced with nothing to commit: %v", *p)
		}
		c.ReviveAfterLoss() // joined a new generation
		synctest.Wait()
		g.setErr(errors.New("unexpected EOF"))
		c.Offer(ctx, 0, 41)
		time.Sleep(50 * time.Millisecond)
		if p := fenced.Load(); p != nil {
			t.Fatalf("the new generation's first failed commit fenced it: %v", *p)
		}
		g.setErr(nil)
		if err := c.CommitNow(ctx, 0, 42); err != nil {
			t.Fatalf("commit after the rejoin: %v", err)
		}
	})
}

// manualClock is a clock that moves only when the test says.
type manualClock struct{ at atomic.Int64 }

func newManualClock() *manualClock {
	c := &manualClock{}
	c.at.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *manualClock) Now() time.Time       { return time.Unix(0, c.at.Load()) }
func (c *manualClock) move(d time.Duration) { c.at.Add(int64(d)) }

// TestCommitterFencesOnItsClock: the fencing decisions read the
// committer's clock (Committer.Now, the worker's Deps.Now), at their exact
// bounds: commits failing for half the session timeout in a row and none
// successful for more than a whole one fence the member; a pause is
// longer than the session timeout. The clock moves only when the test
// says, and the tickers (an hour apart) never fire.
func TestCommitterFencesOnItsClock(t *testing.T) {
	const gap = 10 * time.Second
	outage := errors.New("dial tcp 127.0.0.1:9092: connection refused")
	start := func(t *testing.T) (*Committer, *fakeGen, *manualClock, *atomic.Pointer[error]) {
		g, clock := &fakeGen{}, newManualClock()
		var fenced atomic.Pointer[error]
		c := NewCommitter(g, "in", time.Hour, slog.New(slog.DiscardHandler), nil, func(err error) { fenced.Store(&err) })
		c.MaxGap, c.Now = gap, clock.Now
		go c.Run()
		t.Cleanup(c.Close)
		if err := c.CommitNow(t.Context(), 0, 1); err != nil { // the last success, at the start
			t.Fatal(err)
		}
		return c, g, clock, &fenced
	}
	notFenced := func(t *testing.T, c *Committer, fenced *atomic.Pointer[error], o int64, when string) {
		t.Helper()
		if err := c.CommitNow(t.Context(), 0, o); errors.Is(err, ErrStaleGeneration) || fenced.Load() != nil {
			t.Fatalf("%s: commit = %v, fenced = %v; want a plain failure", when, err, fenced.Load() != nil)
		}
	}
	isFenced := func(t *testing.T, c *Committer, fenced *atomic.Pointer[error], o int64, when string) {
		t.Helper()
		if err := c.CommitNow(t.Context(), 0, o); !errors.Is(err, ErrNoContact) {
			t.Fatalf("%s: commit = %v, want ErrNoContact", when, err)
		}
		if p := fenced.Load(); p == nil || !errors.Is(*p, ErrNoContact) {
			t.Fatalf("%s: fenced with %v, want ErrNoContact", when, p)
		}
		if !c.PausedTooLong() {
			t.Fatalf("%s: partitions may still write", when)
		}
	}

	t.Run("no success for a session timeout", func(t *testing.T) {
		c, g, clock, fenced := start(t)
		clock.move(gap / 10)
		g.setErr(outage)
		notFenced(t, c, fenced, 2, "first failure")
		clock.move(gap - gap/10) // failing for 0.9 gap, the last success a whole gap ago
		notFenced(t, c, fenced, 3, "at the session timeout")
		clock.move(time.Nanosecond)
		isFenced(t, c, fenced, 4, "just past it")
	})
	t.Run("failing for half a session timeout", func(t *testing.T) {
		c, g, clock, fenced := start(t)
		clock.move(gap)
		g.setErr(outage)
		notFenced(t, c, fenced, 2, "first failure, the last success a gap ago")
		clock.move(gap/2 - time.Nanosecond)
		notFenced(t, c, fenced, 3, "failing for just under half a gap")
		clock.move(time.Nanosecond)
		isFenced(t, c, fenced, 4, "failing for half a gap")
	})
	t.Run("pause", func(t *testing.T) {
		c, _, clock, fenced := start(t)
		clock.move(gap)
		if c.PausedTooLong() {
			t.Fatal("paused after exactly the session timeout")
		}
		clock.move(time.Nanosecond)
		if !c.PausedTooLong() {
			t.Fatal("not paused just past the session timeout")
		}
		if fenced.Load() != nil {
			t.Fatal("fenced before the committer looked (its next tick)")
		}
	})
}
