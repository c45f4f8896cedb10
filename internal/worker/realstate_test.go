package worker_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/kafkatest"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// TestRealStateRestartAndCrash: bloom shards in a file:// checkpoint store;
// a clean restart recognises old keys without replay, and a crash after an
// acknowledged write recovers exactly.
func TestRealStateRestartAndCrash(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 2)
	dir := t.TempDir()
	evs := genEvents(3000, 2, 0.3, 51, base)
	ex := realExtractor(t)

	produce(t, brokers, evs[:1000])
	cfg := realConfig(brokers)
	a := startWorkerWith(t, cfg, realState(t, dir), ex, nil)
	waitFor(t, 60*time.Second, "first part consumed", func() bool { return a.consumed() == 1000 })
	if err := a.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}

	produce(t, brokers, evs[1000:])
	cfg.BatchSize = 40
	cfg.CommitInterval, cfg.CheckpointInterval = 30*time.Millisecond, 70*time.Millisecond
	cfg.Owner = "crashing"
	var batches atomic.Int64
	crash := make(chan struct{})
	b := startWorkerWith(t, cfg, realState(t, dir), ex, func(w *worker.Worker) {
		w.TestHooks().AfterWrite = func(int, int64) {
			if batches.Add(1) == 20 {
				w.TestHooks().Halted.Store(true)
				close(crash)
			}
		}
	})
	go func() { <-crash; b.cancel() }()
	<-b.done
	b.done <- nil
	if n := b.metricSum(t, "bloomgate_recovery_replayed_records_total"); n != 0 {
		t.Errorf("clean restart replayed %v records, want 0", n)
	}

	cfg = realConfig(brokers)
	cfg.Owner = "successor"
	c := startWorkerWith(t, cfg, realState(t, dir), ex, nil)
	waitFor(t, 60*time.Second, "successor caught up", func() bool {
		s := c.w.Status()
		var next int64
		for _, p := range s.Partitions {
			next += p.NextOffset
		}
		return s.Ready && next == int64(len(evs))
	})
	st := c.w.Status()
	if f := st.Partitions[0].Filter; f.Generations == 0 || f.Bytes == 0 || f.EstKeys == 0 {
		t.Errorf("filter stats after recovery: %+v", f)
	}
	c.stop(t)
	wantOut, wantDup, _ := expectation(evs, time.Hour)
	checkKeys(t, "output", readTopic(t, brokers, tOut, 2), wantOut)
	checkKeys(t, "duplicates", readTopic(t, brokers, tDup, 2), wantDup)
}

// TestRealStateWindow: with the rotating shard, a key is forgotten after
// the window (at most window·G/(G-1) later) and remembered inside it.
func TestRealStateWindow(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1)
	k := []byte("order-1")
	evs := []event{
		{Key: k, Value: "a", TS: base},
		{Key: k, Value: "b", TS: base.Add(59 * time.Minute)},             // inside the window: duplicate
		{Key: k, Value: "c", TS: base.Add(59*time.Minute + 2*time.Hour)}, // beyond W·G/(G-1) = 80m of the last sighting
		{Key: []byte("other"), Value: "d", TS: base.Add(3 * time.Hour)},
	}
	produce(t, brokers, evs)
	rw := startWorkerWith(t, realConfig(brokers), realState(t, t.TempDir()), realExtractor(t), nil)
	waitFor(t, 60*time.Second, "events consumed", func() bool { return rw.consumed() == uint64(len(evs)) })
	rw.stop(t)
	if got := values(readTopic(t, brokers, tOut, 1)[0]); got != "a c d" {
		t.Errorf("forwarded %q, want %q", got, "a c d")
	}
}

