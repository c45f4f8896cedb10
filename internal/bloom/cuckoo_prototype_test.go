package bloom

import (
	"fmt"
	"math/bits"
	"sync/atomic"
)

// This file is the prototype the fingerprint kind was measured against
// (BenchmarkTableKinds; docs/filter.md, "How the table was chosen"): it
// lives in a test file so that the measurement can be repeated, and is
// not part of the filter.
//
// A ctable is a cuckoo filter (Fan et al. 2014) of entries e = fp<<a | tag:
// an f-bit fingerprint (never 0: 0 marks an empty slot) and an a-bit tag.
// A key has two buckets of four slots, i1 from its hash and
// i2 = alt(i1, fp) = (H(fp) − i1) mod nb, so that alt(i2, fp) = i1 for any
// number of buckets nb: an entry can move to its other bucket knowing only
// its fingerprint.
//
// Buckets are semi-sorted (Fan et al., §5.2): the four entries of a bucket
// are kept in ascending order, so the bucket is a function of the set of
// its entries; their top four bits form a sorted multiset of four nibbles,
// one of 3,876, stored as a 12-bit code; the other s−4 bits of each entry
// follow. A bucket takes 4s − 4 bits (s = f + a), one bit per slot less
// than the entries, packed back to back in 64 KiB copy-on-write pages.
//
// An insert that finds both buckets full moves a resident entry to its
// other bucket (a kick), up to maxKicks times; which slot is taken is a
// function of the entry being placed and the kick count, so that the same
// inserts in the same order give the same table. An entry that still has
// no place goes to a small stash that every lookup reads; nothing is ever
// dropped. A full stash makes the table refuse further inserts: the
// caller opens a larger one.
type ctable struct {
	f, a, s uint   // fingerprint, tag and entry bits (s = f + a)
	nb      uint64 // buckets
	bbits   uint64 // bits per bucket: 4s − 4
	bpp     uint64 // buckets per page
	bppM    uint64 // ⌈2^64 / bpp⌉, for the division by bpp
	pages   []*[pageWords]uint64
	entries uint64 // in buckets and stash
	stash   []stashed

	cow       bool
	epoch     uint32
	pageEpoch []uint32
	refs      atomic.Int32
	sink      uint64
}

// stashed is an entry without a slot, with the bucket it was last given.
type stashed struct {
	bucket uint64
	e      uint64
}

const (
	cSlots    = 4
	maxKicks  = 500
	maxStash  = 64
	cMaxEntry = 40 // s stays at or below this
)

// cGeometry is the layout of a table of nb buckets of s-bit entries.
func cGeometry(nb uint64, s uint) (bbits, bpp, npages uint64) {
	bbits = 4*uint64(s) - 4
	bpp = pageWords * 64 / bbits
	npages = (nb + bpp - 1) / bpp
	return
}

// cBytes is the memory of a table of nb buckets of s-bit entries.
func cBytes(nb uint64, s uint) uint64 {
	_, _, n := cGeometry(nb, s)
	return n * pageBytes
}

func newCtable(nb uint64, f, a uint) *ctable {
	t := &ctable{f: f, a: a, s: f + a, nb: nb}
	var np uint64
	t.bbits, t.bpp, np = cGeometry(nb, t.s)
	t.bppM = ^uint64(0)/t.bpp + 1
	t.pages = carvePages(np)
	t.pageEpoch = make([]uint32, np)
	return t
}

// bytes is the memory of the table's pages.
func (t *ctable) bytes() uint64 { return uint64(len(t.pages)) * pageBytes }

// slots is the number of slots in buckets.
func (t *ctable) slots() uint64 { return t.nb * cSlots }

// index maps a hash to its first bucket and fingerprint: the bucket from
// H1 by multiply-shift, the fingerprint from the top bits of H2 (0 taken
// as 1).
func (t *ctable) index(h Hash) (i, fp uint64) {
	i, _ = bits.Mul64(h.H1, t.nb)
	fp = h.H2 >> (64 - t.f)
	if fp == 0 {
		fp = 1
	}
	return i, fp
}

// alt is the other bucket of an entry with fingerprint fp in bucket i.
func (t *ctable) alt(i, fp uint64) uint64 {
	h, _ := bits.Mul64(fmix64(fp), t.nb)
	if h >= i {
		return h - i
	}
	return h + t.nb - i
}

