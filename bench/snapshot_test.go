package bench

import (
	"bytes"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/bloom"
)

// A shard whose live generation is ~120 MB and nearly half full: W = 1 h,
// G = 2, 84 M planned keys per generation at p = 1 % (per-generation rate
// 0.45 %), 80 M inserted, so that the benchmarks' further inserts stay below
// capacity (no overflow sub-filter).
var big struct {
	once sync.Once
	s    *bloom.Shard
	ts   time.Time
	rng  *rand.Rand
	enc  []byte
	size uint64
}

func bigShard(b *testing.B) {
	big.once.Do(func() {
		cfg := bloom.Config{Window: time.Hour, Generations: 2, Capacity: 84_000_000, FPR: 0.01}
		s, err := bloom.NewShard(cfg)
		if err != nil {
			b.Fatal(err)
		}
		big.s, big.ts, big.rng = s, time.Unix(1_800_000_000, 0), rand.New(rand.NewPCG(1, 2))
		for range 80_000_000 {
			s.TestAndAdd(bloom.Hash{H1: big.rng.Uint64(), H2: big.rng.Uint64()}, big.ts)
		}
		st := s.Stats().Generations[0]
		big.size = st.Bytes
		defer func() {
			b.Logf("generation: %d MB, fill %.3f, %d stacks, encoded %d MB", st.Bytes>>20, st.Fill, st.Stacks, len(big.enc)>>20)
		}()
		sn := s.Snapshot()
		var buf bytes.Buffer
		if _, err := sn.Generations[0].WriteTo(&buf); err != nil {
			b.Fatal(err)
		}
		sn.Release()
		big.enc = buf.Bytes()
	})
}

// BenchmarkSnapshotPause measures how long Snapshot stops the owner, and the
// extra cost the owner pays afterwards for cloning pages while an encoder
// reads the snapshot concurrently (reported per snapshot as clone-ms).
func BenchmarkSnapshotPause(b *testing.B) {
	bigShard(b)
	b.ReportAllocs()
	var pause, worst, clone time.Duration
	for range b.N {
		start := time.Now()
		sn := big.s.Snapshot()
		d := time.Since(start)
		pause += d
		worst = max(worst, d)

		done := make(chan struct{})
		go func() {
			defer close(done)
			sn.Generations[0].WriteTo(io.Discard)
			sn.Release()
		}()
		const inserts = 200_000 // ×2 per snapshot; run with -benchtime 5x
		hs := make([]bloom.Hash, inserts)
		for i := range hs {
			hs[i] = bloom.Hash{H1: big.rng.Uint64(), H2: big.rng.Uint64()}
		}
		start = time.Now()
		for _, h := range hs {
			big.s.TestAndAdd(h, big.ts)
		}
		withCOW := time.Since(start)
		<-done
		for i := range hs {
			hs[i] = bloom.Hash{H1: big.rng.Uint64(), H2: big.rng.Uint64()}
		}
		start = time.Now()
		for _, h := range hs {
			big.s.TestAndAdd(h, big.ts)
		}
		clone += withCOW - time.Since(start)
	}
	b.ReportMetric(float64(pause.Microseconds())/float64(b.N), "pause-µs")
	b.ReportMetric(float64(worst.Microseconds()), "worst-pause-µs")
	b.ReportMetric(float64(clone.Milliseconds())/float64(b.N), "clone-ms")
}

func BenchmarkEncodeGeneration(b *testing.B) {
	bigShard(b)
	sn := big.s.Snapshot()
	defer sn.Release()
	b.SetBytes(int64(big.size))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := sn.Generations[0].WriteTo(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeGeneration(b *testing.B) {
	bigShard(b)
	b.SetBytes(int64(big.size))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := bloom.DecodeGeneration(bytes.NewReader(big.enc), 0); err != nil {
			b.Fatal(err)
		}
	}
}
