package bench

import (
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/bloom"
)

// Reference layouts over the same murmur3-128 hash, to choose bloomgate's
// layout by measurement: a classic (Guava-style) filter and a split-block
// filter (Parquet SBBF).

type classic struct {
	w []uint64
	m uint64
	k int
}

func newClassic(n uint64, p float64) *classic {
	m := uint64(math.Ceil(-float64(n) * math.Log(p) / (math.Ln2 * math.Ln2)))
	k := max(1, int(math.Round(float64(m)/float64(n)*math.Ln2)))
	return &classic{w: make([]uint64, (m+63)/64), m: m, k: k}
}

func (c *classic) testAndAdd(h bloom.Hash) bool {
	seen := true
	x := h.H1
	for range c.k {
		i, _ := bits.Mul64(x, c.m)
		if c.w[i>>6]&(1<<(i&63)) == 0 {
			seen = false
			c.w[i>>6] |= 1 << (i & 63)
		}
		x += h.H2
	}
	return seen
}

func (c *classic) test(h bloom.Hash) bool {
	x := h.H1
	for range c.k {
		i, _ := bits.Mul64(x, c.m)
		if c.w[i>>6]&(1<<(i&63)) == 0 {
			return false
		}
		x += h.H2
	}
	return true
}

// splitBlock is Parquet's split-block Bloom filter: 256-bit blocks of
// eight 32-bit lanes, one bit per lane (k = 8).
type splitBlock struct {
	b []([8]uint32)
}

var sbbfSalt = [8]uint32{0x47b6137b, 0x44974d91, 0x8824ad5b, 0xa2b7289d, 0x705495c7, 0x2df1424b, 0x9efc4947, 0x5c6bfb31}

func newSplitBlock(n uint64, p float64) *splitBlock {
	bitsTotal := -8 * float64(n) / math.Log(1-math.Pow(p, 1.0/8))
	nb := max(1, uint64(math.Ceil(bitsTotal/256)))
	return &splitBlock{b: make([][8]uint32, nb)}
}

func (s *splitBlock) mask(h bloom.Hash) (m [8]uint32) {
	x := uint32(h.H2)
	for i := range m {
		m[i] = 1 << ((x * sbbfSalt[i]) >> 27)
	}
	return m
}

func (s *splitBlock) testAndAdd(h bloom.Hash) bool {
	i, _ := bits.Mul64(h.H1, uint64(len(s.b)))
	blk := &s.b[i]
	m := s.mask(h)
	var miss uint32
	for j := range m {
		miss |= m[j] &^ blk[j]
		blk[j] |= m[j]
	}
	return miss == 0
}

func (s *splitBlock) test(h bloom.Hash) bool {
	i, _ := bits.Mul64(h.H1, uint64(len(s.b)))
	blk := &s.b[i]
	m := s.mask(h)
	var miss uint32
	for j := range m {
		miss |= m[j] &^ blk[j]
	}
	return miss == 0
}

// BenchmarkLayouts compares bloomgate's blocked-512 filter with classic and
// split-block layouts on the same hash (16-byte keys, hashing included),
// interleaved in 1 M-key segments like BenchmarkTestAndAdd.
func BenchmarkLayouts(b *testing.B) {
	const probes, segment = 1_000_000, 1_000_000
	for _, n := range keySizes(b) {
		for _, p := range []float64{0.01, 0.001} {
			b.Run(fmt.Sprintf("n=%s/p=%g", label(n), p), func(b *testing.B) {
				for range b.N {
					b.StopTimer()
					runtime.GC()
					bf, err := bloom.NewFilter(n, p)
					if err != nil {
						b.Fatal(err)
					}
					cl, sb := newClassic(n, p), newSplitBlock(n, p)
					type layout struct {
						tag              string
						testAndAdd, test func(bloom.Hash) bool
						bits             uint64
						segs             []float64
					}
					ls := []*layout{
						{tag: "blocked", testAndAdd: bf.TestAndAdd, test: bf.Test, bits: bf.Bits()},
						{tag: "classic", testAndAdd: cl.testAndAdd, test: cl.test, bits: uint64(len(cl.w)) * 64},
						{tag: "split", testAndAdd: sb.testAndAdd, test: sb.test, bits: uint64(len(sb.b)) * 256},
					}
					keys := make([]*keyGen, len(ls))
					for i := range keys {
						keys[i] = orderKeys(false)
					}
					b.StartTimer()
					for lo := uint64(0); lo < n; lo += segment {
						hi := min(lo+segment, n)
						for li, l := range ls {
							start := time.Now()
							for i := lo; i < hi; i++ {
								l.testAndAdd(bloom.HashKey(keys[li].key(i)))
							}
							l.segs = append(l.segs, float64(time.Since(start).Nanoseconds())/float64(hi-lo))
						}
					}
					b.StopTimer()
					for i, l := range ls {
						fresh := orderKeys(true)
						fp := 0
						for j := range uint64(probes) {
							if l.test(bloom.HashKey(fresh.key(j))) {
								fp++
							}
						}
						if i == 0 {
							b.ReportMetric(median(l.segs), "ns/op")
						}
						b.ReportMetric(median(l.segs), l.tag+"-ns/op")
						b.ReportMetric(slices.Min(l.segs), l.tag+"-min-ns/op")
						b.ReportMetric(float64(l.bits)/float64(n), l.tag+"-bits/key")
						b.ReportMetric(float64(fp)/probes, l.tag+"-fpr")
					}
				}
			})
		}
	}
}
