package bloom

import (
	"fmt"
	"math/bits"
	"sync/atomic"
	"unsafe"
)

// A qtable is a quotient filter (Bender et al. 2012) with the rank-and-select
// metadata of Pandey et al. 2017: a key's hash gives a quotient x (its home
// slot) and an entry value v of s bits; entries of one quotient form a run,
// runs lie in quotient order, each at its home slot or right after the run
// before it, so that a cluster of runs is a stretch of consecutive slots.
// The tagged shard stores v = remainder<<a | tag.
//
// Layout: blocks of 56 slots. A block's metadata is two words: its
// occupieds (bit i: some entry has quotient i of the block) and its
// runends (bit i: slot i ends a run) in bits 0–55, and its 16-bit offset
// in the top bytes of both. Four blocks' metadata fill one 64-byte cache
// line; the entries, s bits each, are packed in a separate array, 56·s
// bits per block. That is s + 2.29 bits per slot. A lookup reads one line
// of metadata and, usually, one line of entries.
//
// Slots are addressed as positions b<<6 | i (block b, slot i < 56).
//
// off(b) counts the runs of quotients below block b that end in block b
// or later. The runends from block b on are then, in order, those off(b)
// runs, followed by the runs of the occupied quotients of block b and
// beyond, so the run of an occupied quotient x in block b ends at the
// (off(b) + rank(x))-th runend from block b on: one short forward scan of
// runends words.
//
// Runs are sorted by value, so the table's bytes are a function of the set
// of (quotient, value) entries alone, whatever the order of insertion:
// canonical. Empty slots hold 0.
//
// Blocks past the quotient range (spill blocks) take runs pushed past the
// last home slot. An insert that would need a slot past them, or an offset
// past 65535, changes nothing and reports failure: the caller then opens a
// larger table.
//
// Pages are copy-on-write like a Filter's: a snapshot freezes the page
// tables, and the owner clones a page before its first write after it.
type qtable struct {
	r, a, s uint   // remainder bits, tag bits, entry bits r+a (< qMaxBits)
	nblocks uint64 // blocks of home slots: quotients are positions in blocks < nblocks
	pblocks uint64 // physical blocks: nblocks + spill
	bpp     uint64 // blocks per entry page
	bppM    uint64 // ⌈2^64 / bpp⌉, for the division by bpp
	meta    []*[pageWords]uint64
	ents    []*[pageWords]uint64
	entries uint64

	// Copy-on-write state, as in Filter: while cow is set, writes go
	// through writable, which clones the pages a snapshot may hold.
	cow       bool
	epoch     uint32
	metaEpoch []uint32
	entsEpoch []uint32
	refs      atomic.Int32
	buf       []uint64 // retain's scratch
}

const (
	qSlots     = 56 // slots per block
	qSlotMask  = 1<<qSlots - 1
	qMetaShift = 12 // 4096 blocks of metadata per page
	qMaxOffset = 1<<16 - 1
	qMaxBits   = 56 // s = r + a stays below this
	qMaxBlocks = 1 << 32
)

// qSpill is the number of spill blocks of a table of nblocks blocks: runs
// pushed past the last home slot land there. 64 blocks make a failed
// insert at 95 % load a practical impossibility for large tables; a small
// one gets as many as it has.
func qSpill(nblocks uint64) uint64 { return max(2, min(nblocks, 64)) }

// qGeometry is the physical layout of a table of nblocks home blocks and
// s-bit entries.
func qGeometry(nblocks uint64, s uint) (pblocks, bpp, metaPages, entPages uint64) {
	pblocks = nblocks + qSpill(nblocks)
	bpp = pageWords * 64 / (qSlots * uint64(s))
	metaPages = (pblocks + 1<<qMetaShift - 1) >> qMetaShift
	entPages = (pblocks + bpp - 1) / bpp
	return
}

// qBytes is the memory of a table of nblocks home blocks and s-bit
// entries: whole pages, the last ones used in part.
func qBytes(nblocks uint64, s uint) uint64 {
	_, _, mp, ep := qGeometry(nblocks, s)
	return (mp + ep) * pageBytes
}

