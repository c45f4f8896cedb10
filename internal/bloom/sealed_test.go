package bloom

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// modelSet is what a sealedSet should answer: tags per (quotient,
// remainder).
type modelSet map[[2]uint64]uint64

// buildSetFromScratch codes the model's entries into a set of nq
// quotients, directly (no merge): the canonical set of those entries.
func buildSetFromScratch(m modelSet, nq uint64, r, a uint) *sealedSet {
	s := newSealedSet(nq, r, a)
	per := make([][]uint64, len(s.chunks))
	for k, tags := range m {
		for t := uint64(0); tags != 0; t, tags = t+1, tags>>1 {
			if tags&1 != 0 {
				ci := k[0] / ssChunkQ
				per[ci] = append(per[ci], (k[0]%ssChunkQ)<<s.s|k[1]<<a|t)
				s.counts[t]++
				s.n++
			}
		}
	}
	for ci, ents := range per {
		if len(ents) > 0 {
			slices.Sort(ents)
			s.chunks[ci] = buildChunk(ents, s.s)
		}
	}
	return s
}

func sameSet(t *testing.T, got, want *sealedSet) {
	t.Helper()
	if got.n != want.n || !slices.Equal(got.counts, want.counts) || len(got.chunks) != len(want.chunks) {
		t.Fatalf("set: %d entries, counts %v, %d chunks; want %d, %v, %d", got.n, got.counts, len(got.chunks), want.n, want.counts, len(want.chunks))
	}
	for i := range got.chunks {
		g, w := got.chunks[i], want.chunks[i]
		if g.n != w.n || !slices.Equal(g.high, w.high) || !slices.Equal(g.low, w.low) || !slices.Equal(g.idx, w.idx) || !slices.Equal(g.wide, w.wide) {
			t.Fatalf("chunk %d differs from the one built from scratch (%d entries, want %d)", i, g.n, w.n)
		}
	}
}

// TestSealedSetMergesMatchModel: chunks merged with adds and drops answer
// as a model of the entries does, and equal the set built from scratch
// from the same entries (canonical), for dense and sparse chunks and one
// dense enough to need wide positions.
func TestSealedSetMergesMatchModel(t *testing.T) {
	for _, tc := range []struct {
		name   string
		nq     uint64
		perAdd int
		r, a   uint
	}{
		{"sparse", 3 * ssChunkQ, 2_000, 7, 3},
		{"dense", 2 * ssChunkQ, 40_000, 7, 3},
		{"wide", ssChunkQ, 70_000, 5, 2},
		{"long remainders", 2 * ssChunkQ, 10_000, 20, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(tc.perAdd)))
			s := newSealedSet(tc.nq, tc.r, tc.a)
			m := modelSet{}
			ntags := uint64(1) << tc.a
			for round := range 3 * ntags {
				tag := round % ntags
				drop := uint64(1) << ((tag + 1) % ntags)
				// Adds of one tag, per chunk, sorted.
				per := make([][]uint64, len(s.chunks))
				for range tc.perAdd {
					q, rem := rng.Uint64N(s.nq), rng.Uint64N(1<<tc.r)
					k := [2]uint64{q, rem}
					if m[k]>>tag&1 != 0 {
						continue
					}
					m[k] |= 1 << tag
					ci := q / ssChunkQ
					per[ci] = append(per[ci], (q%ssChunkQ)<<s.s|rem<<tc.a|tag)
				}
				var buf []uint64
				var n uint64
				for ci := range s.chunks {
					slices.Sort(per[ci])
					var fresh int
					s.chunks[ci], fresh, buf = s.mergeChunk(uint64(ci), drop, per[ci], buf)
					if fresh != len(per[ci]) {
						t.Fatalf("round %d: %d of %d adds new", round, fresh, len(per[ci]))
					}
					n += s.chunks[ci].n
				}
				s.n = n
				for tg := range s.counts {
					if drop>>tg&1 != 0 {
						s.counts[tg] = 0
					}
				}
				for k, tags := range m {
					if tags &^= drop; tags == 0 {
						delete(m, k)
					} else {
						m[k] = tags
					}
				}
				s.counts[tag] = 0
				for _, tags := range m {
					s.counts[tag] += tags >> tag & 1
				}
				for k, want := range m {
					if got := s.tags(k[0], k[1]); got != want {
						t.Fatalf("round %d: tags(%d, %d) = %b, want %b", round, k[0], k[1], got, want)
					}
				}
				for range 20_000 {
					k := [2]uint64{rng.Uint64N(s.nq), rng.Uint64N(1 << tc.r)}
					if got := s.tags(k[0], k[1]); got != m[k] {
						t.Fatalf("round %d: tags(%d, %d) = %b, want %b", round, k[0], k[1], got, m[k])
					}
				}
				sameSet(t, s, buildSetFromScratch(m, tc.nq, tc.r, tc.a))
			}
			if tc.name == "wide" && s.chunks[0].wide == nil {
				t.Fatalf("a chunk of %d entries should use wide positions", s.chunks[0].n)
			}
		})
	}
}

