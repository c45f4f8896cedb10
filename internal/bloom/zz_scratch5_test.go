package bloom

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestQCycleScratch(t *testing.T) {
	const W = 15_600_000
	rng := rand.New(rand.NewPCG(3, 4))
	hs := make([]Hash, 256)
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
	per := W / 7
	peak := float64(per * 8)
	for _, amax := range []float64{0.95} {
		nb := uint64(peak/amax/56) + 1
		q := newQtable(nb, 7, 3)
		gen := 0
		gf := func(hs []Hash) {
			for lo := 0; lo < len(hs); lo += 32 {
				q.touch(hs[lo : lo+32])
				for _, h := range hs[lo : lo+32] {
					x := q.quotient(h.H1)
					v := h.H2>>(64-7)<<3 | uint64(gen&7)
					if q.tags(x, v>>3)&(1<<(gen&7)) == 0 {
						q.insert(x, v)
					}
				}
			}
		}
		rot := func() {
			gen++
			drop := uint64(gen & 7)
			q.drop(1 << drop)
		}
		for g := 0; g < 8; g++ {
			fill(per, gf)
			rot()
		}
		var tot, rt time.Duration
		for g := 0; g < 3; g++ {
			tot += fill(per, gf)
			c := cpuNow()
			rot()
			rt += cpuNow() - c
		}
		t.Logf("qf amax %.2f: %.1f ns/key (+%.1f rotation) cpu", amax, float64(tot.Nanoseconds())/float64(3*per), float64(rt.Nanoseconds())/float64(3*per))
	}
}
