package bloom

import (
	"math/rand/v2"
	"slices"
	"testing"
)

type centry struct{ i1, fp, tag uint64 }

// fillCtable inserts n random entries (tags drawn from [0, 1<<a)) and
// returns those it took.
func fillCtable(t *testing.T, c *ctable, rng *rand.Rand, n int) []centry {
	t.Helper()
	var in []centry
	for range n {
		h := Hash{rng.Uint64(), rng.Uint64()}
		i1, fp := c.index(h)
		tag := rng.Uint64N(1 << c.a)
		if c.tags(i1, c.alt(i1, fp), fp)&(1<<tag) != 0 {
			continue
		}
		if !c.insert(i1, c.alt(i1, fp), fp<<c.a|tag) {
			break
		}
		in = append(in, centry{i1, fp, tag})
	}
	return in
}

func checkCtable(t *testing.T, c *ctable, in []centry) {
	t.Helper()
	if err := c.verify(); err != nil {
		t.Fatal(err)
	}
	for _, e := range in {
		if c.tags(e.i1, c.alt(e.i1, e.fp), e.fp)&(1<<e.tag) == 0 {
			t.Fatalf("entry %+v lost", e)
		}
	}
}

// TestCtableNoLoss fills tables to their limit (kicks and the stash
// included) and checks that every entry taken is found, the structure and
// the entry count.
func TestCtableNoLoss(t *testing.T) {
	for _, tc := range []struct {
		nb   uint64
		f, a uint
	}{{3, 10, 3}, {100, 10, 3}, {1000, 13, 3}, {777, 6, 2}, {500, 30, 6}} {
		rng := rand.New(rand.NewPCG(tc.nb, uint64(tc.f)))
		c := newCtable(tc.nb, tc.f, tc.a)
		in := fillCtable(t, c, rng, int(tc.nb*cSlots*2))
		if uint64(len(in)) != c.entries {
			t.Fatalf("nb %d: %d entries taken, table counts %d", tc.nb, len(in), c.entries)
		}
		if load := float64(c.entries-uint64(len(c.stash))) / float64(c.slots()); tc.nb >= 100 && tc.f >= 10 && load < 0.95 {
			t.Errorf("nb %d: refused at load %.3f", tc.nb, load)
		}
		checkCtable(t, c, in)
	}
}

// TestCtableDeterministic: the same inserts in the same order give the
// same pages and stash.
func TestCtableDeterministic(t *testing.T) {
	build := func() *ctable {
		c := newCtable(300, 10, 3)
		fillCtable(t, c, rand.New(rand.NewPCG(9, 9)), 1300)
		return c
	}
	a, b := build(), build()
	for i := range a.pages {
		if *a.pages[i] != *b.pages[i] {
			t.Fatalf("page %d differs", i)
		}
	}
	if !slices.Equal(a.stash, b.stash) {
		t.Fatal("stash differs")
	}
}

// TestCtableRetain removes two tags and checks that exactly the others
// remain.
func TestCtableRetain(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	c := newCtable(200, 10, 3)
	in := fillCtable(t, c, rng, 900)
	c.retain(func(e uint64) bool { return e&7 != 2 && e&7 != 5 })
	var kept []centry
	for _, e := range in {
		if e.tag != 2 && e.tag != 5 {
			kept = append(kept, e)
		}
	}
	checkCtable(t, c, kept)
	if c.entries != uint64(len(kept)) {
		t.Fatalf("%d entries, want %d", c.entries, len(kept))
	}
	// The removed tags match nothing any more (unless a kept entry of the
	// same fingerprint and buckets has them: none has those tags).
	for _, e := range in {
		if got := c.tags(e.i1, c.alt(e.i1, e.fp), e.fp); got&(1<<2|1<<5) != 0 {
			t.Fatalf("removed tag still matches: %b", got)
		}
	}
	kept = append(kept, fillCtable(t, c, rng, 200)...)
	checkCtable(t, c, kept)
}

func TestNibbleCodes(t *testing.T) {
	seen := map[uint16]bool{}
	for code, nibs := range nibDecode {
		if nibEncode(nibs) != uint16(code) {
			t.Fatalf("code %d decodes to %#x, which encodes to %d", code, nibs, nibEncode(nibs))
		}
		seen[nibs] = true
	}
	if len(seen) != 3876 {
		t.Fatalf("%d distinct multisets", len(seen))
	}
}