func newQtable(nblocks uint64, r, a uint) *qtable {
	t := &qtable{r: r, a: a, s: r + a, nblocks: nblocks}
	var mp, ep uint64
	t.pblocks, t.bpp, mp, ep = qGeometry(nblocks, t.s)
	t.bppM = ^uint64(0)/t.bpp + 1
	t.meta, t.ents = carvePages(mp), carvePages(ep)
	t.metaEpoch, t.entsEpoch = make([]uint32, mp), make([]uint32, ep)
	return t
}

// bytes is the memory of the table's pages.
func (t *qtable) bytes() uint64 { return uint64(len(t.meta)+len(t.ents)) * pageBytes }

// slots is the number of home slots (the quotient range).
func (t *qtable) slots() uint64 { return t.nblocks * qSlots }

// limit is the first position past the table.
func (t *qtable) limit() uint64 { return t.pblocks << 6 }

// quotient maps the first half of a hash to a home position: a block by
// multiply-shift, and a slot in it from the rest of the product.
func (t *qtable) quotient(h1 uint64) uint64 {
	b, lo := bits.Mul64(h1, t.nblocks)
	i, _ := bits.Mul64(lo, qSlots)
	return b<<6 | i
}

// next is the position after p.
func next(p uint64) uint64 {
	if p&63 == qSlots-1 {
		return p | 63 + 1
	}
	return p + 1
}

// posIndex numbers positions densely (for counting slots).
func posIndex(p uint64) uint64 { return p>>6*qSlots + p&63 }

func (t *qtable) metaAt(b uint64) *[pageWords]uint64 { return t.meta[b>>qMetaShift] }

func (t *qtable) occ(b uint64) uint64 {
	return t.meta[b>>qMetaShift][b&(1<<qMetaShift-1)*2] & qSlotMask
}

func (t *qtable) runends(b uint64) uint64 {
	return t.meta[b>>qMetaShift][b&(1<<qMetaShift-1)*2+1] & qSlotMask
}

func (t *qtable) off(b uint64) uint64 {
	m := t.meta[b>>qMetaShift]
	w := b & (1<<qMetaShift - 1) * 2
	return m[w]>>56 | m[w+1]>>56<<8
}

func (t *qtable) setOff(b, v uint64) {
	m := t.meta[b>>qMetaShift]
	w := b & (1<<qMetaShift - 1) * 2
	m[w] = m[w]&qSlotMask | v&0xff<<56
	m[w+1] = m[w+1]&qSlotMask | v>>8<<56
}

func (t *qtable) mask() uint64 { return 1<<t.s - 1 }

// entAt locates the entry of position p: its page and bit offset there.
func (t *qtable) entAt(p uint64) (*[pageWords]uint64, uint64) {
	b := p >> 6
	pi, _ := bits.Mul64(b, t.bppM)
	return t.ents[pi], ((b-pi*t.bpp)*qSlots + p&63) * uint64(t.s)
}

// get reads the entry at position p.
func (t *qtable) get(p uint64) uint64 {
	pg, bit := t.entAt(p)
	k, o := bit>>6, bit&63
	v := pg[k] >> o
	if o+uint64(t.s) > 64 {
		v |= pg[k+1] << (64 - o)
	}
	return v & t.mask()
}

// set writes the entry at position p (its page must be writable).
func (t *qtable) set(p, v uint64) {
	pg, bit := t.entAt(p)
	k, o := bit>>6, bit&63
	m := t.mask()
	pg[k] = pg[k]&^(m<<o) | v<<o
	if o+uint64(t.s) > 64 {
		pg[k+1] = pg[k+1]&^(m>>(64-o)) | v>>(64-o)
	}
}

func (t *qtable) runendAt(p uint64) bool { return t.runends(p>>6)>>(p&63)&1 != 0 }

func (t *qtable) setRunend(p uint64, on bool) {
	b := p >> 6
	m := t.meta[b>>qMetaShift]
	w := b&(1<<qMetaShift-1)*2 + 1
	if on {
		m[w] |= 1 << (p & 63)
	} else {
		m[w] &^= 1 << (p & 63)
	}
}

func (t *qtable) setOcc(x uint64, on bool) {
	b := x >> 6
	m := t.meta[b>>qMetaShift]
	w := b & (1<<qMetaShift - 1) * 2
	if on {
		m[w] |= 1 << (x & 63)
	} else {
		m[w] &^= 1 << (x & 63)
	}
}

