package bloom

import (
	"math"
	"math/bits"
	"slices"
	"unsafe"
)

// A sealed set: the sealed generations of a fingerprint table, kept as one
// static, succinct multiset of tagged fingerprints instead of in the
// dynamic table (docs/filter.md, "A static set of the sealed
// generations"). Only the generation taking inserts needs a table with
// empty slots and per-slot metadata; a generation that has ended never
// changes until it leaves, so its entries can be coded without either:
// an Elias–Fano code over nq quotients, per quotient its entries' count in
// unary (a 1 each, then a 0), per entry its remainder and tag packed in
// s = r + a bits. Per entry that is s + 1 bits, plus about 1.06 bits per
// quotient, where the quotient table keeps its peak at load 0.95 and
// spends 2.29 bits of metadata per slot.
//
// The set is rebuilt at each generation change by one streaming merge of
// the old set (less the generations that leave) with the live table's
// entries (hybrid.seal), chunk by chunk: the rebuild holds one chunk
// beside the set. Chunks never change once built: a snapshot keeps the
// chunk pointers it saw, and the rebuild replaces them in the set's own
// list, so snapshots need no copy-on-write of their own.
//
// Entries are sorted by quotient, then remainder, then tag: the set is a
// function of its entries (canonical), as the quotient table is.

const (
	ssChunkQ = 1 << 14 // quotients per chunk
	ssBlockQ = 256     // quotients per entry of a chunk's index
	// ssMaxS bounds the packed bits per entry: j‖remainder‖tag of a chunk
	// entry fits 64 bits (j < 2^14).
	ssMaxS = 48
	// ssMaxChunkEntries bounds a chunk's entries so that its block
	// positions fit 32 bits; a plan's chunk holds ~17,000 (hashed keys
	// spread evenly), a decoded one may not hold more.
	ssMaxChunkEntries = 1<<31 - ssChunkQ
)

// ssChunk is the set's entries of ssChunkQ consecutive quotients. It is
// immutable once built.
type ssChunk struct {
	n    uint64   // entries
	high []uint64 // n + ssChunkQ bits: per quotient, a 1 per entry, then a 0
	low  []uint64 // per entry, in order: remainder‖tag, s bits
	// idx[b] is the bit of high where the quotients of block b (ssBlockQ
	// of them) begin: b·ssBlockQ + the entries before it. 16 bits suffice
	// unless a chunk holds more than 2^16 − ssChunkQ entries (three times
	// the plan's; wide then holds the positions instead).
	idx  []uint16
	wide []uint32
}

// ssEmptyChunk is the chunk of no entries, shared by every set.
var ssEmptyChunk = buildChunk(nil, 1)

// blockStart is where block b's quotients begin in high.
func (c *ssChunk) blockStart(b uint64) uint64 {
	if c.wide != nil {
		return uint64(c.wide[b])
	}
	return uint64(c.idx[b])
}

// makeIndex allocates the block index for the chunk's n entries: 16-bit
// positions, or 32-bit past 2^16 bits of code.
func (c *ssChunk) makeIndex() {
	if c.n+ssChunkQ > 1<<16 {
		c.wide = make([]uint32, ssChunkQ/ssBlockQ)
	} else {
		c.idx = make([]uint16, ssChunkQ/ssBlockQ)
	}
}

// setBlockStart records where block b's quotients begin in high.
func (c *ssChunk) setBlockStart(b, pos uint64) {
	if c.wide != nil {
		c.wide[b] = uint32(pos)
	} else {
		c.idx[b] = uint16(pos)
	}
}

