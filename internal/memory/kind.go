package memory

import (
	"time"

	"github.com/bloomgate/bloomgate/internal/bloom"
	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// kind is a filter of one kind as the memory uses it: the ring (ring, a
// bloom.Shard), the fingerprint filter (tables, a bloom.FingerprintShard:
// fingerprint.go), or exact mode's wrapper around either (exactKind,
// exact.go). A filter holds one and never asks which.
type kind interface {
	// generations files hashes (TestAndAdd, TestAndAddBatch) and is what
	// exact mode reads of the filter's generations.
	generations
	// stats is the filter's worker.FilterStats, but for what the memory
	// counts itself (ClampedTimestamps).
	stats() worker.FilterStats
	// snapshot freezes the filter (copy-on-write); exact mode's wrapper
	// also cuts its store at the same record (nil: exact mode is off).
	snapshot() (kindSnapshot, *exactSnapshot)
	// legacy reports the generations (tables) of another plan the filter
	// still holds, the end of the last one, and what they are.
	legacy() (n int, last time.Time, what string)
	// lostFrom lists, for the worker, the generations of m (as
	// RestoreWith returned it) that the filter holds empty or without
	// their exact store, and the empty ones to rebuild (lost.go).
	lostFrom(m *checkpoint.Manifest, loss restoredLoss, frontier int64) ([]worker.LostGeneration, []*lostGen)
	// keysFrom is the input point at offset, with the filter's frontier
	// and its newest generation; nil: the kind does not track where its
	// generations' keys come from.
	keysFrom(offset, frontier int64) *checkpoint.KeysFrom
}

// kindSnapshot is a kind's frozen state, as a commit stores it.
type kindSnapshot interface {
	Release()
	// stored is what a commit stores of the snapshot: one entry per
	// generation (table), with the exact store's generations of ex (nil:
	// exact mode is off).
	stored(ex *exactSnapshot) []checkpoint.Generation
	// committed records what manifest m, written from stored, holds: the
	// journals may drop it, and the next log of each generation (table)
	// continues its chain there.
	committed(m *checkpoint.Manifest)
	// keysFrom is kind.keysFrom at the snapshot.
	keysFrom(offset, frontier int64) *checkpoint.KeysFrom
}

// ring is the ring kind: a rotating bloom.Shard, checkpointed as one
// object per generation (plus log segments of the live one).
type ring struct{ *bloom.Shard }

func (r ring) stats() worker.FilterStats {
	st := r.Stats()
	fs := worker.FilterStats{Bytes: st.Bytes, EstFPR: st.EstFPR, EstKeys: st.EstKeys,
		Generations: len(st.Generations), OverflowStacks: st.Stacks}
	if n := len(st.Generations); n > 0 {
		fs.Fill = st.Generations[n-1].Fill
	}
	return fs
}

func (r ring) snapshot() (kindSnapshot, *exactSnapshot) { return ringSnapshot{r.Snapshot()}, nil }

func (r ring) legacy() (n int, last time.Time, what string) {
	st := r.Stats()
	for _, g := range st.Generations {
		if g.Legacy && g.End.After(last) {
			last = g.End
		}
	}
	return st.Legacy, last, "generations"
}

func (r ring) keysFrom(offset, frontier int64) *checkpoint.KeysFrom {
	return position(offset, frontier, r.Shard)
}

// ringSnapshot is a ring's snapshot.
type ringSnapshot struct{ *bloom.Snapshot }

func (sn ringSnapshot) stored(ex *exactSnapshot) []checkpoint.Generation {
	gens := make([]checkpoint.Generation, 0, len(sn.Generations))
	for _, g := range sn.Generations {
		cg := checkpoint.Generation{
			ID: g.ID, Sealed: g.Sealed, Start: g.Stats.Start, End: g.Stats.End,
			Inserts: g.Stats.Inserts, EstKeys: g.Stats.EstKeys, Fill: g.Stats.Fill, EstFPR: g.Stats.EstFPR,
			Stacks: g.Stats.Stacks, Capacity: g.Stats.Capacity, FPR: g.Stats.FPR, Source: g,
		}
		// What the generation added since the state its journal was
		// marked with (the last commit, or the restored chain).
		if mark, ok := g.JournalMark(); ok && !g.Sealed {
			if seg, ok := g.LogSince(mark.Pos); ok {
				cg.Log = &checkpoint.GenerationLog{After: mark.Token, Entries: int64(len(seg.Entries)), Source: seg}
			}
		}
		if ex != nil {
			cg.ExactGen = ex.ids[bloom.Span{Start: g.Stats.Start.UnixNano(), End: g.Stats.End.UnixNano()}]
		}
		gens = append(gens, cg)
	}
	return gens
}

func (sn ringSnapshot) committed(m *checkpoint.Manifest) {
	for i, g := range sn.Generations {
		g.Mark(m.Generations[i].Tail())
	}
}

func (sn ringSnapshot) keysFrom(offset, frontier int64) *checkpoint.KeysFrom {
	return position(offset, frontier, snapshotNewest{sn.Snapshot})
}
