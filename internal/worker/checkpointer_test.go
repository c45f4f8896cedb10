package worker

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestFirstCheckpointSoon: a new memory's first periodic checkpoint comes
// firstCheckpointAfter after its records, not a whole interval later (here
// an hour); the next one after twice that. The worker's clock (Deps.Now) is
// moved by the test; everything else runs in real time.
func TestFirstCheckpointSoon(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1)
	evs := genEvents(600, 1, 0.2, 71, base)
	produce(t, brokers, evs[:500])
	store := newMemStore()
	cfg := testConfig(brokers)
	cfg.CheckpointInterval = time.Hour
	var ahead atomic.Int64 // how far the worker's clock is ahead of the real one
	move := func(d time.Duration) { ahead.Add(int64(d)) }
	rw := startWorker(t, cfg, store, func(w *Worker) {
		w.deps.Now = func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	})
	waitFor(t, 60*time.Second, "500 records consumed", func() bool { return rw.consumed() == 500 })
	if cp, ok := store.latest(tIn, 0); !ok || cp.InputOffset != 0 {
		t.Fatalf("before %v: checkpoint %+v (stored %v), want only the initial one at offset 0", firstCheckpointAfter, cp.InputOffset, ok)
	}
	move(firstCheckpointAfter)
	waitFor(t, 10*time.Second, "the first checkpoint after the records", func() bool {
		cp, ok := store.latest(tIn, 0)
		return ok && cp.InputOffset == 500
	})

	produce(t, brokers, evs[500:])
	waitFor(t, 60*time.Second, "600 records consumed", func() bool { return rw.consumed() == 600 })
	move(firstCheckpointAfter + time.Second)
	rw.housekept(t, 0, 2) // each pass looks whether a checkpoint is due
	if cp, _ := store.latest(tIn, 0); cp.InputOffset != 500 {
		t.Fatalf("second checkpoint at offset %d before %v", cp.InputOffset, 2*firstCheckpointAfter)
	}
	move(firstCheckpointAfter)
	waitFor(t, 10*time.Second, "the second checkpoint, twice as late", func() bool {
		cp, ok := store.latest(tIn, 0)
		return ok && cp.InputOffset == 600
	})
}

// gatedStore holds each Commit until the test opens the gate.
type gatedStore struct {
	PartitionStore
	gate chan struct{}
}

func (s gatedStore) Commit(ctx context.Context, cp Checkpoint) error {
	select {
	case <-s.gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type noSnapshot struct{}

func (noSnapshot) Release() {}

// TestCheckpointerIdle: idle returns when the running upload ends, not
// before, and at once when none runs; a checkpoint offered while one
// runs is refused. In a bubble, so that "not before" is exact.
func TestCheckpointerIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := gatedStore{gate: make(chan struct{})}
		c := newCheckpointer(store, time.Hour, slog.New(slog.DiscardHandler), time.Now, func(error) {})
		c.start()
		defer c.stop()
		if err := c.idle(t.Context()); err != nil {
			t.Fatalf("idle with no upload: %v", err)
		}
		cp := func() Checkpoint { return Checkpoint{InputOffset: 7, Snapshot: noSnapshot{}} }
		if !c.trySubmit(cp) {
			t.Fatal("first checkpoint refused")
		}
		if c.trySubmit(cp) {
			t.Fatal("a second checkpoint accepted while one uploads")
		}
		var idled atomic.Bool
		go func() {
			if err := c.idle(t.Context()); err != nil {
				t.Errorf("idle: %v", err)
			}
			idled.Store(true)
		}()
		synctest.Wait()
		if idled.Load() {
			t.Fatal("idle returned while the upload runs")
		}
		close(store.gate)
		synctest.Wait()
		if !idled.Load() {
			t.Fatal("idle still waits after the upload ended")
		}
		if _, off, err := c.state(); off != 7 || err != nil {
			t.Errorf("after the upload: offset %d, err %v; want 7, nil", off, err)
		}
		if !c.trySubmit(cp) {
			t.Error("checkpoint refused after the upload ended")
		}
	})
}
