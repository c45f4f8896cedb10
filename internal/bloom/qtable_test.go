package bloom

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// qmodel is the reference a qtable is checked against: the set of entries
// per quotient.
type qmodel map[uint64][]uint64

func (m qmodel) insert(x, v uint64) {
	if i, ok := slices.BinarySearch(m[x], v); !ok {
		m[x] = slices.Insert(m[x], i, v)
	}
}

func (m qmodel) count() (n uint64) {
	for _, vs := range m {
		n += uint64(len(vs))
	}
	return n
}

// pos is the position of the i-th home slot.
func pos(i uint64) uint64 { return i/qSlots<<6 | i%qSlots }

// pagesOf copies a table's pages, metadata then entries.
func pagesOf(q *qtable) [][pageWords]uint64 {
	var out [][pageWords]uint64
	for _, p := range q.meta {
		out = append(out, *p)
	}
	for _, p := range q.ents {
		out = append(out, *p)
	}
	return out
}

// checkAgainst compares every run of t with the model.
func checkAgainst(t *testing.T, q *qtable, m qmodel) {
	t.Helper()
	if err := q.verify(nil); err != nil {
		t.Fatalf("verify: %v", err)
	}
	if q.entries != m.count() {
		t.Fatalf("entries %d, model %d", q.entries, m.count())
	}
	for i := range q.slots() {
		x := pos(i)
		start, end, ok := q.run(x)
		want := m[x]
		if !ok {
			if len(want) > 0 {
				t.Fatalf("quotient %d: no run, model has %v", x, want)
			}
			continue
		}
		var got []uint64
		for i := start; ; i = next(i) {
			got = append(got, q.get(i))
			if i == end {
				break
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("quotient %d: run %v, model %v", x, got, want)
		}
	}
}

// TestQtableModel inserts random entries (clustered quotients, so that runs
// shift across blocks and into the spill blocks) and checks the runs, the
// structure and the entry count against a map after every step.
func TestQtableModel(t *testing.T) {
	for _, tc := range []struct {
		name    string
		nblocks uint64
		r, a    uint
		n       int
		spread  uint64 // quotients drawn from [0, spread)
	}{
		{"small dense", 2, 3, 2, 150, 128},
		{"one block", 1, 7, 3, 60, 64},
		{"clustered", 16, 7, 3, 900, 300},
		{"wide entries", 8, 50, 4, 400, 512},
		{"tail", 8, 5, 1, 500, 512},
		// 173 blocks of 54-bit entries per page: clusters cross pages.
		{"pages", 400, 50, 4, 21500, 22400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tc.n)))
			q := newQtable(tc.nblocks, tc.r, tc.a)
			m := qmodel{}
			for i := range tc.n {
				x := pos(rng.Uint64N(min(tc.spread, q.slots())))
				if tc.name == "tail" {
					x = pos(q.slots() - 1 - rng.Uint64N(tc.spread/8))
				}
				v := rng.Uint64N(1 << (tc.r + tc.a))
				if rng.IntN(8) == 0 && len(m[x]) > 0 { // repeat an entry
					v = m[x][rng.IntN(len(m[x]))]
				}
				if !q.insert(x, v) {
					// Only allowed when the cluster would pass the spill.
					if e := q.firstEmpty(x); e < q.limit() {
						t.Fatalf("insert %d refused with slot %d free", i, e)
					}
					continue
				}
				m.insert(x, v)
				if every := max(7, tc.n/10); i%every == 0 || i == tc.n-1 {
					checkAgainst(t, q, m)
				}
			}
			if q.entries < uint64(tc.n)*8/10 {
				t.Fatalf("only %d of %d entries taken", q.entries, tc.n)
			}
		})
	}
}

// TestQtableCanonical: the same entries inserted in two orders give the
// same pages.
func TestQtableCanonical(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 3))
	type e struct{ x, v uint64 }
	var es []e
	for range 700 {
		es = append(es, e{pos(rng.Uint64N(640)), rng.Uint64N(1 << 10)})
	}
	a, b := newQtable(12, 7, 3), newQtable(12, 7, 3)
	for _, x := range es {
		a.insert(x.x, x.v)
	}
	rng.Shuffle(len(es), func(i, j int) { es[i], es[j] = es[j], es[i] })
	for _, x := range es {
		b.insert(x.x, x.v)
	}
	if !slices.Equal(pagesOf(a), pagesOf(b)) {
		t.Fatal("pages differ between insertion orders")
	}
}

// TestQtableDrop removes entries by a predicate and checks the result
// against a table built from the survivors alone: same pages.
func TestQtableDrop(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4} {
		rng := rand.New(rand.NewPCG(seed, 9))
		q := newQtable(10, 6, 3)
		m := qmodel{}
		for range 600 {
			x, v := pos(rng.Uint64N(560)), rng.Uint64N(1<<9)
			if q.insert(x, v) {
				m.insert(x, v)
			}
		}
		drop := rng.Uint64N(8)
		keep := func(v uint64) bool { return v&7 != drop && v&7 != (drop+3)&7 }
		q.drop(1<<drop | 1<<((drop+3)&7))
		want := newQtable(10, 6, 3)
		kept := qmodel{}
		for x, vs := range m {
			for _, v := range vs {
				if keep(v) {
					want.insert(x, v)
					kept.insert(x, v)
				}
			}
		}
		checkAgainst(t, q, kept)
		if !slices.Equal(pagesOf(q), pagesOf(want)) {
			t.Fatalf("seed %d: pages differ from a table of the survivors", seed)
		}
		// Inserting again after a retain keeps working.
		for range 100 {
			x, v := pos(rng.Uint64N(560)), rng.Uint64N(1<<9)
			if q.insert(x, v) {
				kept.insert(x, v)
			}
		}
		checkAgainst(t, q, kept)
	}
}