// at locates bucket i: its page and bit offset there.
func (t *ctable) at(i uint64) (*[pageWords]uint64, uint64) {
	pi, _ := bits.Mul64(i, t.bppM)
	return t.pages[pi], (i - pi*t.bpp) * t.bbits
}

// bucket decodes bucket i into its four entries, ascending.
func (t *ctable) bucket(i uint64) (e [cSlots]uint64) {
	pg, bit := t.at(i)
	nib := nibDecode[getBits(pg[:], bit, 12)]
	low := uint64(t.s - 4)
	bit += 12
	for k := range cSlots {
		e[k] = uint64(nib>>(4*k)&15)<<low | getBits(pg[:], bit, low)
		bit += low
	}
	return e
}

// setBucket encodes four entries (any order) into bucket i.
func (t *ctable) setBucket(i uint64, e [cSlots]uint64) {
	sort4(&e)
	if t.cow {
		t.writable(i)
	}
	low := uint64(t.s - 4)
	var nibs uint16
	for k := range cSlots {
		nibs |= uint16(e[k]>>low) << (4 * k)
	}
	pg, bit := t.at(i)
	putBits(pg[:], bit, 12, uint64(nibEncode(nibs)))
	bit += 12
	for k := range cSlots {
		putBits(pg[:], bit, low, e[k]&(1<<low-1))
		bit += low
	}
}

// sort4 sorts four values ascending (a sorting network).
func sort4(e *[cSlots]uint64) {
	cmpSwap := func(a, b int) {
		if e[a] > e[b] {
			e[a], e[b] = e[b], e[a]
		}
	}
	cmpSwap(0, 1)
	cmpSwap(2, 3)
	cmpSwap(0, 2)
	cmpSwap(1, 3)
	cmpSwap(1, 2)
}

// tags returns the tags (bit t: tag t) of the entries with fingerprint fp
// in buckets i1 and i2 and the stash.
func (t *ctable) tags(i1, i2, fp uint64) (tags uint64) {
	tm := uint64(1)<<t.a - 1
	for _, e := range t.bucket(i1) {
		if e>>t.a == fp {
			tags |= 1 << (e & tm)
		}
	}
	if i2 != i1 {
		for _, e := range t.bucket(i2) {
			if e>>t.a == fp {
				tags |= 1 << (e & tm)
			}
		}
	}
	for _, s := range t.stash {
		if s.e>>t.a == fp && (s.bucket == i1 || s.bucket == i2) {
			tags |= 1 << (s.e & tm)
		}
	}
	return tags
}

// insert adds entry e (fingerprint fp) for a key whose buckets are i1 and
// i2, kicking resident entries to their other buckets if both are full.
// It returns false, changing nothing, if the stash is full.
func (t *ctable) insert(i1, i2, e uint64) bool {
	if len(t.stash) >= maxStash {
		return false
	}
	t.entries++
	if t.place(i1, e) || t.place(i2, e) {
		return true
	}
	// Kicks: the slot taken from bucket i is a function of the entry
	// being placed and the kick number.
	i := i1
	for k := range uint64(maxKicks) {
		b := t.bucket(i)
		slot := fmix64(e^k<<40) >> 62
		e, b[slot] = b[slot], e
		t.setBucket(i, b)
		i = t.alt(i, e>>t.a)
		if t.place(i, e) {
			return true
		}
	}
	t.stash = append(t.stash, stashed{bucket: i, e: e})
	return true
}

// retain keeps the entries e with keep(e) and removes the others, bucket
// by bucket (entries never move).
func (t *ctable) retain(keep func(e uint64) bool) {
	var n uint64
	for i := range t.nb {
		b := t.bucket(i)
		changed := false
		for k, e := range b {
			if e == 0 {
				continue
			}
			if keep(e) {
				n++
			} else {
				b[k], changed = 0, true
			}
		}
		if changed {
			t.setBucket(i, b)
		}
	}
	kept := t.stash[:0]
	for _, s := range t.stash {
		if keep(s.e) {
			kept = append(kept, s)
			n++
		}
	}
	t.stash = kept
	t.entries = n
	// Freed slots may take stashed entries back (in stash order).
	kept = t.stash[:0]
	for _, s := range t.stash {
		if !t.place(s.bucket, s.e) && !t.place(t.alt(s.bucket, s.e>>t.a), s.e) {
			kept = append(kept, s)
		}
	}
	t.stash = kept
}

