package bloom

import (
	"math/bits"
	"slices"
)

// merge adds many entries to the table at once, as insert would one by
// one in ascending order, but moving each stretch of entries once: adds
// are the entries, each posIndex(quotient)<<s | value, in ascending order
// (equal ones allowed). It returns how many were not in the table yet and
// whether the table took them all. The result is the table insert would
// give (the table is canonical), except that an offset of exactly 65535
// is accepted where insert, conservatively, refuses to pass one.
//
// Slots are counted densely here (posIndex). An entry's new slot is its
// old one plus a displacement that grows by one at each entry added
// before it and shrinks by one at each empty slot crossed (the empty
// slot is filled), never below zero: runs start at their home slot or
// right after the run before. A first pass locates each added entry in
// the old table (its run, through the unchanged metadata) and finds the
// empty slots where the displacement shrinks; it records the stretches
// of old slots that move, by how much, and the entries to write. These
// are applied, last stretch first so that nothing is overwritten before
// it moves, each time the displacement is back to zero before the home
// block of the next entry (so the first pass never reads an edited
// block), and once at the end. Every slot of the old table that held an
// entry holds one afterwards (runs only grow), so nothing needs clearing.
//
// An entry that would land past the spill blocks fails the merge before
// anything of its stretch is written; the stretches applied before stay,
// and the table is left consistent, without the rest. Offsets are rebuilt
// at the end; one past 65535 empties the table (the caller discards it).
func (t *qtable) merge(adds []uint64) (added uint64, ok bool) {
	if len(adds) == 0 {
		return 0, true
	}
	if t.cow {
		t.writable(0, t.pblocks-1)
	}
	m := merger{t: t, limit: t.pblocks * qSlots, s: uint64(t.s)}
	ok = m.run(adds)
	if ok {
		m.flush()
	}
	t.entries += m.added
	if !t.rebuildOffsetsChecked() {
		t.clear()
		return m.added, false
	}
	return m.added, ok
}

type mergeMove struct{ a, b, d uint64 } // old slots [a, b) move d on (dense)

type mergePut struct {
	pos, v uint64
	end    bool // ends its run
}

type merger struct {
	t        *qtable
	limit, s uint64 // dense slots; entry bits

	p, d, seg uint64 // old slots < p are placed; d: displacement of those from p on; seg: start of the stretch moving by d
	empty     uint64 // an empty old slot ≥ p, or limit (valid while ≥ p)
	haveEmpty bool

	moves   []mergeMove
	puts    []mergePut
	unends  []uint64 // new slots of old run ends that an appended entry follows
	occs    []uint64 // quotients of new runs (dense)
	touched uint64   // 1 + the last slot the pending edits write
	added   uint64
	lastX   uint64 // quotient of the previous added entry (dense), or ^0
	lastApp bool   // the previous added entry went after its run's old entries
}

func denseToPos(i uint64) uint64 { return i/qSlots<<6 | i%qSlots }

// emptyFrom is the first empty old slot at or after p (dense), or limit.
func (m *merger) emptyFrom(p uint64) uint64 {
	if !m.haveEmpty || m.empty < p {
		m.empty = m.t.emptyFrom(p)
		m.haveEmpty = true
	}
	return m.empty
}

// emptyFrom is firstEmpty in dense slots (limit: none), by four slots at
// a time. E, the runs pending after a slot (of quotients up to it, not
// ended at it or before), starts a block at its offset; a slot j is empty
// when E(j−1) + occupied(j) is 0. E drops by at most one a slot, so a
// block whose E exceeds its runends still ahead has no empty slot left,
// and four slots starting at E ≥ 5 none either; below that a table gives
// the empty ones.
func (t *qtable) emptyFrom(p uint64) uint64 {
	c, i := p/qSlots, p%qSlots
	for ; c < t.pblocks; c, i = c+1, 0 {
		m := t.meta[c>>qMetaShift]
		w := c & (1<<qMetaShift - 1) * 2
		occ, re := m[w]&qSlotMask, m[w+1]&qSlotMask
		below := uint64(1)<<i - 1
		e := int(m[w]>>56|m[w+1]>>56<<8) + bits.OnesCount64(occ&below) - bits.OnesCount64(re&below)
		if e > bits.OnesCount64(re>>i) {
			continue
		}
		for j := i; j < qSlots; j += 4 {
			o4, r4 := occ>>j&15, re>>j&15
			if e >= 5 {
				e += bits.OnesCount8(uint8(o4)) - bits.OnesCount8(uint8(r4))
				continue
			}
			z := emptyNibbles[max(e, 0)<<8|int(o4<<4|r4)]
			if zs := uint64(z & 15); zs != 0 {
				if k := j + uint64(bits.TrailingZeros64(zs)); k < qSlots {
					return c*qSlots + k
				}
			}
			e = int(z >> 4)
		}
	}
	return t.pblocks * qSlots
}

