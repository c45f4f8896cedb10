package bloom

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"time"
)

// The fingerprint kind (FingerprintShard): one quotient table (qtable.go)
// holds the whole window. Each entry is a key's remainder and an age tag,
// the generation it was added in modulo 2^a, a = ⌈log2 G⌉ (at most 6 bits,
// G being at most filterplan.MaxGenerations, 64). Generations span
// ⌈W/(G−1)⌉ of event time, as in the ring, and the window's keys are
// those of the last G generations; at each generation change the table
// drops the entries of the generations that left (one pass over it), so
// that their tags can be reused. The false-positive budget is paid once,
// by the remainder bits, instead of split over G filters: about
// (r + a + 2.3) / α bits per stored entry at peak load α, × G/(G−1) for
// the generation that is leaving (docs/filter.md, "The fingerprint kind").
//
// A table that reaches its capacity (more keys than planned) is closed:
// it stays, unchanged, answering for the generations it holds until they
// leave, and a table of the next level — twice the capacity, with
// remainders long enough for a tighter share of the rate — takes the
// inserts. The shares sum to at most the target rate. At a generation
// change a table of the next level gives way to a table of the plan again
// once the plan's table is gone and the last generation fitted the plan.

const (
	tableAlphaMax  = 0.95 // peak load of every table
	tableShare     = 0.95 // share of the rate a plan's own table takes at peak
	maxTableLevels = 32
)

// tableSize is the sizing of one table.
type tableSize struct {
	r        uint    // remainder bits
	nblocks  uint64  // blocks of 56 home slots
	capacity uint64  // entries it takes before it closes: ⌊α·slots⌋ (a sealed table's: G−1 full sealed generations and a full live table)
	fpr      float64 // its false-positive rate at capacity: α·2^−r
	level    int
	// nq is the quotients of a sealed table's set (sealed.go): the table
	// is then a live table of the newest generation (nblocks) beside a
	// static set of the sealed ones. 0: one table of tagged entries.
	nq uint64
}

// fpPlan is the derived sizing of a fingerprint shard.
type fpPlan struct {
	span   int64  // nanoseconds, ⌈W/(G−1)⌉
	gens   int    // G
	a      uint   // tag bits: ⌈log2 G⌉
	perGen uint64 // planned keys per generation, ⌈Capacity/(G−1)⌉
	fpr    float64
	level0 tableSize
	err    error
}

func tagBits(gens int) uint { return uint(bits.Len(uint(gens - 1))) }

// fingerprintPlan sizes the shard's tables. The plan's own table holds G
// generations of Capacity/(G−1) keys at its peak load α; its remainder r
// and α are the pair with the fewest bits per entry, (r + a + 128/56)/α,
// whose rate α·2^−r stays within tableShare of the target.
func (c Config) fingerprintPlan() fpPlan {
	g := int64(c.Generations - 1)
	p := fpPlan{
		span:   (int64(c.Window) + g - 1) / g,
		gens:   c.Generations,
		a:      tagBits(c.Generations),
		perGen: (c.Capacity + uint64(g) - 1) / uint64(g),
		fpr:    c.FPR,
	}
	peak := float64(p.perGen) * float64(p.gens)
	best := math.Inf(1)
	for r := uint(1); r+p.a < qMaxBits; r++ {
		alpha := min(tableAlphaMax, tableShare*c.FPR*math.Exp2(float64(r)))
		if cost := (float64(r+p.a) + 128.0/qSlots) / alpha; cost < best {
			best = cost
			p.level0 = tableSize{r: r, fpr: alpha / math.Exp2(float64(r))}
			p.level0.nblocks = uint64(math.Ceil(peak / alpha / qSlots))
		}
	}
	if math.IsInf(best, 1) || p.level0.fpr > c.FPR {
		p.err = fmt.Errorf("fpr %v: too small for remainders of at most %d bits", c.FPR, qMaxBits-p.a-1)
		return p
	}
	p.level0.nblocks = max(p.level0.nblocks, 1)
	p.level0.capacity = uint64(math.Floor(min(tableAlphaMax, tableShare*c.FPR*math.Exp2(float64(p.level0.r))) * float64(p.level0.nblocks*qSlots)))
	// The plan's own table keeps its sealed generations in a static set
	// when that takes less memory (it does at every rate and G ≥ 4 the
	// sizing meets: docs/filter.md); overflow levels stay tagged tables.
	if hs, ok := sealedSizing(p.perGen, p.gens, c.FPR, tableAlphaMax, tableShare); ok && sealedLayout != sealedNever &&
		(sealedLayout == sealedAlways || sealedPeakBytes(hs, p.perGen, p.gens) < qBytes(p.level0.nblocks, p.level0.r+p.a)) {
		p.level0 = tableSize{r: hs.r, nblocks: hs.nblocks, capacity: hs.capacity, fpr: hs.fpr, nq: hs.nq}
	}
	if p.level0.nblocks >= qMaxBlocks || p.level0.peakBytes(p.perGen, p.gens) > MaxFilterBytes {
		p.err = fmt.Errorf("a table of %d keys at fpr %v needs more than %d GiB: %w", uint64(peak), c.FPR, MaxFilterBytes>>30, ErrTooLarge)
	}
	return p
}

