package worker

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// TestLostAckRecovers: a write that landed but whose acknowledgement was
// lost makes the partition re-run exact recovery; nothing is written twice.
func TestLostAckRecovers(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 2)
	evs := genEvents(2000, 2, 0.3, 21, base)
	produce(t, brokers, evs)
	cfg := testConfig(brokers)
	cfg.BatchSize = 50
	var n atomic.Int64
	rw := startWorker(t, cfg, newMemStore(), func(w *Worker) {
		w.hooks.LoseAck = func(int) bool {
			k := n.Add(1)
			return k == 5 || k == 6 || k == 20
		}
	})
	waitFor(t, 60*time.Second, "events consumed", func() bool { return rw.consumed() == uint64(len(evs)) })
	rw.stop(t)
	if f := rw.metricSum(t, "bloomgate_output_write_failures_total"); f != 3 {
		t.Errorf("write failures %v, want 3", f)
	}
	wantOut, wantDup, _ := expectation(evs, time.Hour)
	checkKeys(t, "output", readTopic(t, brokers, tOut, 2), wantOut)
	checkKeys(t, "duplicates", readTopic(t, brokers, tDup, 2), wantDup)
}

// TestFencedCheckpointStopsPartition: when another owner claims the
// partition's checkpoints, the worker stops working on it at once, rejoins,
// and ends up exact.
func TestFencedCheckpointStopsPartition(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1)
	evs := genEvents(3000, 1, 0.3, 22, base)
	store := newMemStore()
	cfg := testConfig(brokers)
	cfg.CheckpointInterval = 20 * time.Millisecond
	cfg.BatchSize = 50
	rw := startWorker(t, cfg, store, nil)
	produce(t, brokers, evs[:1000])
	waitFor(t, 60*time.Second, "first part consumed", func() bool { return rw.consumed() == 1000 })
	// Another owner claims the partition.
	other := store.Partition(tIn, 0)
	if _, err := other.Restore(context.Background(), FilterParams{Window: time.Hour}); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if err := other.Claim(context.Background(), "intruder"); err != nil {
		t.Fatalf("claim: %v", err)
	}
	produce(t, brokers, evs[1000:])
	waitFor(t, 60*time.Second, "the worker was fenced and rejoined", func() bool {
		return rw.metricSum(t, "bloomgate_rebalances_total") >= 2
	})
	waitFor(t, 60*time.Second, "everything consumed", func() bool {
		s := rw.w.Status()
		return len(s.Partitions) == 1 && s.Partitions[0].NextOffset == int64(len(evs))
	})
	rw.stop(t)
	wantOut, wantDup, _ := expectation(evs, time.Hour)
	checkKeys(t, "output", readTopic(t, brokers, tOut, 1), wantOut)
	checkKeys(t, "duplicates", readTopic(t, brokers, tDup, 1), wantDup)
}

// TestBucketDown: with checkpoints failing, processing goes on; after the
// staleness bound offset commits stop; once checkpoints succeed they resume.
func TestBucketDown(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1)
	evs := genEvents(1000, 1, 0.2, 23, base)
	store := newMemStore()
	cfg := testConfig(brokers)
	cfg.CheckpointInterval = 50 * time.Millisecond
	cfg.MaxCheckpointStaleness = 300 * time.Millisecond
	cfg.CommitInterval = 20 * time.Millisecond
	rw := startWorker(t, cfg, store, nil)
	failAfterInitialCheckpoint(t, store, 1)
	committed := func() int64 {
		c := &kafka.Client{Addr: kafka.TCP(brokers...)}
		res, err := c.OffsetFetch(context.Background(), &kafka.OffsetFetchRequest{GroupID: "g", Topics: map[string][]int{tIn: {0}}})
		if err != nil || len(res.Topics[tIn]) == 0 {
			return -1
		}
		return res.Topics[tIn][0].CommittedOffset
	}
	produce(t, brokers, evs[:500])
	waitFor(t, 60*time.Second, "first part consumed", func() bool { return rw.consumed() == 500 })
	waitFor(t, 30*time.Second, "the status showing commits held", func() bool {
		ps := rw.w.Status().Partitions
		return len(ps) == 1 && ps[0].CommitsPaused
	})
	before := committed()
	produce(t, brokers, evs[500:])
	waitFor(t, 60*time.Second, "second part consumed although the bucket is down", func() bool { return rw.consumed() == 1000 })
	rw.housekept(t, 0, 2) // checkpoints due, commits offered: held
	if c := committed(); c != before || c >= 1000 {
		t.Errorf("committed offset moved from %d to %d while checkpoints were stale", before, c)
	}
	store.failCommit.Store(false)
	waitFor(t, 30*time.Second, "commits resumed after a checkpoint succeeded", func() bool { return committed() == 1000 })
	rw.stop(t)
}

