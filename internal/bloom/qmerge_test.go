package bloom

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// cloneQtable copies a table's pages and counters.
func cloneQtable(q *qtable) *qtable {
	c := newQtable(q.nblocks, q.r, q.a)
	for i, p := range q.meta {
		*c.meta[i] = *p
	}
	for i, p := range q.ents {
		*c.ents[i] = *p
	}
	c.entries = q.entries
	return c
}

// insertAll is the replay merge replaces: the entries (posIndex<<s |
// value) inserted one by one in the given order; it stops at the first
// the table cannot take.
func insertAll(q *qtable, adds []uint64) (added uint64, ok bool) {
	for _, e := range adds {
		before := q.entries
		if !q.insert(pos(e>>q.s), e&q.mask()) {
			return added, false
		}
		added += q.entries - before
	}
	return added, true
}

// TestQtableMergeMatchesInserts: merging a sorted batch of entries gives
// the very pages inserting them one by one gives, on random tables (small
// and large entries, empty to over-full, uniform and clustered quotients)
// and random batches (new quotients, entries of existing runs before,
// inside and after them, entries already present, repeats); where the
// inserts fail (the table cannot take the batch), the merge fails too
// and leaves a table whose layout holds.
func TestQtableMergeMatchesInserts(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	iters := 4000
	if testing.Short() {
		iters = 500
	}
	var fails, fulls int
	for it := range iters {
		nblocks := 1 + rng.Uint64N(30)
		r := 1 + uint(rng.IntN(14))
		a := uint(rng.IntN(4))
		q := newQtable(nblocks, r, a)
		slots, vmax := q.slots(), uint64(1)<<q.s
		// Quotients uniform, or crowded into a stretch (long clusters,
		// runs pushed into the spill blocks).
		hot := rng.IntN(3) == 0
		lo, span := uint64(0), slots
		if hot {
			span = 1 + rng.Uint64N(slots)
			lo = rng.Uint64N(slots - span + 1)
		}
		key := func() uint64 { return (lo+rng.Uint64N(span))<<q.s | rng.Uint64N(vmax) }
		var base []uint64
		for range int(rng.Float64() * 1.1 * float64(slots)) {
			k := key()
			if q.insert(pos(k>>q.s), k&q.mask()) {
				base = append(base, k)
			}
		}
		var adds []uint64
		for range rng.IntN(int(slots)/2 + 2) {
			switch rng.IntN(8) {
			case 0: // already in the table
				if len(base) > 0 {
					adds = append(adds, base[rng.IntN(len(base))])
				}
			case 1: // twice in the batch
				if len(adds) > 0 {
					adds = append(adds, adds[rng.IntN(len(adds))])
				}
			default:
				adds = append(adds, key())
			}
		}
		slices.Sort(adds)
		want, got := cloneQtable(q), cloneQtable(q)
		n1, ok1 := insertAll(want, adds)
		n2, ok2 := got.merge(adds)
		if ok1 != ok2 {
			t.Fatalf("iteration %d: inserts ok %v, merge ok %v", it, ok1, ok2)
		}
		if !ok1 {
			fails++
			if err := got.checkLayout(); err != nil {
				t.Fatalf("iteration %d: failed merge left a bad layout: %v", it, err)
			}
			continue
		}
		if n1 != n2 || want.entries != got.entries {
			t.Fatalf("iteration %d: inserts added %d (%d entries), merge %d (%d)", it, n1, want.entries, n2, got.entries)
		}
		if err := got.verify(nil); err != nil {
			t.Fatalf("iteration %d: %v", it, err)
		}
		a1, a2 := pagesOf(want), pagesOf(got)
		for i := range a1 {
			if a1[i] != a2[i] {
				t.Fatalf("iteration %d (%d blocks, s %d, %d entries + %d): page %d differs", it, nblocks, q.s, q.entries, len(adds), i)
			}
		}
		if got.entries*20 >= got.slots()*19 {
			fulls++
		}
	}
	if fails == 0 || fulls == 0 {
		t.Fatalf("no case where the table could not take the batch (%d) or was nearly full (%d)", fails, fulls)
	}
}

