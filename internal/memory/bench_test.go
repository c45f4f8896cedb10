package memory

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/s3test"
	"github.com/bloomgate/bloomgate/internal/worker"
	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkCheckpoint measures the checkpoint goals end to end with the
// real filter (Store) and the real S3 server (versitygw): a shard of
// Capacity BLOOMGATE_BENCH_KEYS (default 100 M) at p = 1 %, G = 2, filled
// once with 95 % of that many distinct keys, is checkpointed the way the
// worker does it (Restore → Claim once, then per checkpoint Snapshot by the
// owner and Commit), then restored on a fresh checkpoint store and Store.
// Sub-benchmarks: owner-idle (nothing writes during the upload) and
// owner-inserting (a goroutine playing the owner keeps inserting new keys
// while Commit uploads, as the partition's processing goroutine would).
//
// Metrics: pause-ms (Snapshot), commit-s (Commit wall time), restore-s
// (Restore including decoding into a filter), owner-inserts/s and
// owner-max-insert-ms (the owner during the upload), uploaded-B/op
// (generation objects plus manifest, per bloomgate_checkpoint_bytes_total)
// and filter-B (worker.FilterStats.Bytes of the checkpointed shard). Results in
// docs/checkpoints.md.
func BenchmarkCheckpoint(b *testing.B) {
	if testing.Short() {
		b.Skip("fills a 100 M-key filter (~1 min); not in -short")
	}
	n := uint64(100_000_000)
	if s := os.Getenv("BLOOMGATE_BENCH_KEYS"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil || v == 0 {
			b.Fatalf("BLOOMGATE_BENCH_KEYS=%q: want a positive integer", s)
		}
		n = v
	}
	srv := s3test.Start(b)
	srv.SetEnv(b)
	ctx := context.Background()
	url := srv.URL("bench")
	open := func(reg prometheus.Registerer) *checkpoint.Store {
		st, err := checkpoint.Open(ctx, url, checkpoint.Options{Registerer: reg, Compression: "none"})
		if err != nil {
			b.Fatalf("opening %s: %v", url, err)
		}
		b.Cleanup(func() { st.Close() })
		return st
	}
	reg := prometheus.NewRegistry()
	state := New(open(reg), "bench")
	params := worker.FilterParams{Window: time.Hour, Generations: 2, Capacity: n, FPR: 0.01}

	// The worker's order on assignment: Restore (none yet) → Claim.
	ps := state.Partition("in", 0)
	if _, err := ps.Restore(ctx, params); !errors.Is(err, worker.ErrNoCheckpoint) {
		b.Fatalf("first restore: %v, want worker.ErrNoCheckpoint", err)
	}
	if err := ps.Claim(ctx, "bench"); err != nil {
		b.Fatalf("claim: %v", err)
	}

	f, err := state.NewFilter(params)
	if err != nil {
		b.Fatal(err)
	}
	// Fill to 95 % of Capacity: the owner's inserts during the uploads
	// must not reach Capacity, where the generation stacks an overflow
	// sub-filter (2×Capacity, ≈ 480 MB at 100 M keys) whose memory is
	// faulted in over the next inserts — a different cost from the
	// checkpoint's (see docs/checkpoints.md).
	fill := n - n/20
	ts := time.Now() // one timestamp: every key lands in the live generation
	var key [8]byte
	next := uint64(0)
	fillStart := time.Now()
	for ; next < fill; next++ {
		binary.LittleEndian.PutUint64(key[:], next)
		f.TestAndAdd(key[:], ts)
	}
	st := f.Stats()
	b.Logf("filled %d keys in %v: %d filter bytes, %d generations, fill %.3f, est. FPR %.4f, est. keys %d",
		fill, time.Since(fillStart).Round(time.Millisecond), st.Bytes, st.Generations, st.Fill, st.EstFPR, st.EstKeys)

	// Idle first: inserts past Capacity stack an overflow filter.
	b.Run("owner-idle", func(b *testing.B) {
		next = benchCheckpoints(b, ctx, f, ps, params, st, reg, open, ts, next, false)
	})
	b.Run("owner-inserting", func(b *testing.B) {
		next = benchCheckpoints(b, ctx, f, ps, params, st, reg, open, ts, next, true)
	})
}

