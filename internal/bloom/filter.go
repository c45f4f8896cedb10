package bloom

import (
	"fmt"
	"math"
	"math/bits"
	"sync/atomic"
	"unsafe"
)

const (
	pageShift  = 10 // 1024 blocks = 64 KiB per page
	pageBlocks = 1 << pageShift
	pageWords  = pageBlocks * blockWords
	pageBytes  = pageWords * 8

	// slabPages pages (8 MiB, the smallest bitset adviseHugePages advises)
	// are allocated together by a lazy filter; its last slab also takes the
	// remaining pages. A filter of fewer than two slabs is allocated whole.
	slabPages = 128
)

// zeroPage stands for every page of a lazy filter's slabs not yet
// allocated. It is only ever read: writable allocates the slab before the
// first write to one of its pages.
var zeroPage = new([pageWords]uint64)

// Filter is a cache-line-blocked Bloom filter: each key sets k bits inside
// one 512-bit block. Its bits live in 64 KiB pages so that snapshots are
// copy-on-write. A large filter is lazy: its pages start as the shared
// zeroPage and are allocated a slab at a time on first write, so that
// creating it costs no time proportional to its size. A Filter belongs to
// one goroutine.
type Filter struct {
	pages    []*[pageWords]uint64 // the last page may be used in part
	nblocks  uint64
	k        uint32
	capacity uint64
	fpr      float64
	ones     uint64 // set bits, maintained on every write

	// Copy-on-write state. cow is true while a snapshot may be outstanding
	// or a slab is not allocated yet (lazy > 0): writes then test first and
	// go through writable. pageEpoch[i] == epoch marks page i as private to
	// the owner (cloned or allocated since the latest snapshot).
	cow       bool
	epoch     uint32
	pageEpoch []uint32
	refs      atomic.Int32 // outstanding snapshots holding these pages
	lazy      int          // slabs whose pages are still zeroPage
}

// NewFilter returns a filter sized so that its computed false-positive rate
// after capacity distinct keys is at most fpr.
func NewFilter(capacity uint64, fpr float64) (*Filter, error) {
	k, nb, err := filterParams(capacity, fpr)
	if err != nil {
		return nil, fmt.Errorf("sizing filter: %w", err)
	}
	return newFilter(capacity, fpr, k, nb), nil
}

func newFilter(capacity uint64, fpr float64, k int, nblocks uint64) *Filter {
	npages := (nblocks + pageBlocks - 1) / pageBlocks
	f := &Filter{
		nblocks:   nblocks,
		k:         uint32(k),
		capacity:  capacity,
		fpr:       fpr,
		pageEpoch: make([]uint32, npages),
	}
	f.initPages(npages)
	return f
}

// initPages gives the filter npages pages: allocated at once when the
// filter is smaller than two slabs, else all zeroPage (lazy). Allocating
// and zeroing a large filter at once stalls its owner for as long as the
// kernel takes to supply the memory: up to seconds for a 480 MB overflow
// sub-filter (docs/filter.md, "Overflow").
func (f *Filter) initPages(npages uint64) {
	if npages < 2*slabPages {
		f.pages = carvePages(npages)
		return
	}
	f.pages = make([]*[pageWords]uint64, npages)
	for i := range f.pages {
		f.pages[i] = zeroPage
	}
	f.lazy = int(npages / slabPages)
	f.cow = true
}

// slabRange is the range of pages allocated together with page pi.
func (f *Filter) slabRange(pi uint64) (lo, hi uint64) {
	n := uint64(len(f.pages))
	lo = pi / slabPages * slabPages
	if lo+2*slabPages > n { // the last slab takes the remainder
		lo = (n/slabPages - 1) * slabPages
		return lo, n
	}
	return lo, lo + slabPages
}

// allocSlab allocates the slab of page pi, whose pages are all zeroPage.
// The fresh pages are private to the owner: no snapshot holds them.
func (f *Filter) allocSlab(pi uint64) {
	lo, hi := f.slabRange(pi)
	copy(f.pages[lo:hi], carvePages(hi-lo))
	for i := lo; i < hi; i++ {
		f.pageEpoch[i] = f.epoch
	}
	f.lazy--
}

// block returns the page index and word offset of h's block.
func (f *Filter) block(h Hash) (page, off uint64) {
	blk, _ := bits.Mul64(h.H1, f.nblocks)
	return blk >> pageShift, (blk & (pageBlocks - 1)) * blockWords
}

// The probes of h inside its block are independent 9-bit fields: seven
// from H2, then seven from each further word fmix64(H2 + j·rot(H1, 32)), so
// that they match the sizing model. (Kirsch–Mitzenmacher double hashing
// inside a 512-bit block measured 1.6× the target rate at p = 0.1 %.)
//
// The probes are unrolled and branch-free: which bits of a block are set is
// unpredictable, and a mispredicted branch on a bit of a block still in
// flight from memory throws away the work the CPU did past it, which is
// the next keys' hashing and loads. Without those branches the loads of
// consecutive keys overlap (docs/filter.md, "Probing").