// TestLiveMapRecoversQuotient: the set quotient recomputed from a live
// entry (home position and the low d bits of q) is the key's, for tables
// of every ratio of set quotients to live slots the sizing can give.
func TestLiveMapRecoversQuotient(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, nb := range []uint64{1, 3, 1000, 40_000} {
		for _, ratio := range []float64{0.3, 1, 1.5, 6.3, 7, 7.9, 8, 15} {
			live := newQtable(nb, 10, 0)
			nq := max(1, uint64(float64(nb*qSlots)*ratio))
			m := newLiveMap(nq, nb*qSlots)
			if m.d+7 >= qMaxBits {
				t.Fatalf("d = %d", m.d)
			}
			for range 10_000 {
				h1 := rng.Uint64()
				if rng.IntN(10) == 0 {
					h1 = ^uint64(rng.IntN(5)) // the top of the range
				}
				q, _ := mulFull(h1, nq)
				x := live.quotient(h1)
				v := (q&(1<<m.d-1))<<7 | 0x55
				if got := m.setQuotient(x, v, 7); got != q {
					t.Fatalf("nb %d, nq %d (d %d): h1 %#x: quotient %d recomputed as %d", nb, nq, m.d, h1, q, got)
				}
				if b := m.base(x); b > q || q-b >= 1<<m.d {
					t.Fatalf("base %d for quotient %d (d %d)", b, q, m.d)
				}
			}
		}
	}
}

// mulFull is the 128-bit product of a and b, computed apart from
// bits.Mul64 so that the test does not reuse the arithmetic under test.
func mulFull(a, b uint64) (hi, lo uint64) {
	const mask32 = 1<<32 - 1
	a0, a1 := a&mask32, a>>32
	b0, b1 := b&mask32, b>>32
	w0 := a0 * b0
	t := a1*b0 + w0>>32
	w1 := t & mask32
	w2 := t >> 32
	w1 += a0 * b1
	hi = a1*b1 + w2 + w1>>32
	lo = a * b
	return
}

// hybridGen runs a hybrid through generations as a fingerprint shard
// would (G generations: the live one and G−1 sealed), against a model of
// which generations hold each key.
type hybridRun struct {
	t    *testing.T
	h    *hybrid
	gens int
	gen  uint64 // the live generation
	keys map[Hash][]uint64
}

func (r *hybridRun) add(k Hash) {
	live, _, added := r.h.testAndAdd(k)
	if !live && !added {
		r.t.Fatalf("generation %d: the live table is full at %d entries", r.gen, r.h.live.entries)
	}
	if !live {
		r.keys[k] = append(r.keys[k], r.gen)
	}
}

// advance makes generation to the live one: the live generation is
// sealed, and those that leave the window are dropped.
func (r *hybridRun) advance(to uint64) {
	g := uint64(r.gens)
	tm := uint64(1)<<tagBits(r.gens) - 1
	var drop uint64
	for old := r.gen + 1 - min(r.gen+1, g); old+g <= to; old++ {
		drop |= 1 << (old & tm)
	}
	if to-r.gen >= g {
		drop = 1<<(tm+1) - 1 // everything left; the live generation too
	}
	r.h.seal(r.gen&tm, drop)
	r.gen = to
}

func (r *hybridRun) check(rng *rand.Rand, probes int) (fp int) {
	g := uint64(r.gens)
	tm := uint64(1)<<tagBits(r.gens) - 1
	for k, gens := range r.keys {
		var want uint64
		liveWant := false
		for _, gn := range gens {
			if gn+g <= r.gen {
				continue
			}
			if gn == r.gen {
				liveWant = true
			} else {
				want |= 1 << (gn & tm)
			}
		}
		live, tags := r.h.lookup(k)
		if liveWant && !live {
			r.t.Fatalf("generation %d: a key of the live generation is not in the live table", r.gen)
		}
		if tags&want != want {
			r.t.Fatalf("generation %d: key of generations %v: tags %b, want at least %b", r.gen, gens, tags, want)
		}
	}
	for range probes {
		if live, tags := r.h.lookup(Hash{rng.Uint64(), rng.Uint64()}); live || tags != 0 {
			fp++
		}
	}
	return fp
}