// sealedLayout is how the plan's table is laid out: sealedAuto, the
// smaller of a tagged table and a sealed one (small plans, whose tables
// are a few 64 KiB pages, stay tagged); tests set sealedAlways or
// sealedNever to run the same contract over both.
var sealedLayout = sealedAuto

const (
	sealedAuto = iota
	sealedAlways
	sealedNever
)

// peakBytes is the memory of a table of this size at its fullest: a
// tagged table's pages, or a sealed table's live table and set with G−1
// full generations.
func (ts tableSize) peakBytes(perGen uint64, gens int) uint64 {
	if ts.nq == 0 {
		return qBytes(ts.nblocks, ts.r+tagBits(gens))
	}
	return sealedPeakBytes(hybridSize{nblocks: ts.nblocks, nq: ts.nq, r: ts.r}, perGen, gens)
}

// level is the sizing of a table of level L: level 0 is the plan's; level
// L ≥ 1 takes 2^L times the plan's entries at the rate
// (fpr − level 0's)·2^−L, so that one table of each level together stay
// within fpr. Remainders are capped below qMaxBits.
func (p fpPlan) level(L int) tableSize {
	if L == 0 {
		return p.level0
	}
	budget := (p.fpr - p.level0.fpr) * math.Exp2(-float64(L))
	r := uint(math.Ceil(math.Log2(tableAlphaMax / budget)))
	r = min(max(r, 1), qMaxBits-p.a-1)
	peak := float64(p.perGen) * float64(p.gens) * math.Exp2(float64(L))
	nb := uint64(math.Ceil(peak / tableAlphaMax / qSlots))
	return tableSize{r: r, nblocks: nb, level: L, capacity: uint64(tableAlphaMax * float64(nb*qSlots)),
		fpr: tableAlphaMax / math.Exp2(float64(r))}
}

// ValidateFingerprint checks the parameters for the fingerprint kind, like
// Validate for the ring: every bad field named with its accepted range.
func (c Config) ValidateFingerprint() error {
	if err := c.checkRanges(); err != nil {
		return err
	}
	if p := c.fingerprintPlan(); p.err != nil {
		return fmt.Errorf("invalid filter config: capacity %d, fpr %v: %w", c.Capacity, c.FPR, p.err)
	}
	return nil
}

// FingerprintPlannedBytes is the memory of the plan's table (no overflow
// tables): what an operator should budget per partition. 0 if the
// configuration is invalid.
func (c Config) FingerprintPlannedBytes() uint64 {
	if c.ValidateFingerprint() != nil {
		return 0
	}
	p := c.fingerprintPlan()
	return p.level0.peakBytes(p.perGen, p.gens)
}