// hasBit is 1 if bit p&511 of b is set.
func hasBit(b *[blockWords]uint64, p uint64) uint64 {
	p &= blockBits - 1
	return b[p>>6] >> (p & 63) & 1
}

// setBit sets bit p&511 of b and returns 1 if it was unset.
func setBit(b *[blockWords]uint64, p uint64) uint64 {
	p &= blockBits - 1
	x := b[p>>6]
	b[p>>6] = x | 1<<(p&63)
	return ^x >> (p & 63) & 1
}

// has reports whether every probe bit of h is set in b.
func (f *Filter) has(b *[blockWords]uint64, h Hash) bool {
	set := has7(b, h.H2, min(f.k, 7))
	if f.k > 7 {
		s, d := h.H2, bits.RotateLeft64(h.H1, 32)
		for i := uint32(7); i < f.k; i += 7 {
			s += d
			set += has7(b, fmix64(s), min(f.k-i, 7))
		}
	}
	return set == uint64(f.k)
}

// set sets the probe bits of h in b and returns how many were unset.
func (f *Filter) set(b *[blockWords]uint64, h Hash) uint64 {
	added := set7(b, h.H2, min(f.k, 7))
	if f.k > 7 {
		added += f.setRest(b, h)
	}
	return added
}

// setRest sets probes 8 to k.
func (f *Filter) setRest(b *[blockWords]uint64, h Hash) (added uint64) {
	s, d := h.H2, bits.RotateLeft64(h.H1, 32)
	for i := uint32(7); i < f.k; i += 7 {
		s += d
		added += set7(b, fmix64(s), min(f.k-i, 7))
	}
	return added
}

// has7 counts the set bits among the first n (1–7) 9-bit probe fields of
// w, unrolled: the jump into the switch goes the same way for every key of
// a filter.
func has7(b *[blockWords]uint64, w uint64, n uint32) (set uint64) {
	switch n {
	case 7:
		set += hasBit(b, w>>54)
		fallthrough
	case 6:
		set += hasBit(b, w>>45)
		fallthrough
	case 5:
		set += hasBit(b, w>>36)
		fallthrough
	case 4:
		set += hasBit(b, w>>27)
		fallthrough
	case 3:
		set += hasBit(b, w>>18)
		fallthrough
	case 2:
		set += hasBit(b, w>>9)
		fallthrough
	case 1:
		set += hasBit(b, w)
	}
	return set
}

// set7 sets the bits of the first n (1–7) 9-bit probe fields of w and
// returns how many were unset.
func set7(b *[blockWords]uint64, w uint64, n uint32) (added uint64) {
	switch n {
	case 7:
		added += setBit(b, w>>54)
		fallthrough
	case 6:
		added += setBit(b, w>>45)
		fallthrough
	case 5:
		added += setBit(b, w>>36)
		fallthrough
	case 4:
		added += setBit(b, w>>27)
		fallthrough
	case 3:
		added += setBit(b, w>>18)
		fallthrough
	case 2:
		added += setBit(b, w>>9)
		fallthrough
	case 1:
		added += setBit(b, w)
	}
	return added
}

// fmix64 is murmur3's 64-bit finalizer: a bijection with full avalanche.
func fmix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// TestAndAdd reports whether h was (probably) added before, and adds it.
// One block is read and, if needed, written.
func (f *Filter) TestAndAdd(h Hash) bool {
	pi, off := f.block(h)
	b := (*[blockWords]uint64)(f.pages[pi][off : off+blockWords])
	if f.cow {
		// A snapshot may share the page, or it is the shared zeroPage:
		// write only if something changes.
		if f.has(b, h) {
			return true
		}
		b = f.writable(pi, off)
	}
	// Setting the bits reports whether they were all set already: one pass,
	// no branch on the block's contents. Rewriting an unchanged block of
	// a private page is harmless.
	added := set7(b, h.H2, min(f.k, 7)) // f.set, one call less
	if f.k > 7 {
		added += f.setRest(b, h)
	}
	f.ones += added
	return added == 0
}

// batchChunk is how many keys a batch call loads ahead of using them:
// enough for the memory system to fetch their blocks in parallel (a core
// tracks a few dozen misses at once), few enough that the blocks are still
// in cache when they are used.
const batchChunk = 32

// TestAndAddBatch calls TestAndAdd on each of hs in order and stores the
// results in seen, which must be at least as long as hs. The result and
// the filter's state are exactly those of the calls one by one; only the
// memory accesses differ: the blocks of a chunk of keys are prefetched before
// any of them is used, so that their cache misses overlap instead of
// following each other.
func (f *Filter) TestAndAddBatch(hs []Hash, seen []bool) {
	seen = seen[:len(hs)]
	for lo := 0; lo < len(hs); lo += batchChunk {
		chunk := hs[lo:min(lo+batchChunk, len(hs))]
		f.touch(chunk)
		for i, h := range chunk {
			seen[lo+i] = f.TestAndAdd(h)
		}
	}
}

// touch prefetches the block of each of hs, so that their cache misses
// overlap and a later TestAndAdd finds its block in cache.
func (f *Filter) touch(hs []Hash) {
	for _, h := range hs {
		pi, off := f.block(h)
		prefetch(unsafe.Pointer(&f.pages[pi][off]))
	}
}