// TestHybridGenerations: through generation changes and jumps, a hybrid
// finds every key of the last G generations with the tags of their
// generations, forgets older ones, equals after each seal the set built
// from scratch from its entries, and stays near its planned rate.
func TestHybridGenerations(t *testing.T) {
	const per = 30_000
	for _, gens := range []int{8, 4} {
		size, ok := sealedSizing(per, gens, 0.01, tableAlphaMax, tableShare)
		if !ok {
			t.Fatal("no sizing")
		}
		r := &hybridRun{t: t, h: newHybrid(size, gens), gens: gens, keys: map[Hash][]uint64{}}
		rng := rand.New(rand.NewPCG(3, uint64(gens)))
		var all []Hash
		steps := []uint64{1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 1, 1, uint64(gens), 1, 1, 1, 1, 1, 1, 1, 1}
		var worst float64
		for i, step := range steps {
			for range per {
				k := Hash{rng.Uint64(), rng.Uint64()}
				if len(all) > 0 && rng.IntN(5) == 0 {
					k = all[rng.IntN(len(all))] // a key of an earlier generation, again
				} else {
					all = append(all, k)
				}
				r.add(k)
			}
			fp := r.check(rng, 20_000)
			worst = max(worst, float64(fp)/20_000)
			r.advance(r.gen + step)
			// The set equals the one built from its entries.
			m := modelSet{}
			tm := uint64(1)<<tagBits(gens) - 1
			for k, gs := range r.keys {
				for _, gn := range gs {
					if gn+uint64(gens) > r.gen && gn < r.gen {
						q, _, _, rem := r.h.key(k)
						m[[2]uint64{q, rem}] |= 1 << (gn & tm)
					}
				}
			}
			sameSet(t, r.h.set, buildSetFromScratch(m, r.h.set.nq, r.h.set.r, r.h.set.a))
			if r.h.live.entries != 0 {
				t.Fatalf("step %d: the live table keeps %d entries after a seal", i, r.h.live.entries)
			}
		}
		// Keys of generations that left are gone (up to the rate).
		var gone, old int
		g := uint64(gens)
		for k, gs := range r.keys {
			if slices.Max(gs)+g <= r.gen {
				old++
				if live, tags := r.h.lookup(k); live || tags != 0 {
					gone++
				}
			}
		}
		t.Logf("G = %d: r = %d, %d quotients, %d live slots: worst FPR %.3f %% (planned at the peak %.3f %%); %d of %d expired keys matched",
			gens, size.r, size.nq, size.nblocks*qSlots, 100*worst, 100*size.fpr, gone, old)
		if worst > 0.01*1.15 {
			t.Errorf("G = %d: FPR %.4f above 1 %%", gens, worst)
		}
		if float64(gone) > float64(old)*0.012 {
			t.Errorf("G = %d: %d of %d expired keys still match", gens, gone, old)
		}
	}
}

// TestSealedSizingBits: the planned bits per window key of a hybrid
// (Capacity/(G−1) keys per generation, G generations held) at 1 % and
// 0.1 %, against the quotient table's; the rate at the peak is within the
// target.
func TestSealedSizingBits(t *testing.T) {
	const capacity = 15_600_000
	for _, tc := range []struct {
		fpr  float64
		gens int
		max  float64 // bits per window key the sizing must stay under
	}{{0.01, 8, 14}, {0.01, 4, 15.5}, {0.01, 16, 14.5}, {0.001, 8, 18}} {
		per := uint64(capacity / (tc.gens - 1))
		size, ok := sealedSizing(per, tc.gens, tc.fpr, tableAlphaMax, tableShare)
		if !ok {
			t.Fatalf("fpr %v, G %d: no sizing", tc.fpr, tc.gens)
		}
		h := newHybrid(size, tc.gens)
		// The set at its fullest: G−1 generations of per entries, coded at
		// s + 1 bits per entry plus the quotients' bits and index.
		full := float64(h.live.bytes())*8 + float64(per)*float64(tc.gens-1)*float64(h.set.s+1) +
			float64(h.set.nq)*(1+16.0/ssBlockQ) + float64(len(h.set.chunks))*96*8
		bits := full / capacity
		sealedLayout = sealedNever
		table, _ := FingerprintBitsPerKey(tc.fpr, tc.gens)
		sealedLayout = sealedAuto
		t.Logf("fpr %v, G %d: r %d, d %d, %.2f entries per quotient: %.2f bits per window key (quotient table %.2f), rate at the peak %.3f %%",
			tc.fpr, tc.gens, size.r, h.m.d, float64(per)*float64(tc.gens-1)/float64(size.nq), bits, table, 100*size.fpr)
		if bits > tc.max || size.fpr > tc.fpr {
			t.Errorf("fpr %v, G %d: %.2f bits per key (bound %.1f), rate %.4f", tc.fpr, tc.gens, bits, tc.max, size.fpr)
		}
	}
}