// nthRunend is the position of the n-th (n ≥ 1) runend from block b on.
// The table's structure guarantees it exists (see verify).
func (t *qtable) nthRunend(b, n uint64) uint64 {
	for {
		re := t.runends(b)
		c := uint64(bits.OnesCount64(re))
		if n <= c {
			return b<<6 | uint64(select64(re, uint(n-1)))
		}
		n -= c
		b++
	}
}

// prevRunend is the last runend before position p and in block b or
// later, or -1 if there is none.
func (t *qtable) prevRunend(p, b uint64) int64 {
	for c := p >> 6; ; c-- {
		re := t.runends(c)
		if c == p>>6 {
			re &= 1<<(p&63) - 1
		}
		if re != 0 {
			return int64(c<<6 + 63 - uint64(bits.LeadingZeros64(re)))
		}
		if c == b {
			return -1
		}
	}
}

// rank is the number of runends from block x>>6 on up to the run of
// the largest occupied quotient ≤ x: off + occupied quotients of the block
// up to x. occ is the block's occupieds.
func (t *qtable) rank(x, occ uint64) uint64 {
	bit := uint64(1) << (x & 63)
	return t.off(x>>6) + uint64(bits.OnesCount64(occ&(bit|(bit-1))))
}

// run locates the run of quotient x: found is false if x is not occupied;
// else [start, end] are its positions.
func (t *qtable) run(x uint64) (start, end uint64, found bool) {
	b := x >> 6
	occ := t.occ(b)
	if occ>>(x&63)&1 == 0 {
		return 0, 0, false
	}
	n := t.rank(x, occ)
	end = t.nthRunend(b, n)
	start = x
	if n >= 2 {
		if prev := t.prevRunend(end, b); prev >= 0 && uint64(prev) >= start {
			start = next(uint64(prev))
		}
	}
	return start, end, true
}

// firstEmpty is the first empty position at or after p (possibly past
// the table: the caller checks).
//
// D(j), the runs of quotients ≤ j not ended before j, is off(c) + the
// occupied quotients of block c up to j − the runends of block c before
// j; j is empty exactly when D(j) = 0. D only drops right after a runend:
// after the k-th runend of the block, at r, D(r+1) = g(k) = off(c) +
// occupied up to r+1 − k. Since g drops by at most 1 from one runend to
// the next, after g(k) > 0 the next zero is g(k) runends on at the
// earliest: a few selects per block.
func (t *qtable) firstEmpty(p uint64) uint64 {
	c, i := p>>6, p&63
	occ, re, o := t.occ(c), t.runends(c), t.off(c)
	if o+uint64(bits.OnesCount64(occ&(2<<i-1))) == uint64(bits.OnesCount64(re&(1<<i-1))) {
		return p
	}
	k := uint64(bits.OnesCount64(re&(1<<i-1))) + 1 // first runend at or after i
	for {
		n := uint64(bits.OnesCount64(re))
		for k <= n {
			r := uint64(select64(re, uint(k-1)))
			if r == qSlots-1 {
				break // r+1 is the next block's first slot
			}
			g := o + uint64(bits.OnesCount64(occ&(4<<r-1))) - k
			if g == 0 {
				return c<<6 | (r + 1)
			}
			k += g
		}
		if c++; c >= t.pblocks {
			return t.limit()
		}
		occ, re, o = t.occ(c), t.runends(c), t.off(c)
		if o+occ&1 == 0 {
			return c << 6
		}
		k = 1
	}
}

// tags returns the tags (bit t of the result: tag t) of the entries of
// quotient x whose value without the tag is rem.
func (t *qtable) tags(x, rem uint64) uint64 {
	start, end, ok := t.run(x)
	if !ok {
		return 0
	}
	return t.tagsIn(start, end, rem)
}

func (t *qtable) tagsIn(start, end, rem uint64) (tags uint64) {
	for i := start; i <= end; i = next(i) {
		v := t.get(i)
		if r := v >> t.a; r == rem {
			tags |= 1 << (v & (1<<t.a - 1))
		} else if r > rem {
			break
		}
	}
	return tags
}

// insert adds entry v at quotient x, keeping the run sorted; an entry
// already present is left as it is (reported true). It returns false and
// changes nothing if the table cannot take it.
func (t *qtable) insert(x, v uint64) bool {
	start, end, found := t.run(x)
	return t.insertRun(x, v, start, end, found)
}

