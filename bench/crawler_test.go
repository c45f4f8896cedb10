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
// window over 64 partitions, window 4 weeks — on one partition's filter
// (the filter and checkpoint path, not Kafka), for both filter kinds side
// by side: the ring (G = 4) and the fingerprint table (G = 8), at p = 1 %
// and 0.1 %. Both receive the same 15.6 M URLs per window, spread evenly
// over the window's event time, with a keyed hash, in batches of 256 as the
// worker feeds them, for one window and a third (the ring full, and its
// oldest generation dropped once), interleaved in segments of 1 M URLs so
// that both see the same machine load. Reported per kind: memory and bits
// per URL of the window; ns per URL (hashing included; median over
// segments, and the total); the false-positive rate measured on 1 M
// never-added URLs at the kind's fullest (the ring at the end, just before
// it would drop a generation; the table just before its last generation
// change, with 8 generations in it) and the estimate; what a checkpoint
// uploads (the ring's live generation at 10, 50 and 100 % of its span and
// its sealed generations; the table whole, once per generation change
// and at a new base); and the restore of the whole partition (decode every
// object + restore; the median of 7, alternating kinds). Multiply by 64 for the whole plan; docs/benchmarks-journal.md
// has the table.
func BenchmarkCrawlerPartition(b *testing.B) {
	const (
		partitions = 64
		perWindow  = 1_000_000_000 / partitions
		window     = 28 * 24 * time.Hour
		segment    = 1_000_000
	)
	for _, fpr := range []float64{0.01, 0.001} {
		b.Run(fmt.Sprintf("fpr=%g", fpr), func(b *testing.B) {
			for range b.N {
				runCrawlerPartition(b, bloom.Config{Window: window, Generations: 4, Capacity: perWindow, FPR: fpr},
					bloom.Config{Window: window, Generations: 8, Capacity: perWindow, FPR: fpr}, segment)
			}
		})
	}
}

// crawlerKind is one filter kind in BenchmarkCrawlerPartition.
type crawlerKind struct {
	name      string
	batch     func(hs []bloom.Hash, ts []time.Time, seen []bool)
	test      func(bloom.Hash) bool
	span      time.Duration
	bytes     func() uint64
	estFPR    func() float64
	segs      []float64
	total     time.Duration
	fpr, est  float64 // measured and estimated at the fullest
	lastSpan  int64   // span index of the newest batch fed
	encode    func() (sizes []int64, live int64, all [][]byte)
	restore   func(all [][]byte) error
	liveSizes map[string]int64
}

