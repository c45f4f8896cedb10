package worker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
)

// exactFilter is an exact, map-based filter with the window semantics of a
// rotating shard: a key is seen while ts < last insert + window.
type exactFilter struct {
	window time.Duration
	last   map[string]time.Time
}

func (f *exactFilter) TestAndAdd(key []byte, ts time.Time) bool {
	k := string(key)
	prev, ok := f.last[k]
	seen := ok && ts.Sub(prev) < f.window
	if !ok || ts.After(prev) {
		f.last[k] = ts
	}
	return seen
}

func (f *exactFilter) TestAndAddBatch(keys [][]byte, ts []time.Time, seen []bool) {
	for i, k := range keys {
		seen[i] = f.TestAndAdd(k, ts[i])
	}
}

func (f *exactFilter) Stats() FilterStats {
	return FilterStats{Bytes: uint64(len(f.last) * 50), EstKeys: uint64(len(f.last)), Generations: 1}
}

type exactSnapshot struct{ last map[string]time.Time }

func (*exactSnapshot) Release() {}

func (f *exactFilter) Snapshot() Snapshot { return &exactSnapshot{last: maps.Clone(f.last)} }

// memStore keeps checkpoints in memory with manifest-sequence fencing like
// internal/checkpoint.
type memStore struct {
	mu         sync.Mutex
	parts      map[string]*memHistory
	failCommit atomic.Bool
	hangCommit atomic.Bool // Commit blocks until its ctx ends
	// failed and hung count the Commit calls refused (failCommit) and
	// held (hangCommit).
	failed, hung atomic.Int64
	unusable     atomic.Bool // Restore reports ErrNoUsableCheckpoint
	commits      atomic.Int64
	// legacy, while set, marks committed checkpoints as written by a build
	// from before provenance headers (Restored.LegacyProvenance).
	legacy atomic.Bool
}

type memHistory struct {
	seq    int
	cps    []Checkpoint // snapshots are *exactSnapshot
	legacy []bool       // per checkpoint: memStore.legacy when committed
}

func newMemStore() *memStore { return &memStore{parts: map[string]*memHistory{}} }

func (s *memStore) NewFilter(p FilterParams) (Filter, error) {
	return &exactFilter{window: p.Window, last: map[string]time.Time{}}, nil
}

func (s *memStore) Partition(topic string, partition int) PartitionStore {
	return &memPartition{s: s, key: fmt.Sprintf("%s/%d", topic, partition)}
}

func (s *memStore) latest(topic string, partition int) (Checkpoint, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.parts[fmt.Sprintf("%s/%d", topic, partition)]
	if h == nil || len(h.cps) == 0 {
		return Checkpoint{}, false
	}
	return h.cps[len(h.cps)-1], true
}

type memPartition struct {
	s   *memStore
	key string
	seq int
}

func (p *memPartition) hist() *memHistory {
	h := p.s.parts[p.key]
	if h == nil {
		h = &memHistory{}
		p.s.parts[p.key] = h
	}
	return h
}

func (p *memPartition) Restore(ctx context.Context, params FilterParams) (*Restored, error) {
	if p.s.unusable.Load() {
		return nil, fmt.Errorf("every manifest corrupt: %w", ErrNoUsableCheckpoint)
	}
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	h := p.hist()
	p.seq = h.seq
	if len(h.cps) == 0 {
		return nil, ErrNoCheckpoint
	}
	cp := h.cps[len(h.cps)-1]
	out := map[string]map[int]int64{}
	for t, m := range cp.OutputOffsets {
		out[t] = maps.Clone(m)
	}
	return &Restored{
		Filter:           &exactFilter{window: params.Window, last: maps.Clone(cp.Snapshot.(*exactSnapshot).last)},
		InputOffset:      cp.InputOffset,
		OutputOffsets:    out,
		Seed:             cp.Seed,
		SeedingUntil:     cp.SeedingUntil,
		LegacyProvenance: len(h.legacy) == len(h.cps) && h.legacy[len(h.cps)-1],
		LegacyBefore:     cp.LegacyBefore,
		Mark:             cp.Mark,
	}, nil
}

func (p *memPartition) Claim(ctx context.Context, owner string) error {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	h := p.hist()
	if h.seq != p.seq {
		return ErrFenced
	}
	h.seq++
	p.seq = h.seq
	return nil
}

func (p *memPartition) Commit(ctx context.Context, cp Checkpoint) error {
	if p.s.failCommit.Load() {
		p.s.failed.Add(1)
		return errors.New("bucket unavailable")
	}
	if p.s.hangCommit.Load() {
		p.s.hung.Add(1)
		<-ctx.Done()
		return ctx.Err()
	}
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	h := p.hist()
	if h.seq != p.seq {
		return fmt.Errorf("committing %s: %w", p.key, ErrFenced)
	}
	h.seq++
	p.seq = h.seq
	h.cps = append(h.cps, cp)
	h.legacy = append(h.legacy, p.s.legacy.Load())
	p.s.commits.Add(1)
	return nil
}

// keyExtractor uses the Kafka message key; "bad" values simulate malformed
// events.
type keyExtractor struct{}

func (keyExtractor) Extract(dst []byte, key, value []byte, _ []kafka.Header) ([]byte, error) {
	switch {
	case key == nil:
		return dst, &KeyError{Reason: "null_key"}
	case len(key) == 0:
		return dst, &KeyError{Reason: "empty"}
	case string(value) == "malformed":
		return dst, &KeyError{Reason: "malformed_json"}
	}
	return append(dst, key...), nil
}

// planningStore is a memStore that refuses filters of more than limit keys
// per partition (a Planner, as the production store is).
type planningStore struct {
	*memStore
	limit uint64
}

func (s planningStore) PlannedBytes(p FilterParams) uint64 { return p.Capacity }

func (s planningStore) CheckParams(p FilterParams) error {
	if p.Capacity > s.limit {
		return fmt.Errorf("a filter of %d keys; this store's limit is %d", p.Capacity, s.limit)
	}
	return nil
}