// insertRun is insert with the run of x already located (run's results).
func (t *qtable) insertRun(x, v, start, end uint64, found bool) bool {
	b := x >> 6
	occ := t.occ(b)
	var p, runEnd uint64
	newRun, appendEnd := !found, false
	if newRun {
		// After the run of the largest occupied quotient below x, if that
		// reaches x.
		p = x
		if n := t.rank(x, occ); n > 0 {
			if e := t.nthRunend(b, n); e >= p {
				p = next(e)
			}
		}
	} else {
		p = start
		for {
			c := t.get(p)
			if c == v {
				return true
			}
			if c > v {
				break
			}
			if p == end {
				p, appendEnd = next(p), true
				break
			}
			p = next(p)
		}
		runEnd = end
	}
	e := t.firstEmpty(p)
	if e >= t.limit() {
		return false
	}
	for c := b + 1; c <= e>>6; c++ {
		if t.off(c) >= qMaxOffset {
			return false
		}
	}
	if t.cow {
		t.writable(b, e>>6)
	}
	t.shiftRight(p, e)
	t.set(p, v)
	switch {
	case newRun:
		t.setRunend(p, true)
		t.setOcc(x, true)
	case appendEnd:
		t.setRunend(runEnd, false)
		t.setRunend(p, true)
	default:
		t.setRunend(p, false)
	}
	// off(c) = occupied quotients before block c − runends before block c,
	// for the blocks whose start the edit passed.
	for c := b + 1; c <= e>>6; c++ {
		bnd := c << 6
		o := t.off(c)
		if newRun {
			o++ // x is before block c
			if p < bnd {
				o--
			}
		}
		if appendEnd {
			if runEnd < bnd {
				o++
			}
			if p < bnd {
				o--
			}
		}
		// The runend of the last slot of block c−1 moved to block c.
		if last := bnd - 64 + qSlots - 1; last >= p && last < e && t.runendAt(bnd) {
			o++
		}
		t.setOff(c, o)
	}
	t.entries++
	return true
}

// shiftRight moves the entries and runend bits of positions [p, e) one
// position on, to [next(p), e]; position p keeps its old content (the
// caller overwrites it). The entries of consecutive blocks of a page are
// contiguous bits, so they move as one range per page.
func (t *qtable) shiftRight(p, e uint64) {
	if e == p {
		return
	}
	t.shiftRunends(p, e)
	s := uint64(t.s)
	for hi := e; ; {
		pg, hbit := t.entAt(hi)
		pi, _ := bits.Mul64(hi>>6, t.bppM)
		first := pi * t.bpp // first block of the page
		if first <= p>>6 {
			_, lo := t.entAt(p)
			shiftBitsUp(pg[:], lo, hbit+s, s)
			return
		}
		shiftBitsUp(pg[:], 0, hbit+s, s)
		// The page's first entry takes the last one of the page before.
		prev := (first-1)<<6 | (qSlots - 1)
		putBits(pg[:], 0, s, t.get(prev))
		hi = prev
	}
}

// shiftRunends moves the runend bits of positions [p, e) to [next(p), e].
func (t *qtable) shiftRunends(p, e uint64) {
	for c := e >> 6; ; c-- {
		lo, hi := uint64(0), uint64(qSlots-1)
		if c == p>>6 {
			lo = p & 63
		}
		if c == e>>6 {
			hi = e & 63
		}
		mp := t.metaAt(c)
		w := c&(1<<qMetaShift-1)*2 + 1
		if hi > lo {
			m := (uint64(2)<<hi - 1) &^ (uint64(2)<<lo - 1) // bits lo+1 … hi
			re := mp[w]
			mp[w] = re&^m | (re<<1)&m
		}
		if c == p>>6 {
			return
		}
		// Bit 0 takes the last bit of the block before.
		mp[w] = mp[w]&^1 | t.runends(c-1)>>(qSlots-1)&1
	}
}

// getBits reads n (< 64) bits at bit offset bit of ws.
func getBits(ws []uint64, bit, n uint64) uint64 {
	k, o := bit>>6, bit&63
	v := ws[k] >> o
	if o+n > 64 {
		v |= ws[k+1] << (64 - o)
	}
	return v & (1<<n - 1)
}

