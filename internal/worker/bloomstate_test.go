package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/keys"
)

// realState opens a file:// checkpoint store in dir with the real filter.
func realState(t *testing.T, dir string) *BloomState {
	t.Helper()
	st, err := checkpoint.Open(context.Background(), "file://"+dir, checkpoint.Options{
		Logger: testLogger(t), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatalf("opening checkpoint store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return NewBloomState(st, "g")
}

func realExtractor(t *testing.T) Extractor {
	t.Helper()
	ex, err := keys.NewExtractor("key", "none", 1024)
	if err != nil {
		t.Fatal(err)
	}
	return ex
}

// realConfig keeps the false-positive rate negligible so that exact
// expectations hold with the Bloom filter.
func realConfig(brokers []string) Config {
	cfg := testConfig(brokers)
	cfg.Filter.FPR = 1e-7
	return cfg
}

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
	b := startWorkerWith(t, cfg, realState(t, dir), ex, func(w *Worker) {
		w.afterWrite = func(int, int64) {
			if batches.Add(1) == 20 {
				w.halted.Store(true)
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
		{key: k, value: "a", ts: base},
		{key: k, value: "b", ts: base.Add(59 * time.Minute)},             // inside the window: duplicate
		{key: k, value: "c", ts: base.Add(59*time.Minute + 2*time.Hour)}, // beyond W·G/(G-1) = 80m of the last sighting
		{key: []byte("other"), value: "d", ts: base.Add(3 * time.Hour)},
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
// a rebalance resumes from memory, not from the store; dedup stays exact.
func TestRealStateReuseOnRebalance(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 4)
	dir := t.TempDir()
	evs := genEvents(3000, 4, 0.3, 52, base)
	ex := realExtractor(t)
	stA := realState(t, dir)
	cfg := realConfig(brokers)
	defaultGroupTimings(&cfg)
	cfg.Owner = "a"
	a := startWorkerWith(t, cfg, stA, ex, nil)
	produce(t, brokers, evs[:1500])
	waitFor(t, 60*time.Second, "a consumed the first part", func() bool { return a.consumed() == 1500 })
	cfg.Owner = "b"
	b := startWorkerWith(t, cfg, realState(t, dir), ex, nil)
	waitFor(t, 60*time.Second, "partitions split", func() bool {
		sa, sb := a.w.Status(), b.w.Status()
		return sa.Ready && sb.Ready && len(sa.Assigned) == 2 && len(sb.Assigned) == 2
	})
	if n := stA.reuse.Load(); n != 2 {
		t.Errorf("a resumed %d partitions from memory, want 2", n)
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
}

// TestBloomStateReuseRules: a kept filter is reused only when the newest
// manifest is the one this process wrote last and the filter is unchanged.
func TestBloomStateReuseRules(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := realState(t, dir)
	params := FilterParams{Window: time.Hour, Generations: 4, Capacity: 1000, FPR: 0.01}
	commit := func(h PartitionStore, f Filter, off int64) {
		t.Helper()
		if err := h.Commit(ctx, Checkpoint{InputOffset: off, Params: params, Snapshot: f.Snapshot(), Owner: "t"}); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	restore := func(s *BloomState) (PartitionStore, *Restored) {
		t.Helper()
		h := s.Partition("in", 0)
		r, err := h.Restore(ctx, params)
		if err != nil {
			t.Fatalf("restore: %v", err)
		}
		if err := h.Claim(ctx, "t"); err != nil {
			t.Fatalf("claim: %v", err)
		}
		return h, r
	}

	h := st.Partition("in", 0)
	if _, err := h.Restore(ctx, params); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("first restore = %v, want ErrNoCheckpoint", err)
	}
	if err := h.Claim(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	f, _ := st.NewFilter(params)
	f.TestAndAdd([]byte("a"), base)
	commit(h, f, 1)

	h, r := restore(st)
	if r.Filter != f || st.reuse.Load() != 1 {
		t.Fatalf("unchanged filter not reused (reuse=%d)", st.reuse.Load())
	}
	commit(h, f, 1)
	f.TestAndAdd([]byte("b"), base) // changed after its checkpoint
	h, r = restore(st)
	if r.Filter == f || st.reuse.Load() != 1 {
		t.Fatalf("changed filter reused")
	}
	if !r.Filter.TestAndAdd([]byte("a"), base) || r.Filter.TestAndAdd([]byte("b"), base) {
		t.Fatalf("restored filter does not hold the checkpointed state")
	}

	commit(h, r.Filter, 2)
	restore(realState(t, dir)) // another owner claims in between
	_, r2 := restore(st)
	if r2.Filter == r.Filter || st.reuse.Load() != 1 {
		t.Fatalf("filter reused although another owner claimed the partition since")
	}
}

// TestBloomFilterBatchMatchesOneByOne: the real filter fed in batches ends
// byte-identical to one fed record by record, far-future timestamps
// (clamped by max-time-jump) and rotations included.
func TestBloomFilterBatchMatchesOneByOne(t *testing.T) {
	t.Parallel()
	params := FilterParams{Window: time.Hour, Generations: 3, Capacity: 5_000, FPR: 0.01}
	st := realState(t, t.TempDir())
	st.MaxTimeJump = 20 * time.Minute
	one, err := st.NewFilter(params)
	if err != nil {
		t.Fatal(err)
	}
	batched, _ := st.NewFilter(params)
	batched.(*bloomFilter).seed = one.(*bloomFilter).seed // one memory's hash, two ways
	r := rand.New(rand.NewPCG(5, 6))
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	var keys [][]byte
	var ts []time.Time
	dups := 0
	for round := range 300 {
		keys, ts = keys[:0], ts[:0]
		for range r.IntN(100) {
			now = now.Add(time.Duration(r.IntN(2000)) * time.Millisecond)
			at := now.Add(-time.Duration(r.IntN(60)) * time.Second)
			if r.IntN(500) == 0 {
				at = at.AddDate(5, 0, 0) // a bad clock: clamped
			}
			keys = append(keys, []byte(fmt.Sprintf("order-%d", r.IntN(8000))))
			ts = append(ts, at)
		}
		seen := make([]bool, len(keys))
		batched.TestAndAddBatch(keys, ts, seen)
		for i := range keys {
			if want := one.TestAndAdd(keys[i], ts[i]); seen[i] != want {
				t.Fatalf("round %d record %d: batched seen=%v, one by one %v", round, i, seen[i], want)
			} else if want {
				dups++
			}
		}
	}
	a, b := one.Stats(), batched.Stats()
	if a != b || a.ClampedTimestamps == 0 || dups == 0 {
		t.Fatalf("stats one by one %+v, batched %+v (%d duplicates); want equal, with clamped timestamps and duplicates", a, b, dups)
	}
	encode := func(f Filter) [][]byte {
		sn := f.(*bloomFilter).s.Snapshot()
		defer sn.Release()
		var out [][]byte
		for _, g := range sn.Generations {
			var buf bytes.Buffer
			if _, err := g.WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
			out = append(out, buf.Bytes())
		}
		return out
	}
	x, y := encode(one), encode(batched)
	if len(x) != len(y) {
		t.Fatalf("%d generations one by one, %d batched", len(x), len(y))
	}
	for i := range x {
		if !bytes.Equal(x[i], y[i]) {
			t.Fatalf("generation %d differs", i)
		}
	}
}