// FingerprintBitsPerKey is the planned memory per expected distinct key of
// the window, in bits, for the fingerprint kind (see BitsPerKey). Tables
// are allocated in 64 KiB pages, which small plans round up.
func FingerprintBitsPerKey(fpr float64, generations int) (float64, error) {
	cfg := Config{Window: time.Hour, Generations: generations, Capacity: 1 << 30, FPR: fpr}
	if err := cfg.ValidateFingerprint(); err != nil {
		return 0, err
	}
	return float64(cfg.FingerprintPlannedBytes()) * 8 / float64(cfg.Capacity), nil
}

// Table is one table of a fingerprint shard and what the shard knows of
// it: which generations it holds and how its entries are spread over
// them. It is what a checkpoint stores of the shard, one object per table
// (see WriteTo and DecodeTable).
type Table struct {
	// q is the table of tagged entries, or a sealed table's live table
	// (entries: the low d bits of the set quotient, then the remainder;
	// no tag: all are of generation newest); h is a sealed table's, nil
	// for a tagged one.
	q      *qtable
	h      *hybrid
	a      uint   // tag bits
	serial uint64 // tables opened by the memory, counted from 1: its identity
	first  uint64 // first generation it holds
	newest uint64 // newest generation it holds (the shard's while it is open)
	span   int64  // of its plan
	gens   int    // of its plan: a generation lives G spans
	size   tableSize
	closed bool     // takes no inserts any more
	counts []uint64 // entries per tag
	adds   uint64   // entries added over its life

	// live is the mask of the tags whose entries answer lookups; liveLo
	// is the oldest generation among them.
	live   uint64
	liveLo uint64

	j     *tableJournal // entries added, while open (journal.go)
	jplan *journalPlan
}

func newTable(serial, gen uint64, p fpPlan, size tableSize) *Table {
	tb := &Table{
		a: p.a, serial: serial, first: gen, newest: gen,
		span: p.span, gens: p.gens, size: size, counts: make([]uint64, 1<<p.a),
	}
	if size.nq > 0 {
		tb.h = newHybrid(hybridSize{nblocks: size.nblocks, nq: size.nq, r: size.r}, p.gens)
		tb.q = tb.h.live
	} else {
		tb.q = newQtable(size.nblocks, size.r, p.a)
	}
	return tb
}

func (tb *Table) tag(gen uint64) uint64 { return gen & (1<<tb.a - 1) }

// bytes is the table's memory.
func (tb *Table) bytes() uint64 {
	if tb.h != nil {
		return tb.h.bytes()
	}
	return tb.q.bytes()
}

// planBytes is the table's memory at its fullest (what its journal's
// share is of): a sealed table's set grows over its first G generations.
func (tb *Table) planBytes() uint64 {
	if tb.h != nil {
		return sealedPeakBytes(hybridSize{nblocks: tb.size.nblocks, nq: tb.size.nq, r: tb.size.r}, tb.size.capacity/uint64(tb.gens), tb.gens)
	}
	return tb.q.bytes()
}

// entries is the number of entries held.
func (tb *Table) entries() uint64 {
	if tb.h != nil {
		return tb.q.entries + tb.h.set.n
	}
	return tb.q.entries
}

// insert adds h's entry of tag (the newest generation's) and returns its
// log entry (home slot · 2^s + the entry); false if the table cannot take
// it.
func (tb *Table) insert(h Hash, tag uint64) (logEntry uint64, ok bool) {
	if tb.h != nil {
		_, x, v, _ := tb.h.key(h)
		return posIndex(x)<<tb.q.s | v, tb.q.insert(x, v)
	}
	x, rem := tb.key(h)
	return posIndex(x)<<tb.q.s | rem<<tb.a | tag, tb.q.insert(x, rem<<tb.a|tag)
}

// touch prefetches what the lookups of hs will read first (see qtable.touch).
func (tb *Table) touch(hs []Hash) {
	if tb.h != nil {
		tb.h.touch(hs)
	} else {
		tb.q.touch(hs)
	}
}