// putBits writes the n (< 64) low bits of v at bit offset bit of ws.
func putBits(ws []uint64, bit, n, v uint64) {
	k, o := bit>>6, bit&63
	m := uint64(1)<<n - 1
	ws[k] = ws[k]&^(m<<o) | v<<o
	if o+n > 64 {
		ws[k+1] = ws[k+1]&^(m>>(64-o)) | v>>(64-o)
	}
}

// shiftBitsUp moves the bits [lo, hi−by) of the bit array ws to
// [lo+by, hi) (0 < by < 64); bits [lo, lo+by) and those outside [lo, hi)
// are unchanged.
func shiftBitsUp(ws []uint64, lo, hi, by uint64) {
	dlo := lo + by // destination range [dlo, hi)
	if dlo >= hi {
		return
	}
	kl, kh := dlo>>6, (hi-1)>>6
	topMask := ^uint64(0) >> (63 - (hi-1)&63) // bits of word kh below hi
	lowMask := ^uint64(0) << (dlo & 63)       // bits of word kl from dlo
	shifted := func(k uint64) uint64 {
		v := ws[k] << by
		if k > 0 {
			v |= ws[k-1] >> (64 - by)
		}
		return v
	}
	if kl == kh {
		m := topMask & lowMask
		ws[kh] = ws[kh]&^m | shifted(kh)&m
		return
	}
	ws[kh] = ws[kh]&^topMask | shifted(kh)&topMask
	w := ws[kl : kh+1]
	for k := len(w) - 2; k > 0; k-- {
		w[k] = w[k]<<by | w[k-1]>>(64-by)
	}
	ws[kl] = ws[kl]&^lowMask | shifted(kl)&lowMask
}

// drop removes the entries whose tag is in tags (bit t: tag t), in one
// streaming pass over the blocks. Runs lie in quotient order, so the
// entry at a position belongs to the oldest occupied quotient seen so far
// whose run has not ended (a queue). Entries only move towards their home
// slots: the pass rewrites the table in place behind its read position,
// each block read whole before anything is written to it. Metadata is
// rebuilt.
func (t *qtable) drop(tags uint64) {
	if t.entries == 0 || tags == 0 {
		return
	}
	if t.cow {
		t.writable(0, t.pblocks-1)
	}
	// The queue holds at most the runs pending at a block's start (an
	// offset, < 2^16) and the block's own: it never grows, and a push is
	// a store and an add.
	if cap(t.buf) < qMaxOffset+qSlots+1 {
		t.buf = make([]uint64, qMaxOffset+qSlots+1)
	}
	var (
		vals     [qSlots]uint64
		queue    = t.buf[:cap(t.buf)] // quotients whose runs are being read
		head, qn uint64
		np       uint64 // the next output position: right after the last entry written
		last     uint64 // the last position written
		out      uint64 // 1: an entry of the run being read was written
		cur      entCursor
		kept     uint64
		s        = uint64(t.s)
		mask     = t.mask()
		tm       = uint64(1)<<t.a - 1
		zeroMeta = ^uint64(qSlotMask)
	)
	for b := range t.pblocks {
		mp := t.metaAt(b)
		mw := b & (1<<qMetaShift - 1) * 2
		occ, re := mp[mw]&qSlotMask, mp[mw+1]&qSlotMask
		if occ == 0 && head == qn {
			continue // no run reaches into the block: it is empty
		}
		// Read the block whole, then clear it: the output written to it
		// below lies at or before the read position.
		pg, bit := t.entAt(b << 6)
		unpack(pg[:], bit, s, mask, vals[:])
		clearBits(pg[:], bit, bit+qSlots*s)
		mp[mw] &= zeroMeta
		mp[mw+1] &= zeroMeta
		for i := uint64(0); i < qSlots; i++ {
			if head == qn {
				// Between clusters: go to the next home slot in use.
				head, qn = 0, 0
				rest := occ >> i
				if rest == 0 {
					break
				}
				i += uint64(bits.TrailingZeros64(rest))
			}
			// Without branches on the bits: which slots are home slots
			// and which end runs is as good as random.
			queue[qn] = b<<6 | i
			qn += occ >> i & 1
			x := queue[head]
			if v := vals[i]; tags>>(v&tm)&1 == 0 {
				// A run starts at its home slot or right after the run
				// before; an entry of the same run follows the last.
				p := max(x, np)
				if kept > 0 && p == np {
					cur.advance(t)
				} else {
					cur.seek(t, p)
				}
				cur.or(v, s)
				last, np, out = p, next(p), 1
				kept++
			}
			// At a runend, the run written (if any) ends at last, and its
			// quotient is occupied.
			end := re >> i & 1
			closes := end & out
			lb := last >> 6
			t.meta[lb>>qMetaShift][lb&(1<<qMetaShift-1)*2+1] |= closes << (last & 63)
			xb := x >> 6
			t.meta[xb>>qMetaShift][xb&(1<<qMetaShift-1)*2] |= closes << (x & 63)
			out &^= end
			head += end
		}
	}
	t.entries = kept
	t.rebuildOffsets()
}

