package bloom

import (
	"math/bits"
	"math/rand/v2"
	"testing"
)

// A prototype, for BenchmarkTableKinds (docs/filter.md, "Under 14 bits: a
// static set of the sealed generations"): the fingerprint kind split in
// two. The generation taking inserts lives in a small quotient table of
// its own (no tags); the sealed generations live in a static, succinct
// set of tagged fingerprints — Elias–Fano coded: per quotient, its
// entries' count in unary (a 1 each, then a 0), and per entry its
// remainder and tag packed — rebuilt at each generation change by one
// streaming merge of the old set (less the generation that leaves) with
// the live table (which is then cleared), chunk by chunk, so that the
// rebuild needs one chunk's memory beside the set.
//
// Why it is smaller: a static set has no empty slots (the quotient table
// holds its peak at load 0.95 and spends 2.29 bits of metadata per slot;
// the set spends 1 bit per entry and 1 per quotient, with ~1 entry per
// quotient), and only the live generation pays for a dynamic table.
//
// Fingerprints: a key's quotient q in the set's Q quotients is a
// multiply-shift of H1, its remainder the top 7 bits of H2 (as the
// quotient table's). The live table must give the set the same q when the
// generation is sealed, though it has fewer quotients (S, one
// generation's): its quotient is k = ⌊q·S/Q⌋ and its entry d‖rem with
// d = q − ⌈k·Q/S⌉ (< 2^dbits), from which q is recomputed at the merge.
// A never-added key matches when a stored entry has its q and remainder:
// FPR ≈ (entries / Q) · 2^−7 over all G generations.

const (
	ssChunkQ = 1 << 14 // quotients per chunk
	ssBlockQ = 256     // quotients per index entry (a uint16 bit position)
	ssRem    = 7
	ssTag    = 3
	ssLow    = ssRem + ssTag
)

// ssChunk is the set's entries of ssChunkQ consecutive quotients.
type ssChunk struct {
	high []uint64 // per quotient: a 1 per entry, then a 0
	low  []uint64 // per entry, in order: remainder‖tag, ssLow bits
	idx  []uint16 // where in high each block of ssBlockQ quotients begins
}

type sealedSet struct {
	q      uint64 // quotients: a multiple of ssChunkQ
	chunks []ssChunk
	n      uint64 // entries
}

func newSealedSet(q uint64) *sealedSet {
	q = (q + ssChunkQ - 1) / ssChunkQ * ssChunkQ
	s := &sealedSet{q: q, chunks: make([]ssChunk, q/ssChunkQ)}
	for i := range s.chunks {
		s.chunks[i] = buildChunk(nil)
	}
	return s
}

func (s *sealedSet) bytes() uint64 {
	n := uint64(cap(s.chunks)) * 72
	for _, c := range s.chunks {
		n += uint64(cap(c.high)+cap(c.low))*8 + uint64(cap(c.idx))*2
	}
	return n
}

// bucket is where quotient j of chunk c begins in its high bits, and the
// index of its first entry.
func (c *ssChunk) bucket(j uint64) (pos, e uint64) {
	pos = uint64(c.idx[j/ssBlockQ])
	for z := j % ssBlockQ; z > 0; {
		w := ^c.high[pos>>6] >> (pos & 63) // zeros, from pos on
		n := uint64(bits.OnesCount64(w))
		if n >= z {
			pos += uint64(select64(w, uint(z-1))) + 1
			break
		}
		z -= n
		pos = pos | 63 + 1
	}
	return pos, pos - j
}

// tags returns the tags of the entries of quotient q with remainder rem.
func (s *sealedSet) tags(q, rem uint64) (tags uint64) {
	c := &s.chunks[q/ssChunkQ]
	pos, e := c.bucket(q % ssChunkQ)
	for c.high[pos>>6]>>(pos&63)&1 != 0 {
		v := getBits(c.low, e*ssLow, ssLow)
		if r := v >> ssTag; r == rem {
			tags |= 1 << (v & (1<<ssTag - 1))
		} else if r > rem {
			break
		}
		pos, e = pos+1, e+1
	}
	return tags
}

// touch loads the index entry and the first high word of q's bucket.
func (s *sealedSet) touch(q uint64) uint64 {
	c := &s.chunks[q/ssChunkQ]
	p := c.idx[q%ssChunkQ/ssBlockQ]
	return c.high[p>>6]
}

