package bloom

import (
	"fmt"
	"io"
	"math"
	"time"
)

// Overflow plan (scalable Bloom filter, Almeida et al. 2007). Sub-filter 0
// gets firstShare of the generation's rate budget p; sub-filter i ≥ 1 gets
// (1−firstShare)·p·(1−tighten)·tighten^(i−1) and growth^i times the planned
// capacity. The rates sum to at most p however many sub-filters exist.
const (
	firstShare = 0.9
	tighten    = 0.5
	growth     = 2
	maxStacks  = 32    // sub-filters per generation, the first included
	minSubRate = 1e-10 // below this a 512-bit block cannot be sized
)

// subRate is the target rate of sub-filter i of a stack with budget p.
func subRate(p float64, i int) float64 {
	if i == 0 {
		return firstShare * p
	}
	r := (1 - firstShare) * p * (1 - tighten) * math.Pow(tighten, float64(i-1))
	return max(r, minSubRate)
}

// subCapacity is the planned capacity of sub-filter i.
func subCapacity(c uint64, i int) uint64 {
	if i >= 62 || c > math.MaxUint64>>uint(i) {
		return math.MaxUint64
	}
	return c << uint(i)
}

// Generation is one span of event time: a stack of blocked filters that
// grows when more distinct keys arrive than planned.
type Generation struct {
	id         uint64
	start, end int64 // Unix nanoseconds, [start, end)
	capacity   uint64
	fpr        float64
	subs       []*Filter
	subInserts []uint64
	inserts    uint64
	saturated  bool // no further sub-filter fits the size limit

	j     *journal // hashes that set bits (journal.go); nil: not kept
	jplan *journalPlan
}

func newGeneration(id uint64, start, end int64, capacity uint64, fpr float64, first *Filter) *Generation {
	return &Generation{
		id: id, start: start, end: end, capacity: capacity, fpr: fpr,
		subs: []*Filter{first}, subInserts: []uint64{0},
	}
}

// NewGeneration returns an empty generation for the span [start, end)
// with index id (start must be id·(end − start)), planned for capacity
// keys at the rate budget fpr: what the shard opens at a rotation, for a
// generation whose stored state was lost. Given to RestoreShard with the
// others, it takes the place of the lost one; TestAndAdd refills it.
func NewGeneration(id uint64, start, end time.Time, capacity uint64, fpr float64) (*Generation, error) {
	s, e := start.UnixNano(), end.UnixNano()
	if s < 0 || e <= s || id > math.MaxInt64/uint64(e-s) || int64(id)*(e-s) != s {
		return nil, fmt.Errorf("new generation: span [%s, %s) does not match id %d", start.Format(time.RFC3339Nano), end.Format(time.RFC3339Nano), id)
	}
	k, nb, err := filterParams(capacity, subRate(fpr, 0))
	if err != nil {
		return nil, fmt.Errorf("new generation: capacity %d, fpr %v: %w", capacity, fpr, err)
	}
	return newGeneration(id, s, e, capacity, fpr, newFilter(capacity, subRate(fpr, 0), k, nb)), nil
}

// GenerationPlan is the capacity and rate budget of the generations the
// shard opens under cfg (see GenerationStats.Capacity).
func (c Config) GenerationPlan() (capacity uint64, fpr float64) {
	p := c.plan()
	return p.capacity, p.fpr
}

// TestAndAdd reports whether h is in the generation and adds it, as the
// shard does for its newest generation (overflow stacking included): for
// refilling a generation from its keys, in the order they were added, so
// that it ends byte-identical to the original. Only the owning goroutine
// may call it.
func (g *Generation) TestAndAdd(h Hash) bool { return g.testAndAdd(h) }

// ID is the span index: Start = ID·span since the Unix epoch.
func (g *Generation) ID() uint64 { return g.id }

// Start is the first instant of the generation's span.
func (g *Generation) Start() time.Time { return time.Unix(0, g.start).UTC() }

// End is the first instant after the generation's span.
func (g *Generation) End() time.Time { return time.Unix(0, g.end).UTC() }

// Inserts counts the keys added (TestAndAdd calls that reported unseen).
func (g *Generation) Inserts() uint64 { return g.inserts }

func (g *Generation) test(h Hash) bool {
	for _, f := range g.subs {
		if f.Test(h) {
			return true
		}
	}
	return false
}

// testAndAdd checks every sub-filter and adds h to the newest. Inserts are
// counted per sub-filter; reaching a sub-filter's capacity stacks the next,
// so the stacking point depends only on the sequence of keys.
func (g *Generation) testAndAdd(h Hash) bool {
	n := len(g.subs)
	for _, f := range g.subs[:n-1] {
		if f.Test(h) {
			return true
		}
	}
	if g.subs[n-1].TestAndAdd(h) {
		return true
	}
	g.inserts++
	g.subInserts[n-1]++
	if g.j != nil {
		g.j.add(h)
	}
	if g.subInserts[n-1] >= g.subs[n-1].capacity && !g.saturated {
		g.stack()
	}
	return false
}

func (g *Generation) stack() {
	defer g.invalidateJournal()
	i := len(g.subs)
	if i >= maxStacks {
		g.saturated = true
		return
	}
	var total uint64
	for _, f := range g.subs {
		total += f.Bytes()
	}
	c, p := subCapacity(g.capacity, i), subRate(g.fpr, i)
	k, nb, err := filterParams(c, p)
	if err != nil || total+nb*blockBits/8 > MaxFilterBytes {
		g.saturated = true
		return
	}
	g.subs = append(g.subs, newFilter(c, p, k, nb))
	g.subInserts = append(g.subInserts, 0)
}

// GenerationStats describes one generation; totals include overflow stacks.
type GenerationStats struct {
	ID         uint64
	Start, End time.Time
	Inserts    uint64  // keys added
	EstKeys    uint64  // distinct keys estimated from the set bits
	Fill       float64 // fraction of bits set, over all sub-filters
	EstFPR     float64 // estimated current false-positive rate
	Bytes      uint64  // memory of the bits
	Stacks     int     // overflow sub-filters beyond the first
	// Capacity and FPR are the generation's own plan: its planned keys and
	// its rate budget (NewGeneration opens an empty one like it).
	Capacity uint64
	FPR      float64
	// Legacy: written under an earlier plan (another window or generation
	// count); sealed, dropped when event time reaches End + the window.
	Legacy bool
}

// Stats computes the generation's statistics; cost O(sub-filters).
func (g *Generation) Stats() GenerationStats {
	st := GenerationStats{ID: g.id, Start: g.Start(), End: g.End(), Inserts: g.inserts, Stacks: len(g.subs) - 1,
		Capacity: g.capacity, FPR: g.fpr}
	var ones, bitsTotal uint64
	pass := 1.0
	for _, f := range g.subs {
		ones += f.ones
		bitsTotal += f.Bits()
		st.EstKeys += f.EstimatedKeys()
		st.Bytes += f.Bytes()
		pass *= 1 - f.EstimatedFPR()
	}
	st.Fill = float64(ones) / float64(bitsTotal)
	st.EstFPR = 1 - pass
	return st
}

// WriteTo encodes the generation in binary format v1. Only the owning
// goroutine may call it; use Shard.Snapshot to encode concurrently.
func (g *Generation) WriteTo(w io.Writer) (int64, error) {
	views := make([]filterView, len(g.subs))
	for i, f := range g.subs {
		views[i] = filterView{pages: f.pages, nblocks: f.nblocks, k: f.k, capacity: f.capacity, fpr: f.fpr, ones: f.ones}
	}
	m := g.meta()
	return encodeGeneration(w, &m, views)
}
