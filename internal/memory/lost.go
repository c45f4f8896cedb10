package memory

import (
	"fmt"
	"time"

	"github.com/bloomgate/bloomgate/internal/bloom"
	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// Lost generations and their rebuild (docs/checkpoints.md, "Partial
// restore").
//
// Where a generation's keys begin. A key goes into the ring's newest
// generation when its record is processed (bloom.Shard.TestAndAdd), and the
// newest generation only moves forward, with the partition's event-time
// frontier; so a generation's keys come from a contiguous run of input
// records. Each manifest records, per generation, a point of the input
// before that run (checkpoint.KeysFrom): an offset, the frontier there and
// the ring's newest generation there. The filter keeps the point of the
// last committed state (or, before the first commit of a session, where
// the session began reading), and a generation that a commit stores for
// the first time gets it: the generation did not exist there.
//
// The rebuild. From such a point, re-reading the input and filing every
// record's timestamp as the filter does (--max-time-jump clamping against
// the frontier) gives, record by record, the span index of the ring's
// newest generation: the largest index filed since the point, or the
// newest generation there if larger. A record's key went into generation
// g exactly when that index is g's. Keys are added in input order through
// the generation's own TestAndAdd, so inserts, overflow stacking and the
// bits come out as they were: a rebuilt generation is byte-identical to the
// lost one, and the filter after the rebuild and the replay equals the
// one the original run had. This holds for the same key settings, hash
// seed, isolation level and --max-time-jump as the original run, as for
// every replay.
//
// When the input no longer holds the point (log start past it), the
// rebuild starts at the log start with the point's frontier and newest
// generation, which are at or below the true ones there: the index it
// computes is never above the true one, so every retained record whose key
// went into g is added (and some that went into older generations: a
// superset of what g held among the retained records). The keys of the
// records retention removed are forgotten.

// lostGen is a generation restored empty in place of one whose stored
// state did not load, and its rebuild.
type lostGen struct {
	g    *bloom.Generation
	ref  checkpoint.GenerationRef
	span int64 // ns

	// Rebuild state (StartRebuild).
	active   bool
	exact    bool  // started at its KeysFrom: only records it held
	start    int64 // first input offset it takes
	frontier int64 // the original run's event-time frontier, as filed
	newest   int64 // span index of the newest generation; -1: none
	added    uint64
}

// emptyGeneration opens ref's generation again, empty: with its own plan
// when the manifest recorded it, else with the manifest's filter plan (or
// this worker's, if that is unusable).
func emptyGeneration(ref checkpoint.GenerationRef, m *checkpoint.Manifest, params worker.FilterParams) (*bloom.Generation, error) {
	capacity, fpr := ref.Capacity, ref.FPR
	if capacity == 0 || !(fpr > 0 && fpr < 1) {
		cfg := bloom.Config(m.Filter.Params)
		if cfg.Validate() != nil {
			cfg = bloom.Config(params)
		}
		capacity, fpr = cfg.GenerationPlan()
	}
	return bloom.NewGeneration(ref.ID, ref.Start, ref.End, capacity, fpr)
}

// until is the event time at which a generation of sh covering
// [start, end) leaves the window: a ring generation when the span G
// generations later opens, a legacy one at its end + the window.
func until(sh *bloom.Shard, start, end time.Time) time.Time {
	if end.Sub(start) == sh.Span() {
		return end.Add(time.Duration(sh.Config().Generations-1) * sh.Span())
	}
	return end.Add(sh.Config().Window)
}

// restoredLoss is what a (partial) restore lost, as the loader built it.
type restoredLoss struct {
	gens      map[int]*bloom.Generation // manifest index → the empty generation
	exactLost string                    // why the exact store was lost ("": it was not)
	exactGens map[int]uint64            // manifest index → its exact generation before the loss
}

// lostFrom lists, for the worker, the generations of m (as RestoreWith
// returned it) that the filter holds empty or without their exact store,
// and keeps the empty ones on f for the rebuild.
func (f *filter) lostFrom(m *checkpoint.Manifest, loss restoredLoss) []worker.LostGeneration {
	out, lost := f.k.lostFrom(m, loss, f.frontier)
	f.lost = append(f.lost, lost...)
	return out
}

// lostFrom is filter.lostFrom for the ring.
func (r ring) lostFrom(m *checkpoint.Manifest, loss restoredLoss, _ int64) (out []worker.LostGeneration, lost []*lostGen) {
	held := map[bloom.Span]bool{}
	for _, sp := range r.Spans(nil) {
		held[sp] = true
	}
	for i, ref := range m.Generations {
		if !held[bloom.Span{Start: ref.Start.UnixNano(), End: ref.End.UnixNano()}] {
			continue // dropped at the restore: gone from the window anyway
		}
		lg := worker.LostGeneration{ID: ref.ID, Start: ref.Start, End: ref.End, Until: until(r.Shard, ref.Start, ref.End),
			Keys: ref.Inserts, KeysFrom: -1, Checkpoint: m.Seq}
		if ref.KeysFrom != nil {
			lg.KeysFrom = ref.KeysFrom.Offset
		}
		switch g := loss.gens[i]; {
		case g != nil:
			lg.Reason = ref.Lost
			lost = append(lost, &lostGen{g: g, ref: ref, span: ref.End.Sub(ref.Start).Nanoseconds()})
		case loss.exactLost != "" && loss.exactGens[i] != 0:
			lg.ExactOnly, lg.Reason = true, "exact store: "+loss.exactLost
		default:
			continue
		}
		out = append(out, lg)
	}
	return out, lost
}

// StartRebuild begins refilling the lost generations from input offset
// from (worker.Rebuilder).
func (f *filter) StartRebuild(from int64) {
	for _, lg := range f.lost {
		kf := lg.ref.KeysFrom
		lg.active, lg.added = kf != nil, 0
		if !lg.active {
			continue
		}
		lg.start = max(kf.Offset, from)
		lg.frontier = kf.EventTime
		lg.newest = -1
		switch kf.NewestSpan {
		case lg.span:
			lg.newest = int64(kf.NewestID)
			lg.exact = kf.Offset >= from
		case 0:
			lg.exact = kf.Offset >= from
		default:
			// The ring had another plan there: no exact claim.
			lg.exact = false
		}
	}
}

// RebuildKey adds key to the lost generations that held it
// (worker.Rebuilder; see the top of this file). It returns false once the
// newest generation is past every lost one: the newest only moves forward.
func (f *filter) RebuildKey(offset int64, key []byte, ts time.Time) (more bool) {
	var h bloom.Hash
	hashed := false
	for _, lg := range f.lost {
		if !lg.active {
			continue
		}
		id := int64(lg.ref.ID)
		if offset < lg.start {
			more = true
			continue
		}
		ns, _ := fileAt(&lg.frontier, f.maxJump, ts.UnixNano())
		if idx := int64(bloom.SpanIndex(ns, lg.span)); idx > lg.newest {
			lg.newest = idx
		}
		if lg.newest == id || !lg.exact && lg.newest < id {
			if !hashed {
				h, hashed = f.seed.Hash(key), true
			}
			lg.g.TestAndAdd(h)
			lg.added++
		}
		more = more || lg.newest <= id
	}
	return more
}

// FinishRebuild ends the rebuild and returns the keys added back
// (worker.Rebuilder).
func (f *filter) FinishRebuild() uint64 {
	var n uint64
	for _, lg := range f.lost {
		n += lg.added
	}
	f.inserts += n
	f.lost = nil
	return n
}

// ReadingFrom records where the session's keys come from
// (worker.InputTracker): generations opened before the next commit hold
// keys of input records from offset on, unless foreign keys come first.
func (f *filter) ReadingFrom(offset int64, foreign bool) {
	f.committed.Store(nil)
	if foreign || offset < 0 {
		f.from = nil
		return
	}
	f.from = f.k.keysFrom(offset, f.frontier)
}

// position is the input point at offset with the filter's frontier and
// the ring's newest generation of sh.
func position(offset, frontier int64, sh interface {
	Newest() (bloom.Span, uint64, bool)
}) *checkpoint.KeysFrom {
	kf := &checkpoint.KeysFrom{Offset: offset, EventTime: frontier}
	if sp, id, ok := sh.Newest(); ok {
		kf.NewestID, kf.NewestSpan = id, sp.End-sp.Start
	}
	return kf
}

// snapshotNewest is the ring's newest generation of a snapshot (legacy
// generations first, then the ring oldest first).
type snapshotNewest struct{ sn *bloom.Snapshot }

func (s snapshotNewest) Newest() (bloom.Span, uint64, bool) {
	gens := s.sn.Generations
	if n := len(gens); n > 0 && !gens[n-1].Stats.Legacy {
		g := gens[n-1]
		return bloom.Span{Start: g.Stats.Start.UnixNano(), End: g.Stats.End.UnixNano()}, g.ID, true
	}
	return bloom.Span{}, 0, false
}

// fileAt files an event time ns against the frontier: at most maxJump past
// it (≤ 0: unbounded), and moves the frontier; clamped reports whether ns
// was lowered. The one rule for processing and for rebuilds.
func fileAt(frontier *int64, maxJump time.Duration, ns int64) (_ int64, clamped bool) {
	if maxJump > 0 && *frontier != 0 && ns-*frontier > int64(maxJump) {
		ns, clamped = *frontier+int64(maxJump), true
	}
	if ns > *frontier {
		*frontier = ns
	}
	return ns, clamped
}

// describe names a lost generation for errors.
func describe(ref checkpoint.GenerationRef) string {
	return fmt.Sprintf("generation %d [%s, %s)", ref.ID, ref.Start.Format(time.RFC3339), ref.End.Format(time.RFC3339))
}

// lostFrom is filter.lostFrom for the fingerprint kind, whose tables restore
// whole or not at all: only a lost exact store is reported, per table
// whose generations it had verified. Their positives are unverified until
// the table's newest generation leaves the window: (G−1) spans after its
// end at the latest (a legacy table's leave earlier, at their end + the
// window).
func (t tables) lostFrom(m *checkpoint.Manifest, loss restoredLoss, frontier int64) (out []worker.LostGeneration, _ []*lostGen) {
	if loss.exactLost == "" {
		return nil, nil
	}
	stay := time.Duration(t.Config().Generations-1) * t.Span()
	for i, ref := range m.Generations {
		if loss.exactGens[i] == 0 || !ref.End.Add(stay).After(time.Unix(0, frontier)) {
			continue
		}
		out = append(out, worker.LostGeneration{ID: ref.ID, Start: ref.Start, End: ref.End, Until: ref.End.Add(stay),
			Keys: ref.Inserts, KeysFrom: -1, Checkpoint: m.Seq, ExactOnly: true, Reason: "exact store: " + loss.exactLost})
	}
	return out, nil
}