// buildChunk encodes entries j<<ssLow | value, sorted, j < ssChunkQ:
// entry e of quotient j is the 1 at position j + e of high (the zeros are
// the array's), and block b begins at b·ssBlockQ + the entries before it.
func buildChunk(ents []uint64) ssChunk {
	n := uint64(len(ents))
	hb := n + ssChunkQ
	if hb > 1<<16 {
		panic("prototype: chunk too full for 16-bit block positions")
	}
	c := ssChunk{high: make([]uint64, (hb+63)/64), low: make([]uint64, (n*ssLow+63)/64), idx: make([]uint16, ssChunkQ/ssBlockQ)}
	b := uint64(0) // next block whose start is not set
	for e, x := range ents {
		j := x >> ssLow
		for ; b*ssBlockQ <= j; b++ {
			c.idx[b] = uint16(b*ssBlockQ + uint64(e))
		}
		p := j + uint64(e)
		c.high[p>>6] |= 1 << (p & 63)
		putBits(c.low, uint64(e)*ssLow, ssLow, x&(1<<ssLow-1))
	}
	for ; b < ssChunkQ/ssBlockQ; b++ {
		c.idx[b] = uint16(b*ssBlockQ + n)
	}
	return c
}

// decode appends the chunk's entries as buildChunk takes them, in order,
// without those of tag drop.
func (c *ssChunk) decode(dst []uint64, drop uint64) []uint64 {
	var e uint64
	for wi, w := range c.high {
		for ; w != 0; w &= w - 1 {
			p := uint64(wi)<<6 | uint64(bits.TrailingZeros64(w))
			v := getBits(c.low, e*ssLow, ssLow)
			if v&(1<<ssTag-1) != drop {
				dst = append(dst, (p-e)<<ssLow|v)
			}
			e++
		}
	}
	return dst
}

// qCursor yields a quotient table's entries in order: by quotient, then
// value.
type qCursor struct {
	t        *qtable
	b, occ   uint64 // block, its occupied quotients not yet visited
	pos      uint64 // first position after the last run
	x        uint64 // quotient of the current run
	i, end   uint64
	inRun    bool
	finished bool
}

func (c *qCursor) next() (x, v uint64, ok bool) {
	t := c.t
	for !c.inRun {
		for c.occ == 0 {
			if c.b++; c.b >= t.nblocks {
				return 0, 0, false
			}
			c.occ = t.occ(c.b)
		}
		c.x = c.b<<6 | uint64(bits.TrailingZeros64(c.occ))
		c.occ &= c.occ - 1
		c.i = max(c.x, c.pos)
		c.end = t.runendFrom(c.i)
		c.inRun = true
	}
	x, v = c.x, t.get(c.i)
	if c.i == c.end {
		c.inRun, c.pos = false, next(c.end)
	} else {
		c.i = next(c.i)
	}
	return x, v, true
}

func newQCursor(t *qtable) *qCursor {
	return &qCursor{t: t, occ: t.occ(0)}
}

// hybridTable is the prototype: the live generation in a quotient table
// of S home slots, the sealed ones in a sealedSet of Q quotients.
type hybridTable struct {
	live  *qtable
	set   *sealedSet
	s, q  uint64
	dbits uint
	gen   uint64
	ents  []uint64 // merge scratch
	old   []uint64
}

// newHybridTable sizes the prototype for generations of perGen keys: the
// live table at peak load alpha, the set at lambda entries per quotient
// over all G = 8 generations (FPR ≈ lambda·2^−7).
func newHybridTable(perGen uint64, alpha, lambda float64) *hybridTable {
	nb := uint64(float64(perGen)/alpha/qSlots) + 1
	q := uint64(float64(8*perGen) / lambda)
	h := &hybridTable{s: nb * qSlots}
	h.set = newSealedSet(q)
	h.q = h.set.q
	h.dbits = uint(bits.Len64((h.q + h.s - 1) / h.s))
	h.live = newQtable(nb, h.dbits+ssRem, 0)
	return h
}

func (h *hybridTable) bytes() uint64 { return h.live.bytes() + h.set.bytes() }

// liveKey maps set quotient q to the live table's position and the d part
// of its entry.
func (h *hybridTable) liveKey(q uint64) (x, d uint64) {
	k := q * h.s / h.q
	d = q - (k*h.q+h.s-1)/h.s
	return k/qSlots<<6 | k%qSlots, d
}

// testAndAdd reports whether h was seen in the last 8 generations and adds
// it to the live one.
func (h *hybridTable) testAndAdd(hs Hash) bool {
	q, _ := bits.Mul64(hs.H1, h.q)
	rem := hs.H2 >> (64 - ssRem)
	x, d := h.liveKey(q)
	v := d<<ssRem | rem
	start, end, found := h.live.run(x)
	if found && h.live.tagsIn(start, end, v) != 0 {
		return true
	}
	sealed := h.set.tags(q, rem) != 0
	if !h.live.insertRun(x, v, start, end, found) {
		panic("prototype: live table full")
	}
	return sealed
}

func (h *hybridTable) test(hs Hash) bool {
	q, _ := bits.Mul64(hs.H1, h.q)
	rem := hs.H2 >> (64 - ssRem)
	x, d := h.liveKey(q)
	return h.live.tags(x, d<<ssRem|rem) != 0 || h.set.tags(q, rem) != 0
}

