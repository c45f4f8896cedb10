package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomgate/bloomgate/bench/procstat"
	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/memory"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// BenchmarkExactMode runs one partition's memory, the production state
// store (internal/memory) without Kafka, filter only and in exact mode
// side by side: n unique keys and n/4 true duplicates (20 % of the
// events; half of them repeat one of the last 1,000 keys, half any earlier
// key) in batches of 2,000 records (a fetch), over 20 h of event time
// (window 24 h, 4 generations of 8 h, fpr 1 %, capacity n: the defaults).
// Every answer is checked against the stream's own truth (the generator
// knows which event is a repeat). Then: a checkpoint to a file:// bucket,
// 4 more hours of keys that open a new generation, a checkpoint after
// that rotation, and restores of the last checkpoint into an empty
// directory (the disk lost) and into the kept one.
//
// Keys: BLOOMGATE_EXACT_KEYS (default 1M; 10M for docs/exact.md). Run the
// two modes in separate processes for their memory figures (the process's
// RssAnon and RssFile after the feed; mapped store files count as
// RssFile).
func BenchmarkExactMode(b *testing.B) {
	n := uint64(1_000_000)
	if v := os.Getenv("BLOOMGATE_EXACT_KEYS"); v != "" {
		n = keySizesFrom(b, v)[0]
	}
	for _, mode := range []string{"filter", "exact"} {
		b.Run(fmt.Sprintf("n=%s/mode=%s", label(n), mode), func(b *testing.B) {
			for range b.N {
				runExactMode(b, n, mode == "exact")
			}
		})
	}
}

func keySizesFrom(b *testing.B, spec string) []uint64 {
	b.Setenv("BLOOMGATE_BENCH_KEYS", spec)
	return keySizes(b)
}

const exactBatch = 2000

// exactStream is the benchmark's input: unique keys in order, and repeats.
type exactStream struct {
	r        *rand.Rand
	next     uint64 // unique keys so far
	buf      [][]byte
	arena    []byte
	ts       []time.Time
	dup      []bool
	at       time.Time
	step     time.Duration
	keys     *keyGen
	dupShare float64
}

func newExactStream(seed uint64, start time.Time, step time.Duration) *exactStream {
	return &exactStream{r: rand.New(rand.NewPCG(seed, 9)), at: start, step: step, keys: orderKeys(false), dupShare: 0.2}
}

// batch fills the next k events (unique keys up to limit, then only
// repeats): keys, timestamps, and whether each is a repeat.
func (s *exactStream) batch(k int, limit uint64) {
	s.buf, s.ts, s.dup, s.arena = s.buf[:0], s.ts[:0], s.dup[:0], s.arena[:0]
	for range k {
		i := s.next
		dup := s.next > 0 && (s.next >= limit || s.r.Float64() < s.dupShare)
		if dup {
			if s.r.IntN(2) == 0 {
				i = s.next - 1 - s.r.Uint64N(min(s.next, 1000))
			} else {
				i = s.r.Uint64N(s.next)
			}
		} else {
			s.next++
		}
		start := len(s.arena)
		s.arena = append(s.arena, s.keys.key(i)...)
		s.buf = append(s.buf, s.arena[start:])
		s.ts = append(s.ts, s.at)
		s.dup = append(s.dup, dup)
		s.at = s.at.Add(s.step)
	}
}

type exactMem struct {
	st  *memory.Store
	reg *prometheus.Registry // checkpoint and exact metrics
}

func openExactMem(b *testing.B, bucket, dir string, exact bool) *exactMem {
	b.Helper()
	reg := prometheus.NewRegistry()
	cs, err := checkpoint.Open(context.Background(), "file://"+bucket, checkpoint.Options{Registerer: reg, Compression: "none"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cs.Close() })
	st := memory.New(cs, "g")
	if exact {
		st.Exact = memory.ExactOptions{Dir: dir, Registerer: reg}
	}
	b.Cleanup(func() { st.Close() })
	return &exactMem{st: st, reg: reg}
}