// TestQtableMergeLargeTables is TestQtableMergeMatchesInserts on tables
// large enough that runs cross entry pages and the metadata page of 4096
// blocks, with a snapshot outstanding: the merge gives the inserts' pages
// and leaves the snapshot's pages as they were.
func TestQtableMergeLargeTables(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	cases := []struct {
		nblocks uint64
		r, a    uint
	}{{400, 17, 3}, {4200, 40, 3}, {1500, 52, 3}, {4300, 7, 3}}
	if raceEnabled || testing.Short() {
		cases = cases[:2] // the inserts are slow under the race detector
	}
	for it, c := range cases {
		q := newQtable(c.nblocks, c.r, c.a)
		slots, vmax := q.slots(), uint64(1)<<q.s
		key := func() uint64 { return rng.Uint64N(slots)<<q.s | rng.Uint64N(vmax) }
		for range int(0.85 * float64(slots)) {
			k := key()
			q.insert(pos(k>>q.s), k&q.mask())
		}
		var adds []uint64
		for range int(0.09 * float64(slots)) {
			adds = append(adds, key())
		}
		slices.Sort(adds)
		want, got := cloneQtable(q), cloneQtable(q)
		view := got.snapshot()
		frozen := pagesOf(got)
		n1, ok1 := insertAll(want, adds)
		n2, ok2 := got.merge(adds)
		if !ok1 || !ok2 || n1 != n2 {
			t.Fatalf("table %d: inserts %d %v, merge %d %v", it, n1, ok1, n2, ok2)
		}
		if err := got.verify(nil); err != nil {
			t.Fatalf("table %d: %v", it, err)
		}
		a1, a2 := pagesOf(want), pagesOf(got)
		for i := range a1 {
			if a1[i] != a2[i] {
				t.Fatalf("table %d (%d blocks, s %d): page %d differs", it, c.nblocks, q.s, i)
			}
		}
		var held [][pageWords]uint64
		for _, p := range view.meta {
			held = append(held, *p)
		}
		for _, p := range view.ents {
			held = append(held, *p)
		}
		for i := range frozen {
			if frozen[i] != held[i] {
				t.Fatalf("table %d: the snapshot's page %d changed", it, i)
			}
		}
		view.release()
	}
}

// TestQtableMergeOffsetOverflow: a batch whose runs would leave more than
// 65535 runs pending at a block's start is refused, as the inserts refuse
// it, and the table left empty, its layout sound.
func TestQtableMergeOffsetOverflow(t *testing.T) {
	q := newQtable(2500, 17, 0)
	var adds []uint64
	for v := range uint64(70_000) { // one long run at quotient 0
		adds = append(adds, v)
	}
	for x := uint64(1); x <= 65_600; x++ { // then one entry per quotient
		adds = append(adds, x<<q.s)
	}
	// The inserts take minutes under the race detector (each finds the
	// long run's start again).
	if !raceEnabled && !testing.Short() {
		if _, ok := insertAll(cloneQtable(q), adds); ok {
			t.Fatal("inserts took the batch")
		}
	}
	if _, ok := q.merge(adds); ok {
		t.Fatal("merge took the batch")
	}
	if err := q.checkLayout(); err != nil || q.entries != 0 {
		t.Fatalf("after the failed merge: %d entries, %v", q.entries, err)
	}
}

