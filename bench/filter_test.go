package bench

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	bbloom "github.com/bits-and-blooms/bloom/v3"
	"github.com/bloomgate/bloomgate/internal/bloom"
	"github.com/cespare/xxhash/v2"
	"github.com/greatroar/blobloom"
)

// keySizes parses BLOOMGATE_BENCH_KEYS ("10M" by default; "10M,100M" adds
// the long run).
func keySizes(b *testing.B) []uint64 {
	spec := os.Getenv("BLOOMGATE_BENCH_KEYS")
	if spec == "" {
		spec = "10M"
	}
	var out []uint64
	for _, f := range strings.Split(spec, ",") {
		mult := uint64(1)
		switch {
		case strings.HasSuffix(f, "M"):
			mult, f = 1_000_000, strings.TrimSuffix(f, "M")
		case strings.HasSuffix(f, "k"):
			mult, f = 1_000, strings.TrimSuffix(f, "k")
		}
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			b.Fatalf("BLOOMGATE_BENCH_KEYS=%q: %v", spec, err)
		}
		out = append(out, n*mult)
	}
	return out
}

func label(n uint64) string {
	if n%1_000_000 == 0 {
		return fmt.Sprintf("%dM", n/1_000_000)
	}
	return strconv.FormatUint(n, 10)
}

// keyGen writes key i into a fixed buffer: the 8 big-endian bytes of i at a
// fixed position (cheap, so that key formatting does not dominate the
// measurement; the content does not matter to the hash functions). Never-
// added keys use a different prefix.
type keyGen struct {
	buf []byte
	pos int
}

func orderKeys(fresh bool) *keyGen { // 16 bytes: "ORD-0000" + 8 bytes of i
	p := "ORD-0000"
	if fresh {
		p = "NEW-0000"
	}
	return &keyGen{buf: []byte(p + "........"), pos: 8}
}

func urlKeys(fresh bool) *keyGen { // 60 bytes
	host := "https://shop.example.com/catalog/item/"
	if fresh {
		host = "https://shop.example.org/catalog/item/"
	}
	return &keyGen{buf: []byte(host + "........-000000?ref=ab"), pos: len(host)}
}

func (g *keyGen) key(i uint64) []byte {
	binary.BigEndian.PutUint64(g.buf[g.pos:], i)
	return g.buf
}

type impl struct {
	name string
	// build returns testAndAdd, test and the filter's size in bits.
	build func(n uint64, p float64) (testAndAdd, test func([]byte) bool, bits uint64)
	// buildBatch, when set instead of build, returns a function that
	// hashes and adds keys lo..hi-1 of g through the batch API.
	buildBatch func(n uint64, p float64) (fill func(g *keyGen, lo, hi uint64), test func([]byte) bool, bits uint64)
}

// perKey fills keys lo..hi-1 of g one TestAndAdd call at a time.
func perKey(testAndAdd func([]byte) bool) func(g *keyGen, lo, hi uint64) {
	return func(g *keyGen, lo, hi uint64) {
		for i := lo; i < hi; i++ {
			testAndAdd(g.key(i))
		}
	}
}

// batchLen is the number of keys per TestAndAddBatch call, the size of a
// small fetch from Kafka.
const batchLen = 256