// entCursor writes entries at consecutive positions of a table.
type entCursor struct {
	pos uint64
	pg  *[pageWords]uint64
	bit uint64
}

func (c *entCursor) seek(t *qtable, p uint64) {
	c.pos = p
	c.pg, c.bit = t.entAt(p)
}

func (c *entCursor) advance(t *qtable) {
	if c.pos&63 == qSlots-1 {
		c.seek(t, next(c.pos))
		return
	}
	c.pos++
	c.bit += uint64(t.s)
}

// or writes v at the cursor into cleared bits.
func (c *entCursor) or(v, s uint64) {
	k, o := c.bit>>6, c.bit&63
	c.pg[k] |= v << o
	if o+s > 64 {
		c.pg[k+1] |= v >> (64 - o)
	}
}

// unpack reads len(vals) consecutive entries of s bits from bit offset bit
// of ws.
func unpack(ws []uint64, bit, s, mask uint64, vals []uint64) {
	for i := range vals {
		k, o := bit>>6, bit&63
		v := ws[k] >> o
		if o+s > 64 {
			v |= ws[k+1] << (64 - o)
		}
		vals[i] = v & mask
		bit += s
	}
}

// clearBits clears bits [lo, hi) of ws.
func clearBits(ws []uint64, lo, hi uint64) {
	for lo < hi {
		k, o := lo>>6, lo&63
		n := min(64-o, hi-lo)
		m := ^uint64(0)
		if n < 64 {
			m = (1<<n - 1) << o
		}
		ws[k] &^= m
		lo += n
	}
}

// runendFrom is the first runend at or after position p, or limit if
// there is none.
func (t *qtable) runendFrom(p uint64) uint64 {
	for b := p >> 6; b < t.pblocks; b++ {
		re := t.runends(b)
		if b == p>>6 {
			re &^= 1<<(p&63) - 1
		}
		if re != 0 {
			return b<<6 | uint64(bits.TrailingZeros64(re))
		}
	}
	return t.limit()
}

// rebuildOffsets recomputes every block's offset from the occupieds and
// runends: off(c) = occupied quotients before block c − runends before it.
func (t *qtable) rebuildOffsets() {
	var occ, re uint64
	for c := uint64(0); c < t.pblocks; c++ {
		t.setOff(c, occ-re)
		occ += uint64(bits.OnesCount64(t.occ(c)))
		re += uint64(bits.OnesCount64(t.runends(c)))
	}
}

// clear removes every entry.
func (t *qtable) clear() {
	if t.refs.Load() != 0 {
		t.meta, t.ents = carvePages(uint64(len(t.meta))), carvePages(uint64(len(t.ents)))
		for i := range t.metaEpoch {
			t.metaEpoch[i] = t.epoch
		}
		for i := range t.entsEpoch {
			t.entsEpoch[i] = t.epoch
		}
	} else {
		for _, p := range t.meta {
			clear(p[:])
		}
		for _, p := range t.ents {
			clear(p[:])
		}
		t.cow = false
	}
	t.entries = 0
}

// writable makes the pages of blocks lo … hi private to the owner,
// cloning those a snapshot may hold, and clears cow once no snapshot is
// outstanding.
func (t *qtable) writable(lo, hi uint64) {
	if t.refs.Load() == 0 {
		// The atomic load orders the released snapshots' reads before
		// our writes.
		t.cow = false
		return
	}
	for pi := lo >> qMetaShift; pi <= hi>>qMetaShift; pi++ {
		if t.metaEpoch[pi] != t.epoch {
			p := *t.meta[pi]
			t.meta[pi] = &p
			t.metaEpoch[pi] = t.epoch
		}
	}
	plo, _ := bits.Mul64(lo, t.bppM)
	phi, _ := bits.Mul64(hi, t.bppM)
	for pi := plo; pi <= phi; pi++ {
		if t.entsEpoch[pi] != t.epoch {
			p := *t.ents[pi]
			t.ents[pi] = &p
			t.entsEpoch[pi] = t.epoch
		}
	}
}

