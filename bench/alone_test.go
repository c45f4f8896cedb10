package bench

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// BenchmarkFillAlone fills one filter at a time (bloomgate per key,
// bloomgate batched, blobloom+xxhash), each built right before its fill,
// instead of BenchmarkTestAndAdd's interleaved segments: a second view of
// the same comparison, because on a virtual machine where memory is placed
// by the host the absolute cost of a miss depends on how a process
// allocates (docs/filter.md). Reports the median ns per key over 1 M-key
// segments, order16 keys.
func BenchmarkFillAlone(b *testing.B) {
	const segment = 1_000_000
	for _, n := range keySizes(b) {
		for _, p := range []float64{0.01, 0.001} {
			b.Run(fmt.Sprintf("n=%s/p=%g/key=order16", label(n), p), func(b *testing.B) {
				for range b.N {
					for _, im := range []impl{impls[0], impls[1], impls[3]} {
						b.StopTimer()
						runtime.GC()
						var fill func(g *keyGen, lo, hi uint64)
						if im.buildBatch != nil {
							fill, _, _ = im.buildBatch(n, p)
						} else {
							tad, _, _ := im.build(n, p)
							fill = perKey(tad)
						}
						g := orderKeys(false)
						var segs []float64
						b.StartTimer()
						for lo := uint64(0); lo < n; lo += segment {
							hi := min(lo+segment, n)
							start := time.Now()
							fill(g, lo, hi)
							segs = append(segs, float64(time.Since(start).Nanoseconds())/float64(hi-lo))
						}
						b.ReportMetric(median(segs), im.name+"-ns/key")
					}
				}
			})
		}
	}
}
