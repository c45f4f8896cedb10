package bench

import (
	"fmt"
	"os"
	"runtime"
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

const hexdigits = "0123456789abcdef"

// keyGen writes key i into a fixed buffer: the 16 hex digits of i at a
// fixed position. Never-added keys use a different prefix.
type keyGen struct {
	buf []byte
	pos int
}

func orderKeys(fresh bool) *keyGen { // 16 bytes: "O" + 15 hex digits
	p := "O"
	if fresh {
		p = "N"
	}
	return &keyGen{buf: []byte(p + "000000000000000"), pos: 1}
}

func urlKeys(fresh bool) *keyGen { // 60 bytes
	host := "https://shop.example.com/catalog/item/"
	if fresh {
		host = "https://shop.example.org/catalog/item/"
	}
	return &keyGen{buf: []byte(host + "0000000000000000?ref=ab"), pos: len(host)}
}

func (g *keyGen) key(i uint64) []byte {
	b := g.buf[g.pos:min(g.pos+16, len(g.buf))]
	for j := len(b) - 1; j >= 0; j-- {
		b[j] = hexdigits[i&15]
		i >>= 4
	}
	return g.buf
}

type impl struct {
	name string
	// build returns testAndAdd, test and the filter's size in bits.
	build func(n uint64, p float64) (testAndAdd, test func([]byte) bool, bits uint64)
}

var impls = []impl{
	{"bloomgate", func(n uint64, p float64) (func([]byte) bool, func([]byte) bool, uint64) {
		f, err := bloom.NewFilter(n, p)
		if err != nil {
			panic(err)
		}
		return func(k []byte) bool { return f.TestAndAdd(bloom.HashKey(k)) },
			func(k []byte) bool { return f.Test(bloom.HashKey(k)) }, f.Bits()
	}},
	{"bitsandblooms", func(n uint64, p float64) (func([]byte) bool, func([]byte) bool, uint64) {
		f := bbloom.NewWithEstimates(uint(n), p)
		return f.TestAndAdd, f.Test, uint64(f.Cap())
	}},
	{"blobloom-xxhash", func(n uint64, p float64) (func([]byte) bool, func([]byte) bool, uint64) {
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

// BenchmarkTestAndAdd fills each filter with n distinct keys through
// TestAndAdd (hashing included) and reports the mean ns per key as ns/op,
// then bits/key and the false-positive rate measured on 1,000,000 keys never
// added. Run with -benchtime 1x: one fill per sub-benchmark.
func BenchmarkTestAndAdd(b *testing.B) {
	const probes = 1_000_000
	for _, n := range keySizes(b) {
		for _, p := range []float64{0.01, 0.001} {
			for _, kind := range []string{"order16", "url60"} {
				gen := orderKeys
				if kind == "url60" {
					gen = urlKeys
				}
				for _, im := range impls {
					name := fmt.Sprintf("n=%s/p=%g/key=%s/impl=%s", label(n), p, kind, im.name)
					b.Run(name, func(b *testing.B) {
						b.ReportAllocs()
						var elapsed time.Duration
						var fp int
						var bits uint64
						for range b.N {
							b.StopTimer()
							runtime.GC()
							testAndAdd, test, nbits := im.build(n, p)
							bits = nbits
							g := gen(false)
							b.StartTimer()
							start := time.Now()
							for i := range n {
								testAndAdd(g.key(i))
							}
							elapsed += time.Since(start)
							b.StopTimer()
							fresh := gen(true)
							fp = 0
							for i := range uint64(probes) {
								if test(fresh.key(i)) {
									fp++
								}
							}
						}
						b.ReportMetric(float64(elapsed.Nanoseconds())/float64(uint64(b.N)*n), "ns/op")
						b.ReportMetric(float64(bits)/float64(n), "bits/key")
						b.ReportMetric(float64(fp)/probes, "fpr")
					})
				}
			}
		}
	}
}