// emptyNibbles[E<<8 | o<<4 | r], for E < 5 and four slots of occupied
// bits o and runend bits r: the empty slots among them (low 4 bits) and
// E after them (the high bits; at least 0).
var emptyNibbles = func() (t [5 << 8]uint8) {
	for e0 := range 5 {
		for o := range 16 {
			for r := range 16 {
				e, zs := e0, 0
				for k := range 4 {
					d := e + o>>k&1
					if d == 0 {
						zs |= 1 << k
					}
					e = max(d-r>>k&1, 0)
				}
				t[e0<<8|o<<4|r] = uint8(e<<4 | zs)
			}
		}
	}
	return t
}()

// advance places the old slots before q: the displacement shrinks by one
// at each empty one. It stops early (p < q) only if the displacement is still
// positive at limit.
func (m *merger) advance(q uint64) {
	for m.d > 0 {
		e := m.emptyFrom(m.p)
		if e >= q {
			break
		}
		if e > m.seg {
			m.moves = append(m.moves, mergeMove{m.seg, e, m.d})
			m.touched = max(m.touched, e+m.d)
		}
		// The empty slots from e up to the next occupied quotient (D
		// stays 0) take up to d of the displacement, those before q.
		c, i := e/qSlots, e%qSlots
		run := uint64(qSlots) - i
		if rest := m.t.occ(c) >> (i + 1); rest != 0 {
			run = uint64(bits.TrailingZeros64(rest)) + 1
		}
		k := min(run, m.d, q-e)
		m.d -= k
		m.p, m.seg = e+k, e+k
	}
	if m.d == 0 {
		m.seg = q
	}
	m.p = q
}

func (m *merger) run(adds []uint64) bool {
	t := m.t
	vmask := t.mask()
	m.lastX = ^uint64(0)
	prev := ^uint64(0)
	for _, k := range adds {
		if k == prev {
			continue
		}
		prev = k
		x, v := k>>m.s, k&vmask
		if x >= t.slots() {
			return false
		}
		xp := denseToPos(x)
		b := xp >> 6
		occ := t.occ(b)
		var q uint64
		followed, appended, fromOld := false, false, false
		if occ>>(xp&63)&1 != 0 {
			fromOld = true
			start, end, _ := t.run(xp)
			dup := false
			for p := start; ; p = next(p) {
				c := t.get(p)
				if c == v {
					dup = true
					break
				}
				if c > v {
					q, followed = posIndex(p), true
					break
				}
				if p == end {
					q, appended = posIndex(end)+1, true
					break
				}
			}
			if dup {
				continue
			}
		} else {
			q = x
			if n := t.rank(xp, occ); n > 0 {
				if e := t.nthRunend(b, n); e >= xp {
					q = posIndex(e) + 1
				}
			}
		}
		q = max(q, m.p)
		m.advance(q)
		if m.d == 0 && m.touched <= x/qSlots*qSlots {
			m.flush() // the pass reads nothing before x's block again
		}
		pos := q + m.d
		if pos >= m.limit {
			return false
		}
		if m.d > 0 && q > m.seg {
			m.moves = append(m.moves, mergeMove{m.seg, q, m.d})
		}
		if x == m.lastX {
			m.puts[len(m.puts)-1].end = false // this one follows it in the run
		}
		if appended && fromOld && !(x == m.lastX && m.lastApp) {
			m.unends = append(m.unends, q-1+m.d) // the old run end, moved
		}
		if !fromOld && x != m.lastX {
			m.occs = append(m.occs, x)
		}
		m.puts = append(m.puts, mergePut{pos: pos, v: v, end: !followed})
		m.touched = max(m.touched, pos+1)
		m.d++
		m.seg = q
		m.lastX, m.lastApp = x, appended
	}
	m.advance(m.limit)
	return m.d == 0
}