func runCrawlerPartition(b *testing.B, ringCfg, fpCfg bloom.Config, segment uint64) {
	b.StopTimer()
	runtime.GC()
	seed, err := bloom.NewSeed()
	if err != nil {
		b.Fatal(err)
	}
	ring, err := bloom.NewShard(ringCfg)
	if err != nil {
		b.Fatal(err)
	}
	fp, err := bloom.NewFingerprintShard(fpCfg)
	if err != nil {
		b.Fatal(err)
	}
	kinds := []*crawlerKind{
		{
			name: "ring", batch: ring.TestAndAddBatch, test: ring.Test, span: ring.Span(),
			bytes: func() uint64 { return ring.Stats().Bytes }, estFPR: func() float64 { return ring.Stats().EstFPR },
			encode: func() ([]int64, int64, [][]byte) {
				sn := ring.Snapshot()
				defer sn.Release()
				var sizes []int64
				var all [][]byte
				for _, g := range sn.Generations {
					var buf bytes.Buffer
					if _, err := g.WriteTo(&buf); err != nil {
						b.Fatal(err)
					}
					all = append(all, buf.Bytes())
					sizes = append(sizes, int64(buf.Len()))
				}
				return sizes, sizes[len(sizes)-1], all
			},
			restore: func(all [][]byte) error {
				var gens []*bloom.Generation
				for _, e := range all {
					g, err := bloom.DecodeGeneration(bytes.NewReader(e), 0)
					if err != nil {
						return err
					}
					gens = append(gens, g)
				}
				_, err := bloom.RestoreShard(ringCfg, gens)
				return err
			},
		},
		{
			name: "fingerprint", batch: fp.TestAndAddBatch, test: fp.Test, span: fp.Span(),
			bytes: func() uint64 { return fp.Stats().Bytes }, estFPR: func() float64 { return fp.Stats().EstFPR },
			encode: func() ([]int64, int64, [][]byte) {
				sn := fp.Snapshot()
				defer sn.Release()
				var sizes []int64
				var all [][]byte
				for _, t := range sn.Tables {
					var buf bytes.Buffer
					if _, err := t.WriteTo(&buf); err != nil {
						b.Fatal(err)
					}
					all = append(all, buf.Bytes())
					sizes = append(sizes, int64(buf.Len()))
				}
				return sizes, sizes[len(sizes)-1], all
			},
			restore: func(all [][]byte) error {
				var tables []*bloom.Table
				for _, e := range all {
					t, err := bloom.DecodeTable(bytes.NewReader(e), 0)
					if err != nil {
						return err
					}
					tables = append(tables, t)
				}
				_, err := bloom.RestoreFingerprintShard(fpCfg, tables)
				return err
			},
		},
	}
	perWindow := ringCfg.Capacity
	span := ring.Span() // the stream: one window and one span of the ring
	t0 := epochAligned(time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC), span)
	total := perWindow * 4 / 3
	perSpan := total / 4
	at := func(i uint64) time.Time {
		return t0.Add(time.Duration(float64(span) * float64(i) / float64(perSpan)))
	}
	keys := urlKeys(false)
	hs := make([]bloom.Hash, batchLen)
	ts := make([]time.Time, batchLen)
	seen := make([]bool, batchLen)
	probe := func(k *crawlerKind) {
		fresh := urlKeys(true)
		fp := 0
		for i := range uint64(1_000_000) {
			if k.test(seed.Hash(fresh.key(i))) {
				fp++
			}
		}
		k.fpr, k.est = float64(fp)/1e6, k.estFPR()
	}
	for lo := uint64(0); lo < total; lo += segment {
		hi := min(lo+segment, total)
		for _, k := range kinds {
			b.StartTimer()
			start := time.Now()
			for i := lo; i < hi; {
				m := min(hi-i, batchLen)
				for j := range m {
					hs[j], ts[j] = seed.Hash(keys.key(i+j)), at(i+j)
				}
				// The table just before a generation change (a batch
				// crossing it is fed after the probe): its fullest.
				if sp := ts[m-1].UnixNano() / int64(k.span); k.name == "fingerprint" && k.lastSpan != 0 && sp > k.lastSpan {
					b.StopTimer()
					d := time.Since(start)
					probe(k)
					start = time.Now().Add(-d)
					b.StartTimer()
				}
				k.lastSpan = ts[m-1].UnixNano() / int64(k.span)
				k.batch(hs[:m], ts[:m], seen[:m])
				i += m
				// The ring's live generation's checkpoint size at 10, 50 and
				// 100 % of the last span (not timed).
				if k.name == "ring" && i >= total-perSpan {
					done := float64(i-(total-perSpan)) / float64(perSpan)
					for _, mark := range []float64{0.1, 0.5, 0.999} {
						name := fmt.Sprintf("%.0f%%", mark*100)
						if _, ok := k.liveSizes[name]; !ok && done >= mark {
							b.StopTimer()
							d := time.Since(start)
							if k.liveSizes == nil {
								k.liveSizes = map[string]int64{}
							}
							_, k.liveSizes[name], _ = k.encode()
							start = time.Now().Add(-d)
							b.StartTimer()
						}
					}
				}
			}
			d := time.Since(start)
			b.StopTimer()
			k.total += d
			k.segs = append(k.segs, float64(d.Nanoseconds())/float64(hi-lo))
		}
	}
	probe(kinds[0]) // the ring at its fullest: the end
	// Restores, 7 of each kind alternating (a restore's time here is
	// dominated by how the heap hands out memory: medians).
	encoded := make([][][]byte, len(kinds))
	restores := make([][]float64, len(kinds))
	for i, k := range kinds {
		_, _, encoded[i] = k.encode()
	}
	for range 7 {
		for i, k := range kinds {
			runtime.GC()
			rs := time.Now()
			if err := k.restore(encoded[i]); err != nil {
				b.Fatal(err)
			}
			restores[i] = append(restores[i], time.Since(rs).Seconds())
		}
	}
	for i, k := range kinds {
		sizes, live, _ := k.encode()
		var sealed int64
		for _, sz := range sizes[:len(sizes)-1] {
			sealed += sz
		}
		restore := median(restores[i])
		p := k.name + "-"
		b.ReportMetric(median(k.segs), p+"ns/url")
		b.ReportMetric(float64(k.total.Nanoseconds())/float64(total), p+"ns/url-total")
		b.ReportMetric(float64(k.bytes())/(1<<20), p+"MiB/partition")
		b.ReportMetric(float64(k.bytes())*8/float64(perWindow), p+"bits/url-of-window")
		b.ReportMetric(k.fpr*100, p+"fpr-%")
		b.ReportMetric(k.est*100, p+"est-fpr-%")
		b.ReportMetric(float64(live)/(1<<20), p+"MiB-live")
		b.ReportMetric(float64(sealed)/(1<<20), p+"MiB-sealed")
		b.ReportMetric(restore, p+"s-restore")
		for name, sz := range k.liveSizes {
			b.ReportMetric(float64(sz)/(1<<20), p+"MiB-live@"+name)
		}
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
// chain-limit-rate=6.5 and chain-limit-rate=6.5-fingerprint skip the day:
// four checkpoints, then the chain to its limit and the restores, as
// rate=6.5 does after its day (minutes instead of an hour and a half).
//
// A third case, sized: 10 k/s into a filter planned for that rate (window
// 6 h, 216 M URLs per window: the largest such plan that fits this
// machine's memory twice), 32 minutes simulated.
//
// kind=fingerprint runs the first two cases with the fingerprint filter
// (G = 8): "before" is then its open table whole at every checkpoint, the
// first fill one window and half a span of its own spans.
func BenchmarkCrawlerUploads(b *testing.B) {
	for _, c := range []struct {
		name      string
		kind      string
		rate      float64
		window    time.Duration
		perWindow uint64
		intervals int
	}{
		{"rate=6.5", memory.KindRing, 6.5, 28 * 24 * time.Hour, 1_000_000_000 / 64, 1440},
		{"rate=6.5/kind=fingerprint", memory.KindFingerprint, 6.5, 28 * 24 * time.Hour, 1_000_000_000 / 64, 1440},
		{"rate=10000", memory.KindRing, 10_000, 28 * 24 * time.Hour, 1_000_000_000 / 64, 4},
		{"rate=10000/kind=fingerprint", memory.KindFingerprint, 10_000, 28 * 24 * time.Hour, 1_000_000_000 / 64, 4},
		{"rate=10000/sized-6h", memory.KindRing, 10_000, 6 * time.Hour, 10_000 * 6 * 3600, 32},
		// The restore at the chain's limit alone: the same fill and
		// chain as rate=6.5, four checkpoints instead of the day (the
		// per-day figures then come from those four).
		{"chain-limit-rate=6.5", memory.KindRing, 6.5, 28 * 24 * time.Hour, 1_000_000_000 / 64, 4},
		{"chain-limit-rate=6.5-fingerprint", memory.KindFingerprint, 6.5, 28 * 24 * time.Hour, 1_000_000_000 / 64, 4},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				runCrawlerUploads(b, c.kind, c.rate, c.window, c.perWindow, c.intervals)
			}
		})
	}
}