// TestBucketBackAtShutdown: checkpoints fail until commits pause; the
// bucket comes back as the worker stops: the final checkpoint succeeds and
// the final offset is committed after it, so the next owner neither
// replays nor rescans what this one did.
func TestBucketBackAtShutdown(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1)
	evs := genEvents(600, 1, 0.2, 25, base)
	store := newMemStore()
	cfg := testConfig(brokers)
	// Periodic checkpoints a second apart: the stop below comes long before
	// the next one could resume commits, so the final checkpoint must.
	cfg.CheckpointInterval = time.Second
	cfg.MaxCheckpointStaleness = time.Second
	rw := startWorker(t, cfg, store, nil)
	failAfterInitialCheckpoint(t, store, 1)
	produce(t, brokers, evs[:300])
	waitFor(t, 60*time.Second, "commits paused", func() bool {
		ps := rw.w.Status().Partitions
		return len(ps) == 1 && ps[0].NextOffset == 300 && ps[0].CommitsPaused
	})
	produce(t, brokers, evs[300:]) // processed, written, not committed
	waitFor(t, 60*time.Second, "everything consumed", func() bool {
		ps := rw.w.Status().Partitions
		return len(ps) == 1 && ps[0].NextOffset == int64(len(evs))
	})
	store.failCommit.Store(false)
	if err := rw.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	c := &kafka.Client{Addr: kafka.TCP(brokers...)}
	res, err := c.OffsetFetch(context.Background(), &kafka.OffsetFetchRequest{GroupID: "g", Topics: map[string][]int{tIn: {0}}})
	if err != nil || len(res.Topics[tIn]) == 0 {
		t.Fatalf("offset fetch: %v", err)
	}
	if got := res.Topics[tIn][0].CommittedOffset; got != int64(len(evs)) {
		t.Errorf("committed offset %d after the final checkpoint, want %d", got, len(evs))
	}
	if cp, ok := store.latest(tIn, 0); !ok || cp.InputOffset != int64(len(evs)) {
		t.Errorf("final checkpoint at %d, want %d", cp.InputOffset, len(evs))
	}
}

// TestShutdownBounded: with a checkpoint store that hangs, Run still returns
// within the shutdown timeout.
func TestShutdownBounded(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 2)
	evs := genEvents(500, 2, 0.2, 24, base)
	produce(t, brokers, evs)
	store := newMemStore()
	cfg := testConfig(brokers)
	cfg.ShutdownTimeout = time.Second
	cfg.CheckpointTimeout = time.Minute
	cfg.CheckpointInterval = 50 * time.Millisecond
	rw := startWorker(t, cfg, store, nil)
	waitFor(t, 60*time.Second, "events consumed", func() bool { return rw.consumed() == uint64(len(evs)) })
	store.hangCommit.Store(true)
	waitFor(t, 30*time.Second, "an upload hanging", func() bool { return store.hung.Load() > 0 })
	start := time.Now()
	if err := rw.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("shutdown took %v with a 1s shutdown timeout", d)
	}
}

// failAfterInitialCheckpoint waits until the new memories of the first
// partitions are durable (a new memory writes nothing before its initial
// checkpoint), then makes every further checkpoint fail.
func failAfterInitialCheckpoint(t *testing.T, store *memStore, partitions int) {
	t.Helper()
	waitFor(t, 60*time.Second, "initial checkpoints", func() bool { return store.commits.Load() >= int64(partitions) })
	store.failCommit.Store(true)
}