// take restores partition 0 (or starts its memory) and claims it.
func (m *exactMem) take(b *testing.B, params worker.FilterParams) (worker.PartitionStore, worker.Filter, time.Duration) {
	b.Helper()
	ctx := context.Background()
	h := m.st.Partition("in", 0)
	start := time.Now()
	r, err := h.Restore(ctx, params)
	took := time.Since(start)
	var f worker.Filter
	switch {
	case errors.Is(err, worker.ErrNoCheckpoint):
		if f, err = h.(worker.PartitionFilterMaker).NewFilter(params); err != nil {
			b.Fatal(err)
		}
	case err != nil:
		b.Fatal(err)
	default:
		f = r.Filter
	}
	if err := h.Claim(ctx, "bench"); err != nil {
		b.Fatal(err)
	}
	return h, f, took
}

func (m *exactMem) metric(name string) (sum, count float64) {
	mfs, _ := m.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mm := range mf.GetMetric() {
			switch {
			case mm.GetCounter() != nil:
				sum += mm.GetCounter().GetValue()
			case mm.GetHistogram() != nil:
				sum += mm.GetHistogram().GetSampleSum()
				count += float64(mm.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum, count
}

func commitBench(b *testing.B, h worker.PartitionStore, f worker.Filter, params worker.FilterParams, off int64) time.Duration {
	b.Helper()
	start := time.Now()
	sn := f.Snapshot()
	err := h.Commit(context.Background(), worker.Checkpoint{InputOffset: off, Params: params, Snapshot: sn, Owner: "bench"})
	sn.Release()
	if err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func runExactMode(b *testing.B, n uint64, exact bool) {
	b.StopTimer()
	runtime.GC()
	tmp := b.TempDir()
	bucket, dir := filepath.Join(tmp, "bucket"), filepath.Join(tmp, "exact")
	params := worker.FilterParams{Window: 24 * time.Hour, Generations: 4, Capacity: n, FPR: 0.01}
	m := openExactMem(b, bucket, dir, exact)
	h, f, _ := m.take(b, params)

	events := n + n/4
	// 20 h of event time from a span boundary: three generations.
	t0 := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	s := newExactStream(1, t0, 20*time.Hour/time.Duration(events))
	seen := make([]bool, exactBatch)
	var fp, fn, dups uint64
	feed := func(total, limit uint64) (wall, cpu time.Duration) {
		for done := uint64(0); done < total; {
			k := int(min(exactBatch, total-done))
			s.batch(k, limit)
			c0, w0 := cpuNow(), time.Now()
			f.TestAndAddBatch(s.buf, s.ts, seen[:k])
			wall += time.Since(w0)
			cpu += cpuNow() - c0
			for i := range k {
				switch {
				case s.dup[i] && !seen[i]:
					fn++
				case !s.dup[i] && seen[i]:
					fp++
				}
				if s.dup[i] {
					dups++
				}
			}
			done += uint64(k)
		}
		return wall, cpu
	}
	rss0 := procstat.StatusMiB(0, "RssAnon")
	b.StartTimer()
	wall, cpu := feed(events, n)
	b.StopTimer()
	if fe, ok := f.(worker.FallibleFilter); ok && fe.Err() != nil {
		b.Fatal(fe.Err())
	}
	runtime.GC()
	st := f.Stats()
	b.ReportMetric(float64(wall.Nanoseconds())/float64(events), "ns/event")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(events), "cpu-ns/event")
	b.ReportMetric(float64(s.next), "unique-keys")
	b.ReportMetric(float64(dups), "true-dups")
	b.ReportMetric(float64(fp), "false-positives")
	b.ReportMetric(float64(fn), "false-negatives")
	b.ReportMetric(procstat.StatusMiB(0, "RssAnon"), "rss-anon-MiB")
	b.ReportMetric(procstat.StatusMiB(0, "RssFile"), "rss-file-MiB")
	b.ReportMetric(procstat.StatusMiB(0, "RssAnon")-rss0, "rss-anon-growth-MiB")
	b.ReportMetric(float64(st.Bytes)/(1<<20), "filter-MiB")
	if fn != 0 {
		b.Errorf("%d false negatives", fn)
	}
	if exact {
		if fp != 0 {
			b.Errorf("exact mode: %d false positives", fp)
		}
		lat, lookups := m.metric("bloomgate_exact_lookup_seconds")
		refuted := st.Exact.RefutedPositives
		b.ReportMetric(float64(refuted), "refuted")
		b.ReportMetric(lookups, "lookups")
		b.ReportMetric(lat/max(lookups, 1)*1e9, "ns/lookup")
		b.ReportMetric(float64(procstat.DirBytes(dir))/float64(s.next), "disk-B/key")
		b.ReportMetric(float64(st.Exact.DiskBytes)/float64(s.next), "store-B/key")
	}

	// A checkpoint of the full window, then a rotation: 4 h of new keys in
	// the next generation, and a checkpoint after it.
	up0, _ := m.metric("bloomgate_checkpoint_bytes_total")
	cp1 := commitBench(b, h, f, params, int64(events))
	up1, _ := m.metric("bloomgate_checkpoint_bytes_total")
	more := n / 5
	s.at = t0.Add(24 * time.Hour)
	s.step = 4 * time.Hour / time.Duration(more)
	feed(more, s.next+more)
	cp2 := commitBench(b, h, f, params, int64(events+more))
	up2, _ := m.metric("bloomgate_checkpoint_bytes_total")
	b.ReportMetric(cp1.Seconds(), "checkpoint-s")
	b.ReportMetric((up1-up0)/(1<<20), "checkpoint-MiB")
	b.ReportMetric((up2-up1)/(1<<20), "after-rotation-upload-MiB")
	if exact {
		// What the rotation's checkpoint had to upload: files of the
		// first checkpoint, referenced, are not counted.
		b.ReportMetric(cp2.Seconds(), "after-rotation-checkpoint-s")
	}
	if exact {
		if err := m.st.Close(); err != nil {
			b.Fatal(err)
		}
	}

	// Restores of the last checkpoint: into an empty directory (the disk
	// lost: everything comes from the bucket), then into the kept one.
	runtime.GC()
	lost := openExactMem(b, bucket, filepath.Join(tmp, "exact-new"), exact)
	_, g, took := lost.take(b, params)
	b.ReportMetric(took.Seconds(), "restore-s")
	// The restored memory answers: repeats of 100 k earlier keys are
	// duplicates, 100 k never-seen keys are not.
	probe := make([][]byte, 0, exactBatch)
	ts := make([]time.Time, exactBatch)
	for i := range ts {
		ts[i] = s.at
	}
	bad := 0
	fresh := orderKeys(true)
	for round := range 100 {
		for _, new := range []bool{false, true} {
			probe = probe[:0]
			var arena []byte
			for j := range 1000 {
				var k []byte
				if new {
					k = fresh.key(uint64(round*1000 + j))
				} else {
					k = s.keys.key(s.r.Uint64N(s.next))
				}
				start := len(arena)
				arena = append(arena, k...)
				probe = append(probe, arena[start:])
			}
			g.TestAndAddBatch(probe, ts[:len(probe)], seen[:len(probe)])
			for j := range probe {
				if seen[j] == new && (exact || !new) {
					bad++
				}
			}
		}
	}
	if bad != 0 {
		b.Errorf("restored memory: %d wrong answers of 200000 probes", bad)
	}
	if exact {
		kept := openExactMem(b, bucket, dir, exact)
		_, _, took := kept.take(b, params)
		b.ReportMetric(took.Seconds(), "restore-kept-dir-s")
	}
}
