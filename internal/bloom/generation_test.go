package bloom

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"
)

// TestNewGenerationRefill: a generation opened empty with NewGeneration and
// refilled with TestAndAdd, in order, with the hashes the shard filed into
// the original while it was the newest (repeats and keys of older
// generations included, enough to stack an overflow sub-filter), encodes
// byte-identical to the original.
func TestNewGenerationRefill(t *testing.T) {
	cfg := Config{Window: 2 * time.Hour, Generations: 3, Capacity: 2_000, FPR: 0.01}
	s, err := NewShard(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	filed := map[uint64][]Hash{} // generation ID → hashes in the order they went in
	var kb [8]byte
	for i := range 9_000 {
		k := uint64(i)
		if i%4 == 3 {
			k = uint64(i / 3) // repeats, some from older generations
		}
		binary.LittleEndian.PutUint64(kb[:], k)
		h := HashKey(kb[:])
		ts := t0.Add(time.Duration(i) * 500 * time.Millisecond)
		if i%50 == 7 {
			ts = ts.Add(-20 * time.Minute) // late
		}
		s.TestAndAdd(h, ts)
		_, id, _ := s.Newest()
		filed[id] = append(filed[id], h)
	}
	sn := s.Snapshot()
	defer sn.Release()
	stacked := false
	for _, g := range sn.Generations {
		var want bytes.Buffer
		if _, err := g.WriteTo(&want); err != nil {
			t.Fatal(err)
		}
		stacked = stacked || g.Stats.Stacks > 0
		ng, err := NewGeneration(g.ID, g.Stats.Start, g.Stats.End, g.Stats.Capacity, g.Stats.FPR)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range filed[g.ID] {
			ng.TestAndAdd(h)
		}
		var got bytes.Buffer
		if _, err := ng.WriteTo(&got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Fatalf("generation %d refilled with its %d hashes encodes differently", g.ID, len(filed[g.ID]))
		}
	}
	if !stacked {
		t.Error("no generation stacked: the test does not cover overflow")
	}
	if _, err := NewGeneration(5, t0, t0.Add(time.Hour), 100, 0.01); err == nil {
		t.Error("a span that does not match its index was accepted")
	}
	if _, err := NewGeneration(0, t0, t0, 100, 0.01); err == nil {
		t.Error("an empty span was accepted")
	}
}
