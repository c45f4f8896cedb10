package bloom

import (
	"bytes"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// restoreChain is one kind's stored state at the end of a checkpoint
// chain: its bases (whole objects) and its log segments, encoded.
type restoreChain struct {
	bases   [][]byte
	segs    [][]byte
	entries int
}

var (
	restoreChainsOnce sync.Once
	restoreRing       restoreChain
	restoreFP         restoreChain
)

// buildRestoreChains builds, for the crawler plan of one partition (15.6 M
// URLs per 4-week window, p = 1 %), what BenchmarkCrawlerUploads restores
// at the chain's limit, without the simulated day: each kind filled with
// one window and half a span of keys, its objects stored whole, then a
// chain of new keys of the live generation in segments as the
// checkpoints at 6.5 URLs/s leave it at the share's limit (ring: 256
// segments of 390 entries, ~100 k; fingerprint: 68 segments of 6,600,
// ~450 k, as after its merges).
func buildRestoreChains(b *testing.B) {
	const window = 28 * 24 * time.Hour
	const perWindow = 1_000_000_000 / 64
	rng := rand.New(rand.NewPCG(11, 12))
	hs := make([]Hash, 256)
	ts := make([]time.Time, 256)
	seen := make([]bool, 256)
	type kind struct {
		gens        int
		batch       func([]Hash, []time.Time, []bool)
		span        time.Duration
		bases       func() [][]byte
		seg         func() []byte
		segs, perSg int
		out         *restoreChain
	}
	ring, err := NewShard(Config{Window: window, Generations: 4, Capacity: perWindow, FPR: 0.01})
	if err != nil {
		b.Fatal(err)
	}
	ring.EnableJournal(0.25, 10_000_000)
	fp, err := NewFingerprintShard(Config{Window: window, Generations: 8, Capacity: perWindow, FPR: 0.01})
	if err != nil {
		b.Fatal(err)
	}
	fp.EnableJournal(0.25, 10_000_000)
	kinds := []kind{
		{gens: 4, batch: ring.TestAndAddBatch, span: ring.Span(), segs: 256, perSg: 390, out: &restoreRing,
			bases: func() [][]byte {
				sn := ring.Snapshot()
				defer sn.Release()
				var out [][]byte
				for _, g := range sn.Generations {
					var buf bytes.Buffer
					if _, err := g.WriteTo(&buf); err != nil {
						b.Fatal(err)
					}
					g.Mark("base")
					out = append(out, buf.Bytes())
				}
				return out
			},
			seg: func() []byte {
				sn := ring.Snapshot()
				defer sn.Release()
				g := sn.Generations[len(sn.Generations)-1]
				m, ok := g.JournalMark()
				if !ok {
					b.Fatal("ring: no journal mark")
				}
				l, ok := g.LogSince(m.Pos)
				if !ok {
					b.Fatal("ring: no log")
				}
				var buf bytes.Buffer
				if _, err := l.WriteTo(&buf); err != nil {
					b.Fatal(err)
				}
				g.Mark("seg")
				return buf.Bytes()
			}},
		{gens: 8, batch: fp.TestAndAddBatch, span: fp.Span(), segs: 68, perSg: 6600, out: &restoreFP,
			bases: func() [][]byte {
				sn := fp.Snapshot()
				defer sn.Release()
				var out [][]byte
				for _, t := range sn.Tables {
					var buf bytes.Buffer
					if _, err := t.WriteTo(&buf); err != nil {
						b.Fatal(err)
					}
					t.MarkMerged("base", 0)
					out = append(out, buf.Bytes())
				}
				return out
			},
			seg: func() []byte { return encodeOpenLog(b, fp, 1) }},
	}
	for _, k := range kinds {
		t0 := time.Unix(0, 0).Add(2000 * k.span)
		// One window and half a span: G + 1/2 spans of keys, each
		// span's planned share.
		perSpan := perWindow / (k.gens - 1)
		n := perSpan*k.gens + perSpan/2
		feed := func(n int, from, d time.Duration) {
			for i := 0; i < n; i += len(hs) {
				m := min(n-i, len(hs))
				for j := range m {
					hs[j] = Hash{rng.Uint64(), rng.Uint64()}
					ts[j] = t0.Add(from + time.Duration(float64(d)*float64(i+j)/float64(n)))
				}
				k.batch(hs[:m], ts[:m], seen[:m])
			}
		}
		fill := time.Duration(k.gens)*k.span + k.span/2
		feed(n, 0, fill)
		k.out.bases = k.bases()
		for range k.segs {
			feed(k.perSg, fill, time.Second) // all in the live generation
			k.out.segs = append(k.out.segs, k.seg())
		}
		k.out.entries = k.segs * k.perSg
	}
}

func (c *restoreChain) restoreRing(b *testing.B) {
	var gens []*Generation
	for i, base := range c.bases {
		g, err := DecodeGeneration(bytes.NewReader(base), 0)
		if err != nil {
			b.Fatal(err)
		}
		if i == len(c.bases)-1 {
			for _, s := range c.segs {
				l, err := DecodeLog(bytes.NewReader(s), 10_000_000)
				if err != nil {
					b.Fatal(err)
				}
				if err := g.ApplyLog(l); err != nil {
					b.Fatal(err)
				}
			}
		}
		gens = append(gens, g)
	}
	if _, err := RestoreShard(Config{Window: 28 * 24 * time.Hour, Generations: 4, Capacity: 1_000_000_000 / 64, FPR: 0.01}, gens); err != nil {
		b.Fatal(err)
	}
}

func (c *restoreChain) restoreFingerprint(b *testing.B) {
	var tables []*Table
	for i, base := range c.bases {
		tb, err := DecodeTable(bytes.NewReader(base), 0)
		if err != nil {
			b.Fatal(err)
		}
		if i == len(c.bases)-1 {
			var ls []*TableLog
			for _, s := range c.segs {
				l, err := DecodeTableLog(bytes.NewReader(s), 10_000_000)
				if err != nil {
					b.Fatal(err)
				}
				ls = append(ls, l)
			}
			if err := tb.ApplyLogs(ls); err != nil {
				b.Fatal(err)
			}
		}
		tables = append(tables, tb)
	}
	if _, err := RestoreFingerprintShard(Config{Window: 28 * 24 * time.Hour, Generations: 8, Capacity: 1_000_000_000 / 64, FPR: 0.01}, tables); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRestoreChain measures the restore of one partition of the
// crawler plan at the end of its checkpoint chain (see buildRestoreChains),
// decoding from memory (no store): the ring (G = 4: its generations
// decoded, ~100 k log entries replayed) against the fingerprint kind
// (G = 8: its table decoded, ~450 k log entries replayed), alternating, a
// garbage collection before each. Reported: the medians of wall time and
// of process CPU time per restore, and the fingerprint/ring ratio of
// each. kind=ring and kind=fingerprint run one kind alone, for profiles.
func BenchmarkRestoreChain(b *testing.B) {
	restoreChainsOnce.Do(func() { buildRestoreChains(b) })
	b.Logf("ring: %d bases (%d bytes), %d segments, %d entries; fingerprint: %d bases (%d bytes), %d segments, %d entries",
		len(restoreRing.bases), sizeOf(restoreRing.bases), len(restoreRing.segs), restoreRing.entries,
		len(restoreFP.bases), sizeOf(restoreFP.bases), len(restoreFP.segs), restoreFP.entries)
	b.Run("alternating", func(b *testing.B) {
		var wall, cpu [2][]float64
		for range b.N {
			for k, f := range []func(*testing.B){restoreRing.restoreRing, restoreFP.restoreFingerprint} {
				runtime.GC()
				w, c := time.Now(), processCPU()
				f(b)
				cpu[k] = append(cpu[k], (processCPU() - c).Seconds())
				wall[k] = append(wall[k], time.Since(w).Seconds())
			}
		}
		med := func(xs []float64) float64 { xs = slices.Clone(xs); slices.Sort(xs); return xs[len(xs)/2] }
		b.ReportMetric(med(wall[0])*1e3, "ms-ring")
		b.ReportMetric(med(wall[1])*1e3, "ms-fingerprint")
		b.ReportMetric(med(wall[1])/med(wall[0]), "ratio-wall")
		b.ReportMetric(med(cpu[0])*1e3, "cpu-ms-ring")
		b.ReportMetric(med(cpu[1])*1e3, "cpu-ms-fingerprint")
		b.ReportMetric(med(cpu[1])/med(cpu[0]), "ratio-cpu")
	})
	b.Run("kind=ring", func(b *testing.B) {
		for range b.N {
			restoreRing.restoreRing(b)
		}
	})
	b.Run("kind=fingerprint", func(b *testing.B) {
		for range b.N {
			restoreFP.restoreFingerprint(b)
		}
	})
}

func sizeOf(bs [][]byte) (n int) {
	for _, b := range bs {
		n += len(b)
	}
	return n
}