// flush applies the pending edits: the stretches last first, then the
// added entries and the run ends and quotients that change.
func (m *merger) flush() {
	t := m.t
	for i := len(m.moves) - 1; i >= 0; i-- {
		mv := m.moves[i]
		t.moveEntries(mv.a, mv.b, mv.d)
		t.moveRunends(mv.a, mv.b, mv.d)
	}
	for _, p := range m.puts {
		pg, bit := t.entAt(denseToPos(p.pos))
		putBits(pg[:], bit, m.s, p.v)
		t.setRunend(denseToPos(p.pos), p.end)
	}
	for _, p := range m.unends {
		t.setRunend(denseToPos(p), false)
	}
	for _, x := range m.occs {
		t.setOcc(denseToPos(x), true)
	}
	m.added += uint64(len(m.puts))
	m.moves, m.puts, m.unends, m.occs = m.moves[:0], m.puts[:0], m.unends[:0], m.occs[:0]
	m.touched = 0
}

// moveEntries moves the entries of dense slots [a, b) to [a+d, b+d),
// highest first (the ranges may overlap), a page's stretch at a time.
func (t *qtable) moveEntries(a, b, d uint64) {
	s := uint64(t.s)
	per := t.bpp * qSlots // slots per entry page
	for hi := b; hi > a; {
		sp, _ := bits.Mul64((hi-1)/qSlots, t.bppM)
		dp, _ := bits.Mul64((hi-1+d)/qSlots, t.bppM)
		lo := max(a, sp*per)
		if dp*per > d {
			lo = max(lo, dp*per-d)
		}
		copyBitsBack(t.ents[dp][:], (lo+d-dp*per)*s, t.ents[sp][:], (lo-sp*per)*s, (hi-lo)*s)
		hi = lo
	}
}

// copyBitsBack copies n bits from bit sbit of src to bit dbit of dst,
// highest first, so that a copy to higher bits of the same array is
// safe: the destination's top partial word, then whole words, then the
// rest.
func copyBitsBack(dst []uint64, dbit uint64, src []uint64, sbit uint64, n uint64) {
	end := dbit + n
	if o := end & 63; o != 0 && n > 0 {
		k := min(n, o)
		n -= k
		putBits(dst, end-k, k, getBits(src, sbit+n, k))
		end -= k
	}
	for n >= 64 {
		n -= 64
		end -= 64
		sb := sbit + n
		k, o := sb>>6, sb&63
		v := src[k] >> o
		if o != 0 {
			v |= src[k+1] << (64 - o)
		}
		dst[end>>6] = v
	}
	if n > 0 {
		putBits(dst, dbit, n, getBits(src, sbit, n))
	}
}

// moveRunends moves the runend bits of dense slots [a, b) to [a+d, b+d),
// highest first, a block's stretch at a time.
func (t *qtable) moveRunends(a, b, d uint64) {
	for hi := b; hi > a; {
		sb, db := (hi-1)/qSlots, (hi-1+d)/qSlots
		lo := max(a, sb*qSlots)
		if db*qSlots > d {
			lo = max(lo, db*qSlots-d)
		}
		n := hi - lo
		v := t.runends(sb) >> (lo - sb*qSlots) & (1<<n - 1)
		o := lo + d - db*qSlots
		mp := t.meta[db>>qMetaShift]
		w := db&(1<<qMetaShift-1)*2 + 1
		mp[w] = mp[w]&^((1<<n-1)<<o) | v<<o
		hi = lo
	}
}

// rebuildOffsetsChecked is rebuildOffsets that reports false, leaving
// the offsets wrong, if one does not fit its 16 bits.
func (t *qtable) rebuildOffsetsChecked() bool {
	var occ, re uint64
	for c := uint64(0); c < t.pblocks; c++ {
		if occ-re > qMaxOffset {
			return false
		}
		t.setOff(c, occ-re)
		occ += uint64(bits.OnesCount64(t.occ(c)))
		re += uint64(bits.OnesCount64(t.runends(c)))
	}
	return true
}

// sortEntries sorts log entries ascending: a radix sort, 11 bits a pass
// over the bits in use, for long logs.
func sortEntries(xs []uint64) {
	if len(xs) < 256 {
		slices.Sort(xs)
		return
	}
	var all uint64
	for _, x := range xs {
		all |= x
	}
	const w = 11
	tmp := make([]uint64, len(xs))
	src, dst := xs, tmp
	for shift := uint(0); shift < uint(bits.Len64(all)); shift += w {
		var cnt [1 << w]int
		for _, x := range src {
			cnt[x>>shift&(1<<w-1)]++
		}
		sum := 0
		for i, c := range cnt {
			cnt[i] = sum
			sum += c
		}
		for _, x := range src {
			k := x >> shift & (1<<w - 1)
			dst[cnt[k]] = x
			cnt[k]++
		}
		src, dst = dst, src
	}
	if &src[0] != &xs[0] {
		copy(xs, src)
	}
}
