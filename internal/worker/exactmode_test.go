package worker_test

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/memory"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// exactState is the production state store in exact mode, its stores in
// dir (a worker's local disk), its exact metrics in the returned registry.
func exactState(t *testing.T, ckDir, dir string) (*memory.Store, *prometheus.Registry) {
	t.Helper()
	st := realState(t, ckDir)
	reg := prometheus.NewRegistry()
	st.Exact = memory.ExactOptions{Dir: dir, FlushKeys: 256, Registerer: reg, Logger: testLogger(t)}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("closing exact stores: %v", err)
		}
	})
	return st, reg
}

// sumCounter sums a counter's series whose result label is result.
func sumCounter(t *testing.T, reg *prometheus.Registry, name, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var s float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "result" && lp.GetValue() == result {
					s += m.GetCounter().GetValue()
				}
			}
		}
	}
	return s
}

// exactEvents is n events over two partitions with 20 % duplicates,
// spread over 50 minutes of event time: the filter (window 1h, 4
// generations) opens three generations, and every repeat is inside the
// window.
func exactEvents(n int) []event {
	evs := genEvents(n, 2, 0.2, 61, base)
	for i := range evs {
		evs[i].TS = base.Add(time.Duration(i) * 50 * time.Minute / time.Duration(n))
	}
	return evs
}

// exactConfig is a tiny filter at a 30 % false-positive rate: without
// exact mode, unique events are judged duplicates all the time.
func exactConfig(brokers []string) worker.Config {
	cfg := worker.TestConfig(brokers)
	cfg.Filter = worker.FilterParams{Window: time.Hour, Generations: 4, Capacity: 2_000, FPR: 0.3}
	return cfg
}

// TestExactMode runs the same input through the worker with the production
// state store twice, on separate brokers: filter only, where the tiny
// filter's false positives drop unique events, and in exact mode, where
// every unique key is forwarded once and every repeat is a duplicate, also
// across a crash in the middle (the successor on another disk: its stores
// come from the checkpoints alone).
func TestExactMode(t *testing.T) {
	t.Parallel()
	evs := exactEvents(8000)
	wantOut, wantDup, _ := expectation(evs, time.Hour)
	unique := len(wantOut[0]) + len(wantOut[1])
	ex := realExtractor(t)

	t.Run("filter only", func(t *testing.T) {
		t.Parallel()
		brokers := newCluster(t, 2)
		produce(t, brokers, evs)
		rw := startWorkerWith(t, exactConfig(brokers), realState(t, t.TempDir()), ex, nil)
		waitFor(t, 60*time.Second, "all consumed", func() bool { return rw.consumed() == uint64(len(evs)) })
		rw.stop(t)
		out := readTopic(t, brokers, tOut, 2)
		forwarded := len(out[0]) + len(out[1])
		t.Logf("filter only: %d of %d unique keys forwarded; %d false positives", forwarded, unique, unique-forwarded)
		if forwarded >= unique {
			t.Fatalf("the tiny filter had no false positives (%d forwarded of %d): the comparison shows nothing", forwarded, unique)
		}
	})

	t.Run("exact", func(t *testing.T) {
		t.Parallel()
		brokers := newCluster(t, 2)
		ckDir := t.TempDir()
		half := len(evs) / 2
		produce(t, brokers, evs[:half])

		cfg := exactConfig(brokers)
		cfg.BatchSize = 50
		cfg.CommitInterval, cfg.CheckpointInterval = 30*time.Millisecond, 70*time.Millisecond
		cfg.Owner = "crashing"
		stA, regA := exactState(t, ckDir, t.TempDir())
		// The crash comes after 50 batches, at the first write beyond its
		// partition's newest checkpoint (read from the bucket; a checkpoint
		// in flight was cut before this batch, on this goroutine), so that
		// the successor restores the store and then processes records past
		// it: on a slow machine a checkpoint could cover everything written.
		ck, err := checkpoint.Open(context.Background(), "file://"+ckDir, checkpoint.Options{Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		defer ck.Close()
		checkpointed := func(partition int) int64 {
			rep, err := checkpoint.Inspect(context.Background(), ck)
			if err != nil {
				return math.MaxInt64 // unknown: not a crash point
			}
			for _, p := range rep.Partitions {
				if p.Partition == partition {
					return p.InputOffset
				}
			}
			return -1
		}
		var batches atomic.Int64
		var crashed atomic.Bool
		crash := make(chan struct{})
		a := startWorkerWith(t, cfg, stA, ex, func(w *worker.Worker) {
			w.TestHooks().AfterWrite = func(partition int, next int64) {
				if batches.Add(1) < 50 || crashed.Load() || next <= checkpointed(partition) {
					return
				}
				if crashed.CompareAndSwap(false, true) {
					w.TestHooks().Halted.Store(true)
					close(crash)
				}
			}
		})
		<-crash
		a.cancel()
		<-a.done
		a.done <- nil
		refutedA := sumCounter(t, regA, "bloomgate_exact_positives_total", "refuted")

		produce(t, brokers, evs[half:])
		cfg = exactConfig(brokers)
		cfg.Owner = "successor"
		stB, regB := exactState(t, ckDir, t.TempDir()) // the crashed worker's disk is gone
		b := startWorkerWith(t, cfg, stB, ex, nil)
		b.CaughtUp(t, map[int]int64{0: int64(countIn(evs, 0)), 1: int64(countIn(evs, 1))})
		st := b.w.Status()
		b.stop(t)
		refutedB := sumCounter(t, regB, "bloomgate_exact_positives_total", "refuted")
		t.Logf("exact: %d unique keys; false positives refuted: %v before the crash, %v after (replay included)", unique, refutedA, refutedB)
		checkKeys(t, "output", readTopic(t, brokers, tOut, 2), wantOut)
		checkKeys(t, "duplicates", readTopic(t, brokers, tDup, 2), wantDup)
		if refutedA == 0 || refutedB == 0 {
			t.Errorf("refuted positives %v, %v: exact mode had nothing to do", refutedA, refutedB)
		}
		for _, p := range st.Partitions { // refreshed every few seconds: present, not current
			if p.Filter.Exact == nil {
				t.Errorf("partition %d: no exact stats in the status", p.Partition)
			}
		}
		// Past the checkpoint the successor replays what was committed and
		// finds in the outputs what was written but not committed; both go
		// through its filter and store.
		replayed := b.metricSum(t, "bloomgate_recovery_replayed_records_total")
		found := b.metricSum(t, "bloomgate_recovery_already_written_records_total")
		if replayed+found == 0 {
			t.Errorf("the successor processed nothing past the restored checkpoint: the crash came after the last checkpoint covered everything")
		}
		t.Logf("past the restored checkpoint: %v records replayed, %v found already written", replayed, found)
	})
}

func countIn(evs []event, p int) int {
	n := 0
	for _, e := range evs {
		if e.Partition == p {
			n++
		}
	}
	return n
}
