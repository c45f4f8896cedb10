package bloom

import (
	"bytes"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// lazyBlocks sizes a filter of two slabs, the second with a remainder and a
// partly used last page: the smallest lazy shape.
const lazyBlocks = 2*slabPages*pageBlocks + 5*pageBlocks + 7

// allocateAll allocates every slab of f, as a filter smaller than two slabs
// is allocated at construction.
func allocateAll(f *Filter) {
	for pi := range f.pages {
		if f.pages[pi] == zeroPage {
			f.allocSlab(uint64(pi))
		}
	}
	if f.refs.Load() == 0 {
		f.cow = false
	}
}

func checkZeroPage(t *testing.T) {
	t.Helper()
	for i, w := range zeroPage {
		if w != 0 {
			t.Fatalf("the shared zero page was written: word %d = %#x", i, w)
		}
	}
}

// zeroPages counts the pages of f that are still the shared zero page.
func zeroPages(f *Filter) int {
	n := 0
	for _, p := range f.pages {
		if p == zeroPage {
			n++
		}
	}
	return n
}

func encodeFilter(t testing.TB, f *Filter) []byte {
	t.Helper()
	var b bytes.Buffer
	g := newGeneration(1, 3600e9, 7200e9, f.capacity, f.fpr, f)
	if _, err := g.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestFilterLazyAllocation(t *testing.T) {
	small := newFilter(1000, 0.01, 6, (2*slabPages-1)*pageBlocks)
	if small.lazy != 0 || small.cow || zeroPages(small) != 0 {
		t.Fatalf("a filter of fewer than two slabs is lazy: %d lazy slabs, cow %v, %d zero pages", small.lazy, small.cow, zeroPages(small))
	}
	f := newFilter(1_000_000, 0.01, 6, lazyBlocks)
	npages := len(f.pages)
	if f.lazy != 2 || !f.cow || zeroPages(f) != npages {
		t.Fatalf("new lazy filter: %d lazy slabs, cow %v, %d of %d pages zero; want 2, true, all", f.lazy, f.cow, zeroPages(f), npages)
	}
	for pi, want := range map[uint64][2]uint64{
		0:                  {0, slabPages},
		slabPages - 1:      {0, slabPages},
		slabPages:          {slabPages, uint64(npages)},
		uint64(npages) - 1: {slabPages, uint64(npages)},
	} {
		if lo, hi := f.slabRange(pi); lo != want[0] || hi != want[1] {
			t.Errorf("slab of page %d: [%d, %d), want [%d, %d)", pi, lo, hi, want[0], want[1])
		}
	}
	eager := newFilter(1_000_000, 0.01, 6, lazyBlocks)
	allocateAll(eager)
	if a, b := encodeFilter(t, f), encodeFilter(t, eager); !bytes.Equal(a, b) {
		t.Fatal("an empty lazy filter encodes differently from an empty allocated one")
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 1000 {
		if h := (Hash{r.Uint64(), r.Uint64()}); f.Test(h) {
			t.Fatalf("empty lazy filter reports %v seen", h)
		}
	}

	// The first write allocates exactly its slab.
	h := Hash{1, 2}
	pi, _ := f.block(h)
	if f.TestAndAdd(h) || eager.TestAndAdd(h) {
		t.Fatal("first key reported seen")
	}
	lo, hi := f.slabRange(pi)
	if f.lazy != 1 || zeroPages(f) != npages-int(hi-lo) || f.pages[lo] == zeroPage || f.pages[hi-1] == zeroPage {
		t.Fatalf("after one write: %d lazy slabs, %d zero pages; want 1, %d", f.lazy, zeroPages(f), npages-int(hi-lo))
	}

	// A snapshot taken while a slab is unallocated keeps the state of its
	// time; both filters then take many keys (with repeats) and must agree
	// on every answer and every bit.
	sn := f.snapshot()
	want := encodeFilter(t, eager)
	g := keyGen{seed: 700}
	for i := range 300_000 {
		h := g.hash(r.Uint64N(200_000)) // many repeats
		if a, b := f.TestAndAdd(h), eager.TestAndAdd(h); a != b {
			t.Fatalf("key %d: lazy filter says seen=%v, allocated one %v", i, a, b)
		}
	}
	got := encodeViews(t, sn)
	sn.release()
	if !bytes.Equal(got, want) {
		t.Fatal("snapshot of a partly lazy filter changed after later writes")
	}
	if f.lazy != 0 || zeroPages(f) != 0 {
		t.Fatalf("after 300 k keys: %d lazy slabs, %d zero pages", f.lazy, zeroPages(f))
	}
	f.TestAndAdd(Hash{5, 6}) // a write after the release drops to the fast path
	eager.TestAndAdd(Hash{5, 6})
	if f.cow {
		t.Fatal("every slab allocated and no snapshot outstanding, but writes still test first")
	}
	if f.ones != eager.ones || popcountPages(f.pages, f.nblocks) != f.ones {
		t.Fatalf("set bits: lazy %d (popcount %d), allocated %d", f.ones, popcountPages(f.pages, f.nblocks), eager.ones)
	}
	for i := range f.pages {
		if *f.pages[i] != *eager.pages[i] {
			t.Fatalf("page %d differs", i)
		}
	}
	checkZeroPage(t)
}

// encodeViews encodes views as the sub-filters of one generation.
func encodeViews(t *testing.T, views ...filterView) []byte {
	t.Helper()
	m := genMeta{id: 1, start: 3600e9, end: 7200e9, capacity: views[0].capacity, fpr: views[0].fpr, subInserts: make([]uint64, len(views))}
	var b bytes.Buffer
	if _, err := encodeGeneration(&b, &m, views); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// The insert that stacks an overflow sub-filter allocates none of its bits;
// the sub-filter's slabs come with the writes into them.
func TestStackIsLazy(t *testing.T) {
	const c = 8_000_000 // the overflow sub-filter (16 M keys at 0.05 %) is ~33 MB
	k, nb, err := filterParams(c, subRate(0.01, 0))
	if err != nil {
		t.Fatal(err)
	}
	gen := newGeneration(1, 3600e9, 7200e9, c, 0.01, newFilter(c, subRate(0.01, 0), k, nb))
	gen.subInserts[0], gen.inserts = c-1, c-1
	g := keyGen{seed: 500}
	if gen.testAndAdd(g.hash(0)) || len(gen.subs) != 2 {
		t.Fatalf("the insert reaching capacity: %d sub-filters, want 2", len(gen.subs))
	}
	over := gen.subs[1]
	if over.lazy < 2 || zeroPages(over) != len(over.pages) {
		t.Fatalf("new overflow sub-filter: %d lazy slabs, %d of %d pages allocated", over.lazy, len(over.pages)-zeroPages(over), len(over.pages))
	}
	for i := uint64(1); i <= 50_000; i++ {
		gen.testAndAdd(g.hash(i))
	}
	checkZeroPage(t)
	for i := uint64(1); i <= 50_000; i++ {
		if !gen.test(g.hash(i)) {
			t.Fatalf("key %d added to a lazy overflow sub-filter but not found", i)
		}
	}
	if over.lazy != 0 || over.cow {
		t.Fatalf("after 50 k keys: %d lazy slabs, cow %v", over.lazy, over.cow)
	}
}

// TestLazySnapshotConcurrentEncode is TestSnapshotConcurrentEncode with
// lazy filters (run with -race): a snapshot taken while slabs are
// unallocated (the first one before any key) is encoded while the owner
// inserts, allocating slabs and stacking a lazy overflow sub-filter. Each
// encoding must equal the state at snapshot time, decode to a filter that
// is lazy where the snapshot had no bit, and re-encode byte-identically;
// a restored shard continues exactly like the original; and the shared
// zero page is never written.
func TestLazySnapshotConcurrentEncode(t *testing.T) {
	cfg := Config{Window: time.Hour, Generations: 2, Capacity: 14_000_000, FPR: 0.01} // ~20 MB first sub-filter
	s, err := NewShard(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g := keyGen{seed: 600}
	ts := at(time.Hour, 490_000, 0)
	s.Advance(ts)
	if f := s.gens[0].subs[0]; f.lazy < 2 {
		t.Fatalf("first sub-filter of %d pages is not lazy", len(f.pages))
	}
	next := uint64(0)
	insert := func(n uint64) {
		for end := next + n; next < end; next++ {
			s.TestAndAdd(g.hash(next), ts)
		}
	}
	type result struct {
		want, got []byte
	}
	var wg sync.WaitGroup
	results := make([]*result, 3)
	for round := range results {
		if round == 1 {
			gen := s.gens[0] // the next new key stacks a lazy overflow sub-filter
			gen.inserts += gen.subs[0].capacity - 1 - gen.subInserts[0]
			gen.subInserts[0] = gen.subs[0].capacity - 1
			insert(1)
			if len(gen.subs) != 2 || gen.subs[1].lazy < 2 {
				t.Fatalf("no lazy overflow sub-filter stacked: %d sub-filters", len(gen.subs))
			}
		}
		res := &result{want: encodeGenerations(t, s)}
		results[round] = res
		sn := s.Snapshot()
		encodeInBackground(t, &wg, sn, &res.got)
		insert(5_000) // allocates slabs while the encoder reads the zero page
	}
	wg.Wait()
	for i, res := range results {
		if !bytes.Equal(res.want, res.got) {
			t.Fatalf("round %d: concurrent snapshot encoding differs from the state at snapshot time", i)
		}
		dec, err := DecodeGeneration(bytes.NewReader(res.got), 0)
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if f := dec.subs[0]; i == 0 && (f.lazy < 2 || zeroPages(f) != len(f.pages)) {
			t.Fatalf("round 0: decoded empty sub-filter allocated %d of %d pages", len(f.pages)-zeroPages(f), len(f.pages))
		}
		var b bytes.Buffer
		if _, err := dec.WriteTo(&b); err != nil || !bytes.Equal(b.Bytes(), res.got) {
			t.Fatalf("round %d: decode → encode differs (%v)", i, err)
		}
	}

	// Restore the round 0 state (nothing allocated) and replay what the
	// original got since: both end byte-identical.
	dec, err := DecodeGeneration(bytes.NewReader(results[0].got), 0)
	if err != nil {
		t.Fatal(err)
	}
	r, err := RestoreShard(cfg, []*Generation{dec})
	if err != nil {
		t.Fatal(err)
	}
	for i := range next {
		if i == 5_000 {
			gen := r.gens[0]
			gen.inserts += gen.subs[0].capacity - 1 - gen.subInserts[0]
			gen.subInserts[0] = gen.subs[0].capacity - 1
		}
		r.TestAndAdd(g.hash(i), ts)
	}
	if !bytes.Equal(encodeGenerations(t, s), encodeGenerations(t, r)) {
		t.Fatal("a shard restored from a lazy snapshot evolves differently from the original")
	}
	checkZeroPage(t)
}