// key maps a hash to the table's quotient and remainder: the quotient from
// H1 by multiply-shift, the remainder from the top bits of H2.
func (tb *Table) key(h Hash) (x, rem uint64) {
	return tb.q.quotient(h.H1), h.H2 >> (64 - tb.q.r)
}

// tagsOf returns the live tags of the entries of h.
func (tb *Table) tagsOf(h Hash) uint64 {
	if tb.h != nil {
		live, tags := tb.h.lookup(h)
		if live {
			tags |= 1 << tb.tag(tb.newest)
		}
		return tags & tb.live
	}
	x, rem := tb.key(h)
	return tb.q.tags(x, rem) & tb.live
}

// genOf is the generation of tag t among those the table may hold.
func (tb *Table) genOf(t uint64) uint64 {
	return tb.newest - (tb.newest-t)&(1<<tb.a-1)
}

// tagMask is the mask of the tags of generations lo … hi.
func (tb *Table) tagMask(lo, hi uint64) uint64 {
	if lo > hi {
		return 0
	}
	if hi-lo+1 >= 1<<tb.a {
		return 1<<(1<<tb.a) - 1
	}
	var m uint64
	for g := lo; g <= hi; g++ {
		m |= 1 << tb.tag(g)
	}
	return m
}

// setLive makes generations lo … newest answer lookups.
func (tb *Table) setLive(lo uint64) {
	tb.liveLo = max(lo, tb.first)
	tb.live = tb.tagMask(tb.liveLo, tb.newest)
}

// liveEntries counts the entries of the live generations.
func (tb *Table) liveEntries() (n uint64) {
	for t, c := range tb.counts {
		if tb.live>>t&1 != 0 {
			n += c
		}
	}
	return n
}

// estFPR is the table's false-positive rate from its live entries: a
// never-added key meets on average liveEntries/slots entries of its
// quotient, each with the same remainder with probability 2^−r.
func (tb *Table) estFPR() float64 {
	if tb.h != nil {
		// Sealed and live entries alike: a never-added key meets one with
		// its set quotient and remainder with probability 2^−r / nq
		// (sealedSizing).
		return float64(tb.liveEntries()) / float64(tb.h.set.nq) / math.Exp2(float64(tb.h.r))
	}
	return float64(tb.liveEntries()) / float64(tb.q.slots()) / math.Exp2(float64(tb.q.r))
}

// FingerprintShard is the fingerprint kind's counterpart of Shard: the
// same contract (Config, event-time generations, overflow, plan changes),
// one table of tagged fingerprints instead of a ring of Bloom filters. A
// FingerprintShard belongs to one goroutine.
type FingerprintShard struct {
	cfg     Config
	plan    fpPlan
	t       uint64 // newest generation (span index); valid once started
	first   uint64 // first generation of the plan's tables
	started bool
	tables  []*Table // the plan's, oldest first; the last takes inserts unless closed
	legacy  []*Table // earlier plans' (another span or G), by newest generation's end
	// legacyUntil is the event time (Unix ns) at which a legacy
	// generation next leaves the window; math.MaxInt64 while none.
	legacyUntil int64
	serial      uint64 // the last table serial given
	saturated   bool   // no further table fits the size limit
	journal     *journalPlan

	spans      []Span // Spans, while spansStale is false (tagged_spans.go)
	spansStale bool
}

// NewFingerprintShard returns an empty shard; the first TestAndAdd opens
// its table.
func NewFingerprintShard(cfg Config) (*FingerprintShard, error) {
	if err := cfg.ValidateFingerprint(); err != nil {
		return nil, err
	}
	return &FingerprintShard{cfg: cfg, plan: cfg.fingerprintPlan(), legacyUntil: math.MaxInt64}, nil
}

// Config returns the shard's configuration.
func (s *FingerprintShard) Config() Config { return s.cfg }

// Span is the event time covered by one generation.
func (s *FingerprintShard) Span() time.Duration { return time.Duration(s.plan.span) }

// open is the table taking inserts, or nil.
func (s *FingerprintShard) open() *Table {
	if n := len(s.tables); n > 0 && !s.tables[n-1].closed {
		return s.tables[n-1]
	}
	return nil
}

