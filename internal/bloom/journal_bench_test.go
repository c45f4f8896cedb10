package bloom

import (
	"testing"
	"time"
)

// BenchmarkShardTestAndAdd measures the shard's insert path with every key
// new (each one sets bits, so a journal records each), one by one and in
// batches of 256, with the journal off and on. Every 100 k keys a snapshot
// is taken and released as a checkpoint would (with the journal on, marked
// as committed, so that its entries are dropped): both sides pay the same
// copy-on-write clones.
func BenchmarkShardTestAndAdd(b *testing.B) {
	for _, journal := range []bool{false, true} {
		for _, batch := range []bool{false, true} {
			name := "journal=off"
			if journal {
				name = "journal=on"
			}
			if batch {
				name += "/batch"
			} else {
				name += "/single"
			}
			b.Run(name, func(b *testing.B) { benchShard(b, journal, batch) })
		}
	}
}

func benchShard(b *testing.B, journal, batch bool) {
	s, err := NewShard(Config{Window: time.Hour, Generations: 2, Capacity: 1 << 24, FPR: 0.01})
	if err != nil {
		b.Fatal(err)
	}
	if journal {
		s.EnableJournal(0.25, 10_000_000)
	}
	ts := time.Unix(1_800_000_000, 0)
	hs := make([]Hash, 256)
	tss := make([]time.Time, 256)
	seen := make([]bool, 256)
	for i := range tss {
		tss[i] = ts
	}
	var x uint64
	next := func() Hash {
		x += 0x9e3779b97f4a7c15
		return Hash{H1: fmix64(x), H2: fmix64(x ^ 0x5555)}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; {
		n := min(b.N-i, 256)
		if batch {
			for j := range n {
				hs[j] = next()
			}
			s.TestAndAddBatch(hs[:n], tss[:n], seen)
		} else {
			for range n {
				s.TestAndAdd(next(), ts)
			}
		}
		i += n
		if i%(100_000/256*256) < n {
			sn := s.Snapshot()
			for _, g := range sn.Generations {
				g.Mark("")
			}
			sn.Release()
		}
	}
}