// TestQtableTags reports exactly the tags stored for a remainder.
func TestQtableTags(t *testing.T) {
	q := newQtable(4, 5, 3)
	x, y := pos(10), pos(11)
	q.insert(x, 7<<3|1)
	q.insert(x, 7<<3|6)
	q.insert(x, 8<<3|2)
	q.insert(y, 7<<3|4)
	if got := q.tags(x, 7); got != 1<<1|1<<6 {
		t.Fatalf("tags(10, 7) = %b", got)
	}
	if got := q.tags(y, 7); got != 1<<4 {
		t.Fatalf("tags(11, 7) = %b", got)
	}
	if got := q.tags(pos(12), 7); got != 0 {
		t.Fatalf("tags(12, 7) = %b", got)
	}
}

func TestSelect64(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for range 10000 {
		x := rng.Uint64() & rng.Uint64()
		var pos []uint
		for i := range uint(64) {
			if x>>i&1 != 0 {
				pos = append(pos, i)
			}
		}
		for k, p := range pos {
			if got := select64(x, uint(k)); got != p {
				t.Fatalf("select64(%#x, %d) = %d, want %d", x, k, got, p)
			}
			if got := selectPortable(x, uint(k)); got != p {
				t.Fatalf("selectPortable(%#x, %d) = %d, want %d", x, k, got, p)
			}
		}
	}
}

// TestQtableSnapshotCOW: a snapshot's pages keep the state at snapshot time
// while the owner goes on inserting and retaining.
func TestQtableSnapshotCOW(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	q := newQtable(300, 7, 3)
	for range 10000 {
		q.insert(pos(rng.Uint64N(q.slots())), rng.Uint64N(1<<10))
	}
	want := pagesOf(q)
	v := q.snapshot()
	for range 5000 {
		q.insert(pos(rng.Uint64N(q.slots())), rng.Uint64N(1<<10))
	}
	q.drop(1 << 3)
	if got := pagesOf(&qtable{meta: v.meta, ents: v.ents}); !slices.Equal(got, want) {
		t.Fatal("snapshot pages changed")
	}
	v.release()
	if err := q.verify(nil); err != nil {
		t.Fatal(err)
	}
}

// FuzzTableLayout: metadata of a table rewritten at will (offsets made
// consistent, so that checkLayout's other checks decide) is either refused
// by checkLayout or safe: every lookup, insert and drop stays inside the
// table. The format's CRCs keep such data from a decoder; this is what
// stands behind them.
func FuzzTableLayout(f *testing.F) {
	f.Add([]byte{0x01, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00})
	f.Add([]byte{0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		q := newQtable(4, 5, 3)
		rng := rand.New(rand.NewPCG(1, 1))
		for range 150 {
			q.insert(pos(rng.Uint64N(q.slots())), rng.Uint64N(1<<8))
		}
		// Each 9 bytes: a metadata word index and 8 bytes XORed into it
		// (the offset bits are recomputed below).
		for len(data) >= 9 {
			w := uint64(data[0]) % (q.pblocks * 2)
			var x uint64
			for i := range 8 {
				x |= uint64(data[1+i]) << (8 * i)
			}
			q.meta[0][w] ^= x & qSlotMask
			data = data[9:]
		}
		q.rebuildOffsets()
		if q.checkLayout() != nil {
			return
		}
		for i := range q.slots() {
			q.tags(pos(i), 3)
		}
		for range 50 {
			q.insert(pos(rng.Uint64N(q.slots())), rng.Uint64N(1<<8))
		}
		q.drop(1 << 2)
		// A batch merged in, as a log's replay does.
		adds := make([]uint64, 60)
		for i := range adds {
			adds[i] = rng.Uint64N(q.slots())<<q.s | rng.Uint64N(1<<8)
		}
		slices.Sort(adds)
		q.merge(adds)
		if err := q.checkLayout(); err != nil {
			t.Fatalf("a table that passed checkLayout fails it after operations: %v", err)
		}
	})
}

// TestQtableCheckLayoutRejects: layouts an operation could leave the
// table through are refused; a sound one passes.
func TestQtableCheckLayoutRejects(t *testing.T) {
	sound := newQtable(4, 5, 3)
	for i := range uint64(100) {
		sound.insert(pos(i*2), i)
	}
	if err := sound.checkLayout(); err != nil {
		t.Fatalf("sound table refused: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(q *qtable)
	}{
		{"run ends before its quotient", func(q *qtable) { q.setOcc(pos(10), true); q.setRunend(pos(5), true) }},
		{"more runends than quotients", func(q *qtable) { q.setRunend(pos(7), true) }},
		{"occupied spill block", func(q *qtable) { q.setOcc(q.nblocks<<6, true); q.setRunend(q.nblocks<<6, true) }},
		{"offset off by one", func(q *qtable) {
			q.setOcc(pos(55), true)
			q.setRunend(pos(56), true)
			q.rebuildOffsets()
			q.setOff(1, q.off(1)+1)
		}},
	} {
		q := newQtable(4, 5, 3)
		tc.edit(q)
		if tc.name != "offset off by one" {
			q.rebuildOffsets()
		}
		if err := q.checkLayout(); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}