// place puts e into an empty slot of bucket i, if it has one.
func (t *ctable) place(i, e uint64) bool {
	b := t.bucket(i)
	if b[0] != 0 {
		return false
	}
	b[0] = e
	t.setBucket(i, b)
	return true
}

// writable makes the page of bucket i private to the owner.
func (t *ctable) writable(i uint64) {
	if t.refs.Load() == 0 {
		t.cow = false
		return
	}
	pi, _ := bits.Mul64(i, t.bppM)
	if t.pageEpoch[pi] != t.epoch {
		p := *t.pages[pi]
		t.pages[pi] = &p
		t.pageEpoch[pi] = t.epoch
	}
}

// touch loads both buckets of each hash (see Filter.touch).
func (t *ctable) touch(hs []Hash) {
	var x uint64
	for _, h := range hs {
		i, fp := t.index(h)
		pg, bit := t.at(i)
		x ^= pg[bit>>6]
		pg, bit = t.at(t.alt(i, fp))
		x ^= pg[bit>>6]
	}
	t.sink = x
}

// verify checks what every operation relies on and the format cannot
// check by itself: each bucket's nibble code is valid and its entries
// ascending, padding bits are zero, the entry count matches, and stashed
// entries name a bucket of the table. Cost: one pass over the buckets.
func (t *ctable) verify() error {
	var n uint64
	for i := range t.nb {
		pg, bit := t.at(i)
		if getBits(pg[:], bit, 12) >= uint64(len(nibDecode)) {
			return fmt.Errorf("bucket %d: bad nibble code", i)
		}
		b := t.bucket(i)
		for k, e := range b {
			if k > 0 && e < b[k-1] {
				return fmt.Errorf("bucket %d: entries out of order", i)
			}
			if e != 0 {
				if e>>t.a == 0 {
					return fmt.Errorf("bucket %d: entry with fingerprint 0", i)
				}
				n++
			}
		}
	}
	for _, s := range t.stash {
		if s.bucket >= t.nb || s.e>>t.a == 0 || s.e>>t.s != 0 {
			return fmt.Errorf("stashed entry %#x of bucket %d", s.e, s.bucket)
		}
		n++
	}
	if n != t.entries {
		return fmt.Errorf("%d entries, header says %d", n, t.entries)
	}
	for pi, pg := range t.pages {
		used := min(t.bpp, t.nb-uint64(pi)*t.bpp) * t.bbits
		if used&63 != 0 && pg[used>>6]>>(used&63) != 0 {
			return fmt.Errorf("page %d: padding bits set", pi)
		}
		for _, w := range pg[(used+63)>>6:] {
			if w != 0 {
				return fmt.Errorf("page %d: padding bits set", pi)
			}
		}
	}
	return nil
}

// Semi-sorting: a sorted multiset of four nibbles n0 ≤ n1 ≤ n2 ≤ n3 is
// numbered by the combinatorial number system, C(n0, 1) + C(n1+1, 2) +
// C(n2+2, 3) + C(n3+3, 4), which runs from 0 to 3,875.
var (
	nibDecode [3876]uint16 // code → nibbles, n0 in the low bits
	nibBinom  [4][19]uint16
)

func init() {
	for k := range 4 {
		for n := range 19 {
			nibBinom[k][n] = uint16(binom(n, k+1))
		}
	}
	for a := range 16 {
		for b := a; b < 16; b++ {
			for c := b; c < 16; c++ {
				for d := c; d < 16; d++ {
					nibs := uint16(a | b<<4 | c<<8 | d<<12)
					nibDecode[nibEncode(nibs)] = nibs
				}
			}
		}
	}
}

func binom(n, k int) int {
	if k > n {
		return 0
	}
	r := 1
	for i := range k {
		r = r * (n - i) / (i + 1)
	}
	return r
}

// nibEncode numbers four sorted nibbles (n0 in the low bits).
func nibEncode(nibs uint16) uint16 {
	return nibBinom[0][nibs&15] + nibBinom[1][nibs>>4&15+1] + nibBinom[2][nibs>>8&15+2] + nibBinom[3][nibs>>12+3]
}
