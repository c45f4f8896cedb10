package bloom

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"
)

// batchSizes cover the empty batch, one key and the chunk edges.
var batchSizes = []int{0, 1, batchChunk - 1, batchChunk, batchChunk + 1, 3*batchChunk + 5, 500}

func TestFilterBatchMatchesSequential(t *testing.T) {
	for _, p := range []float64{0.01, 0.001} { // k = 6 and k = 9 (probes past the seventh)
		one, _ := NewFilter(20_000, p)
		batch, _ := NewFilter(20_000, p)
		r := rand.New(rand.NewPCG(7, 8))
		var hs []Hash
		var seen []bool
		for round := 0; round < 200; round++ {
			n := batchSizes[round%len(batchSizes)]
			hs = hs[:0]
			for range n {
				hs = append(hs, HashKey([]byte{byte(r.IntN(100)), byte(r.IntN(256)), byte(r.IntN(4))})) // many repeats
			}
			seen = append(seen[:0], make([]bool, n)...)
			if round == 100 {
				// Half-way, a snapshot is outstanding on both: the
				// copy-on-write path must agree too.
				a, b := one.snapshot(), batch.snapshot()
				defer a.release()
				defer b.release()
			}
			batch.TestAndAddBatch(hs, seen)
			for i, h := range hs {
				if want := one.TestAndAdd(h); seen[i] != want {
					t.Fatalf("p=%v round %d key %d: batch says seen=%v, one by one %v", p, round, i, seen[i], want)
				}
			}
		}
		if one.ones != batch.ones || popcountPages(batch.pages, batch.nblocks) != batch.ones {
			t.Fatalf("p=%v: set bits %d one by one, %d batched (popcount %d)", p, one.ones, batch.ones, popcountPages(batch.pages, batch.nblocks))
		}
		for i := range one.pages {
			if *one.pages[i] != *batch.pages[i] {
				t.Fatalf("p=%v: page %d differs", p, i)
			}
		}
	}
}

// A shard fed in batches ends byte-identical to one fed key by key, through
// rotations, gaps, late events and overflow stacking.
func TestShardBatchMatchesSequential(t *testing.T) {
	cfg := Config{Window: 10 * time.Minute, Generations: 3, Capacity: 2_000, FPR: 0.01}
	one, _ := NewShard(cfg)
	batch, _ := NewShard(cfg)
	r := rand.New(rand.NewPCG(1, 2))
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	var hs []Hash
	var ts []time.Time
	var seen []bool
	events, dups := 0, 0
	for round := 0; round < 400; round++ {
		n := batchSizes[round%len(batchSizes)]
		hs, ts = hs[:0], ts[:0]
		for range n {
			switch r.IntN(1000) {
			case 0:
				now = now.Add(25 * time.Minute) // a gap longer than the window
			default:
				now = now.Add(time.Duration(r.IntN(100)) * time.Millisecond)
			}
			hs = append(hs, HashKey([]byte{byte(r.IntN(256)), byte(r.IntN(80))}))
			ts = append(ts, now.Add(-time.Duration(r.IntN(120))*time.Second)) // up to 2 min late
		}
		seen = append(seen[:0], make([]bool, n)...)
		batch.TestAndAddBatch(hs, ts, seen)
		for i := range hs {
			want := one.TestAndAdd(hs[i], ts[i])
			if seen[i] != want {
				t.Fatalf("round %d event %d: batch says seen=%v, one by one %v", round, i, seen[i], want)
			}
			if want {
				dups++
			}
			events++
		}
	}
	st := batch.Stats()
	t.Logf("%d events, %d duplicates, %d overflow stacks", events, dups, st.Stacks)
	if dups == 0 || dups == events || st.Stacks == 0 {
		t.Fatalf("test does not exercise what it claims: %d events, %d duplicates, %d overflow stacks", events, dups, st.Stacks)
	}
	a, b := encodeSnapshot(t, one), encodeSnapshot(t, batch)
	if len(a) != len(b) {
		t.Fatalf("%d generations one by one, %d batched", len(a), len(b))
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			t.Fatalf("generation %d differs", i)
		}
	}
}
