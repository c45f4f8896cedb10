package bloom

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/bloomgate/bloomgate/internal/filterplan"
)

// Config plans one shard (one Kafka partition's filter): the settings the
// worker plans a partition with (filterplan.Params, so that a conversion
// Config(p) is all it takes), Capacity being this shard's expected distinct
// keys per window and FPR the target rate of the whole shard.
//
// The ranges of the fields, and the words of a value outside them, are
// filterplan's, shared with the settings of `bloomgate run` and the worker.
type Config filterplan.Params

// checkRanges returns every field outside its range (Params.Check),
// joined, or nil.
func (c Config) checkRanges() error {
	problems := filterplan.Params(c).Check()
	if len(problems) == 0 {
		return nil
	}
	errs := make([]error, len(problems))
	for i, p := range problems {
		errs[i] = p
	}
	return fmt.Errorf("invalid filter config: %w", errors.Join(errs...))
}

// Validate checks the parameters and that the planned bitsets fit the size
// limit; errors name the field and the accepted range.
func (c Config) Validate() error {
	if err := c.checkRanges(); err != nil {
		return err
	}
	p := c.plan()
	if p.err != nil {
		return fmt.Errorf("invalid filter config: capacity %d, fpr %v: %w", c.Capacity, c.FPR, p.err)
	}
	if total := float64(p.nblocks) * blockBits / 8 * float64(c.Generations); total > MaxFilterBytes {
		return fmt.Errorf("invalid filter config: capacity %d at fpr %v needs %.1f GiB for %d generations, limit %d GiB: lower capacity or raise fpr: %w",
			c.Capacity, c.FPR, total/(1<<30), c.Generations, MaxFilterBytes>>30, ErrTooLarge)
	}
	return nil
}

// plan is the derived sizing of a shard's generations.
type plan struct {
	span     int64   // nanoseconds, ⌈W/(G−1)⌉
	capacity uint64  // planned keys per generation, ⌈Capacity/(G−1)⌉
	fpr      float64 // rate budget per generation: 1−(1−p)^(1/G)
	k        int     // probes of a generation's first sub-filter
	nblocks  uint64  // blocks of a generation's first sub-filter
	err      error
}

// plan derives the generation sizing. A window spans G−1 generations, so a
// generation plans for Capacity/(G−1) keys; a lookup checks G generations,
// so each gets the rate r with 1−(1−r)^G = FPR.
func (c Config) plan() plan {
	g := int64(c.Generations - 1)
	p := plan{
		span:     (int64(c.Window) + g - 1) / g,
		capacity: (c.Capacity + uint64(g) - 1) / uint64(g),
		fpr:      -math.Expm1(math.Log1p(-c.FPR) / float64(c.Generations)),
	}
	p.k, p.nblocks, p.err = filterParams(p.capacity, subRate(p.fpr, 0))
	return p
}

// Shard is a ring of at most G generations over event time. Generation IDs
// are span indexes since the Unix epoch, so rotation depends only on the
// timestamps passed in. A Shard belongs to one goroutine.
//
// Beside the ring, a shard restored under a plan with another span (window
// or generation count changed) holds the restored generations as legacy
// generations: sealed, checked by every lookup, never inserted into, each
// dropped once event time reaches its End + Window (the new window). See
// RestoreShard.
type Shard struct {
	cfg  Config
	plan plan
	gens []*Generation // oldest first; IDs strictly increasing

	legacy []*Generation // earlier plans' generations, by End ascending
	// legacyUntil is the event time (Unix ns) at which legacy[0] leaves the
	// window; math.MaxInt64 while there is none.
	legacyUntil int64

	journal *journalPlan // nil: generations keep no journal (EnableJournal)
}

// NewShard returns an empty shard; the first TestAndAdd opens a generation.
func NewShard(cfg Config) (*Shard, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := cfg.plan()
	// Size the first overflow sub-filter now (memoized), so that the insert
	// that stacks it does not pay for the search.
	_, _, _ = blockedParams(subRate(p.fpr, 1))
	return &Shard{cfg: cfg, plan: p, legacyUntil: math.MaxInt64}, nil
}

// Config returns the shard's configuration.
func (s *Shard) Config() Config { return s.cfg }

// Span is the event time covered by one generation.
func (s *Shard) Span() time.Duration { return time.Duration(s.plan.span) }

