package bloom

import (
	"io"
	"sync"
)

// Snapshot is a consistent, copy-on-write view of a shard. Taking it costs
// O(pages) pointer copies; no bit is copied. It may be encoded from any
// goroutine while the owner keeps inserting: the owner clones a page before
// its first write to it after the snapshot. Release it when done, so the
// owner stops cloning.
type Snapshot struct {
	Config      Config
	Generations []*GenerationSnapshot // legacy first, then the ring oldest first
	once        sync.Once
}

// GenerationSnapshot is one generation frozen at snapshot time.
type GenerationSnapshot struct {
	ID      uint64
	Sealed  bool // rotated out of the newest position: never changes again
	Stats   GenerationStats
	meta    genMeta
	views   []filterView
	journal journalView // zero: no journal
}

// genMeta is what the format records about a generation beside its bits.
type genMeta struct {
	id         uint64
	start, end int64
	capacity   uint64
	fpr        float64
	inserts    uint64
	saturated  bool
	subInserts []uint64
}

// Snapshot freezes the shard: legacy generations first (sealed), then the
// ring, oldest first. Only the owning goroutine may call it.
func (s *Shard) Snapshot() *Snapshot {
	sn := &Snapshot{Config: s.cfg, Generations: make([]*GenerationSnapshot, 0, len(s.legacy)+len(s.gens))}
	for _, g := range s.legacy {
		gs := g.snapshot(true)
		gs.Stats.Legacy = true
		sn.Generations = append(sn.Generations, gs)
	}
	for i, g := range s.gens {
		sn.Generations = append(sn.Generations, g.snapshot(i < len(s.gens)-1))
	}
	return sn
}

func (g *Generation) snapshot(sealed bool) *GenerationSnapshot {
	gs := &GenerationSnapshot{ID: g.id, Sealed: sealed, Stats: g.Stats(), meta: g.meta(), views: make([]filterView, len(g.subs))}
	for i, f := range g.subs {
		gs.views[i] = f.snapshot()
	}
	if g.j != nil {
		gs.journal = g.j.view()
	}
	return gs
}

func (g *Generation) meta() genMeta {
	return genMeta{
		id: g.id, start: g.start, end: g.end, capacity: g.capacity, fpr: g.fpr,
		inserts: g.inserts, saturated: g.saturated, subInserts: append([]uint64(nil), g.subInserts...),
	}
}

// Release lets the owner write in place again. Safe to call more than once
// and from any goroutine; the snapshot must not be encoded afterwards.
func (sn *Snapshot) Release() {
	sn.once.Do(func() {
		for _, g := range sn.Generations {
			for i := range g.views {
				g.views[i].release()
			}
		}
	})
}

// WriteTo encodes the generation in binary format v1 (see format.go).
func (g *GenerationSnapshot) WriteTo(w io.Writer) (int64, error) {
	return encodeGeneration(w, &g.meta, g.views)
}
