package memory

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/worker"
)

// TestReuseRules: a kept filter is reused only when the newest
// manifest is the one this process wrote last and the filter is unchanged.
func TestReuseRules(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := realState(t, dir)
	params := worker.FilterParams{Window: time.Hour, Generations: 4, Capacity: 1000, FPR: 0.01}
	commit := func(h worker.PartitionStore, f worker.Filter, off int64) {
		t.Helper()
		if err := h.Commit(ctx, worker.Checkpoint{InputOffset: off, Params: params, Snapshot: f.Snapshot(), Owner: "t"}); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	restore := func(s *Store) (worker.PartitionStore, *worker.Restored) {
		t.Helper()
		h := s.Partition("in", 0)
		r, err := h.Restore(ctx, params)
		if err != nil {
			t.Fatalf("restore: %v", err)
		}
		if err := h.Claim(ctx, "t"); err != nil {
			t.Fatalf("claim: %v", err)
		}
		return h, r
	}

	h := st.Partition("in", 0)
	if _, err := h.Restore(ctx, params); !errors.Is(err, worker.ErrNoCheckpoint) {
		t.Fatalf("first restore = %v, want worker.ErrNoCheckpoint", err)
	}
	if err := h.Claim(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	f, _ := st.NewFilter(params)
	f.TestAndAdd([]byte("a"), base)
	commit(h, f, 1)

	h, r := restore(st)
	if r.Filter != f || st.reuse.Load() != 1 {
		t.Fatalf("unchanged filter not reused (reuse=%d)", st.reuse.Load())
	}
	commit(h, f, 1)
	f.TestAndAdd([]byte("b"), base) // changed after its checkpoint
	h, r = restore(st)
	if r.Filter == f || st.reuse.Load() != 1 {
		t.Fatalf("changed filter reused")
	}
	if !r.Filter.TestAndAdd([]byte("a"), base) || r.Filter.TestAndAdd([]byte("b"), base) {
		t.Fatalf("restored filter does not hold the checkpointed state")
	}

	commit(h, r.Filter, 2)
	restore(realState(t, dir)) // another owner claims in between
	_, r2 := restore(st)
	if r2.Filter == r.Filter || st.reuse.Load() != 1 {
		t.Fatalf("filter reused although another owner claimed the partition since")
	}
}

// TestBatchMatchesOneByOne: the real filter fed in batches ends
// byte-identical to one fed record by record, far-future timestamps
// (clamped by max-time-jump) and rotations included.
func TestBatchMatchesOneByOne(t *testing.T) {
	t.Parallel()
	params := worker.FilterParams{Window: time.Hour, Generations: 3, Capacity: 5_000, FPR: 0.01}
	st := realState(t, t.TempDir())
	st.MaxTimeJump = 20 * time.Minute
	one, err := st.NewFilter(params)
	if err != nil {
		t.Fatal(err)
	}
	batched, _ := st.NewFilter(params)
	batched.(*filter).seed = one.(*filter).seed // one memory's hash, two ways
	r := rand.New(rand.NewPCG(5, 6))
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	var keys [][]byte
	var ts []time.Time
	dups := 0
	for round := range 300 {
		keys, ts = keys[:0], ts[:0]
		for range r.IntN(100) {
			now = now.Add(time.Duration(r.IntN(2000)) * time.Millisecond)
			at := now.Add(-time.Duration(r.IntN(60)) * time.Second)
			if r.IntN(500) == 0 {
				at = at.AddDate(5, 0, 0) // a bad clock: clamped
			}
			keys = append(keys, []byte(fmt.Sprintf("order-%d", r.IntN(8000))))
			ts = append(ts, at)
		}
		seen := make([]bool, len(keys))
		batched.TestAndAddBatch(keys, ts, seen)
		for i := range keys {
			if want := one.TestAndAdd(keys[i], ts[i]); seen[i] != want {
				t.Fatalf("round %d record %d: batched seen=%v, one by one %v", round, i, seen[i], want)
			} else if want {
				dups++
			}
		}
	}
	a, b := one.Stats(), batched.Stats()
	if !reflect.DeepEqual(a, b) || a.ClampedTimestamps == 0 || dups == 0 {
		t.Fatalf("stats one by one %+v, batched %+v (%d duplicates); want equal, with clamped timestamps and duplicates", a, b, dups)
	}
	encode := func(f worker.Filter) [][]byte {
		sn := f.(*filter).shard().Snapshot()
		defer sn.Release()
		var out [][]byte
		for _, g := range sn.Generations {
			var buf bytes.Buffer
			if _, err := g.WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
			out = append(out, buf.Bytes())
		}
		return out
	}
	x, y := encode(one), encode(batched)
	if len(x) != len(y) {
		t.Fatalf("%d generations one by one, %d batched", len(x), len(y))
	}
	for i := range x {
		if !bytes.Equal(x[i], y[i]) {
			t.Fatalf("generation %d differs", i)
		}
	}
}

// TestSeedPerMemory: every new memory gets its own hash seed.
func TestSeedPerMemory(t *testing.T) {
	t.Parallel()
	st := realState(t, t.TempDir())
	p := worker.FilterParams{Window: time.Hour, Generations: 4, Capacity: 1000, FPR: 0.01}
	a, _ := st.NewFilter(p)
	b, _ := st.NewFilter(p)
	sa, sb := a.(*filter).Seed(), b.(*filter).Seed()
	if sa.IsZero() || sa == sb {
		t.Errorf("seeds of two new memories: zero %v, equal %v; want distinct non-zero ones", sa.IsZero(), sa == sb)
	}
	st.UnkeyedHash = true
	c, _ := st.NewFilter(p)
	if !c.(*filter).Seed().IsZero() {
		t.Error("UnkeyedHash: a new memory got a seed")
	}
}

// TestCheckParams: a plan beyond one partition's filter limit is refused
// with what it would need; PlannedBytes is what a full shard holds.
func TestCheckParams(t *testing.T) {
	var s Store
	ok := worker.FilterParams{Window: time.Hour, Generations: 4, Capacity: 1_000_000, FPR: 0.01}
	if err := s.CheckParams(ok); err != nil {
		t.Fatalf("CheckParams(%+v) = %v", ok, err)
	}
	if b := s.PlannedBytes(ok); b < 2<<20 || b > 4<<20 {
		t.Errorf("PlannedBytes(1M keys at 1%%, G=4) = %d, want ~2.3 MiB (17.9 bits per key of the window)", b)
	}
	big := ok
	big.Capacity = 50_000_000_000
	err := s.CheckParams(big)
	if err == nil || !strings.Contains(err.Error(), "a filter of 104.2 GiB; one partition's filter is limited to 64 GiB") {
		t.Fatalf("CheckParams(50 G keys) = %v, want the size needed and the limit", err)
	}
}

// TestSeedingUntilRoundTrip: where an unfinished seeding of the input ends
// is stored with the checkpoint and restored with it, so that a restart
// reports its replay as seeding; a checkpoint without it restores none.
func TestSeedingUntilRoundTrip(t *testing.T) {
	t.Parallel()
	st := openState(t, "file://"+t.TempDir(), testLogger(t))
	h, f, _ := take(t, st, partialParams)
	for _, r := range stream(11, 500, base) {
		f.TestAndAdd([]byte(r.key), r.ts)
	}
	sn := f.Snapshot()
	err := h.Commit(context.Background(), worker.Checkpoint{InputOffset: 500, Params: partialParams, Snapshot: sn, Owner: "t", SeedingUntil: 4000})
	sn.Release()
	if err != nil {
		t.Fatal(err)
	}
	if m := newestManifest(t, st); m.SeedingUntil != 4000 {
		t.Fatalf("manifest seeding_until %d, want 4000", m.SeedingUntil)
	}
	_, _, r := take(t, st, partialParams)
	if r.SeedingUntil != 4000 || r.InputOffset != 500 {
		t.Fatalf("restored SeedingUntil %d at offset %d, want 4000 at 500", r.SeedingUntil, r.InputOffset)
	}
	h2, f2, _ := take(t, st, partialParams)
	commitT(t, h2, f2, partialParams, 4000) // the seeding is done
	if _, _, r := take(t, st, partialParams); r.SeedingUntil != 0 {
		t.Fatalf("restored SeedingUntil %d after the seeding, want 0", r.SeedingUntil)
	}
}