// sampleSet is a set after a few seals of a small hybrid: entries of
// several tags, empty and full chunks.
func sampleSet(t testing.TB, per int) *sealedSet {
	size, _ := sealedSizing(uint64(per), 8, 0.01, tableAlphaMax, tableShare)
	h := newHybrid(size, 8)
	rng := rand.New(rand.NewPCG(5, uint64(per)))
	for g := uint64(0); g < 10; g++ {
		for range per {
			h.testAndAdd(Hash{rng.Uint64(), rng.Uint64()})
		}
		h.seal(g&7, 1<<((g+1)&7))
	}
	return h.set
}

// TestSealedSetEncodeDecode: a set decodes to the same set, answers the
// same, and re-encodes to the same bytes; so does an empty one.
func TestSealedSetEncodeDecode(t *testing.T) {
	// A chunk of 70,000 entries needs wide block positions.
	wide := newSealedSet(2*ssChunkQ, 5, 2)
	rng := rand.New(rand.NewPCG(4, 4))
	var ents []uint64
	for range 70_000 {
		ents = append(ents, rng.Uint64N(ssChunkQ)<<wide.s|rng.Uint64N(1<<wide.s))
	}
	slices.Sort(ents)
	ents = slices.Compact(ents)
	wide.chunks[1] = buildChunk(ents, wide.s)
	wide.n = uint64(len(ents))
	for _, e := range ents {
		wide.counts[e&3]++
	}
	for _, s := range []*sealedSet{sampleSet(t, 20_000), newSealedSet(3*ssChunkQ, 7, 3), wide} {
		var b bytes.Buffer
		n, err := s.WriteTo(&b)
		if err != nil || n != int64(b.Len()) {
			t.Fatalf("WriteTo: %d, %v (%d bytes)", n, err, b.Len())
		}
		got, err := decodeSealedSet(bytes.NewReader(b.Bytes()), 0)
		if err != nil {
			t.Fatal(err)
		}
		sameSet(t, got, s)
		var again bytes.Buffer
		if _, err := got.WriteTo(&again); err != nil || !bytes.Equal(again.Bytes(), b.Bytes()) {
			t.Fatalf("re-encoding: %v, equal %v", err, bytes.Equal(again.Bytes(), b.Bytes()))
		}
		t.Logf("%d entries, %d B in memory, %d B encoded", s.n, s.bytes(), b.Len())
	}
}

