package bloom

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestCompareScratch(t *testing.T) {
	const W = 15_600_000
	rng := rand.New(rand.NewPCG(3, 4))
	hs := make([]Hash, 256)
	seen := make([]bool, 256)
	tss := make([]time.Time, 256)
	fill := func(n int, f func([]Hash)) time.Duration {
		c := cpuNow()
		for done := 0; done < n; done += len(hs) {
			for i := range hs {
				hs[i] = Hash{rng.Uint64(), rng.Uint64()}
			}
			f(hs)
		}
		return cpuNow() - c
	}
	sh, _ := NewShard(Config{Window: 28 * 24 * time.Hour, Generations: 4, Capacity: W, FPR: 0.01})
	span := sh.Span()
	t0 := time.Unix(0, 0).Add(1000 * span)
	ringGen := func(g int) func([]Hash) {
		return func(hs []Hash) {
			for i := range tss {
				tss[i] = t0.Add(time.Duration(g) * span)
			}
			sh.TestAndAddBatch(hs, tss, seen)
		}
	}
	for g := 0; g < 4; g++ {
		fill(W/3, ringGen(g))
	}
	d := fill(W/3, ringGen(4))
	t.Logf("ring G=4: %.1f ns/key cpu, %.2f bits/window key", float64(d.Nanoseconds())/(W/3), float64(sh.Stats().Bytes)*8/W)
	per := W / 7
	peak := float64(per * 8)
	for _, amax := range []float64{0.90, 0.93, 0.95} {
		nb := uint64(peak/amax/4) + 1
		q := newCtable(nb, 10, 3)
		gen := 0
		var fails int
		gf := func(hs []Hash) {
			q.touch(hs)
			for _, h := range hs {
				i1, fp := q.index(h)
				i2 := q.alt(i1, fp)
				if q.tags(i1, i2, fp)&(1<<(gen&7)) == 0 {
					if !q.insert(i1, i2, fp<<3|uint64(gen&7)) {
						fails++
					}
				}
			}
		}
		rot := func() {
			gen++
			drop := uint64(gen & 7)
			q.retain(func(v uint64) bool { return v&7 != drop })
		}
		for g := 0; g < 8; g++ {
			fill(per, gf)
			rot()
		}
		var tot, rt time.Duration
		for g := 0; g < 2; g++ {
			tot += fill(per, gf)
			c := cpuNow()
			rot()
			rt += cpuNow() - c
		}
		var hits int
		for range 1_000_000 {
			h := Hash{rng.Uint64(), rng.Uint64()}
			i1, fp := q.index(h)
			if q.tags(i1, q.alt(i1, fp), fp) != 0 {
				hits++
			}
		}
		t.Logf("cuckoo amax %.2f: %.1f ns/key (+%.1f rotation) cpu, %.2f bits/window key, load after fill %.3f, stash %d, fails %d, fpr %.3f%%", amax,
			float64(tot.Nanoseconds())/float64(2*per), float64(rt.Nanoseconds())/float64(2*per), float64(q.bytes())*8/W,
			float64(q.entries)/float64(q.slots()), len(q.stash), fails, float64(hits)/1e4)
	}
}