// uploadsBefore is the shard fed the same URLs as the store's filter, whose
// live object's size is what a checkpoint uploaded before log segments.
type uploadsBefore struct {
	batch    func(hs []bloom.Hash, ts []time.Time, seen []bool)
	liveSize func() int64
	span     time.Duration
}

func newUploadsBefore(b *testing.B, kind string, cfg bloom.Config) uploadsBefore {
	if kind == memory.KindFingerprint {
		fp, err := bloom.NewFingerprintShard(cfg)
		if err != nil {
			b.Fatal(err)
		}
		return uploadsBefore{batch: fp.TestAndAddBatch, span: fp.Span(), liveSize: func() int64 {
			sn := fp.Snapshot()
			defer sn.Release()
			n, err := sn.Tables[len(sn.Tables)-1].WriteTo(io.Discard)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}}
	}
	sh, err := bloom.NewShard(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return uploadsBefore{batch: sh.TestAndAddBatch, span: sh.Span(), liveSize: func() int64 {
		sn := sh.Snapshot()
		defer sn.Release()
		return encodedSize(b, sn.Generations[len(sn.Generations)-1])
	}}
}

func runCrawlerUploads(b *testing.B, kind string, rate float64, window time.Duration, perWindow uint64, intervals int) {
	const interval = time.Minute
	gens, entrySize := 4, 16
	if kind == memory.KindFingerprint {
		gens, entrySize = 8, 8
	}
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
	st.Kind = kind
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
	before := newUploadsBefore(b, kind, cfg) // fed the same URLs: the old checkpoints' sizes
	seed, err := bloom.NewSeed()
	if err != nil {
		b.Fatal(err)
	}
	span := before.span
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
			before.batch(hs, ts, seen[:m])
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
	perHour := uint64(perWindow) / uint64(gens-1) / hours
	for range uint64(gens)*hours + hours/2 {
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
		oldBytes += before.liveSize()
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
		seg := int64(perInterval*uint64(entrySize) + 100)
		share := checkpoint.MaxLogShare
		if kind == memory.KindFingerprint {
			share = memory.TableLogShare(f.Stats().Layout == "sealed")
		}
		if len(live.Log) > 0 && (float64(live.LogBytes()+seg) > share*float64(live.Bytes) || len(live.Log) == checkpoint.MaxLogSegments) {
			b.ReportMetric(float64(len(live.Log)), "chain-segments")
			b.ReportMetric(float64(live.LogEntries()), "chain-entries")
			b.ReportMetric(float64(live.LogBytes())/(1<<20), "MiB-chain")
			b.ReportMetric(float64(live.Bytes)/(1<<20), "MiB-base")
			break
		}
		feed(perInterval, interval)
		commit()
	}
	// Restores by new processes' stores: the median of 5.
	var restores, cpus []float64
	for range 5 {
		runtime.GC()
		rs, c0 := time.Now(), cpuNow()
		fresh := memory.New(cs, "g")
		fresh.Kind = kind
		r, err := fresh.Partition("urls", 0).Restore(ctx, params)
		if err != nil {
			b.Fatal(err)
		}
		restores = append(restores, time.Since(rs).Seconds())
		cpus = append(cpus, (cpuNow() - c0).Seconds())
		if r.InputOffset != offset {
			b.Fatalf("restored offset %d, want %d", r.InputOffset, offset)
		}
	}
	b.ReportMetric(median(restores), "s-restore-at-threshold")
	// The process's CPU time (all threads) of the same restores: what a
	// shared machine's waits do not inflate.
	b.ReportMetric(median(cpus), "cpu-s-restore-at-threshold")
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
