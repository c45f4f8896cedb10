package bench

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/bloom"
)

// BenchmarkShard measures the path the worker takes per record: a rotating
// shard (W = 1 h, G = 2, p = 1 %) whose older generation holds n keys,
// receiving n new keys in the newer one — every lookup checks both
// generations. Shard.TestAndAdd one key at a time (one) against
// Shard.TestAndAddBatch over batches of 256 (batch), hashing included,
// interleaved in segments of 1 M keys; reports median and minimum ns per key.
func BenchmarkShard(b *testing.B) {
	const segment = 1_000_000
	for _, n := range keySizes(b) {
		b.Run(fmt.Sprintf("n=%s/G=2/p=0.01/key=order16", label(n)), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				runtime.GC()
				cfg := bloom.Config{Window: time.Hour, Generations: 2, Capacity: n, FPR: 0.01}
				t0 := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
				t1 := t0.Add(time.Hour) // the next span: a new generation
				one, err := bloom.NewShard(cfg)
				if err != nil {
					b.Fatal(err)
				}
				batch, _ := bloom.NewShard(cfg)
				hs := make([]bloom.Hash, batchLen)
				ts := make([]time.Time, batchLen)
				seen := make([]bool, batchLen)
				old := orderKeys(true)
				fill := func(s *bloom.Shard, g *keyGen, lo, hi uint64, at time.Time) {
					for lo < hi {
						m := min(hi-lo, batchLen)
						for j := range m {
							hs[j], ts[j] = bloom.HashKey(g.key(lo+j)), at
						}
						s.TestAndAddBatch(hs[:m], ts[:m], seen[:m])
						lo += m
					}
				}
				fill(one, old, 0, n, t0)
				fill(batch, old, 0, n, t0)
				var segOne, segBatch []float64
				g1, g2 := orderKeys(false), orderKeys(false)
				b.StartTimer()
				for lo := uint64(0); lo < n; lo += segment {
					hi := min(lo+segment, n)
					start := time.Now()
					for i := lo; i < hi; i++ {
						one.TestAndAdd(bloom.HashKey(g1.key(i)), t1)
					}
					segOne = append(segOne, float64(time.Since(start).Nanoseconds())/float64(hi-lo))
					start = time.Now()
					fill(batch, g2, lo, hi, t1)
					segBatch = append(segBatch, float64(time.Since(start).Nanoseconds())/float64(hi-lo))
				}
				b.StopTimer()
				if st := one.Stats(); len(st.Generations) != 2 {
					b.Fatalf("%d generations, want 2", len(st.Generations))
				}
				b.ReportMetric(median(segOne), "ns/op")
				b.ReportMetric(median(segOne), "one-ns/op")
				b.ReportMetric(slices.Min(segOne), "one-min-ns/op")
				b.ReportMetric(median(segBatch), "batch-ns/op")
				b.ReportMetric(slices.Min(segBatch), "batch-min-ns/op")
				b.ReportMetric(float64(one.Stats().Bytes)/float64(n), "bytes/key")
			}
		})
	}
}
