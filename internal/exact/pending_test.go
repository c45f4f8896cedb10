package exact

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestPendingMatchesSet drives pending with adds that repeat within the
// small map, across merges and across resets, and checks every lookup,
// the count and the drained order against a plain set.
func TestPendingMatchesSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	p := newPending(0)
	set := map[entry]bool{}
	var added []entry
	key := func() entry {
		if len(added) > 0 && rng.IntN(4) == 0 { // a repeat, recent or old
			return added[rng.IntN(len(added))]
		}
		return entry{gen: uint64(rng.IntN(3) + 1), hi: rng.Uint64() % 5000, lo: rng.Uint64()}
	}
	for round := range 3 {
		for i := range 3*pendingChunk + 117 {
			k := key()
			p.add(k)
			set[k] = true
			added = append(added, k)
			if i%97 == 0 {
				probe := key()
				if got := p.has(probe); got != set[probe] {
					t.Fatalf("round %d add %d: has(%v) = %v, want %v", round, i, probe, got, set[probe])
				}
				absent := entry{gen: 9, hi: rng.Uint64(), lo: rng.Uint64()}
				if p.has(absent) {
					t.Fatalf("round %d: has(%v) of a key never added", round, absent)
				}
			}
		}
		got := p.drain()
		if len(got) != len(set) {
			t.Fatalf("round %d: drained %d adds, want %d distinct", round, len(got), len(set))
		}
		if !slices.IsSortedFunc(got, cmpEntry) {
			t.Fatalf("round %d: drained adds not sorted", round)
		}
		for i := 1; i < len(got); i++ {
			if cmpEntry(got[i-1], got[i]) == 0 {
				t.Fatalf("round %d: %v drained twice", round, got[i])
			}
		}
		for _, k := range got {
			if !set[k] {
				t.Fatalf("round %d: drained %v, never added", round, k)
			}
		}
		p.reset()
		if p.len() != 0 || p.has(added[0]) {
			t.Fatalf("round %d: reset left adds behind", round)
		}
		clear(set)
		added = added[:0]
	}
}