// bucket is where quotient j of the chunk begins in high, and the index of
// its first entry.
func (c *ssChunk) bucket(j uint64) (pos, e uint64) {
	pos = c.blockStart(j / ssBlockQ)
	for z := j % ssBlockQ; z > 0; {
		w := ^c.high[pos>>6] >> (pos & 63) // the zeros from pos on
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

// buildChunk codes entries j<<s | value (value: s bits), sorted, j <
// ssChunkQ: entry e of quotient j is the 1 at bit j + e of high.
func buildChunk(ents []uint64, s uint) *ssChunk {
	n := uint64(len(ents))
	hb := n + ssChunkQ
	c := &ssChunk{n: n, high: make([]uint64, (hb+63)/64)}
	if n > 0 {
		c.low = make([]uint64, (n*uint64(s)+63)/64)
	}
	nb := uint64(ssChunkQ / ssBlockQ)
	c.makeIndex()
	b := uint64(0) // the next block whose start is not set
	mask := uint64(1)<<s - 1
	bw := bitWriter{ws: c.low}
	for e, x := range ents {
		j := x >> s
		for ; b*ssBlockQ <= j; b++ {
			c.setBlockStart(b, b*ssBlockQ+uint64(e))
		}
		p := j + uint64(e)
		c.high[p>>6] |= 1 << (p & 63)
		bw.put(x&mask, s)
	}
	bw.flush()
	for ; b < nb; b++ {
		c.setBlockStart(b, b*ssBlockQ+n)
	}
	return c
}

// decodeKeep stores the chunk's entries j<<s | value, in order, without
// those whose tag (the low a bits of the value) is in drop, into out (at
// least c.n long) and returns how many it stored. No branch depends on an
// entry's tag: the store is unconditional, the count moves by 0 or 1.
func (c *ssChunk) decodeKeep(s, a uint, drop uint64, out []uint64) int {
	out = out[:c.n]
	ss, mask, tm := uint64(s), uint64(1)<<s-1, uint64(1)<<a-1
	low, last := c.low, uint64(len(c.low)-1)
	var e, bit uint64
	ne := 0
	for wi, w := range c.high {
		for ; w != 0; w &= w - 1 {
			p := uint64(wi)<<6 | uint64(bits.TrailingZeros64(w))
			// The value's bits at bit: the word's from o on, then the next
			// word's (the last word's again at the end, where the value
			// ends within its word and the mask drops them).
			k, o := bit>>6, bit&63
			v := (low[k]>>o | low[min(k+1, last)]<<(64-o)) & mask
			bit += ss
			out[ne] = (p-e)<<ss | v
			e++
			ne += int(^(drop >> (v & tm)) & 1)
		}
	}
	return ne
}

// bitWriter packs values of s < 64 bits one after the other into ws.
type bitWriter struct {
	ws  []uint64
	acc uint64 // bits not yet stored, from the low end
	n   uint   // how many
	i   int    // the next word
}

func (w *bitWriter) put(v uint64, s uint) {
	w.acc |= v << w.n
	if w.n+s < 64 {
		w.n += s
		return
	}
	w.ws[w.i] = w.acc
	w.i++
	w.acc = v >> (64 - w.n) // 0 when n is 0 (a shift by 64)
	w.n = w.n + s - 64
}

func (w *bitWriter) flush() {
	if w.n > 0 {
		w.ws[w.i] = w.acc
	}
}

// bitReader reads values of s < 64 bits one after the other from ws.
type bitReader struct {
	ws  []uint64
	acc uint64
	n   uint
	i   int
}

func (r *bitReader) get(s uint) uint64 {
	if r.n >= s {
		v := r.acc & (1<<s - 1)
		r.acc >>= s
		r.n -= s
		return v
	}
	var next uint64
	if r.i < len(r.ws) {
		next = r.ws[r.i]
		r.i++
	}
	v := (r.acc | next<<r.n) & (1<<s - 1)
	r.acc = next >> (s - r.n)
	r.n = 64 - (s - r.n)
	return v
}

// each calls f(j, value) for the chunk's entries in order.
func (c *ssChunk) each(s uint, f func(j, v uint64)) {
	var e uint64
	br := bitReader{ws: c.low}
	for wi, w := range c.high {
		for ; w != 0; w &= w - 1 {
			p := uint64(wi)<<6 | uint64(bits.TrailingZeros64(w))
			f(p-e, br.get(s))
			e++
		}
	}
}

// bytes is the chunk's memory.
func (c *ssChunk) bytes() uint64 {
	if c == ssEmptyChunk {
		return 0
	}
	return uint64(cap(c.high)+cap(c.low))*8 + uint64(cap(c.idx))*2 + uint64(cap(c.wide))*4 + 96
}

// sealedSet is a static multiset of entries remainder‖tag over nq
// quotients.
type sealedSet struct {
	nq     uint64 // quotients: a multiple of ssChunkQ
	r, a   uint   // remainder and tag bits
	s      uint   // r + a
	chunks []*ssChunk
	n      uint64   // entries
	counts []uint64 // entries per tag
}

// newSealedSet returns an empty set of at least nq quotients.
func newSealedSet(nq uint64, r, a uint) *sealedSet {
	nq = max(ssChunkQ, (nq+ssChunkQ-1)/ssChunkQ*ssChunkQ)
	s := &sealedSet{nq: nq, r: r, a: a, s: r + a, chunks: make([]*ssChunk, nq/ssChunkQ), counts: make([]uint64, 1<<a)}
	for i := range s.chunks {
		s.chunks[i] = ssEmptyChunk
	}
	return s
}

// bytes is the set's memory.
func (s *sealedSet) bytes() uint64 {
	n := uint64(cap(s.chunks)) * 8
	for _, c := range s.chunks {
		n += c.bytes()
	}
	return n
}

// quotient maps the first half of a hash to one of the set's quotients.
func (s *sealedSet) quotient(h1 uint64) uint64 {
	q, _ := bits.Mul64(h1, s.nq)
	return q
}

// tags returns the tags (bit t: tag t) of the entries of quotient q with
// remainder rem.
func (s *sealedSet) tags(q, rem uint64) (tags uint64) {
	c := s.chunks[q/ssChunkQ]
	pos, e := c.bucket(q % ssChunkQ)
	ss, tm := uint64(s.s), uint64(1)<<s.a-1
	for c.high[pos>>6]>>(pos&63)&1 != 0 {
		v := getBits(c.low, e*ss, ss)
		if r := v >> s.a; r == rem {
			tags |= 1 << (v & tm)
		} else if r > rem {
			break
		}
		pos, e = pos+1, e+1
	}
	return tags
}

// touch prefetches what the lookups of hs read in the set, in two passes
// over up to batchChunk keys at a time: the index entries of their blocks
// first, then, with those read (their lines fetched together), the word
// of high where each block's scan starts and the words of high and low
// where the chunk's average density puts the bucket.
func (s *sealedSet) touch(hs []Hash) {
	var qs [batchChunk]uint64
	for len(hs) > 0 {
		b := hs[:min(len(hs), batchChunk)]
		hs = hs[len(b):]
		for i, k := range b {
			q := s.quotient(k.H1)
			qs[i] = q
			c := s.chunks[q/ssChunkQ]
			if bl := q % ssChunkQ / ssBlockQ; c.wide != nil {
				prefetch(unsafe.Pointer(&c.wide[bl]))
			} else {
				prefetch(unsafe.Pointer(&c.idx[bl]))
			}
		}
		for _, q := range qs[:len(b)] {
			c := s.chunks[q/ssChunkQ]
			j := q % ssChunkQ
			start := c.blockStart(j / ssBlockQ)
			hb := c.n + ssChunkQ
			p := min(start+(j%ssBlockQ)*hb/ssChunkQ, hb-1)
			prefetch(unsafe.Pointer(&c.high[start>>6])) // the scan starts at the block's start
			prefetch(unsafe.Pointer(&c.high[p>>6]))
			if c.n > 0 {
				e := min(p-min(p, j), c.n-1)
				prefetch(unsafe.Pointer(&c.low[e*uint64(s.s)>>6]))
			}
		}
	}
}

// mergeChunk builds chunk ci of a set like s from s's entries without the
// tags in drop and adds (j<<s | value, sorted, j < ssChunkQ), using buf as
// scratch; an add equal to an entry kept is one entry. It returns the
// chunk, the adds that were new, and the scratch.
func (s *sealedSet) mergeChunk(ci uint64, drop uint64, adds []uint64, buf []uint64) (*ssChunk, int, []uint64) {
	old := s.chunks[ci]
	if len(adds) == 0 && (old.n == 0 || drop == 0) {
		return old, 0, buf
	}
	n := int(old.n)
	buf = slices.Grow(buf[:0], 2*n+len(adds))[:2*n+len(adds)]
	olds := buf[:old.decodeKeep(s.s, s.a, drop, buf[:n])]
	out, dups := olds, 0
	if len(adds) > 0 {
		out = buf[n:n]
		i, k := 0, 0
		for i < len(olds) && k < len(adds) {
			switch o, a := olds[i], adds[k]; {
			case a < o:
				out = append(out, a)
				k++
			case a > o:
				out = append(out, o)
				i++
			default: // already held: one entry
				out = append(out, o)
				i, k, dups = i+1, k+1, dups+1
			}
		}
		out = append(out, olds[i:]...)
		out = append(out, adds[k:]...)
	}
	if len(out) == 0 {
		return ssEmptyChunk, 0, buf
	}
	return buildChunk(out, s.s), len(adds) - dups, buf
}

// liveMap relates a hybrid's live table to its set: a key's set quotient
// q comes from H1 by multiply-shift over nq, its live home slot k from the
// same H1 over the live table's S home slots (qtable.quotient). For a
// given k, H1/2^64 lies in [k/S, (k+1)/S), so q lies in [⌊k·nq/S⌋,
// ⌈(k+1)·nq/S⌉): at most ⌈nq/S⌉ + 1 values, told apart by the low d bits
// of q, which the live entry keeps above the remainder. A lookup needs no
// division; the seal recomputes q = ⌊k·nq/S⌋ + ((q − ⌊k·nq/S⌋) mod 2^d).
type liveMap struct {
	nq, slots uint64
	d         uint
}

func newLiveMap(nq, slots uint64) liveMap {
	return liveMap{nq: nq, slots: slots, d: uint(bits.Len64((nq + slots - 1) / slots))}
}

// base is ⌊k·nq/S⌋ for the live home position x: the least set quotient
// of a key whose home is x.
func (m liveMap) base(x uint64) uint64 {
	hi, lo := bits.Mul64(posIndex(x), m.nq)
	b, _ := bits.Div64(hi, lo, m.slots)
	return b
}

// setQuotient is the set quotient of a live entry of value v (low d bits
// of q above r remainder bits) at home position x.
func (m liveMap) setQuotient(x, v uint64, r uint) uint64 {
	base := m.base(x)
	return base + (v>>r-base)&(1<<m.d-1)
}

// hybrid is a fingerprint table split in two: the generation taking
// inserts in a quotient table of its own (entries q mod 2^d ‖ remainder,
// no tag: all of its entries are of that generation), the sealed
// generations in a sealedSet of tagged entries.
type hybrid struct {
	live *qtable
	set  *sealedSet
	m    liveMap
	r    uint // remainder bits

	adds, buf []uint64 // seal's scratch
	pend      []sealEntry
}

// hybridSize is the sizing of a hybrid: the live table's home blocks, the
// entries of the whole table at its peak (capacity: G−1 full sealed
// generations and a full live table; the rate depends only on the total),
// the set's quotients, the remainder bits, and the rate at the peak.
type hybridSize struct {
	nblocks  uint64
	capacity uint64
	nq       uint64
	r        uint
	fpr      float64
}

// sealedSizing sizes a hybrid of G generations of perGen keys each, for
// a rate within share·fpr at the peak (G−1 full sealed generations and a
// full live table): the live table at load alpha, and
// of the remainders and set densities that meet the rate, the pair of the
// least memory. ok is false when no remainder of at most qMaxBits−d−1
// bits meets it.
func sealedSizing(perGen uint64, gens int, fpr, alpha, share float64) (hybridSize, bool) {
	a := tagBits(gens)
	nb := max(1, uint64(math.Ceil(float64(perGen)/alpha/qSlots)))
	slots := nb * qSlots
	sealed := float64(perGen) * float64(gens-1)
	best, bestBits := hybridSize{}, math.Inf(1)
	// Remainders far from log2(1/fpr) never win: each bit more costs a bit
	// per entry, each bit less doubles the quotients. ±4 bits around it.
	lg := int(math.Log2(1 / fpr))
	for r := uint(max(1, lg-4)); r <= uint(max(1, lg+4)) && r+a < ssMaxS; r++ {
		// Densities ρ = sealed entries per quotient, from sparse to dense.
		for rho := 0.25; rho <= 4; rho += 0.005 {
			nq := max(ssChunkQ, uint64(math.Ceil(sealed/rho/ssChunkQ))*ssChunkQ)
			m := newLiveMap(nq, slots)
			if r+m.d >= qMaxBits {
				continue
			}
			// A never-added key matches an entry when its set quotient
			// and remainder are the entry's: for a sealed entry 1/nq ·
			// 2^−r, and for a live one as much (same home, 1/S, then the
			// same quotient among the ~nq/S of that home, then the
			// remainder): all G generations' entries over nq quotients.
			rate := (sealed + alpha*float64(slots)) / float64(nq) * math.Exp2(-float64(r))
			if rate > share*fpr {
				continue
			}
			// Bits: the set's entries (s + 1 each), its quotients (1 each
			// + the index), the live table's pages.
			b := sealed*float64(r+a+1) + float64(nq)*(1+16.0/ssBlockQ) + float64(qBytes(nb, r+m.d))*8
			if b < bestBits {
				bestBits = b
				best = hybridSize{nblocks: nb, capacity: uint64(sealed + alpha*float64(slots)), nq: nq, r: r, fpr: rate}
			}
		}
	}
	return best, !math.IsInf(bestBits, 1)
}

func newHybrid(size hybridSize, gens int) *hybrid {
	set := newSealedSet(size.nq, size.r, tagBits(gens))
	m := newLiveMap(set.nq, size.nblocks*qSlots)
	return &hybrid{live: newQtable(size.nblocks, m.d+size.r, 0), set: set, m: m, r: size.r}
}

func (h *hybrid) bytes() uint64 { return h.live.bytes() + h.set.bytes() }

// liveFull reports whether the live table is at its peak load.
func (h *hybrid) liveFull() bool {
	return h.live.entries >= uint64(tableAlphaMax*float64(h.live.slots()))
}

// key is h's set quotient, its live position and live entry, and its
// remainder.
func (h *hybrid) key(k Hash) (q, x, v, rem uint64) {
	q = h.set.quotient(k.H1)
	rem = k.H2 >> (64 - h.r)
	return q, h.live.quotient(k.H1), (q&(1<<h.m.d-1))<<h.r | rem, rem
}

// lookup reports whether k has an entry in the live table, and the tags
// of its entries in the set.
func (h *hybrid) lookup(k Hash) (live bool, tags uint64) {
	q, x, v, rem := h.key(k)
	return h.live.tags(x, v) != 0, h.set.tags(q, rem)
}

// testAndAdd is lookup, and adds k to the live table when it has no entry
// there; added is false when the live table could not take it (full).
func (h *hybrid) testAndAdd(k Hash) (live bool, tags uint64, added bool) {
	q, x, v, rem := h.key(k)
	start, end, found := h.live.run(x)
	if found && h.live.tagsIn(start, end, v) != 0 {
		return true, h.set.tags(q, rem), false
	}
	tags = h.set.tags(q, rem)
	return false, tags, h.live.insertRun(x, v, start, end, found)
}

// touch prefetches what the lookups of hs will read first, so that their cache
// misses overlap: the live table's metadata and home entry, the set's
// index and the words its bucket is likely in.
func (h *hybrid) touch(hs []Hash) {
	h.live.touch(hs)
	h.set.touch(hs)
}

// seal ends the live generation — or, with drop 0 and the same tag again,
// only empties a full live table into the set (an early seal: the
// generation goes on taking inserts) —: its entries go into the set with
// tag tag (one entry where the set already holds it), the set's entries
// of the tags in drop leave it (the generations
// that left the window, so that their tags can be reused), and the live
// table is cleared (when drop holds tag too, the live generation left
// with the others: its entries are not kept). One pass over the set and the live table in quotient
// order, chunk by chunk.
func (h *hybrid) seal(tag, drop uint64) {
	s := h.set
	cur := newQCursor(h.live)
	lx, lv, lok := cur.next()
	if drop>>tag&1 != 0 {
		lok = false // the live generation leaves too (a jump of G or more)
	}
	pend := h.pend[:0] // live entries of later chunks, met early
	var n, added uint64
	for ci := uint64(0); ci < uint64(len(s.chunks)); ci++ {
		base, end := ci*ssChunkQ, (ci+1)*ssChunkQ
		adds := h.adds[:0]
		keep := pend[:0]
		for _, e := range pend {
			if e.q < end {
				adds = insertSorted(adds, (e.q-base)<<s.s|e.low)
			} else {
				keep = append(keep, e)
			}
		}
		pend = keep
		for lok {
			q := h.m.setQuotient(lx, lv, h.r)
			low := (lv&(1<<h.r-1))<<s.a | tag
			if q < end {
				adds = insertSorted(adds, (q-base)<<s.s|low)
			} else {
				pend = append(pend, sealEntry{q, low})
			}
			x := lx
			lx, lv, lok = cur.next()
			if q >= end && h.m.base(x) >= end {
				break // every later entry is of a later chunk
			}
		}
		// Two keys of one set quotient and remainder can have different
		// live homes: in the set they are one entry.
		adds = slices.Compact(adds)
		var c *ssChunk
		var fresh int
		c, fresh, h.buf = s.mergeChunk(ci, drop, adds, h.buf)
		added += uint64(fresh)
		s.chunks[ci] = c
		n += c.n
		h.adds = adds
	}
	h.pend = pend[:0]
	for t := range s.counts {
		if drop>>t&1 != 0 {
			s.counts[t] = 0
		}
	}
	s.counts[tag] += added
	s.n = n
	h.live.clear()
}

type sealEntry struct{ q, low uint64 }

// insertSorted inserts x into the sorted xs (nearly always at the end:
// the live table yields entries nearly in the set's order).
func insertSorted(xs []uint64, x uint64) []uint64 {
	xs = append(xs, x)
	i := len(xs) - 1
	for ; i > 0 && xs[i-1] > x; i-- {
		xs[i] = xs[i-1]
	}
	xs[i] = x
	return xs
}

// qCursor yields a quotient table's entries in order: by home position,
// then value.
type qCursor struct {
	t      *qtable
	b, occ uint64 // block, its occupied quotients not yet visited
	pos    uint64 // first position after the last run
	x      uint64 // quotient of the current run
	i, end uint64
	inRun  bool
}

func newQCursor(t *qtable) *qCursor {
	return &qCursor{t: t, occ: t.occ(0)}
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

// sealedPeakBytes is the memory of a hybrid of this size at its fullest:
// the live table, and a set of G−1 generations of perGen entries.
func sealedPeakBytes(hs hybridSize, perGen uint64, gens int) uint64 {
	nq := max(ssChunkQ, (hs.nq+ssChunkQ-1)/ssChunkQ*ssChunkQ)
	m := newLiveMap(nq, hs.nblocks*qSlots)
	e := perGen * uint64(gens-1)
	s := uint64(hs.r + tagBits(gens))
	chunks := nq / ssChunkQ
	set := (nq+e)/8 + e*s/8 + chunks*(ssChunkQ/ssBlockQ*2+96+8+16)
	return qBytes(hs.nblocks, m.d+hs.r) + set
}

// frozen is a copy of the set that the next seal leaves as it is: the
// chunk list and counts copied, the chunks (immutable) shared.
func (s *sealedSet) frozen() *sealedSet {
	c := *s
	c.chunks, c.counts = slices.Clone(s.chunks), slices.Clone(s.counts)
	return &c
}