// benchCheckpoints runs b.N checkpoints of f through ps and restores each on
// a fresh store; with inserting, another goroutine plays the owner and keeps
// adding new keys (from next on) while Commit uploads. It returns the next
// unused key.
func benchCheckpoints(b *testing.B, ctx context.Context, f worker.Filter, ps worker.PartitionStore, params worker.FilterParams,
	st worker.FilterStats, reg *prometheus.Registry, open func(prometheus.Registerer) *checkpoint.Store,
	ts time.Time, next uint64, inserting bool) uint64 {
	var pause, commit, restore, maxInsert time.Duration
	var ownerInserts uint64
	var ownerTime time.Duration
	var key [8]byte
	uploaded0 := uploadedBytes(b, reg)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Owner goroutine (this one): the pause is the snapshot.
		st = f.Stats() // the state the checkpoint holds
		t0 := time.Now()
		sn := f.Snapshot()
		pause += time.Since(t0)

		// The owner keeps inserting new keys while the checkpointer
		// uploads; each insert is timed (copy-on-write clones a 64 KiB
		// page on the first write to it after the snapshot).
		var stop atomic.Bool
		type result struct {
			n, maxAt uint64 // inserts, index of the slowest
			max      time.Duration
		}
		done := make(chan result, 1)
		if inserting {
			go func(from uint64) {
				var k [8]byte
				var mx time.Duration
				var mxAt uint64
				i := from
				for !stop.Load() {
					for j := 0; j < 64; j++ {
						binary.LittleEndian.PutUint64(k[:], i)
						t := time.Now()
						f.TestAndAdd(k[:], ts)
						if d := time.Since(t); d > mx {
							mx, mxAt = d, i-from
						}
						i++
					}
				}
				done <- result{i - from, mxAt, mx}
			}(next)
		} else {
			done <- result{}
		}

		t1 := time.Now()
		err := ps.Commit(ctx, worker.Checkpoint{InputOffset: int64(next), Params: params, Snapshot: sn, Owner: "bench"})
		d := time.Since(t1)
		stop.Store(true)
		res := <-done
		ownerTime += time.Since(t1)
		sn.Release()
		if err != nil {
			b.Fatalf("commit: %v", err)
		}
		commit += d
		ownerInserts += res.n
		maxInsert = max(maxInsert, res.max)
		offset := int64(next)
		next += res.n

		// Restore on a fresh checkpoint store and Store: list, manifest,
		// download, verify, decode into a filter.
		b.StopTimer()
		fresh := New(open(prometheus.NewRegistry()), "bench")
		rp := fresh.Partition("in", 0)
		b.StartTimer()
		t2 := time.Now()
		r, err := rp.Restore(ctx, params)
		restore += time.Since(t2)
		if err != nil {
			b.Fatalf("restore: %v", err)
		}
		b.StopTimer()
		if r.InputOffset != offset {
			b.Fatalf("restored input offset %d, want %d", r.InputOffset, offset)
		}
		if rs := r.Filter.Stats(); rs.Bytes != st.Bytes || rs.EstKeys < st.EstKeys {
			b.Fatalf("restored filter: %d bytes, %d est. keys; want %d bytes, ≥ %d keys", rs.Bytes, rs.EstKeys, st.Bytes, st.EstKeys)
		}
		binary.LittleEndian.PutUint64(key[:], params.Capacity/2)
		if !r.Filter.TestAndAdd(key[:], ts) {
			b.Fatal("restored filter misses a key inserted before the snapshot")
		}
		r = nil
		b.Logf("checkpoint of %d filter bytes (%d overflow stacks, est. %d keys); owner added %d keys during the upload, "+
			"slowest insert %v (#%d); filter after: %d bytes, %d overflow stacks",
			st.Bytes, st.OverflowStacks, st.EstKeys, res.n, res.max, res.maxAt, f.Stats().Bytes, f.Stats().OverflowStacks)
		b.StartTimer()
	}
	b.StopTimer()
	nf := float64(b.N)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(pause.Microseconds())/1000/nf, "pause-ms")
	b.ReportMetric(commit.Seconds()/nf, "commit-s")
	b.ReportMetric(restore.Seconds()/nf, "restore-s")
	if inserting {
		b.ReportMetric(float64(ownerInserts)/ownerTime.Seconds(), "owner-inserts/s")
		b.ReportMetric(float64(maxInsert.Microseconds())/1000, "owner-max-insert-ms")
	}
	b.ReportMetric(float64(uploadedBytes(b, reg)-uploaded0)/nf, "uploaded-B/op")
	b.ReportMetric(float64(st.Bytes), "filter-B")
	return next
}