// TestTableApplyLogsMatchesInserts: a chain replayed by ApplyLogs gives
// the bytes of the same entries inserted one by one, on a table of the
// fingerprint kind; entries of another generation or past the table are
// refused.
func TestTableApplyLogsMatchesInserts(t *testing.T) {
	forLayouts(t, func(t *testing.T) {
		s, err := NewFingerprintShard(Config{Window: 10 * time.Hour, Generations: 8, Capacity: 200_000, FPR: 0.01})
		if err != nil {
			t.Fatal(err)
		}
		at := time.Unix(0, 0).Add(400_000 * s.Span())
		for i := range uint64(150_000) {
			s.TestAndAdd(keyHash(i), at)
		}
		s.EnableJournal(1, 10_000_000)
		base := encodeOpenBase(t, s)
		var ls []*TableLog
		for i := range 5 {
			for j := range uint64(3000) {
				s.TestAndAdd(keyHash(1_000_000+uint64(i)*3000+j), at)
			}
			sn := s.Snapshot()
			ts := sn.Tables[len(sn.Tables)-1]
			m, _ := ts.JournalMark()
			l, ok := ts.LogSince(m.Pos)
			if !ok {
				t.Fatal("no log")
			}
			ls = append(ls, l)
			ts.Mark("seg", i+1)
			sn.Release()
		}
		tb, err := DecodeTable(bytes.NewReader(base), 0)
		if err != nil {
			t.Fatal(err)
		}
		ref := cloneQtable(tb.q)
		var all []uint64
		for _, l := range ls {
			all = append(all, l.Added...)
		}
		if _, ok := insertAll(ref, all); !ok {
			t.Fatal("inserts failed")
		}
		if err := tb.ApplyLogs(ls); err != nil {
			t.Fatal(err)
		}
		a1, a2 := pagesOf(ref), pagesOf(tb.q)
		for i := range a1 {
			if a1[i] != a2[i] {
				t.Fatalf("page %d differs from the inserts'", i)
			}
		}
		want := encodeTables(t, s)
		var got bytes.Buffer
		if _, err := tb.WriteTo(&got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want[len(want)-1]) {
			t.Fatal("replayed table differs from the live one")
		}
		for _, bad := range []uint64{
			all[0] ^ 1, // another tag
			tb.q.slots()<<tb.q.s | all[0]&tb.q.mask(), // past the home slots
		} {
			fresh, _ := DecodeTable(bytes.NewReader(base), 0)
			l := *ls[0]
			l.Added = append(slices.Clone(l.Added), bad)
			if err := fresh.ApplyLogs([]*TableLog{&l}); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("entry %#x: %v", bad, err)
			}
		}
	})
}

// TestSortEntries: the radix sort sorts.
func TestSortEntries(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 255, 256, 1000, 100_000} {
		for _, bitsUsed := range []uint{1, 11, 12, 35, 64} {
			xs := make([]uint64, n)
			for i := range xs {
				xs[i] = rng.Uint64() >> (64 - bitsUsed)
			}
			want := slices.Clone(xs)
			slices.Sort(want)
			sortEntries(xs)
			if !slices.Equal(xs, want) {
				t.Fatalf("%d entries of %d bits: not sorted", n, bitsUsed)
			}
		}
	}
}

// TestQtableEmptyFrom: the dense emptyFrom agrees with firstEmpty on every
// slot of random tables, crowded ones included.
func TestQtableEmptyFrom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 300 {
		q := newQtable(1+rng.Uint64N(20), 6, 2)
		span := 1 + rng.Uint64N(q.slots())
		lo := rng.Uint64N(q.slots() - span + 1)
		for range int(rng.Float64() * 1.05 * float64(q.slots())) {
			q.insert(pos(lo+rng.Uint64N(span)), rng.Uint64N(256))
		}
		for i := range q.pblocks * qSlots {
			if got, want := q.emptyFrom(i), posIndex(q.firstEmpty(denseToPos(i))); got != want {
				t.Fatalf("slot %d: emptyFrom %d, firstEmpty %d", i, got, want)
			}
		}
	}
}

// TestCopyBitsBack: copies between arrays and up within one array (the
// ranges overlapping) match a bit-by-bit copy.
func TestCopyBitsBack(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	bit := func(ws []uint64, i uint64) uint64 { return ws[i>>6] >> (i & 63) & 1 }
	for range 20_000 {
		src := make([]uint64, 8)
		for i := range src {
			src[i] = rng.Uint64()
		}
		n := rng.Uint64N(300)
		sb := rng.Uint64N(512 - n + 1)
		same := rng.IntN(2) == 0
		var db uint64
		dst := make([]uint64, 8)
		if same {
			db = sb + rng.Uint64N(512-n-sb+1)
			copy(dst, src)
		} else {
			db = rng.Uint64N(512 - n + 1)
			for i := range dst {
				dst[i] = rng.Uint64()
			}
		}
		want := slices.Clone(dst)
		for i := range n {
			b := bit(src, sb+i)
			want[(db+i)>>6] = want[(db+i)>>6]&^(1<<((db+i)&63)) | b<<((db+i)&63)
		}
		if same {
			copyBitsBack(dst, db, dst, sb, n)
		} else {
			copyBitsBack(dst, db, src, sb, n)
		}
		if !slices.Equal(dst, want) {
			t.Fatalf("n %d from %d to %d (same array %v): differs", n, sb, db, same)
		}
	}
}
