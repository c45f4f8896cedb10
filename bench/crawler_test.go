package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomgate/bloomgate/internal/bloom"
	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/memory"
	"github.com/bloomgate/bloomgate/internal/worker"
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
		t0 := epochAligned(time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC), span)
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

// BenchmarkCrawlerUploads measures what the periodic checkpoints of one
// partition of the crawler plan upload per day, through the production
// state store (internal/memory over a mem:// checkpoint store, stored
// uncompressed as `bloomgate run` stores them), at the default interval of
// 1 min: one window and half a span of URLs first (the live generation
// half full, as in BenchmarkCrawlerPartition), then a checkpoint after
// every minute of new URLs at the given rate. "before" is what the
// checkpoints uploaded before logs (the live generation whole every
// minute: its encoded size, measured on a second shard fed the same way);
// "after" is what the store uploaded (bases, log segments, sealed
// generations; manifests apart). At 6.5 URLs/s (the plan) a whole day
// (1,440 checkpoints) is simulated; at 10 k/s, 4 minutes (a day would
// overflow a filter sized for 6.5/s) and the per-day figure is 1,440
// times their mean. Then, at 6.5/s, the checkpoints go on until the live
// generation's chain is as long as the share allows, and a new process
// restores it (every generation decoded, the chain replayed).
//
// A third case, sized: 10 k/s into a filter planned for that rate (window
// 6 h, 216 M URLs per window: the largest such plan that fits this
// machine's memory twice), 32 minutes simulated.
func BenchmarkCrawlerUploads(b *testing.B) {
	for _, c := range []struct {
		name      string
		rate      float64
		window    time.Duration
		perWindow uint64
		intervals int
	}{
		{"rate=6.5", 6.5, 28 * 24 * time.Hour, 1_000_000_000 / 64, 1440},
		{"rate=10000", 10_000, 28 * 24 * time.Hour, 1_000_000_000 / 64, 4},
		{"rate=10000/sized-6h", 10_000, 6 * time.Hour, 10_000 * 6 * 3600, 32},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				runCrawlerUploads(b, c.rate, c.window, c.perWindow, c.intervals)
			}
		})
	}
}