var impls = []impl{
	{name: "bloomgate", build: func(n uint64, p float64) (func([]byte) bool, func([]byte) bool, uint64) {
		f, err := bloom.NewFilter(n, p)
		if err != nil {
			panic(err)
		}
		return func(k []byte) bool { return f.TestAndAdd(bloom.HashKey(k)) },
			func(k []byte) bool { return f.Test(bloom.HashKey(k)) }, f.Bits()
	}},
	{name: "bloomgate-batch", buildBatch: func(n uint64, p float64) (func(*keyGen, uint64, uint64), func([]byte) bool, uint64) {
		f, err := bloom.NewFilter(n, p)
		if err != nil {
			panic(err)
		}
		hs := make([]bloom.Hash, batchLen)
		seen := make([]bool, batchLen)
		return func(g *keyGen, lo, hi uint64) {
				for lo < hi {
					m := min(hi-lo, batchLen)
					for j := range m {
						hs[j] = bloom.HashKey(g.key(lo + j))
					}
					f.TestAndAddBatch(hs[:m], seen[:m])
					lo += m
				}
			},
			func(k []byte) bool { return f.Test(bloom.HashKey(k)) }, f.Bits()
	}},
	{name: "bitsandblooms", build: func(n uint64, p float64) (func([]byte) bool, func([]byte) bool, uint64) {
		f := bbloom.NewWithEstimates(uint(n), p)
		return f.TestAndAdd, f.Test, uint64(f.Cap())
	}},
	{name: "blobloom-xxhash", build: func(n uint64, p float64) (func([]byte) bool, func([]byte) bool, uint64) {
		f := blobloom.NewOptimized(blobloom.Config{Capacity: n, FPRate: p})
		return func(k []byte) bool {
				h := xxhash.Sum64(k)
				if f.Has(h) {
					return true
				}
				f.Add(h)
				return false
			},
			func(k []byte) bool { return f.Has(xxhash.Sum64(k)) }, f.NumBits()
	}},
}

// BenchmarkTestAndAdd fills the filters with the same n distinct keys
// through TestAndAdd (hashing included) — bloomgate twice: one call per key
// (bg) and TestAndAddBatch over batches of 256 hashed keys (bgb) —
// interleaved in segments of 1 M keys so that all see the same machine
// load, and reports per filter
// the median and the minimum over segments of ns per key (ns/op is
// bloomgate's median), bits/key, and the false-positive rate measured on
// 1,000,000 keys never added.
// The machine is shared and noisy: medians of interleaved segments are far
// more stable than one fill per filter. Run with -benchtime 1x.
func BenchmarkTestAndAdd(b *testing.B) {
	const (
		probes  = 1_000_000
		segment = 1_000_000
	)
	short := map[string]string{"bloomgate": "bg", "bloomgate-batch": "bgb", "bitsandblooms": "bb", "blobloom-xxhash": "blob"}
	for _, n := range keySizes(b) {
		for _, p := range []float64{0.01, 0.001} {
			for _, kind := range []string{"order16", "url60"} {
				gen := orderKeys
				if kind == "url60" {
					gen = urlKeys
				}
				name := fmt.Sprintf("n=%s/p=%g/key=%s", label(n), p, kind)
				b.Run(name, func(b *testing.B) {
					b.ReportAllocs()
					for range b.N {
						b.StopTimer()
						runtime.GC()
						type run struct {
							fill func(g *keyGen, lo, hi uint64)
							test func([]byte) bool
							bits uint64
							keys *keyGen
							segs []float64
						}
						runs := make([]*run, len(impls))
						for i, im := range impls {
							r := &run{keys: gen(false)}
							if im.buildBatch != nil {
								r.fill, r.test, r.bits = im.buildBatch(n, p)
							} else {
								var tad func([]byte) bool
								tad, r.test, r.bits = im.build(n, p)
								r.fill = perKey(tad)
							}
							runs[i] = r
						}
						b.StartTimer()
						for lo := uint64(0); lo < n; lo += segment {
							hi := min(lo+segment, n)
							for _, r := range runs {
								start := time.Now()
								r.fill(r.keys, lo, hi)
								r.segs = append(r.segs, float64(time.Since(start).Nanoseconds())/float64(hi-lo))
							}
						}
						b.StopTimer()
						for i, r := range runs {
							fresh := gen(true)
							fp := 0
							for j := range uint64(probes) {
								if r.test(fresh.key(j)) {
									fp++
								}
							}
							tag := short[impls[i].name]
							med := median(r.segs)
							if i == 0 {
								b.ReportMetric(med, "ns/op")
							}
							b.ReportMetric(med, tag+"-ns/op")
							b.ReportMetric(slices.Min(r.segs), tag+"-min-ns/op")
							b.ReportMetric(float64(r.bits)/float64(n), tag+"-bits/key")
							b.ReportMetric(float64(fp)/probes, tag+"-fpr")
						}
					}
				})
			}
		}
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