// qtableView is an immutable view of a table taken by snapshot.
type qtableView struct {
	t          *qtable
	meta, ents []*[pageWords]uint64
	entries    uint64
}

func (t *qtable) snapshot() qtableView {
	t.refs.Add(1)
	t.epoch++
	t.cow = true
	return qtableView{t: t, meta: append([]*[pageWords]uint64(nil), t.meta...),
		ents: append([]*[pageWords]uint64(nil), t.ents...), entries: t.entries}
}

func (v *qtableView) release() {
	if v.t != nil {
		v.t.refs.Add(-1)
		v.t = nil
	}
}

// touch prefetches the metadata and the home entry of each hash, so that
// the cache misses of a batch overlap (see Filter.touch).
func (t *qtable) touch(hs []Hash) {
	for _, h := range hs {
		q := t.quotient(h.H1)
		pg, bit := t.entAt(q)
		prefetch(unsafe.Pointer(&t.meta[q>>6>>qMetaShift][q>>6&(1<<qMetaShift-1)*2]))
		prefetch(unsafe.Pointer(&pg[bit>>6]))
	}
}

// selectPortable is the position of the k-th (0-based) set bit of x,
// which has more than k set bits: per-byte counts summed by a
// multiplication find the byte, a table the bit in it. select64 is this,
// or PDEP where the CPU runs it fast (select_amd64.go).
func selectPortable(x uint64, k uint) uint {
	c := x - x>>1&0x5555555555555555
	c = c&0x3333333333333333 + c>>2&0x3333333333333333
	c = (c + c>>4) & 0x0f0f0f0f0f0f0f0f
	cum := c * 0x0101010101010101 // byte i: set bits in bytes 0 … i
	le := (uint64(k)*0x0101010101010101 | 0x8080808080808080) - cum
	b := uint(bits.OnesCount64(le & 0x8080808080808080)) // bytes with cum ≤ k
	var before uint
	if b > 0 {
		before = uint(cum >> (8*b - 8) & 0xff)
	}
	return 8*b + uint(selectInByte[x>>(8*b)&0xff][k-before])
}

// selectInByte[x][k] is the position of the k-th set bit of the byte x.
var selectInByte = func() (t [256][8]uint8) {
	for x := range 256 {
		k := 0
		for i := range 8 {
			if x>>i&1 != 0 {
				t[x][k] = uint8(i)
				k++
			}
		}
	}
	return t
}()

// checkLayout checks what every operation relies on to stay inside the
// table, in O(blocks + runends): occupieds only for home slots, each
// block's offset as recomputed, as many runends as occupied quotients,
// and no run ending before its quotient (at each runend, the runends so
// far do not outnumber the occupied quotients up to it). A decoded table
// passes it before use, so that no input can make an operation read past
// the table; the CRCs of the format catch accidental corruption, which
// verify would also see.
func (t *qtable) checkLayout() error {
	var occs, res uint64
	for c := range t.pblocks {
		mp := t.meta[c>>qMetaShift]
		w := c & (1<<qMetaShift - 1) * 2
		o, r := mp[w]&qSlotMask, mp[w+1]&qSlotMask
		if c >= t.nblocks && o != 0 {
			return fmt.Errorf("spill block %d has occupied quotients", c)
		}
		d := occs - res // runs pending at the block's start
		if mp[w]>>56|mp[w+1]>>56<<8 != d {
			return fmt.Errorf("block %d: offset %d, recomputed %d", c, t.off(c), d)
		}
		// At no slot may the block's runends so far outnumber its occupied
		// quotients so far by more than the pending runs (a run would end
		// before its quotient): the largest prefix of runends − occupied,
		// four slots at a time.
		if d < uint64(bits.OnesCount64(r)) {
			var run int64
			for k := uint64(0); k < qSlots; k += 4 {
				e := layoutNibbles[r>>k&15|(o>>k&15)<<4]
				if run+int64(e[0]) > int64(d) {
					return fmt.Errorf("block %d: a run ends before its quotient", c)
				}
				run += int64(e[1])
			}
		}
		occs += uint64(bits.OnesCount64(o))
		res += uint64(bits.OnesCount64(r))
	}
	if occs != res {
		return fmt.Errorf("%d occupied quotients, %d runends", occs, res)
	}
	if t.entries > t.pblocks*qSlots {
		return fmt.Errorf("%d entries in %d slots", t.entries, t.pblocks*qSlots)
	}
	return nil
}