// touchBatch loads what the lookups of a batch will read, in two rounds
// so that the misses of each round overlap: first the live table's
// metadata and home entry and the set's block index, then the set's high
// word and packed entry where the block's average density puts them.
func (h *hybridTable) touchBatch(hs []Hash) {
	var s uint64
	var qs [batchChunk]uint64
	for i, k := range hs {
		q, _ := bits.Mul64(k.H1, h.q)
		qs[i] = q
		x, _ := h.liveKey(q)
		pg, bit := h.live.entAt(x)
		c := &h.set.chunks[q/ssChunkQ]
		s ^= h.live.meta[x>>6>>qMetaShift][x>>6&(1<<qMetaShift-1)*2] ^ pg[bit>>6] ^ uint64(c.idx[q%ssChunkQ/ssBlockQ])
	}
	for _, q := range qs[:len(hs)] {
		c := &h.set.chunks[q/ssChunkQ]
		j := q % ssChunkQ
		start := uint64(c.idx[j/ssBlockQ])
		// Bits per quotient: 1 + entries per quotient (the chunk's).
		per := uint64(len(c.high)) * 64 / ssChunkQ
		p := min(start+j%ssBlockQ*per, uint64(len(c.high))*64-1)
		e := min(p-min(p, j), uint64(len(c.low))*64/ssLow)
		s ^= c.high[p>>6]
		if len(c.low) > 0 {
			s ^= c.low[min(e*ssLow>>6, uint64(len(c.low)-1))]
		}
	}
	h.live.sink = s
}

// seal ends the live generation: the set is rebuilt with the live
// entries (tagged with the generation) and without the generation 8
// back, chunk by chunk; the live table is cleared.
func (h *hybridTable) seal() {
	tag := h.gen & (1<<ssTag - 1)
	drop := (h.gen + 1) & (1<<ssTag - 1) // the tag the next generation reuses
	cur := newQCursor(h.live)
	lx, lv, lok := cur.next()
	liveQ := func(x, v uint64) uint64 {
		k := posIndex(x)
		return (k*h.q+h.s-1)/h.s + v>>ssRem
	}
	var n uint64
	for ci := range h.set.chunks {
		c := &h.set.chunks[ci]
		base := uint64(ci) * ssChunkQ
		old := c.decode(h.old[:0], drop)
		ents := h.ents[:0]
		i := 0
		for lok {
			q := liveQ(lx, lv)
			if q >= base+ssChunkQ {
				break
			}
			lk := (q-base)<<ssLow | (lv&(1<<ssRem-1))<<ssTag | tag
			for i < len(old) && old[i] < lk {
				ents = append(ents, old[i])
				i++
			}
			ents = append(ents, lk)
			lx, lv, lok = cur.next()
		}
		ents = append(ents, old[i:]...)
		*c = buildChunk(ents)
		n += uint64(len(ents))
		h.ents, h.old = ents, old
	}
	h.set.n = n
	h.live.clear()
	h.gen++
}

// TestHybridPrototype: the prototype remembers every key of the last
// eight generations (seven sealed and the live one) and forgets older
// ones, and its false-positive rate is near lambda·2^−7.
func TestHybridPrototype(t *testing.T) {
	const per = 40_000
	h := newHybridTable(per, 0.95, 1.2)
	rng := rand.New(rand.NewPCG(1, 2))
	var gens [][]Hash
	for g := range 12 {
		var keys []Hash
		for range per {
			k := Hash{rng.Uint64(), rng.Uint64()}
			keys = append(keys, k)
			h.testAndAdd(k)
		}
		gens = append(gens, keys)
		for back := 0; back < 8 && back <= g; back++ {
			for i, k := range gens[g-back] {
				if !h.test(k) {
					t.Fatalf("generation %d: key %d of generation %d (%d back) missing", g, i, g-back, back)
				}
			}
		}
		h.seal()
	}
	var fp, gone int
	for range 200_000 {
		if h.test(Hash{rng.Uint64(), rng.Uint64()}) {
			fp++
		}
	}
	// After the last seal: generations 5 … 11 are sealed, 4 has left.
	for _, k := range gens[3] {
		if h.test(k) {
			gone++
		}
	}
	rate := float64(fp) / 200_000
	t.Logf("FPR %.3f %% with 7 sealed generations (bound 1.2·2^-7·7/8 = %.3f %%); %d of %d expired keys still matched; %d B", 100*rate, 100*1.2/128*7/8, gone, per, h.bytes())
	if rate > 1.2/128*7/8*1.15 {
		t.Errorf("FPR %.4f above its bound", rate)
	}
	if float64(gone) > per*0.02 {
		t.Errorf("%d of %d keys of a generation that left still match", gone, per)
	}
}
