package bloom

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"
)

// BenchmarkTableKinds is the measurement behind the choice of the tagged
// table (docs/filter.md, "How the table was chosen"): at
// the crawler plan's size (15.6 M keys per window, p = 1 %), the ring of
// G = 4 blocked Bloom generations against a quotient table of 3-bit-tagged
// fingerprints (G = 8) at three peak loads, and a live table beside a static set of the sealed
// generations (sealed.go). Every kind first holds a full window, then takes two
// more generations of new keys in batches of 256 (hashes precomputed
// apart, so hashing is not counted); the tables drop the expiring tag at
// each generation change. Reported: CPU ns per key (process CPU time, so
// that waiting for a CPU on a shared machine is not counted), of which the
// tag drops (the sealed set: its rebuild), bits per window key
// at the peak (the most memory held just before or after a generation
// change), and the false-positive rate on 1 M keys never added at the
// peak (fpr-%-peak: a full window and the generation about to leave) and
// after the last change (fpr-%).
func BenchmarkTableKinds(b *testing.B) {
	const window = 15_600_000
	per := window / 7
	kinds := []string{"ring", "quotient/0.90", "quotient/0.93", "quotient/0.95", "sealed"}
	for _, kind := range kinds {
		b.Run(kind, func(b *testing.B) {
			for range b.N {
				rng := rand.New(rand.NewPCG(3, 4))
				hs := make([]Hash, 256)
				fill := func(n int, f func([]Hash)) time.Duration {
					c := processCPU()
					for done := 0; done < n; done += len(hs) {
						for i := range hs {
							hs[i] = Hash{rng.Uint64(), rng.Uint64()}
						}
						f(hs)
					}
					return processCPU() - c
				}
				var (
					insert func([]Hash)
					rotate func()
					test   func(Hash) bool
					bytes  func() uint64
					gens   int
					keys   int
				)
				gen := uint64(0)
				var amax float64
				fmt.Sscanf(kind[max(0, len(kind)-4):], "%g", &amax)
				switch kind[:4] {
				case "seal":
					// The live generation's table at peak load 0.95 beside
					// a static set of the sealed ones (sealed.go), sized
					// for 1 % over 8 generations.
					size, _ := sealedSizing(uint64(per), 8, 0.01, tableAlphaMax, tableShare)
					h := newHybrid(size, 8)
					insert = func(hs []Hash) {
						for lo := 0; lo < len(hs); lo += batchChunk {
							h.touch(hs[lo : lo+batchChunk])
							for _, k := range hs[lo : lo+batchChunk] {
								h.testAndAdd(k)
							}
						}
					}
					rotate = func() { h.seal(gen&7, 1<<((gen+1)&7)); gen++ }
					test = func(k Hash) bool { live, tags := h.lookup(k); return live || tags != 0 }
					bytes = h.bytes
					gens, keys = 8, per
				case "ring":
					sh, _ := NewShard(Config{Window: 28 * 24 * time.Hour, Generations: 4, Capacity: window, FPR: 0.01})
					seen := make([]bool, 256)
					ts := make([]time.Time, 256)
					t0 := time.Unix(0, 0).Add(1000 * sh.Span())
					insert = func(hs []Hash) {
						for i := range ts {
							ts[i] = t0.Add(time.Duration(gen) * sh.Span())
						}
						sh.TestAndAddBatch(hs, ts, seen)
					}
					rotate = func() { gen++ }
					test = sh.Test
					bytes = func() uint64 { return sh.Stats().Bytes }
					gens, keys = 4, window/3
				case "quot":
					q := newQtable(uint64(float64(per*8)/amax/qSlots)+1, 7, 3)
					insert = func(hs []Hash) {
						for lo := 0; lo < len(hs); lo += batchChunk {
							q.touch(hs[lo : lo+batchChunk])
							for _, h := range hs[lo : lo+batchChunk] {
								x, v := q.quotient(h.H1), h.H2>>57<<3|gen&7
								if q.tags(x, v>>3)&(1<<(gen&7)) == 0 {
									q.insert(x, v)
								}
							}
						}
					}
					rotate = func() { gen++; q.drop(1 << (gen & 7)) }
					test = func(h Hash) bool { return q.tags(q.quotient(h.H1), h.H2>>57) != 0 }
					bytes = q.bytes
					gens, keys = 8, per
				}
				// The peak: before a generation change (a full window
				// and the generation about to leave), or after one.
				var peak uint64
				for range gens {
					fill(keys, insert)
					peak = max(peak, bytes())
					rotate()
				}
				fprOf := func() float64 {
					var fp int
					for range 1_000_000 {
						if test(Hash{rng.Uint64(), rng.Uint64()}) {
							fp++
						}
					}
					return float64(fp) / 1e4
				}
				var total, rot time.Duration
				var fprPeak float64
				for i := range 2 {
					total += fill(keys, insert)
					peak = max(peak, bytes())
					if i == 1 {
						fprPeak = fprOf() // a full window and the generation about to leave
					}
					c := processCPU()
					rotate()
					rot += processCPU() - c
				}
				peak = max(peak, bytes())
				b.ReportMetric(float64((total+rot).Nanoseconds())/float64(2*keys), "cpu-ns/key")
				b.ReportMetric(float64(rot.Nanoseconds())/float64(2*keys), "cpu-ns/key-drops")
				b.ReportMetric(float64(peak)*8/window, "bits/window-key")
				b.ReportMetric(fprOf(), "fpr-%")
				b.ReportMetric(fprPeak, "fpr-%-peak")
			}
		})
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