// layoutNibbles[r | o<<4] is, for four slots with runend bits r and
// occupied bits o, the largest prefix of runends − occupied quotients
// (each slot's both counted) and the whole sum.
var layoutNibbles = func() (t [256][2]int8) {
	for i := range 256 {
		r, o := i&15, i>>4
		cum, top := 0, -4
		for k := range 4 {
			cum += r>>k&1 - o>>k&1
			top = max(top, cum)
		}
		t[i] = [2]int8{int8(top), int8(cum)}
	}
	return t
}()

// verify checks the table's structure: occupieds only for home slots, as
// many runends as occupied quotients, every run found where the layout
// puts it and sorted without repeats, empty slots zero (padding included),
// the offsets and the entry count as recomputed. Every operation relies on
// these (a decoded table is verified before use), so that no input can
// make one read past the table. Cost: one pass over the slots. counts, if
// not nil, receives the number of entries per tag.
func (t *qtable) verify(counts []uint64) error {
	var occs, res uint64
	for c := range t.pblocks {
		o, r := t.occ(c), t.runends(c)
		if c >= t.nblocks && o != 0 {
			return fmt.Errorf("spill block %d has occupied quotients", c)
		}
		if t.off(c) != occs-res {
			return fmt.Errorf("block %d: offset %d, recomputed %d", c, t.off(c), occs-res)
		}
		occs += uint64(bits.OnesCount64(o))
		res += uint64(bits.OnesCount64(r))
		if res > occs {
			return fmt.Errorf("block %d: more runends than occupied quotients before it", c)
		}
	}
	if occs != res {
		return fmt.Errorf("%d occupied quotients, %d runends", occs, res)
	}
	var (
		pos     uint64 // first position not checked yet
		entries uint64
	)
	zeroUpTo := func(end uint64) error {
		for ; pos < end; pos = next(pos) {
			if t.get(pos) != 0 {
				return fmt.Errorf("empty slot %d holds an entry", posIndex(pos))
			}
		}
		return nil
	}
	for b := uint64(0); b < t.nblocks; b++ {
		occ := t.occ(b)
		for occ != 0 {
			x := b<<6 | uint64(bits.TrailingZeros64(occ))
			occ &= occ - 1
			start := max(x, pos)
			if err := zeroUpTo(start); err != nil {
				return err
			}
			end := t.runendFrom(start)
			if end >= t.limit() {
				return fmt.Errorf("run of quotient %d has no end", posIndex(x))
			}
			prev := int64(-1)
			for i := start; ; i = next(i) {
				v := int64(t.get(i))
				if v <= prev {
					return fmt.Errorf("run of quotient %d: slot %d out of order", posIndex(x), posIndex(i))
				}
				if counts != nil {
					counts[v&(1<<t.a-1)]++
				}
				prev = v
				entries++
				if i == end {
					break
				}
			}
			pos = next(end)
		}
	}
	if err := zeroUpTo(t.limit()); err != nil {
		return err
	}
	if entries != t.entries {
		return fmt.Errorf("%d entries, header says %d", entries, t.entries)
	}
	// Padding: entry bits past the last block of each page.
	for pi, pg := range t.ents {
		used := min(t.bpp, t.pblocks-uint64(pi)*t.bpp) * qSlots * uint64(t.s)
		if used&63 != 0 && pg[used>>6]>>(used&63) != 0 {
			return fmt.Errorf("entry page %d: padding bits set", pi)
		}
		for _, w := range pg[(used+63)>>6:] {
			if w != 0 {
				return fmt.Errorf("entry page %d: padding bits set", pi)
			}
		}
	}
	for pi, pg := range t.meta {
		used := min(1<<qMetaShift, t.pblocks-uint64(pi)<<qMetaShift) * 2
		for _, w := range pg[used:] {
			if w != 0 {
				return fmt.Errorf("metadata page %d: padding bits set", pi)
			}
		}
	}
	return nil
}
