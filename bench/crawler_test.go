package bench

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/bloom"
)

// BenchmarkCrawlerPartition sizes the crawler plan — 1 B canonical URLs per
// window over 64 partitions, window 4 weeks, G = 4, p = 1 % — on one
// partition's filter (the filter and checkpoint path, not Kafka): the shard
// receives its 15.6 M URLs of one window, spread evenly over the window's
// event time, with a keyed hash, in batches of 256 as the worker feeds it.
// It reports memory, the insert cost, the encoded size of the live
// generation at several fills (what every periodic checkpoint uploads), the
// sealed generations' sizes (uploaded once), and the restore time of the
// whole partition (decode every generation + RestoreShard). Multiply by 64
// for the whole plan; docs/benchmarks.md has the table.
func BenchmarkCrawlerPartition(b *testing.B) {
	const (
		partitions = 64
		perWindow  = 1_000_000_000 / partitions
		window     = 28 * 24 * time.Hour
		gens       = 4
	)
	cfg := bloom.Config{Window: window, Generations: gens, Capacity: perWindow, FPR: 0.01}
	seed, err := bloom.NewSeed()
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		b.StopTimer()
		runtime.GC()
		sh, err := bloom.NewShard(cfg)
		if err != nil {
			b.Fatal(err)
		}
		span := sh.Span()
		t0 := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC).Truncate(span)
		// One window and one more span: the ring is full and the oldest
		// generation has been dropped once.
		total := uint64(perWindow) * gens / (gens - 1)
		perSpan := total / gens
		keys := urlKeys(false)
		hs := make([]bloom.Hash, batchLen)
		ts := make([]time.Time, batchLen)
		seen := make([]bool, batchLen)
		live := map[string]int64{}
		b.StartTimer()
		start := time.Now()
		for i := uint64(0); i < total; {
			m := min(total-i, batchLen)
			for j := range m {
				hs[j] = seed.Hash(keys.key(i + j))
				ts[j] = t0.Add(time.Duration(float64(span) * float64(i+j) / float64(perSpan)))
			}
			sh.TestAndAddBatch(hs[:m], ts[:m], seen[:m])
			i += m
			// The live generation's checkpoint size at 10, 50 and 100 % of
			// the last span (not timed).
			if i >= total-perSpan {
				done := float64(i-(total-perSpan)) / float64(perSpan)
				for _, mark := range []float64{0.1, 0.5, 0.999} {
					name := fmt.Sprintf("%.0f%%", mark*100)
					if _, ok := live[name]; !ok && done >= mark {
						b.StopTimer()
						sn := sh.Snapshot()
						live[name] = encodedSize(b, sn.Generations[len(sn.Generations)-1])
						sn.Release()
						b.StartTimer()
					}
				}
			}
		}
		insert := time.Since(start)
		b.StopTimer()
		st := sh.Stats()
		sn := sh.Snapshot()
		var encoded [][]byte
		var sealed int64
		for i, g := range sn.Generations {
			var buf bytes.Buffer
			if _, err := g.WriteTo(&buf); err != nil {
				b.Fatal(err)
			}
			encoded = append(encoded, buf.Bytes())
			if i < len(sn.Generations)-1 {
				sealed += int64(buf.Len())
			}
		}
		sn.Release()
		rs := time.Now()
		var decoded []*bloom.Generation
		for _, e := range encoded {
			g, err := bloom.DecodeGeneration(bytes.NewReader(e), 0)
			if err != nil {
				b.Fatal(err)
			}
			decoded = append(decoded, g)
		}
		if _, err := bloom.RestoreShard(cfg, decoded); err != nil {
			b.Fatal(err)
		}
		restore := time.Since(rs)
		b.ReportMetric(float64(insert.Nanoseconds())/float64(total), "ns/url")
		b.ReportMetric(float64(st.Bytes)/(1<<20), "MiB/partition")
		b.ReportMetric(float64(st.Bytes)*8/float64(perWindow), "bits/url-of-window")
		b.ReportMetric(float64(live["10%"])/(1<<20), "MiB-live@10%")
		b.ReportMetric(float64(live["50%"])/(1<<20), "MiB-live@50%")
		b.ReportMetric(float64(live["100%"])/(1<<20), "MiB-live@100%")
		b.ReportMetric(float64(sealed)/(1<<20), "MiB-sealed")
		b.ReportMetric(restore.Seconds(), "s-restore")
		b.ReportMetric(st.EstFPR*100, "est-fpr-%")
	}
}

func encodedSize(b *testing.B, g *bloom.GenerationSnapshot) int64 {
	n, err := g.WriteTo(io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	return n
}