func runCrawlerUploads(b *testing.B, rate float64, window time.Duration, perWindow uint64, intervals int) {
	const (
		gens     = 4
		interval = time.Minute
	)
	ctx := context.Background()
	params := worker.FilterParams{Window: window, Generations: gens, Capacity: perWindow, FPR: 0.01}
	cfg := bloom.Config{Window: window, Generations: gens, Capacity: perWindow, FPR: 0.01}
	reg := prometheus.NewRegistry()
	cs, err := checkpoint.Open(ctx, fmt.Sprintf("mem://crawler-uploads-%g-%d", rate, time.Now().UnixNano()),
		checkpoint.Options{Registerer: reg, Compression: "none"})
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	st := memory.New(cs, "g")
	h := st.Partition("urls", 0)
	if _, err := h.Restore(ctx, params); !errors.Is(err, worker.ErrNoCheckpoint) {
		b.Fatal(err)
	}
	if err := h.Claim(ctx, "bench"); err != nil {
		b.Fatal(err)
	}
	f, err := st.NewFilter(params)
	if err != nil {
		b.Fatal(err)
	}
	before, err := bloom.NewShard(cfg) // fed the same URLs: the old checkpoints' sizes
	if err != nil {
		b.Fatal(err)
	}
	seed, err := bloom.NewSeed()
	if err != nil {
		b.Fatal(err)
	}
	span := before.Span()
	t0 := epochAligned(time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC), span)
	keys := urlKeys(false)
	var (
		next  uint64
		now   = t0
		arena []byte
		batch [][]byte
		ts    []time.Time
		hs    []bloom.Hash
		seen  = make([]bool, batchLen)
	)
	// feed gives n new URLs spread evenly over d of event time to both.
	feed := func(n uint64, d time.Duration) {
		for i := uint64(0); i < n; {
			m := min(n-i, batchLen)
			arena, batch, ts, hs = arena[:0], batch[:0], ts[:0], hs[:0]
			for j := range m {
				at := now.Add(time.Duration(float64(d) * float64(i+j) / float64(n)))
				k := keys.key(next + j)
				arena = append(arena, k...)
				ts = append(ts, at)
				hs = append(hs, seed.Hash(k))
			}
			for j := range m {
				batch = append(batch, arena[j*uint64(len(keys.buf)):(j+1)*uint64(len(keys.buf))])
			}
			f.TestAndAddBatch(batch, ts, seen[:m])
			before.TestAndAddBatch(hs, ts, seen[:m])
			next += m
			i += m
		}
		now = now.Add(d)
	}
	var offset int64
	commit := func() {
		offset++
		if err := h.Commit(ctx, worker.Checkpoint{InputOffset: offset, Params: params, Snapshot: f.Snapshot(), Owner: "bench"}); err != nil {
			b.Fatal(err)
		}
	}
	// newest returns the newest manifest's generations, its sequence and
	// the bytes of the objects uploaded for it.
	newest := func() ([]checkpoint.GenerationRef, uint64, int64) {
		rep, err := checkpoint.Inspect(ctx, cs)
		if err != nil {
			b.Fatal(err)
		}
		p := rep.Partitions[0]
		var n int64
		for _, g := range p.Generations {
			if g.Seq == p.Seq {
				n += g.Bytes
			}
			for _, l := range g.Log {
				if l.Seq == p.Seq {
					n += l.Bytes
				}
			}
		}
		return p.Generations, p.Seq, n
	}

	// One window and half a span, in 1 h steps of event time, then a
	// whole checkpoint.
	hours := uint64(span / time.Hour)
	perHour := uint64(perWindow) / (gens - 1) / hours
	for range 4*hours + hours/2 {
		feed(perHour, time.Hour)
	}
	commit()
	base := counterValue(b, reg, "bloomgate_checkpoint_bytes_total")

	b.ResetTimer()
	perInterval := uint64(rate * interval.Seconds())
	var oldBytes, data int64
	var fulls, logs int
	for range intervals {
		feed(perInterval, interval)
		commit()
		sn := before.Snapshot()
		oldBytes += encodedSize(b, sn.Generations[len(sn.Generations)-1])
		sn.Release()
		gs, seq, n := newest()
		data += n
		switch live := gs[len(gs)-1]; {
		case live.Seq == seq:
			fulls++
		case len(live.Log) > 0 && live.Log[len(live.Log)-1].Seq == seq:
			logs++
		}
	}
	b.StopTimer()
	manifests := counterValue(b, reg, "bloomgate_checkpoint_bytes_total") - base - float64(data)
	day := float64(24*time.Hour/interval) / float64(intervals)
	b.ReportMetric(float64(oldBytes)*day/(1<<20), "MiB/day-before")
	b.ReportMetric(float64(data)*day/(1<<20), "MiB/day-after")
	b.ReportMetric(manifests*day/(1<<20), "MiB/day-manifests")
	b.ReportMetric(float64(fulls), "whole-uploads")
	b.ReportMetric(float64(logs), "log-uploads")
	if rate > 1000 { // the chain's restore is measured at the plan's rate
		return
	}

	// Go on until the chain is as long as the share allows, then restore
	// it in a new process.
	for {
		gs, _, _ := newest()
		live := gs[len(gs)-1]
		seg := int64(perInterval*16 + 100)
		if len(live.Log) > 0 && (float64(live.LogBytes()+seg) > checkpoint.MaxLogShare*float64(live.Bytes) || len(live.Log) == checkpoint.MaxLogSegments) {
			b.ReportMetric(float64(len(live.Log)), "chain-segments")
			b.ReportMetric(float64(live.LogEntries()), "chain-entries")
			b.ReportMetric(float64(live.LogBytes())/(1<<20), "MiB-chain")
			b.ReportMetric(float64(live.Bytes)/(1<<20), "MiB-base")
			break
		}
		feed(perInterval, interval)
		commit()
	}
	runtime.GC()
	rs := time.Now()
	r, err := memory.New(cs, "g").Partition("urls", 0).Restore(ctx, params)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(time.Since(rs).Seconds(), "s-restore-at-threshold")
	if r.InputOffset != offset {
		b.Fatalf("restored offset %d, want %d", r.InputOffset, offset)
	}
}

func counterValue(b *testing.B, reg *prometheus.Registry, name string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				v += m.GetCounter().GetValue()
			}
		}
	}
	return v
}

// epochAligned is the start of the filter span holding t: spans are aligned
// to the Unix epoch (time.Time.Truncate aligns to year 1).
func epochAligned(t time.Time, span time.Duration) time.Time {
	return time.Unix(0, t.UnixNano()/int64(span)*int64(span)).UTC()
}