// TestAndAdd reports whether h was seen in the window and records it in
// the newest generation, with the ring's rules: a timestamp in a later
// span opens that span's generation (dropping the entries of the
// generations it pushes out of the window), a late one rotates nothing,
// and a key found only in an older generation gets an entry in the newest
// too.
func (s *FingerprintShard) TestAndAdd(h Hash, ts time.Time) (seen bool) {
	s.advance(ts.UnixNano())
	return s.testAndAdd(h)
}

func (s *FingerprintShard) testAndAdd(h Hash) (seen bool) {
	if len(s.tables) == 1 && len(s.legacy) == 0 && !s.tables[0].closed {
		if s.tables[0].h != nil {
			return s.testAndAddSealed(s.tables[0], h)
		}
		return s.testAndAddOne(s.tables[0], h)
	}
	here := false // an entry of the newest generation exists
	for i := len(s.tables) - 1; i >= 0; i-- {
		tb := s.tables[i]
		if m := tb.tagsOf(h); m != 0 {
			seen = true
			if tb.newest == s.t && m>>tb.tag(s.t)&1 != 0 {
				here = true
				break
			}
		}
	}
	if !seen {
		for _, tb := range s.legacy {
			if tb.tagsOf(h) != 0 {
				seen = true
				break
			}
		}
	}
	if !here {
		s.add(h)
	}
	return seen
}

// testAndAddOne is testAndAdd for a shard of one open table (the usual
// case: no overflow, no legacy table): the run of h is located once for
// the lookup and the insert.
func (s *FingerprintShard) testAndAddOne(tb *Table, h Hash) bool {
	x, rem := tb.key(h)
	start, end, found := tb.q.run(x)
	var m uint64
	if found {
		m = tb.q.tagsIn(start, end, rem) & tb.live
	}
	tag := tb.tag(s.t)
	if m>>tag&1 != 0 {
		return true
	}
	if !tb.q.insertRun(x, rem<<tb.a|tag, start, end, found) {
		s.add(h) // the table cannot take it: add opens the next one
		return m != 0
	}
	s.added(tb, tag, posIndex(x)<<tb.q.s|rem<<tb.a|tag)
	return m != 0
}

// testAndAddSealed is testAndAddOne for a sealed table: the live table's
// run is located once for the lookup and the insert.
func (s *FingerprintShard) testAndAddSealed(tb *Table, h Hash) bool {
	q, x, v, rem := tb.h.key(h)
	start, end, found := tb.q.run(x)
	if found && tb.q.tagsIn(start, end, v) != 0 {
		return true // an entry of the newest generation
	}
	tags := tb.h.set.tags(q, rem) & tb.live
	if tags>>tb.tag(s.t)&1 != 0 {
		return true // in the set with the newest generation's tag (an early seal)
	}
	seen := tags != 0
	if !tb.q.insertRun(x, v, start, end, found) {
		s.add(h)
		return seen
	}
	s.added(tb, tb.tag(s.t), posIndex(x)<<tb.q.s|v)
	return seen
}

// added records an entry just inserted into the open table tb: its tag and
// its log entry.
func (s *FingerprintShard) added(tb *Table, tag, logEntry uint64) {
	tb.counts[tag]++
	tb.adds++
	if tb.j != nil {
		tb.j.add(logEntry)
	}
	switch {
	case tb.entries() >= tb.size.capacity:
		s.overflow()
	case tb.h != nil && tb.h.liveFull():
		// The generation outgrew its share of the live table while the
		// table as a whole has room: the live entries go into the set
		// now (the rate depends only on the entries of the whole table),
		// and the next checkpoint stores the table whole.
		tb.h.seal(tb.tag(tb.newest), 0)
		copy(tb.counts, tb.h.set.counts)
		if tb.j != nil {
			tb.j.restart()
		}
	}
}

