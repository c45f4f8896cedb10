package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/bloomgate/bloomgate/internal/bloom"
	"github.com/bloomgate/bloomgate/internal/checkpoint"
)

// BloomState is the production StateStore: bloom shards, checkpointed as
// generation objects plus manifests in a checkpoint.Store.
type BloomState struct {
	store *checkpoint.Store
	group string
	// MaxGenerationBytes caps one decoded generation (≤ 0: bloom's limit).
	MaxGenerationBytes int64
}

// NewBloomState checkpoints the partitions of group in store.
func NewBloomState(store *checkpoint.Store, group string) *BloomState {
	return &BloomState{store: store, group: group}
}

func bloomConfig(p FilterParams) bloom.Config {
	return bloom.Config{Window: p.Window, Generations: p.Generations, Capacity: p.Capacity, FPR: p.FPR}
}

// NewFilter returns an empty shard.
func (s *BloomState) NewFilter(p FilterParams) (Filter, error) {
	sh, err := bloom.NewShard(bloomConfig(p))
	if err != nil {
		return nil, fmt.Errorf("creating filter: %w", err)
	}
	return &bloomFilter{s: sh}, nil
}

// Partition returns a checkpoint handle of one input partition.
func (s *BloomState) Partition(topic string, partition int) PartitionStore {
	return &bloomPartition{s: s, p: s.store.Partition(s.group, topic, partition)}
}

type bloomFilter struct{ s *bloom.Shard }

func (f *bloomFilter) TestAndAdd(key []byte, ts time.Time) bool {
	return f.s.TestAndAdd(bloom.HashKey(key), ts)
}

func (f *bloomFilter) Stats() FilterStats {
	st := f.s.Stats()
	fs := FilterStats{Bytes: st.Bytes, EstFPR: st.EstFPR, EstKeys: st.EstKeys,
		Generations: len(st.Generations), OverflowStacks: st.Stacks}
	if n := len(st.Generations); n > 0 {
		fs.Fill = st.Generations[n-1].Fill
	}
	return fs
}

func (f *bloomFilter) Snapshot() Snapshot { return &bloomSnapshot{f.s.Snapshot()} }

type bloomSnapshot struct{ sn *bloom.Snapshot }

func (b *bloomSnapshot) Release() { b.sn.Release() }

type bloomPartition struct {
	s *BloomState
	p *checkpoint.Partition
}

// storeErr maps checkpoint sentinels to the worker's.
func storeErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, checkpoint.ErrFenced):
		return fmt.Errorf("%w: %w", ErrFenced, err)
	case errors.Is(err, checkpoint.ErrNoUsableCheckpoint):
		return fmt.Errorf("%w: %w", ErrNoUsableCheckpoint, err)
	case errors.Is(err, checkpoint.ErrNoCheckpoint):
		return fmt.Errorf("%w: %w", ErrNoCheckpoint, err)
	}
	return err
}

func (b *bloomPartition) Restore(ctx context.Context, params FilterParams) (*Restored, error) {
	var shard *bloom.Shard
	m, err := b.p.Restore(ctx, func(m *checkpoint.Manifest, open func(context.Context, checkpoint.GenerationRef) (io.ReadCloser, error)) error {
		gens := make([]*bloom.Generation, 0, len(m.Generations))
		for _, ref := range m.Generations {
			rc, err := open(ctx, ref)
			if err != nil {
				return fmt.Errorf("opening generation %d: %w", ref.ID, err)
			}
			g, err := bloom.DecodeGeneration(rc, b.s.MaxGenerationBytes)
			cerr := rc.Close()
			if err != nil {
				return fmt.Errorf("decoding generation %d: %w", ref.ID, err)
			}
			if cerr != nil {
				return fmt.Errorf("verifying generation %d: %w", ref.ID, cerr)
			}
			gens = append(gens, g)
		}
		sh, err := bloom.RestoreShard(bloomConfig(params), gens)
		if err != nil {
			return err
		}
		shard = sh
		return nil
	})
	if err != nil {
		return nil, storeErr(err)
	}
	return &Restored{Filter: &bloomFilter{s: shard}, InputOffset: m.InputOffset, OutputOffsets: m.OutputOffsets}, nil
}

func (b *bloomPartition) Claim(ctx context.Context, owner string) error {
	return storeErr(b.p.Claim(ctx, owner))
}

func (b *bloomPartition) Commit(ctx context.Context, cp Checkpoint) error {
	sn, ok := cp.Snapshot.(*bloomSnapshot)
	if !ok {
		return fmt.Errorf("committing checkpoint: snapshot of type %T is not from this store", cp.Snapshot)
	}
	gens := make([]checkpoint.Generation, 0, len(sn.sn.Generations))
	for _, g := range sn.sn.Generations {
		gens = append(gens, checkpoint.Generation{
			ID: g.ID, Sealed: g.Sealed, Start: g.Stats.Start, End: g.Stats.End,
			Inserts: g.Stats.Inserts, EstKeys: g.Stats.EstKeys, Fill: g.Stats.Fill, EstFPR: g.Stats.EstFPR,
			Stacks: g.Stats.Stacks, Source: g,
		})
	}
	_, err := b.p.Commit(ctx, checkpoint.Checkpoint{
		InputOffset:   cp.InputOffset,
		OutputOffsets: cp.OutputOffsets,
		Filter:        checkpoint.FilterParams{Window: cp.Params.Window, Generations: cp.Params.Generations, Capacity: cp.Params.Capacity, FPR: cp.Params.FPR},
		Generations:   gens,
		Owner:         cp.Owner,
	})
	return storeErr(err)
}
