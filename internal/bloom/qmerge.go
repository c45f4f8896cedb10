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
		if p >= m.limit {
			m.empty = m.limit
		} else {
			m.empty = posIndex(m.t.firstEmpty(denseToPos(p)))
		}
		m.haveEmpty = true
	}
	return m.empty
}

// advance places the old slots before q: the displacement shrinks at the
// empty ones. It stops early (p < q) only if the displacement is still
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
		m.d--
		m.p, m.seg = e+1, e+1
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
// safe.
func copyBitsBack(dst []uint64, dbit uint64, src []uint64, sbit uint64, n uint64) {
	for n > 0 {
		k := min(n, 56)
		n -= k
		putBits(dst, dbit+n, k, getBits(src, sbit+n, k))
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