// add inserts h with the newest generation's tag into the open table,
// opening the next level's table when it is full.
func (s *FingerprintShard) add(h Hash) {
	tb := s.open()
	if tb == nil {
		return // saturated: past the size limit
	}
	tag := tb.tag(s.t)
	e, ok := tb.insert(h, tag)
	if !ok {
		if tb = s.overflow(); tb == nil {
			return
		}
		e, _ = tb.insert(h, tag) // an empty table takes it
	}
	s.added(tb, tag, e)
}

// overflow closes the open table and opens one of the next free level,
// unless that would pass the size limit.
func (s *FingerprintShard) overflow() *Table {
	old := s.open()
	old.closed, old.j = true, nil
	used := map[int]bool{}
	var total uint64
	for _, tb := range s.tables {
		used[tb.size.level] = true
		total += tb.bytes()
	}
	L := old.size.level + 1
	for used[L] {
		L++
	}
	L = min(L, maxTableLevels)
	size := s.plan.level(L)
	if s.saturated || total+size.peakBytes(s.plan.perGen, s.plan.gens) > MaxFilterBytes || size.nblocks >= qMaxBlocks {
		s.saturated = true
		old.closed = false // keeps taking what it can
		return nil
	}
	return s.openTable(size)
}

func (s *FingerprintShard) openTable(size tableSize) *Table {
	s.spansStale = true
	s.serial++
	tb := newTable(s.serial, s.t, s.plan, size)
	tb.setLive(tb.first)
	if s.journal != nil {
		tb.startJournal(s.journal)
	}
	s.tables = append(s.tables, tb)
	return tb
}

// Advance opens generations and drops legacy ones as TestAndAdd with
// timestamp ts would, without adding a key.
func (s *FingerprintShard) Advance(ts time.Time) { s.advance(ts.UnixNano()) }

func (s *FingerprintShard) advance(ns int64) {
	if ns >= s.legacyUntil {
		s.expireLegacy(ns)
	}
	if idx := SpanIndex(ns, s.plan.span); !s.started || idx > s.t {
		s.rotate(idx)
	}
}

// rotate makes generation idx the newest.
func (s *FingerprintShard) rotate(idx uint64) {
	s.spansStale = true
	if !s.started {
		s.started, s.t, s.first = true, idx, idx
		s.openTable(s.plan.level0)
		return
	}
	g := uint64(s.plan.gens)
	old := s.t
	s.t = idx
	// Closed tables whose generations all left.
	s.tables = slices.DeleteFunc(s.tables, func(tb *Table) bool { return tb.closed && tb.newest+g <= idx })
	if tb := s.open(); tb != nil {
		if s.backToPlan(tb, old) {
			tb.closed, tb.j = true, nil
		} else {
			// The generations pushed out leave, so that their tags are
			// free (those before newest−G+1 went at earlier changes); on
			// a jump of G or more, all of them.
			all := idx >= g && idx-g >= tb.newest
			var drop uint64
			if all {
				drop = 1<<(1<<tb.a) - 1
			} else if idx >= g {
				lo := tb.first
				if tb.newest+1 > g {
					lo = max(lo, tb.newest+1-g)
				}
				drop = tb.tagMask(lo, idx-g)
			}
			switch {
			case tb.h != nil:
				// The generation that ended goes into the set (unless it
				// left too), less the generations that left.
				tb.h.seal(tb.tag(tb.newest), drop)
				copy(tb.counts, tb.h.set.counts)
			case all:
				tb.q.clear()
				clear(tb.counts)
			case drop != 0:
				tb.q.drop(drop)
				for t := range tb.counts {
					if drop>>t&1 != 0 {
						tb.counts[t] = 0
					}
				}
			}
			tb.newest = idx
			// A new range: the next checkpoint stores the table whole.
			if tb.j != nil {
				tb.j.restart()
			}
		}
	}
	if s.open() == nil {
		s.openTable(s.plan.level0)
	}
	lo := uint64(0)
	if idx >= g {
		lo = idx - g + 1
	}
	for _, tb := range s.tables {
		tb.setLive(lo)
	}
}

