package bloom

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"
)

// keyHash is the hash of the i-th test key.
func keyHash(i uint64) Hash {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], i)
	return HashKey(b[:])
}

// TestFingerprintNoFalseNegatives runs a stream with repeats of every age,
// late events and gaps of one and of many generations, and checks the
// contract: a key whose latest sighting (at event time t) is less than W
// before the newest event time f is reported seen; and one last seen
// G·span or more before is not (unless it is a false positive, which the
// test tells apart by asking for fresh keys only).
func TestFingerprintNoFalseNegatives(t *testing.T) {
	forLayouts(t, func(t *testing.T) {
		for _, gens := range []int{2, 4, 8, 13} {
			cfg := Config{Window: 24 * time.Hour, Generations: gens, Capacity: 20_000, FPR: 0.01}
			s, err := NewFingerprintShard(cfg)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(gens), 1))
			last := map[uint64]int64{} // key → latest sighting (filed event time)
			var keys []uint64
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
			frontier := now
			next := uint64(0)
			for step := range 60_000 {
				switch r := rng.IntN(1000); {
				case r < 2: // a gap of several generations
					now += int64(rng.IntN(3*gens)) * int64(s.Span())
				case r < 900:
					now += int64(rng.IntN(int(time.Minute)))
				}
				ts := now
				if rng.IntN(20) == 0 { // late event
					ts -= int64(rng.IntN(int(6 * time.Hour)))
				}
				var k uint64
				if len(keys) > 0 && rng.IntN(3) == 0 {
					k = keys[rng.IntN(len(keys))]
				} else {
					k, next = next, next+1
					keys = append(keys, k)
				}
				frontier = max(frontier, ts)
				prev, seenBefore := last[k]
				got := s.TestAndAdd(keyHash(k), time.Unix(0, ts))
				if seenBefore && frontier-prev < int64(cfg.Window) && !got {
					t.Fatalf("G=%d step %d: key %d last seen %v before the frontier, reported unseen", gens, step, k, time.Duration(frontier-prev))
				}
				// The key is filed under its generation or the newest.
				last[k] = max(prev, min(ts, frontier))
				if step%5000 == 0 {
					if err := s.check(); err != nil {
						t.Fatalf("G=%d step %d: %v", gens, step, err)
					}
				}
			}
		}
	})
}

// forLayouts runs f with the plan's table laid out as a tagged table and
// as a sealed one (sealedLayout), whatever the plan's size would choose.
func forLayouts(t *testing.T, f func(t *testing.T)) {
	for _, l := range []struct {
		name   string
		layout int
	}{{"tagged", sealedNever}, {"sealed", sealedAlways}} {
		t.Run(l.name, func(t *testing.T) {
			defer func(old int) { sealedLayout = old }(sealedLayout)
			sealedLayout = l.layout
			f(t)
		})
	}
}

// check verifies the structure of every table (tests).
func (s *FingerprintShard) check() error {
	for _, tb := range s.Tables() {
		counts := make([]uint64, len(tb.counts))
		if tb.h != nil {
			live := make([]uint64, 1)
			if err := tb.q.verify(live); err != nil {
				return err
			}
			copy(counts, tb.h.set.counts)
			counts[tb.tag(tb.newest)] += live[0]
			set := make([]uint64, len(counts))
			for _, c := range tb.h.set.chunks {
				c.each(tb.h.set.s, func(_, v uint64) { set[v&(1<<tb.a-1)]++ })
			}
			for i := range set {
				if set[i] != tb.h.set.counts[i] {
					return &FormatError{Section: "counts", Detail: "set tag counts differ", Err: ErrCorrupt}
				}
			}
		} else if err := tb.q.verify(counts); err != nil {
			return err
		}
		for i := range counts {
			if counts[i] != tb.counts[i] {
				return &FormatError{Section: "counts", Detail: "tag counts differ", Err: ErrCorrupt}
			}
		}
	}
	return nil
}