// Test reports whether h was (probably) added.
func (f *Filter) Test(h Hash) bool {
	pi, off := f.block(h)
	return f.has((*[blockWords]uint64)(f.pages[pi][off:off+blockWords]), h)
}

// Add adds h.
func (f *Filter) Add(h Hash) { f.TestAndAdd(h) }

// writable is the slow path of a write while a snapshot may be outstanding
// or a slab is unallocated: it allocates page pi's slab if the page is
// still zeroPage, else clones the page unless no snapshot holds it or the
// owner already holds a private copy, and returns the block at off in the
// page the owner may write. Once every slab is allocated and every
// snapshot released, writes take the fast path again.
func (f *Filter) writable(pi, off uint64) *[blockWords]uint64 {
	// With no reference left, the atomic load orders the released
	// snapshots' reads before our writes.
	shared := f.refs.Load() != 0
	switch {
	case f.pages[pi] == zeroPage:
		f.allocSlab(pi)
	case shared && f.pageEpoch[pi] != f.epoch:
		p := *f.pages[pi]
		f.pages[pi] = &p
		f.pageEpoch[pi] = f.epoch
	}
	if !shared && f.lazy == 0 {
		f.cow = false
	}
	return (*[blockWords]uint64)(f.pages[pi][off : off+blockWords])
}

// filterView is an immutable view of a filter's bits taken by snapshot.
type filterView struct {
	f        *Filter
	pages    []*[pageWords]uint64
	nblocks  uint64
	k        uint32
	capacity uint64
	fpr      float64
	ones     uint64
}

// snapshot freezes the current pages for a reader: O(pages), no bit copied.
// The caller must call release on the view exactly once.
func (f *Filter) snapshot() filterView {
	f.refs.Add(1)
	f.epoch++
	f.cow = true
	return filterView{
		f:        f,
		pages:    append([]*[pageWords]uint64(nil), f.pages...),
		nblocks:  f.nblocks,
		k:        f.k,
		capacity: f.capacity,
		fpr:      f.fpr,
		ones:     f.ones,
	}
}

func (v *filterView) release() {
	if v.f != nil {
		v.f.refs.Add(-1)
		v.f = nil
	}
}

// Capacity is the number of distinct keys the filter was sized for.
func (f *Filter) Capacity() uint64 { return f.capacity }

// K is the number of probe bits per key.
func (f *Filter) K() int { return int(f.k) }

// Bits is the size of the filter in bits.
func (f *Filter) Bits() uint64 { return f.nblocks * blockBits }

// Bytes is the memory taken by the bits.
func (f *Filter) Bytes() uint64 { return f.nblocks * blockBits / 8 }

// Fill is the fraction of bits set.
func (f *Filter) Fill() float64 { return float64(f.ones) / float64(f.Bits()) }

// EstimatedKeys estimates the number of distinct keys added from the number
// of set bits (Swamidass & Baldi 2007, adapted to blocks: a key leaves a
// given bit of its block unset with probability q = (1−1/512)^k, so
// E[unset/m] = exp(−(n/nblocks)(1−q)) and n = −nblocks·ln(1−fill)/(1−q)).
func (f *Filter) EstimatedKeys() uint64 {
	return estimateKeys(f.ones, f.nblocks, int(f.k))
}

// EstimatedFPR estimates the current false-positive rate from the
// estimated number of keys, with the same model used for sizing.
func (f *Filter) EstimatedFPR() float64 {
	return blockedFPR(float64(estimateKeys(f.ones, f.nblocks, int(f.k)))/float64(f.nblocks), int(f.k))
}

func estimateKeys(ones, nblocks uint64, k int) uint64 {
	m := float64(nblocks * blockBits)
	fill := float64(ones) / m
	if fill >= 1 {
		return math.MaxUint64 / 2
	}
	q := math.Pow(1-1.0/blockBits, float64(k))
	return uint64(math.Round(-float64(nblocks) * math.Log1p(-fill) / (1 - q)))
}

// carvePages allocates n pages as one contiguous array (a whole filter or
// one slab), so that the kernel can back it with huge pages. A page cloned
// by copy-on-write is allocated on its own; the array stays alive until
// none of its pages is referenced.
func carvePages(n uint64) []*[pageWords]uint64 {
	backing := make([]uint64, n*pageWords)
	adviseHugePages(backing)
	pages := make([]*[pageWords]uint64, n)
	for i := range pages {
		pages[i] = (*[pageWords]uint64)(backing[uint64(i)*pageWords:])
	}
	return pages
}

// pageSlice is the used part of page i of a filter with nblocks blocks.
func pageSlice(pages []*[pageWords]uint64, i int, nblocks uint64) []uint64 {
	return pages[i][:min(pageWords, (nblocks-uint64(i)*pageBlocks)*blockWords)]
}

func popcountPages(pages []*[pageWords]uint64, nblocks uint64) uint64 {
	var n uint64
	for i := range pages {
		for _, w := range pageSlice(pages, i, nblocks) {
			n += uint64(bits.OnesCount64(w))
		}
	}
	return n
}
