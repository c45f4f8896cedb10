package bloom

import (
	"encoding/binary"
	"math"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// keyGen yields distinct deterministic 16-byte keys: key i is the
// little-endian pair (seed, i), so two generators with different seeds
// never share a key.
type keyGen struct {
	seed uint64
	buf  [16]byte
}

func (g *keyGen) key(i uint64) []byte {
	binary.LittleEndian.PutUint64(g.buf[:8], g.seed)
	binary.LittleEndian.PutUint64(g.buf[8:], i)
	return g.buf[:]
}

func (g *keyGen) hash(i uint64) Hash { return HashKey(g.key(i)) }

func TestFilterNoFalseNegatives(t *testing.T) {
	f, err := NewFilter(50_000, 0.01)
	if err != nil {
		t.Fatal(err)
	}
	g := keyGen{seed: 1}
	for i := uint64(0); i < 50_000; i++ {
		f.Add(g.hash(i))
	}
	for i := uint64(0); i < 50_000; i++ {
		if !f.Test(g.hash(i)) {
			t.Fatalf("key %d added but not found", i)
		}
		if !f.TestAndAdd(g.hash(i)) {
			t.Fatalf("key %d added but TestAndAdd reports unseen", i)
		}
	}
}

// measureFPR counts positives among n never-added keys.
func measureFPR(test func(Hash) bool, seed uint64, n uint64) float64 {
	g := keyGen{seed: seed}
	fp := 0
	for i := uint64(0); i < n; i++ {
		if test(g.hash(i)) {
			fp++
		}
	}
	return float64(fp) / float64(n)
}

func TestFilterFPRAtCapacity(t *testing.T) {
	const probes = 1_000_000
	for _, tc := range []struct {
		p float64
		n uint64
	}{
		{0.01, 1_000_000},
		{0.001, 1_000_000},
	} {
		f, err := NewFilter(tc.n, tc.p)
		if err != nil {
			t.Fatal(err)
		}
		g := keyGen{seed: 7}
		falseSeen := 0
		for i := uint64(0); i < tc.n; i++ {
			if f.TestAndAdd(g.hash(i)) {
				falseSeen++ // distinct keys: every "seen" is a false positive
			}
		}
		fpr := measureFPR(f.Test, 8, probes)
		bpk := float64(f.Bits()) / float64(tc.n)
		ratio := bpk / classicBitsPerKey(tc.p)
		t.Logf("p=%g k=%d bits/key=%.2f (%.3f× classic) measured=%.5f (%.3f× target) est.fpr=%.5f est.keys=%d fill=%.3f",
			tc.p, f.K(), bpk, ratio, fpr, fpr/tc.p, f.EstimatedFPR(), f.EstimatedKeys(), f.Fill())
		if fpr > 1.1*tc.p {
			t.Errorf("p=%g: measured FPR %.5f > 1.1 × target", tc.p, fpr)
		}
		if ratio > 1.15 {
			t.Errorf("p=%g: %.2f bits/key is %.3f× the classic optimum, want ≤ 1.15", tc.p, bpk, ratio)
		}
		if est := f.EstimatedKeys(); math.Abs(float64(est)-float64(tc.n)) > 0.02*float64(tc.n) {
			t.Errorf("p=%g: estimated keys %d, want %d ± 2%%", tc.p, est, tc.n)
		}
		if ef := f.EstimatedFPR(); math.Abs(ef-fpr) > 0.15*tc.p {
			t.Errorf("p=%g: estimated FPR %.5f far from measured %.5f", tc.p, ef, fpr)
		}
	}
}

func TestFilterOnesCount(t *testing.T) {
	f, _ := NewFilter(10_000, 0.01)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 12_000; i++ {
		f.Add(Hash{r.Uint64(), r.Uint64()})
	}
	if got := popcountPages(f.pages, f.nblocks); got != f.ones {
		t.Fatalf("incremental ones %d, popcount %d", f.ones, got)
	}
}

func TestNewFilterBadParams(t *testing.T) {
	for _, tc := range []struct {
		n uint64
		p float64
	}{{0, 0.01}, {10, 0}, {10, 1}, {10, -1}, {10, math.NaN()}, {1 << 62, 0.01}, {10, 1e-300}} {
		if f, err := NewFilter(tc.n, tc.p); err == nil || f != nil {
			t.Errorf("NewFilter(%d, %v) = %v, %v; want error", tc.n, tc.p, f, err)
		}
	}
}

func BenchmarkFilterTestAndAdd(b *testing.B) {
	f, _ := NewFilter(1_000_000, 0.01)
	r := rand.New(rand.NewPCG(1, 2))
	hs := make([]Hash, 1<<16)
	for i := range hs {
		hs[i] = Hash{r.Uint64(), r.Uint64()}
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		f.TestAndAdd(hs[i&(len(hs)-1)])
	}
}

// BenchmarkFilterTestAndAddBatch: ns/op is per batch of 256 keys.
func BenchmarkFilterTestAndAddBatch(b *testing.B) {
	f, _ := NewFilter(1_000_000, 0.01)
	r := rand.New(rand.NewPCG(1, 2))
	hs := make([]Hash, 1<<16)
	for i := range hs {
		hs[i] = Hash{r.Uint64(), r.Uint64()}
	}
	seen := make([]bool, 256)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		lo := (i * 256) & (len(hs) - 1)
		f.TestAndAddBatch(hs[lo:lo+256], seen)
	}
}

// refProbes lists the probe positions of h for k probes the plain way: 9-bit
// fields, seven from H2, then seven from each fmix64(H2 + j·rot(H1, 32)).
// The unrolled has/set must set and test exactly these bits (the format
// and the golden files depend on it).
func refProbes(h Hash, k int) []uint64 {
	var out []uint64
	w, s, d := h.H2, h.H2, h.H1<<32|h.H1>>32
	left := 7
	for range k {
		if left == 0 {
			s += d
			w = fmix64(s)
			left = 7
		}
		out = append(out, w&(blockBits-1))
		w >>= 9
		left--
	}
	return out
}

func TestProbesMatchReference(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for k := 1; k <= maxK; k++ {
		f := newFilter(1, 0.5, k, 1)
		for range 200 {
			h := Hash{H1: r.Uint64(), H2: r.Uint64()}
			var want [blockWords]uint64
			for _, p := range refProbes(h, k) {
				want[p>>6] |= 1 << (p & 63)
			}
			var b [blockWords]uint64
			added := f.set(&b, h)
			if b != want {
				t.Fatalf("k=%d: set wrote %x, want %x", k, b, want)
			}
			var ones uint64
			for _, x := range want {
				ones += uint64(bits.OnesCount64(x))
			}
			if added != ones || f.set(&b, h) != 0 {
				t.Fatalf("k=%d: set reported %d new bits, want %d then 0", k, added, ones)
			}
			if !f.has(&b, h) {
				t.Fatalf("k=%d: has is false right after set", k)
			}
			// Clearing any one probe bit makes has false.
			for _, p := range refProbes(h, k) {
				c := b
				c[p>>6] &^= 1 << (p & 63)
				if f.has(&c, h) {
					t.Fatalf("k=%d: has is true with probe bit %d cleared", k, p)
				}
			}
		}
	}
}