// TestRealStateReuseOnRebalance: a partition that stays with a worker across
// a rebalance keeps running (cooperative: it is not even stopped) or, with
// eager rebalancing, resumes from memory, not from the store; dedup stays
// exact.
func TestRealStateReuseOnRebalance(t *testing.T) {
	for _, eager := range []bool{false, true} {
		t.Run(map[bool]string{false: "cooperative", true: "eager"}[eager], func(t *testing.T) {
			t.Parallel()
			brokers := newCluster(t, 4)
			dir := t.TempDir()
			evs := genEvents(3000, 4, 0.3, 52, base)
			ex := realExtractor(t)
			stA := realState(t, dir)
			cfg := realConfig(brokers)
			worker.DefaultGroupTimings(&cfg)
			cfg.EagerRebalancing = eager
			cfg.Owner = "a"
			a := startWorkerWith(t, cfg, stA, ex, nil)
			produce(t, brokers, evs[:1500])
			waitFor(t, 60*time.Second, "a consumed the first part", func() bool { return a.consumed() == 1500 })
			recoveries := a.metricSum(t, "bloomgate_recovery_duration_seconds_count")
			cfg.Owner = "b"
			b := startWorkerWith(t, cfg, realState(t, dir), ex, nil)
			waitFor(t, 60*time.Second, "partitions split", func() bool {
				sa, sb := a.w.Status(), b.w.Status()
				return sa.Ready && sb.Ready && len(sa.Assigned) == 2 && len(sb.Assigned) == 2
			})
			if eager {
				if n := stA.Reused(); n != 2 {
					t.Errorf("a resumed %d partitions from memory, want 2", n)
				}
			} else if n := a.metricSum(t, "bloomgate_recovery_duration_seconds_count") - recoveries; n != 0 {
				t.Errorf("a recovered %v partitions again, want none (the two it keeps go on running)", n)
			}
			produce(t, brokers, evs[1500:])
			waitFor(t, 60*time.Second, "everything consumed", func() bool {
				return a.metricSum(t, "bloomgate_records_consumed_total")+b.metricSum(t, "bloomgate_records_consumed_total") == 3000
			})
			a.stop(t)
			b.stop(t)
			wantOut, wantDup, _ := expectation(evs, time.Hour)
			checkKeys(t, "output", readTopic(t, brokers, tOut, 4), wantOut)
			checkKeys(t, "duplicates", readTopic(t, brokers, tDup, 4), wantDup)
		})
	}
}

// TestWindowChangeKeepsMemory restarts a worker with --window 3h over
// checkpoints written with 1h (4 generations: spans 20m → 1h): nothing is
// replayed, a key seen inside the old window is still a duplicate (also
// beyond where the old settings would have forgotten it), a key the old
// settings had already forgotten stays forgotten, and the next restart
// restores the checkpoint of the new settings with the old generations.
func TestWindowChangeKeepsMemory(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1)
	name := evolveName(t)
	ex := realExtractor(t)
	at := func(m int) time.Time { return base.Add(time.Duration(m) * time.Minute) }
	key := func(i int) []byte { return []byte(fmt.Sprintf("k%d", i)) }
	var evs []event
	for i := range 100 { // k0..k99 at minutes 0..99
		evs = append(evs, event{Key: key(i), Value: "a", TS: at(i)})
	}
	produce(t, brokers, evs)
	a := startWorkerWith(t, realConfig(brokers), memState(t, name, nil), ex, nil)
	waitFor(t, 60*time.Second, "first part consumed", func() bool { return a.consumed() == uint64(len(evs)) })
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}

	cfg := realConfig(brokers)
	cfg.Filter.Window = 3 * time.Hour
	second := []event{
		{Key: key(60), Value: "b", TS: at(105)},       // 45m after: inside both windows
		{Key: key(45), Value: "b", TS: at(140)},       // 95m after: kept at the change, inside 3h
		{Key: key(10), Value: "b", TS: at(150)},       // 140m after, 89m before the change: forgotten already
		{Key: []byte("new"), Value: "b", TS: at(151)}, // never seen
	}
	produce(t, brokers, second)
	logs := &kafkatest.LogBuffer{}
	b := startWorkerWith(t, cfg, memState(t, name, logs), ex, nil)
	caughtUp(t, b, map[int]int64{0: int64(len(evs) + len(second))})
	if err := b.stop(t); err != nil {
		t.Fatalf("restart with a longer window: %v", err)
	}
	if n := b.metricSum(t, "bloomgate_recovery_replayed_records_total"); n != 0 {
		t.Errorf("replayed %v records; the checkpoint should have been used", n)
	}
	if out := logs.String(); !strings.Contains(out, "window 1h → 3h") {
		t.Errorf("restart log does not name the window change:\n%s", out)
	}

	third := []event{{Key: key(50), Value: "c", TS: at(160)}} // 110m after, in an old generation
	produce(t, brokers, third)
	c := startWorkerWith(t, cfg, memState(t, name, nil), ex, nil)
	caughtUp(t, c, map[int]int64{0: int64(len(evs) + len(second) + len(third))})
	c.stop(t)
	if n := c.metricSum(t, "bloomgate_recovery_replayed_records_total"); n != 0 {
		t.Errorf("second restart replayed %v records", n)
	}

	want := []string{}
	for _, e := range evs {
		want = append(want, string(e.Key))
	}
	want = append(want, "k10", "new")
	checkKeys(t, "output", readTopic(t, brokers, tOut, 1), map[int][]string{0: want})
	checkKeys(t, "duplicates", readTopic(t, brokers, tDup, 1), map[int][]string{0: {"k60", "k45", "k50"}})
}