// uploadedBytes sums bloomgate_checkpoint_bytes_total in reg.
func uploadedBytes(b *testing.B, reg *prometheus.Registry) int64 {
	b.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != "bloomgate_checkpoint_bytes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return int64(sum)
}

// BenchmarkPartialRestore measures what a corrupt live base costs a
// partition (docs/checkpoints.md, "Partial restore"): n records (1 M,
// BLOOMGATE_BENCH_KEYS to change) over 40 minutes of event time (G = 4,
// spans of 20 minutes: a sealed and a live generation) checkpointed on
// file://; then the live generation's base gets flipped bytes. Metrics:
// restore-whole-s (the intact checkpoint, for comparison),
// restore-partial-s (every manifest tried whole, then the newest in part),
// rebuild-s and rebuild-ns/record (the filter's side of the rebuild:
// filing, hashing and adding each record's key; reading the input comes
// on top, as for a replay), and the records read.
func BenchmarkPartialRestore(b *testing.B) {
	n := 1_000_000
	if s := os.Getenv("BLOOMGATE_BENCH_KEYS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 {
			b.Fatalf("BLOOMGATE_BENCH_KEYS=%q: want a positive integer", s)
		}
		n = v
	}
	params := worker.FilterParams{Window: time.Hour, Generations: 4, Capacity: uint64(2 * n), FPR: 0.01}
	dir := b.TempDir()
	ctx := context.Background()
	open := func() *Store {
		st, err := checkpoint.Open(ctx, "file://"+dir, checkpoint.Options{Registerer: prometheus.NewRegistry(), Compression: "none"})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		s := New(st, "bench")
		s.MaxTimeJump = time.Hour
		return s
	}
	keys := make([][]byte, n)
	ts := make([]time.Time, n)
	step := 40 * time.Minute / time.Duration(n)
	for i := range n {
		keys[i] = binary.LittleEndian.AppendUint64([]byte("order-"), uint64(i))
		ts[i] = base.Add(time.Duration(i) * step)
	}
	st := open()
	h := st.Partition(tIn, 0)
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
	f.(worker.InputTracker).ReadingFrom(0, false)
	seen := make([]bool, 1000)
	for lo := 0; lo < n; lo += 1000 {
		f.TestAndAddBatch(keys[lo:lo+1000], ts[lo:lo+1000], seen)
	}
	sn := f.Snapshot()
	if err := h.Commit(ctx, worker.Checkpoint{InputOffset: int64(n), Params: params, Snapshot: sn, Owner: "bench"}); err != nil {
		b.Fatal(err)
	}
	sn.Release()
	restore := func() (*worker.Restored, time.Duration) {
		began := time.Now()
		r, err := open().Partition(tIn, 0).Restore(ctx, params)
		if err != nil {
			b.Fatal(err)
		}
		return r, time.Since(began)
	}
	_, whole := restore()
	m, err := st.store.Partition("bench", tIn, 0).Restore(ctx, func(*checkpoint.Manifest, func(context.Context, checkpoint.GenerationRef) (io.ReadCloser, error)) error {
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	live := m.Generations[len(m.Generations)-1]
	path := filepath.Join(dir, "bench", tIn, "0", live.Key)
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	data[len(data)/2] ^= 1
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
	var partial, rebuild time.Duration
	for b.Loop() {
		r, took := restore()
		partial += took
		if len(r.Lost) != 1 {
			b.Fatalf("lost %+v", r.Lost)
		}
		began := time.Now()
		rb := r.Filter.(worker.Rebuilder)
		rb.StartRebuild(r.Lost[0].KeysFrom)
		for o := r.Lost[0].KeysFrom; o < r.InputOffset; o++ {
			if !rb.RebuildKey(o, keys[o], ts[o]) {
				break
			}
		}
		rb.FinishRebuild()
		rebuild += time.Since(began)
	}
	b.ReportMetric(whole.Seconds(), "restore-whole-s")
	b.ReportMetric(partial.Seconds()/float64(b.N), "restore-partial-s")
	b.ReportMetric(rebuild.Seconds()/float64(b.N), "rebuild-s")
	b.ReportMetric(float64(rebuild.Nanoseconds())/float64(b.N)/float64(n), "rebuild-ns/record")
	b.ReportMetric(float64(live.Inserts), "live-keys")
}