// spanIndex maps an event time (Unix ns) to its span; times before the Unix
// epoch map to span 0.
func (s *Shard) spanIndex(ns int64) uint64 { return SpanIndex(ns, s.plan.span) }

// TestAndAdd reports whether h was seen in any generation, and records it in
// the newest one. A timestamp in a later span than the newest generation
// rotates the ring first: a generation opens for that span and every
// generation with ID ≤ new−G is dropped (all of them after a gap ≥ G spans).
// A timestamp in the newest or an earlier span (late event) rotates nothing.
// A timestamp at or past a legacy generation's End + Window drops it.
//
// A key found only in an older (or legacy) generation is added to the
// newest as well, so a key is remembered for at least W after its latest
// sighting, not its first.
func (s *Shard) TestAndAdd(h Hash, ts time.Time) (seen bool) {
	ns := ts.UnixNano()
	if ns >= s.legacyUntil {
		s.expireLegacy(ns)
	}
	if idx, n := s.spanIndex(ns), len(s.gens); n == 0 || idx > s.gens[n-1].id {
		s.rotate(idx)
	}
	n := len(s.gens)
	for _, g := range s.gens[:n-1] {
		if g.test(h) {
			seen = true
			break
		}
	}
	if !seen {
		for _, g := range s.legacy {
			if g.test(h) {
				seen = true
				break
			}
		}
	}
	return s.gens[n-1].testAndAdd(h) || seen
}

// TestAndAddBatch calls TestAndAdd(hs[i], ts[i]) for each i in order and
// stores the results in seen; ts and seen must be at least as long as hs.
// Results and state, rotation included, are exactly those of the calls one
// by one; the blocks of a chunk of keys in every generation are prefetched
// first so that their cache misses overlap (see Filter.TestAndAddBatch).
func (s *Shard) TestAndAddBatch(hs []Hash, ts []time.Time, seen []bool) {
	ts, seen = ts[:len(hs)], seen[:len(hs)]
	for lo := 0; lo < len(hs); lo += batchChunk {
		hi := min(lo+batchChunk, len(hs))
		for _, gs := range [2][]*Generation{s.gens, s.legacy} {
			for _, g := range gs {
				for _, f := range g.subs {
					f.touch(hs[lo:hi])
				}
			}
		}
		for i := lo; i < hi; i++ {
			seen[i] = s.TestAndAdd(hs[i], ts[i])
		}
	}
}

// Test reports whether h was seen in any generation; it changes nothing.
func (s *Shard) Test(h Hash) bool {
	for _, gs := range [2][]*Generation{s.gens, s.legacy} {
		for _, g := range gs {
			if g.test(h) {
				return true
			}
		}
	}
	return false
}

// Advance rotates the ring and drops legacy generations as TestAndAdd with
// timestamp ts would, without adding a key (for idle partitions whose event
// time moves on).
func (s *Shard) Advance(ts time.Time) { s.advance(ts.UnixNano()) }

func (s *Shard) advance(ns int64) {
	if ns >= s.legacyUntil {
		s.expireLegacy(ns)
	}
	idx := s.spanIndex(ns)
	if n := len(s.gens); n == 0 || idx > s.gens[n-1].id {
		s.rotate(idx)
	}
}

// expireLegacy drops the legacy generations whose End + Window ≤ now.
func (s *Shard) expireLegacy(now int64) {
	keep := 0
	for keep < len(s.legacy) && addSat(s.legacy[keep].end, int64(s.cfg.Window)) <= now {
		s.legacy[keep] = nil
		keep++
	}
	s.legacy = s.legacy[keep:]
	s.legacyUntil = math.MaxInt64
	if len(s.legacy) > 0 {
		s.legacyUntil = addSat(s.legacy[0].end, int64(s.cfg.Window))
	} else {
		s.legacy = nil
	}
}

// addSat is a + b for b ≥ 0, saturating at math.MaxInt64.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func (s *Shard) rotate(idx uint64) {
	keep := 0
	if g := uint64(s.cfg.Generations); idx >= g {
		keep = slices.IndexFunc(s.gens, func(gen *Generation) bool { return gen.id > idx-g })
		if keep < 0 {
			keep = len(s.gens)
		}
	}
	for i := range keep {
		s.gens[i] = nil
	}
	s.gens = append(s.gens[:0], s.gens[keep:]...)
	if n := len(s.gens); n > 0 {
		// Sealed from now on: it is stored whole once more, never logged.
		s.gens[n-1].j = nil
	}
	start := int64(idx) * s.plan.span
	f := newFilter(s.plan.capacity, subRate(s.plan.fpr, 0), s.plan.k, s.plan.nblocks)
	g := newGeneration(idx, start, start+s.plan.span, s.plan.capacity, s.plan.fpr, f)
	if s.journal != nil {
		g.startJournal(s.journal)
	}
	s.gens = append(s.gens, g)
}