// fillFingerprint adds n fresh keys spread evenly over d from start, in
// batches, and returns the time after.
func fillFingerprint(s *FingerprintShard, first, n uint64, start time.Time, d time.Duration) time.Time {
	hs := make([]Hash, 0, 256)
	ts := make([]time.Time, 0, 256)
	seen := make([]bool, 256)
	for i := uint64(0); i < n; i++ {
		hs = append(hs, keyHash(first+i))
		ts = append(ts, start.Add(time.Duration(float64(d)*float64(i)/float64(n))))
		if len(hs) == cap(hs) || i == n-1 {
			s.TestAndAddBatch(hs, ts, seen)
			hs, ts = hs[:0], ts[:0]
		}
	}
	return start.Add(d)
}

// TestFingerprintFPRAtCapacity fills a shard with its planned keys at the
// planned rate until the table is at its peak (a full window and the
// generation about to leave) and measures the rate on keys never added;
// then with 2× and 4× the planned rate (overflow tables) the rate must
// stay within the target too. The model's estimate must be within the
// target; the measured rate within 1.1× it (1 M probes: ±3 % at 1 %,
// ±10 % at 0.1 %, as TestShardFPR allows).
func TestFingerprintFPRAtCapacity(t *testing.T) {
	forLayouts(t, func(t *testing.T) {
		for _, fpr := range []float64{0.01, 0.001} {
			for _, load := range []float64{1, 2, 4} {
				cfg := Config{Window: 7 * time.Hour, Generations: 8, Capacity: 70_000, FPR: fpr}
				s, err := NewFingerprintShard(cfg)
				if err != nil {
					t.Fatal(err)
				}
				span := s.Span()
				at := time.Unix(0, 0).Add(1000 * span)
				perGen := uint64(float64(cfg.Capacity) / 7 * load)
				next := uint64(0)
				for range 8 { // G generations: the peak, just before the oldest leaves
					at = fillFingerprint(s, next, perGen, at, span)
					next += perGen
				}
				got := measureFPR(s.Test, 77+uint64(load), 1_000_000)
				st := s.Stats()
				t.Logf("fpr %v, %.0f× the plan: measured %.4f %%, estimated %.4f %%, %d tables (%d overflow), %.2f bits per planned key",
					fpr, load, got*100, st.EstFPR*100, len(st.Tables), st.Overflow, float64(st.Bytes)*8/float64(cfg.Capacity))
				if got > 1.1*fpr || st.EstFPR > fpr {
					t.Errorf("fpr %v at %.0f× the plan: measured %v, estimated %v", fpr, load, got, st.EstFPR)
				}
				if load > 1 && st.Overflow == 0 {
					t.Errorf("fpr %v at %.0f× the plan: no overflow table", fpr, load)
				}
				if err := s.check(); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}

// TestFingerprintDeterministic: the same keys and timestamps give
// byte-identical tables, whether fed one by one or in batches.
func TestFingerprintDeterministic(t *testing.T) {
	forLayouts(t, func(t *testing.T) {
		cfg := Config{Window: 6 * time.Hour, Generations: 8, Capacity: 5_000, FPR: 0.01}
		run := func(batch bool) [][]byte {
			s, _ := NewFingerprintShard(cfg)
			rng := rand.New(rand.NewPCG(5, 5))
			at := time.Unix(1_700_000_000, 0)
			var hs []Hash
			var ts []time.Time
			for i := range 30_000 {
				at = at.Add(time.Duration(rng.IntN(int(2 * time.Second))))
				k := uint64(i)
				if i%4 == 0 {
					k = rng.Uint64N(uint64(i + 1))
				}
				hs = append(hs, keyHash(k))
				ts = append(ts, at.Add(-time.Duration(rng.IntN(3))*time.Minute))
			}
			if batch {
				s.TestAndAddBatch(hs, ts, make([]bool, len(hs)))
			} else {
				for i := range hs {
					s.TestAndAdd(hs[i], ts[i])
				}
			}
			var out [][]byte
			for _, tb := range s.Tables() {
				var b bytes.Buffer
				if _, err := tb.WriteTo(&b); err != nil {
					t.Fatal(err)
				}
				out = append(out, b.Bytes())
			}
			return out
		}
		a, b, c := run(false), run(false), run(true)
		for i := range a {
			if !bytes.Equal(a[i], b[i]) || !bytes.Equal(a[i], c[i]) {
				t.Fatalf("table %d differs between runs", i)
			}
		}
		if len(a) < 2 {
			t.Fatalf("%d tables: the run should overflow", len(a))
		}
	})
}

// TestSealedEarlySeal: a generation of three times its planned keys, in a
// sealed table with room for them (the earlier generations light), goes
// into the set early instead of overflowing: no overflow table, every key
// found, the table consistent and restored byte-identical; the rate stays
// within the target.
func TestSealedEarlySeal(t *testing.T) {
	defer func(old int) { sealedLayout = old }(sealedLayout)
	sealedLayout = sealedAlways
	cfg := Config{Window: 7 * time.Hour, Generations: 8, Capacity: 70_000, FPR: 0.01}
	s, err := NewFingerprintShard(cfg)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(0, 0).Add(1000 * s.Span())
	at = fillFingerprint(s, 0, 2_000, at, s.Span()) // a light generation
	at = fillFingerprint(s, 10_000, 30_000, at, s.Span()/2)
	st := s.Stats()
	if st.Overflow != 0 || len(st.Tables) != 1 || s.Tables()[0].h.set.counts[s.Tables()[0].tag(s.t)] == 0 {
		t.Fatalf("%d tables, %d overflow; the newest generation's sealed entries: %v", len(st.Tables), st.Overflow, s.Tables()[0].h.set.counts)
	}
	for i := uint64(10_000); i < 40_000; i++ {
		if !s.Test(keyHash(i)) {
			t.Fatalf("key %d lost", i)
		}
	}
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
	enc := encodeTables(t, s)
	r, err := RestoreFingerprintShard(cfg, decodeTables(t, enc))
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range encodeTables(t, r) {
		if !bytes.Equal(e, enc[i]) {
			t.Fatalf("table %d differs after a restore", i)
		}
	}
	// Keys seen again in the same generation are seen, and not added twice.
	before := s.Stats().Entries
	for i := uint64(10_000); i < 11_000; i++ {
		if !s.TestAndAdd(keyHash(i), at) {
			t.Fatalf("key %d not seen again", i)
		}
	}
	if after := s.Stats().Entries; after != before {
		t.Fatalf("entries %d after repeats, %d before", after, before)
	}
	if got := measureFPR(s.Test, 99, 200_000); got > 1.1*cfg.FPR {
		t.Fatalf("rate %.4f", got)
	}
}

// TestTaggedToSealedUpgrade: a memory of tagged tables (written before the
// sealed layout) restored where the plan is laid out sealed keeps its
// open tagged table until the next generation change that ends a
// generation the plan fits (as after a change of capacity), then opens a
// sealed one beside it; every key of the window is found throughout.
func TestTaggedToSealedUpgrade(t *testing.T) {
	defer func(old int) { sealedLayout = old }(sealedLayout)
	cfg := Config{Window: 7 * time.Hour, Generations: 8, Capacity: 70_000, FPR: 0.01}
	sealedLayout = sealedNever
	s, err := NewFingerprintShard(cfg)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(0, 0).Add(1000 * s.Span())
	at = fillFingerprint(s, 0, 12_000, at, 2*s.Span())
	enc := encodeTables(t, s)

	sealedLayout = sealedAlways
	r, err := RestoreFingerprintShard(cfg, decodeTables(t, enc))
	if err != nil {
		t.Fatal(err)
	}
	if tb := r.open(); tb == nil || tb.h != nil {
		t.Fatal("the restored open table should be the tagged one")
	}
	// at is the end of the newest generation: more of it, then the next.
	fillFingerprint(r, 100_000, 2_000, at.Add(-s.Span()/2), s.Span()/4)
	if tb := r.open(); tb.h != nil || len(r.Tables()) != 1 {
		t.Fatalf("%d tables before the generation change", len(r.Tables()))
	}
	fillFingerprint(r, 200_000, 5_000, at, s.Span()/2)
	tabs := r.Tables()
	if len(tabs) != 2 || !tabs[0].closed || tabs[0].h != nil || tabs[1].h == nil {
		t.Fatalf("after the change: %d tables", len(tabs))
	}
	for _, k := range []struct{ from, n uint64 }{{6_000, 6_000}, {100_000, 2_000}, {200_000, 5_000}} {
		for i := k.from; i < k.from+k.n; i++ {
			if !r.Test(keyHash(i)) {
				t.Fatalf("key %d lost", i)
			}
		}
	}
	if err := r.check(); err != nil {
		t.Fatal(err)
	}
}