// backToPlan reports whether the open table tb, not the plan's own (an
// overflow level, or a table of an earlier capacity or rate), gives way
// to a new table of the plan at this generation change: once no other
// table of level 0 of the plan is held and the generation that just ended
// fitted the plan.
func (s *FingerprintShard) backToPlan(tb *Table, ended uint64) bool {
	if s.isPlanTable(tb) {
		return false
	}
	for _, o := range s.tables {
		if o != tb && s.isPlanTable(o) {
			return false
		}
	}
	return tb.counts[tb.tag(ended)] <= s.plan.perGen
}

func (s *FingerprintShard) isPlanTable(tb *Table) bool {
	return tb.size == s.plan.level0 && tb.a == s.plan.a
}

// expireLegacy drops the legacy generations whose end + Window ≤ now, and
// the tables left without any.
func (s *FingerprintShard) expireLegacy(now int64) {
	s.spansStale = true
	s.legacyUntil = math.MaxInt64
	keep := s.legacy[:0]
	for _, tb := range s.legacy {
		lo := tb.liveLo
		for lo <= tb.newest && addSat(int64(lo+1)*tb.span, int64(s.cfg.Window)) <= now {
			lo++
		}
		if lo > tb.newest {
			continue
		}
		tb.setLive(lo)
		keep = append(keep, tb)
		s.legacyUntil = min(s.legacyUntil, addSat(int64(lo+1)*tb.span, int64(s.cfg.Window)))
	}
	clear(s.legacy[len(keep):])
	s.legacy = keep
}

// Test reports whether h was seen in the window; it changes nothing.
func (s *FingerprintShard) Test(h Hash) bool {
	for _, gs := range [2][]*Table{s.tables, s.legacy} {
		for _, tb := range gs {
			if tb.tagsOf(h) != 0 {
				return true
			}
		}
	}
	return false
}

// TestAndAddBatch calls TestAndAdd(hs[i], ts[i]) for each i in order and
// stores the results in seen; ts and seen must be at least as long as hs.
// Results and state are exactly those of the calls one by one; the
// metadata and home entries of a chunk of keys in every table are prefetched
// first so that their cache misses overlap.
func (s *FingerprintShard) TestAndAddBatch(hs []Hash, ts []time.Time, seen []bool) {
	ts, seen = ts[:len(hs)], seen[:len(hs)]
	for lo := 0; lo < len(hs); lo += batchChunk {
		hi := min(lo+batchChunk, len(hs))
		for _, gs := range [2][]*Table{s.tables, s.legacy} {
			for _, tb := range gs {
				tb.touch(hs[lo:hi])
			}
		}
		for i := lo; i < hi; i++ {
			seen[i] = s.TestAndAdd(hs[i], ts[i])
		}
	}
}

// EnableJournal makes the open table record the entries it adds (as
// Shard.EnableJournal does for generations), 8 bytes each, within share
// of the table's size and maxEntries, so that a checkpoint can store a log
// segment instead of the table.
func (s *FingerprintShard) EnableJournal(share float64, maxEntries int) {
	s.EnableJournalShares(share, share, maxEntries)
}

// EnableJournalShares is EnableJournal with a share for tagged tables and
// one for sealed ones (whose logs cost more to replay per byte of base).
func (s *FingerprintShard) EnableJournalShares(tagged, sealed float64, maxEntries int) {
	s.journal = &journalPlan{share: tagged, sealedShare: sealed, maxEntries: maxEntries}
	if tb := s.open(); tb != nil && tb.j == nil {
		tb.startJournal(s.journal)
	}
}

func (tb *Table) startJournal(p *journalPlan) {
	if !tb.packable() {
		return
	}
	tb.jplan = p
	share := p.share
	if tb.h != nil {
		share = p.sealedShare
	}
	tb.j = &tableJournal{limit: journalLimit(tb.planBytes(), share, p.maxEntries, tableLogEntrySize)}
}

// packable reports whether an entry and its home slot fit the 64 bits of
// a log entry.
func (tb *Table) packable() bool {
	return bits.Len64(tb.q.pblocks*qSlots)+int(tb.q.s) <= 64
}