// ShardStats describes a shard: per generation (legacy generations first,
// then the ring, oldest first) and totals.
type ShardStats struct {
	Generations []GenerationStats
	Legacy      int // generations of an earlier plan still answering lookups
	Inserts     uint64
	EstKeys     uint64
	Bytes       uint64
	Stacks      int     // overflow sub-filters over all generations
	EstFPR      float64 // estimated rate of a lookup over all generations
}

// Stats computes the shard's statistics; cost O(generations × sub-filters).
func (s *Shard) Stats() ShardStats {
	st := ShardStats{Generations: make([]GenerationStats, 0, len(s.legacy)+len(s.gens)), Legacy: len(s.legacy)}
	pass := 1.0
	for i, gens := range [2][]*Generation{s.legacy, s.gens} {
		for _, g := range gens {
			gs := g.Stats()
			gs.Legacy = i == 0
			st.Generations = append(st.Generations, gs)
			st.Inserts += gs.Inserts
			st.EstKeys += gs.EstKeys
			st.Bytes += gs.Bytes
			st.Stacks += gs.Stacks
			pass *= 1 - gs.EstFPR
		}
	}
	st.EstFPR = 1 - pass
	return st
}

// RestoreShard rebuilds a shard from decoded generations (any order); the
// shard takes ownership of them.
//
// A generation whose span is the span of cfg joins the ring; its own
// capacity and rate are kept (a capacity or rate change applies to the
// generations opened from then on), and if it is the newest it keeps
// receiving inserts. Any other generation was written under a plan with
// another window or generation count: it becomes a legacy generation,
// sealed — the newest generation of that plan included — and answering
// lookups until event time reaches its End + cfg.Window. The first
// timestamp after the restore opens the ring's generation for its span.
//
// Generations the shard would already have dropped are ignored: ring
// generations with ID ≤ newest − G, and legacy generations whose End +
// Window is at or before the newest ring generation's Start.
//
// The result depends only on the generations and cfg, so restoring the
// same checkpoint under the same settings twice gives the same shard (and
// replay after it the same answers).
func RestoreShard(cfg Config, gens []*Generation) (*Shard, error) {
	s, err := NewShard(cfg)
	if err != nil {
		return nil, err
	}
	if slices.Contains(gens, nil) {
		return nil, errors.New("restoring shard: nil generation")
	}
	var ring, legacy []*Generation
	for _, g := range gens {
		if g.end-g.start == s.plan.span {
			ring = append(ring, g) // the decoder checked start = id·span
		} else {
			legacy = append(legacy, g)
		}
	}
	slices.SortFunc(ring, func(a, b *Generation) int { return cmp.Compare(a.id, b.id) })
	for i := 1; i < len(ring); i++ {
		if ring[i-1].id == ring[i].id {
			return nil, fmt.Errorf("restoring shard: generation %d given twice", ring[i].id)
		}
	}
	slices.SortFunc(legacy, func(a, b *Generation) int {
		return cmp.Or(cmp.Compare(a.end, b.end), cmp.Compare(a.start, b.start))
	})
	for i := 1; i < len(legacy); i++ {
		if a, b := legacy[i-1], legacy[i]; a.start == b.start && a.end == b.end {
			return nil, fmt.Errorf("restoring shard: generation %d [%s, %s) given twice",
				b.id, b.Start().Format(time.RFC3339Nano), b.End().Format(time.RFC3339Nano))
		}
	}
	if n := len(ring); n > 0 {
		newest := ring[n-1]
		for len(ring) > 0 && newest.id >= uint64(cfg.Generations) && ring[0].id <= newest.id-uint64(cfg.Generations) {
			ring = ring[1:]
		}
		for len(legacy) > 0 && addSat(legacy[0].end, int64(cfg.Window)) <= newest.start {
			legacy = legacy[1:]
		}
	}
	s.gens = ring
	if len(legacy) > 0 {
		s.legacy = legacy
		s.legacyUntil = addSat(legacy[0].end, int64(cfg.Window))
	}
	return s, nil
}
