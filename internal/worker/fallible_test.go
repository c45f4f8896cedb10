package worker

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// failingStore hands out filters that fail (FallibleFilter) once, after
// failAfter keys over all of them, and then answer "seen" for everything:
// answers the worker must never act on.
type failingStore struct {
	*memStore
	failAfter int64
	keys      atomic.Int64
	failures  atomic.Int64
}

type failingFilter struct {
	Filter
	s      *failingStore
	failed error
}

func (f *failingFilter) TestAndAdd(key []byte, ts time.Time) bool {
	if f.failed != nil {
		return true
	}
	if f.s.keys.Add(1) == f.s.failAfter {
		f.s.failures.Add(1)
		f.failed = errors.New("disk gone (test)")
		return true
	}
	return f.Filter.TestAndAdd(key, ts)
}

func (f *failingFilter) TestAndAddBatch(keys [][]byte, ts []time.Time, seen []bool) {
	for i, k := range keys {
		seen[i] = f.TestAndAdd(k, ts[i])
	}
}

func (f *failingFilter) Err() error { return f.failed }

func (s *failingStore) NewFilter(p FilterParams) (Filter, error) {
	f, err := s.memStore.NewFilter(p)
	return &failingFilter{Filter: f, s: s}, err
}

func (s *failingStore) Partition(topic string, partition int) PartitionStore {
	return failingPartition{s.memStore.Partition(topic, partition), s}
}

type failingPartition struct {
	PartitionStore
	s *failingStore
}

func (p failingPartition) Restore(ctx context.Context, params FilterParams) (*Restored, error) {
	r, err := p.PartitionStore.Restore(ctx, params)
	if err == nil {
		r.Filter = &failingFilter{Filter: r.Filter, s: p.s}
	}
	return r, err
}

// TestFilterFailureRecovers: a filter that reports a failure (Err) in the
// middle of a batch has that batch's answers discarded, nothing of it
// written, and the partition recovers from its last checkpoint: the output
// is exact.
func TestFilterFailureRecovers(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1)
	evs := genEvents(2000, 1, 0.25, 7, base)
	store := &failingStore{memStore: newMemStore(), failAfter: 1200}
	cfg := testConfig(brokers)
	cfg.CheckpointInterval = 50 * time.Millisecond
	produce(t, brokers, evs[:1000])
	rw := startWorker(t, cfg, store, nil)
	waitFor(t, 60*time.Second, "first half consumed", func() bool { return rw.consumed() == 1000 })
	// A checkpoint covers the first half before the failure comes.
	waitFor(t, 10*time.Second, "a checkpoint of the first half", func() bool {
		cp, ok := store.latest(tIn, 0)
		return ok && cp.InputOffset == 1000
	})
	produce(t, brokers, evs[1000:])
	waitFor(t, 60*time.Second, "all events consumed", func() bool { return rw.consumed() == uint64(len(evs)) })
	if err := rw.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := store.failures.Load(); n != 1 {
		t.Fatalf("filter failed %d times, want once", n)
	}
	wantOut, wantDup, _ := expectation(evs, time.Hour)
	checkKeys(t, "output", readTopic(t, brokers, tOut, 1), wantOut)
	checkKeys(t, "duplicates", readTopic(t, brokers, tDup, 1), wantDup)
	rw.conservation(t)
}