// TestSealedSetDecodeRejects: truncated input, a flipped bit anywhere, a
// size over the limit, and well-framed chunks whose code is not a set's
// (an unended quotient, stray bits) are each an error naming the problem,
// never a panic.
func TestSealedSetDecodeRejects(t *testing.T) {
	s := sampleSet(t, 3_000)
	var b bytes.Buffer
	if _, err := s.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	good := b.Bytes()
	for _, n := range []int{0, 10, 40, len(good) / 2, len(good) - 1} {
		if _, err := decodeSealedSet(bytes.NewReader(good[:n]), 0); !errors.Is(err, ErrCorrupt) {
			t.Errorf("truncated to %d bytes: %v", n, err)
		}
	}
	rng := rand.New(rand.NewPCG(9, 9))
	for range 300 {
		bad := bytes.Clone(good)
		i := rng.IntN(len(bad))
		bad[i] ^= 1 << rng.IntN(8)
		if _, err := decodeSealedSet(bytes.NewReader(bad), 0); err == nil {
			t.Fatalf("a flipped bit at byte %d of %d was accepted", i, len(bad))
		}
	}
	if _, err := decodeSealedSet(bytes.NewReader(good), 1000); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a limit of 1000 bytes: %v", err)
	}
	// A chunk declaring more entries than 32-bit positions can index, its
	// sizes' CRC right: refused before anything is read or allocated.
	huge := bytes.Clone(good)
	sizes := 16 + sealedHdrFixed + 8<<s.a + 4
	binary.LittleEndian.PutUint32(huge[sizes:], 1<<32-1)
	nch := len(s.chunks)
	binary.LittleEndian.PutUint32(huge[sizes+4*nch:], crc32.Checksum(huge[sizes:sizes+4*nch], castagnoli))
	if _, err := decodeSealedSet(bytes.NewReader(huge), 0); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "at most") {
		t.Errorf("a chunk of 2^32-1 entries: %v", err)
	}
	// Sets whose chunks are framed right but coded wrong: encoded from a
	// tampered chunk, so that only the code check can catch them.
	tamper := func(name, want string, f func(c *ssChunk)) {
		t.Helper()
		s2 := *s
		s2.chunks = slices.Clone(s.chunks)
		ci := 0
		for s2.chunks[ci].n < 4 || s2.chunks[ci].n*uint64(s.s)%64 == 0 {
			ci++
		}
		c := *s2.chunks[ci]
		c.high, c.low = slices.Clone(c.high), slices.Clone(c.low)
		f(&c)
		s2.chunks[ci] = &c
		var b bytes.Buffer
		if _, err := s2.WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		_, err := decodeSealedSet(bytes.NewReader(b.Bytes()), 0)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, want)
		}
	}
	tamper("last quotient not ended", "not ended", func(c *ssChunk) {
		// The first entry's 1 moved to the code's last bit.
		hb := c.n + ssChunkQ
		for wi, w := range c.high {
			if w != 0 {
				c.high[wi] &^= 1 << bits.TrailingZeros64(w)
				break
			}
		}
		c.high[(hb-1)>>6] |= 1 << ((hb - 1) & 63)
	})
	tamper("stray bits past the entries", "past the entries", func(c *ssChunk) {
		c.low[len(c.low)-1] |= 1 << 63
	})
	tamper("an entry's 1 cleared", "ones for", func(c *ssChunk) {
		for wi, w := range c.high {
			if w != 0 {
				c.high[wi] &^= 1 << bits.TrailingZeros64(w)
				break
			}
		}
	})
}

// FuzzDecodeSealedSet: no input makes the decoder panic or allocate past
// its limit; an accepted set re-encodes to the same bytes and its lookups
// stay inside it.
func FuzzDecodeSealedSet(f *testing.F) {
	var b bytes.Buffer
	if _, err := sampleSet(f, 2_000).WriteTo(&b); err != nil {
		f.Fatal(err)
	}
	f.Add(bytes.Clone(b.Bytes()))
	f.Add(bytes.Clone(b.Bytes()[:200]))
	b.Reset()
	if _, err := newSealedSet(ssChunkQ, 7, 3).WriteTo(&b); err != nil {
		f.Fatal(err)
	}
	f.Add(b.Bytes())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := decodeSealedSet(bytes.NewReader(data), 4<<20)
		if err != nil {
			if s != nil {
				t.Fatal("error with a non-nil set")
			}
			return
		}
		var out bytes.Buffer
		if _, err := s.WriteTo(&out); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), data) {
			t.Fatal("accepted input does not re-encode to itself")
		}
		rng := rand.New(rand.NewPCG(1, 2))
		for range 1000 {
			q := rng.Uint64N(s.nq)
			s.tags(q, rng.Uint64N(1<<s.r))
			s.touch([]Hash{{H1: rng.Uint64(), H2: rng.Uint64()}})
		}
		for q := range min(s.nq, 2*ssChunkQ) {
			s.tags(q, 0)
		}
	})
}

// TestBitWriterReader: values of every width written one after the other
// read back the same, and land where putBits would put them.
func TestBitWriterReader(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	for s := uint(1); s < 64; s++ {
		n := 1 + rng.IntN(300)
		vals := make([]uint64, n)
		for i := range vals {
			vals[i] = rng.Uint64() & (1<<s - 1)
		}
		ws := make([]uint64, (uint64(n)*uint64(s)+63)/64)
		want := make([]uint64, len(ws))
		w := bitWriter{ws: ws}
		for i, v := range vals {
			w.put(v, s)
			putBits(want, uint64(i)*uint64(s), uint64(s), v)
		}
		w.flush()
		if !slices.Equal(ws, want) {
			t.Fatalf("width %d: written words differ from putBits'", s)
		}
		r := bitReader{ws: ws}
		for i, v := range vals {
			if got := r.get(s); got != v {
				t.Fatalf("width %d: value %d read %#x, want %#x", s, i, got, v)
			}
		}
	}
}
