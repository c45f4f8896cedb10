package worker

import (
	"strconv"
	"testing"
	"time"
)

// TestMaxReplayBoundsCommits: with --max-replay and the checkpoint store
// failing, offsets are never committed beyond the last good checkpoint
// plus max-replay (within the staleness bound they used to be: 3,949
// committed against a checkpoint at 972 with max-replay 500). After a
// kill -9 and a restart, the same keys sent again are all duplicates
// (before: 10,000 of 12,000 repeats forwarded).
func TestMaxReplayBoundsCommits(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1)
	evs := genEvents(4000, 1, 0, 93, base)
	store := newMemStore()
	cfg := testConfig(brokers)
	cfg.MaxReplay = 500
	cfg.MaxCheckpointStaleness = time.Minute
	cfg.CheckpointInterval, cfg.CommitInterval = 50*time.Millisecond, 20*time.Millisecond
	cfg.Owner = "first"
	produce(t, brokers, evs[:1000])
	var wk *Worker
	first := startWorker(t, cfg, store, func(w *Worker) { wk = w })
	waitFor(t, 60*time.Second, "a checkpoint at 1000", func() bool {
		cp, ok := store.latest(tIn, 0)
		return ok && cp.InputOffset == 1000
	})
	store.failCommit.Store(true)
	produce(t, brokers, evs[1000:])
	waitFor(t, 60*time.Second, "everything consumed", func() bool { return first.consumed() == 4000 })
	waitFor(t, 10*time.Second, "the status showing commits held", func() bool {
		ps := first.w.Status().Partitions
		return len(ps) == 1 && ps[0].CommitsPaused
	})
	first.housekept(t, 0, 2) // commits had every chance
	if c := fidGroupOffsets(t, brokers, tIn)[0]; c > 1500 {
		t.Errorf("committed offset %d with the last checkpoint at 1000 and max-replay 500", c)
	}
	wk.hooks.Halted.Store(true) // kill -9
	first.cancel()
	first.done <- <-first.done // for the cleanup's stop
	store.failCommit.Store(false)

	// The same keys again, later.
	again := make([]event, 0, 3000)
	for i, e := range evs[1000:] {
		e.Value, e.TS = "again-"+strconv.Itoa(i), base.Add(time.Minute+time.Duration(i)*time.Millisecond)
		again = append(again, e)
	}
	cfg.Owner = "successor"
	rw := startWorker(t, cfg, store, nil)
	produce(t, brokers, again)
	waitFor(t, 60*time.Second, "everything consumed", func() bool {
		ps := rw.w.Status().Partitions
		return len(ps) == 1 && ps[0].NextOffset == 7000
	})
	if err := rw.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	wantOut, _, _ := expectation(append(append([]event(nil), evs...), again...), time.Hour)
	checkKeys(t, "output", readTopic(t, brokers, tOut, 1), wantOut)
}
