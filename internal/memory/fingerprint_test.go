package memory

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// encodeTables encodes every table of a fingerprint filter, legacy first.
func encodeTables(t *testing.T, f worker.Filter) [][]byte {
	t.Helper()
	sn := f.(*filter).fpShard().Snapshot()
	defer sn.Release()
	var out [][]byte
	for _, tb := range sn.Tables {
		var b bytes.Buffer
		if _, err := tb.WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		out = append(out, b.Bytes())
	}
	return out
}

func fingerprintState(t *testing.T, dir string) *Store {
	st := realState(t, dir)
	st.Kind = KindFingerprint
	st.UnkeyedHash = true // where overflows and whole uploads fall depends on the hashes
	return st
}

// TestFingerprintCheckpointsRestoreIdentical: a fingerprint partition
// checkpointed every 100 records — table logs within a generation, whole
// uploads after generation changes and an overflow, failed commits in
// between; for a tagged table and a sealed one — restores from its newest manifest byte-identical to the live
// filter; with the newest log segment corrupted it restores the previous
// manifest, and replaying the input from there rebuilds the live filter
// exactly.
func TestFingerprintCheckpointsRestoreIdentical(t *testing.T) {
	for _, tc := range []struct {
		name     string
		params   worker.FilterParams
		overflow bool
		layout   string
	}{
		// Spans of 30 min at 25,000 records per hour; the plan's table
		// holds 4 × 10,000 keys and receives more: it overflows, and a
		// tagged table of the next level takes the inserts.
		{"tagged, overflowing", worker.FilterParams{Window: 90 * time.Minute, Generations: 4, Capacity: 30_000, FPR: 0.01}, true, "tagged"},
		// Spans of ~13 min, eleven generation changes: each seals the
		// live table into the static set (a plan of 400,000 keys is laid
		// out sealed).
		{"sealed", worker.FilterParams{Window: 90 * time.Minute, Generations: 8, Capacity: 400_000, FPR: 0.01}, false, "sealed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			st := fingerprintState(t, dir)
			params := tc.params
			const n, every = 60_000, 100
			in := newLogFeed(n, time.Hour/25_000)
			h := st.Partition(tIn, 0)
			if _, err := h.Restore(ctx, params); err == nil {
				t.Fatal("restore of an empty store succeeded")
			}
			if err := h.Claim(ctx, "t"); err != nil {
				t.Fatal(err)
			}
			f, err := st.NewFilter(params)
			if err != nil {
				t.Fatal(err)
			}
			cancelled, cancel := context.WithCancel(ctx)
			cancel()
			var offsets []int64
			for i, c := 0, 0; i < n; i, c = i+every, c+1 {
				in.feed(f, i, i+every)
				cctx := ctx
				if c%7 == 3 {
					cctx = cancelled
				}
				err := h.Commit(cctx, worker.Checkpoint{InputOffset: int64(i + every), Params: params, Snapshot: f.Snapshot(), Owner: "t"})
				if (err != nil) != (cctx == cancelled) {
					t.Fatalf("commit %d: %v", c, err)
				}
				if err == nil {
					offsets = append(offsets, int64(i+every))
				}
			}
			if fs := f.Stats(); (fs.OverflowStacks > 0) != tc.overflow || fs.Layout != tc.layout {
				t.Fatalf("%d overflow tables, layout %q; want overflow %v, %q", fs.OverflowStacks, fs.Layout, tc.overflow, tc.layout)
			}
			p := inspectFirst(t, dir)
			live := p.Generations[len(p.Generations)-1]
			if p.Filter.Kind != checkpoint.FilterFingerprint || len(live.Log) == 0 || len(live.Ages) == 0 {
				t.Fatalf("newest manifest: kind %q, open table with %d log segments and ages %v", p.Filter.Kind, len(live.Log), live.Ages)
			}
			t.Logf("open table: base %d bytes + %d segments (%d bytes, %d entries), ages %v", live.Bytes, len(live.Log), live.LogBytes(), live.LogEntries(), live.Ages)

			want := encodeTables(t, f)
			r, err := fingerprintState(t, dir).Partition(tIn, 0).Restore(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			if r.InputOffset != n {
				t.Fatalf("restored offset %d, want %d", r.InputOffset, n)
			}
			sameEncoding(t, "restored from the newest manifest", encodeTables(t, r.Filter), want)

			last := filepath.Join(dir, "g", tIn, "0", live.Log[len(live.Log)-1].Key)
			data, err := os.ReadFile(last)
			if err != nil {
				t.Fatal(err)
			}
			data[len(data)/2] ^= 0x40
			if err := os.WriteFile(last, data, 0o644); err != nil {
				t.Fatal(err)
			}
			r, err = fingerprintState(t, dir).Partition(tIn, 0).Restore(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			if r.InputOffset != offsets[len(offsets)-2] {
				t.Fatalf("restored offset %d after corrupting the newest segment, want the previous checkpoint's %d", r.InputOffset, offsets[len(offsets)-2])
			}
			in.feed(r.Filter, int(r.InputOffset), n)
			sameEncoding(t, "previous manifest + replay", encodeTables(t, r.Filter), want)
		})
	}
}

// TestFingerprintKindChangeRefused: a memory of one kind restored under
// the other is refused, naming both settings, in both directions; with
// the same kind it restores.
func TestFingerprintKindChangeRefused(t *testing.T) {
	ctx := context.Background()
	params := worker.FilterParams{Window: time.Hour, Generations: 4, Capacity: 10_000, FPR: 0.01}
	for _, tc := range []struct{ wrote, reads string }{{KindFingerprint, KindRing}, {KindRing, KindFingerprint}} {
		dir := t.TempDir()
		st := realState(t, dir)
		st.Kind = tc.wrote
		h := st.Partition(tIn, 0)
		h.Restore(ctx, params)
		if err := h.Claim(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		f, err := st.NewFilter(params)
		if err != nil {
			t.Fatal(err)
		}
		newLogFeed(500, time.Second).feed(f, 0, 500)
		if err := h.Commit(ctx, worker.Checkpoint{InputOffset: 500, Params: params, Snapshot: f.Snapshot(), Owner: "t"}); err != nil {
			t.Fatal(err)
		}
		other := realState(t, dir)
		other.Kind = tc.reads
		_, err = other.Partition(tIn, 0).Restore(ctx, params)
		if !errors.Is(err, worker.ErrNoUsableCheckpoint) || !errors.Is(err, checkpoint.ErrIncompatible) ||
			!strings.Contains(err.Error(), "holds a "+tc.wrote+" filter") || !strings.Contains(err.Error(), "--filter "+tc.reads) {
			t.Errorf("%s restored as %s: %v", tc.wrote, tc.reads, err)
		}
		same := realState(t, dir)
		same.Kind = tc.wrote
		if r, err := same.Partition(tIn, 0).Restore(ctx, params); err != nil || r.InputOffset != 500 {
			t.Errorf("%s restored as %s: %v", tc.wrote, tc.wrote, err)
		}
	}
}

// TestFingerprintPlanChange: a fingerprint memory restored with a longer
// window keeps its table as a legacy table answering for its keys, and
// checkpoints after the change restore to the same filter.
func TestFingerprintPlanChange(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	old := worker.FilterParams{Window: 3 * time.Hour, Generations: 4, Capacity: 30_000, FPR: 0.01}
	in := newLogFeed(20_000, 500*time.Millisecond) // 2.8 h
	st := fingerprintState(t, dir)
	h := st.Partition(tIn, 0)
	h.Restore(ctx, old)
	if err := h.Claim(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	f, _ := st.NewFilter(old)
	in.feed(f, 0, 10_000)
	if err := h.Commit(ctx, worker.Checkpoint{InputOffset: 10_000, Params: old, Snapshot: f.Snapshot(), Owner: "t"}); err != nil {
		t.Fatal(err)
	}
	params := old
	params.Window = 9 * time.Hour
	st2 := fingerprintState(t, dir)
	h2 := st2.Partition(tIn, 0)
	r, err := h2.Restore(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if err := h2.Claim(ctx, "t2"); err != nil {
		t.Fatal(err)
	}
	seen := make([]bool, 1)
	for i := 0; i < 10_000; i += 37 {
		if i%5 == 4 {
			continue // a repeat
		}
		r.Filter.TestAndAddBatch(in.keys[i:i+1], in.ts[10_000:10_001], seen)
		if !seen[0] {
			t.Fatalf("key of record %d forgotten across the plan change", i)
		}
	}
	in.feed(r.Filter, 10_000, 20_000)
	if err := h2.Commit(ctx, worker.Checkpoint{InputOffset: 20_000, Params: params, Snapshot: r.Filter.Snapshot(), Owner: "t2"}); err != nil {
		t.Fatal(err)
	}
	if st := r.Filter.(*filter).fpShard().Stats(); st.Legacy != 1 {
		t.Fatalf("%d legacy tables, want 1", st.Legacy)
	}
	want := encodeTables(t, r.Filter)
	r2, err := fingerprintState(t, dir).Partition(tIn, 0).Restore(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	sameEncoding(t, "restored after the plan change", encodeTables(t, r2.Filter), want)
}

// TestFingerprintLogMerges: within one generation, every mergeEvery log
// segments of the open table are replaced by one (the log since the last
// merge point), so that the chain stays short; restores along the way are
// byte-identical, also from a chain restored by another process and
// continued there.
func TestFingerprintLogMerges(t *testing.T) {
	for _, tc := range []struct {
		name     string
		capacity uint64
		share    float64
		merges   int
	}{
		// A tagged table and a sealed one (from ~200 k keys): their
		// chains stay within an eighth and a sixteenth of the base (the
		// sealed one reaches it after ~50 segments: a whole upload, then
		// merges again).
		{"tagged", 180_000, tableLogShare, 5},
		{"sealed", 200_000, sealedTableLogShare, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			params := worker.FilterParams{Window: 7 * 24 * time.Hour, Generations: 8, Capacity: tc.capacity, FPR: 0.01}
			in := newLogFeed(140_000, time.Millisecond) // all in one generation
			st := fingerprintState(t, dir)
			h := st.Partition(tIn, 0)
			h.Restore(ctx, params)
			if err := h.Claim(ctx, "t"); err != nil {
				t.Fatal(err)
			}
			f, _ := st.NewFilter(params)
			chainOf := func() checkpoint.GenerationRef {
				gs := inspectFirst(t, dir).Generations
				if len(gs) == 0 {
					return checkpoint.GenerationRef{}
				}
				return gs[len(gs)-1]
			}
			longest, merges, overShare := 0, 0, 0
			commitRange := func(f worker.Filter, h worker.PartitionStore, from, to, every int) {
				for i := from; i < to; i += every {
					in.feed(f, i, i+every)
					before := chainOf()
					if err := h.Commit(ctx, worker.Checkpoint{InputOffset: int64(i + every), Params: params, Snapshot: f.Snapshot(), Owner: "t"}); err != nil {
						t.Fatal(err)
					}
					after := chainOf()
					longest = max(longest, len(after.Log))
					if float64(after.LogBytes()) > tc.share*float64(after.Bytes) {
						overShare++
					}
					if len(after.Log) > 0 && len(after.Log) < len(before.Log) {
						merges++
					}
				}
			}
			// A dense base (segments are measured against its stored size), then
			// 99 segments.
			commitRange(f, h, 0, 100_000, 100_000)
			if l := f.Stats().Layout; l != tc.name {
				t.Fatalf("layout %q, want %q", l, tc.name)
			}
			commitRange(f, h, 100_000, 104_950, 50)
			if merges < tc.merges || longest > 1+99/mergeEvery+mergeEvery || overShare > 0 {
				t.Fatalf("%d merges, longest chain %d segments, %d chains past the share", merges, longest, overShare)
			}
			want := encodeTables(t, f)
			st2 := fingerprintState(t, dir)
			h2 := st2.Partition(tIn, 0)
			r, err := h2.Restore(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			sameEncoding(t, "restored from a merged chain", encodeTables(t, r.Filter), want)
			if err := h2.Claim(ctx, "t2"); err != nil {
				t.Fatal(err)
			}
			commitRange(r.Filter, h2, 104_950, 109_900, 50)
			want = encodeTables(t, r.Filter)
			r3, err := fingerprintState(t, dir).Partition(tIn, 0).Restore(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			sameEncoding(t, "restored after merges in a second process", encodeTables(t, r3.Filter), want)
			t.Logf("%d merges, longest chain %d segments, last chain %d segments", merges, longest, len(chainOf().Log))
		})
	}
}

// TestFingerprintStatsAges: the status page's age histogram of the
// fingerprint kind has one count per generation of the window, oldest
// first, summing to the live entries, also across an overflow (two tables
// holding one generation); the ring has none.
func TestFingerprintStatsAges(t *testing.T) {
	params := worker.FilterParams{Window: 7 * time.Hour, Generations: 8, Capacity: 700, FPR: 0.01}
	st := realState(t, t.TempDir())
	st.Kind = KindFingerprint
	f, err := st.NewFilter(params)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	// 10 hours, one generation an hour: 60 keys in each of the first
	// nine, then 1,000 in the tenth (more than the plan's 100 per
	// generation: the table overflows).
	k := 0
	for h := range 10 {
		n := 60
		if h == 9 {
			n = 1000
		}
		for range n {
			f.TestAndAdd(fmt.Appendf(nil, "k%d", k), t0.Add(time.Duration(h)*time.Hour))
			k++
		}
	}
	fs := f.Stats()
	if fs.OverflowStacks == 0 {
		t.Fatalf("no overflow: %+v", fs)
	}
	var sum uint64
	for _, a := range fs.Ages {
		sum += a
	}
	// A key that tests as seen (a false positive, at 1 %) is not added, so
	// each generation holds its keys less a few: 60 keys ~0.3 of them at
	// the older generations' occupancy, the 1,000 of the overflowing one
	// more. Exact counts made this test fail in 14 and 18 of 1,000 runs
	// (without and with -race; 59 in the oldest).
	older := len(fs.Ages) == 8
	for _, a := range fs.Ages[:max(len(fs.Ages)-1, 0)] {
		older = older && a <= 60 && a >= 55
	}
	if !older || fs.Ages[7] > 1000 || fs.Ages[7] < 980 || sum != fs.EstKeys {
		t.Errorf("ages %v (sum %d), want 8 generations, 7 of ~60 then ~1000 (less false positives), summing to the live entries %d", fs.Ages, sum, fs.EstKeys)
	}
	ring, _ := realState(t, t.TempDir()).NewFilter(params)
	ring.TestAndAdd([]byte("a"), t0)
	if ages := ring.Stats().Ages; ages != nil {
		t.Errorf("ring ages %v", ages)
	}
}
