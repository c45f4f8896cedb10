package bloom

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestQLookupScratch(t *testing.T) {
	nb := uint64(18_800_000 / 56)
	q := newQtable(nb, 7, 3)
	rng := rand.New(rand.NewPCG(1, 2))
	for q.entries < uint64(0.9*float64(q.slots())) {
		h := Hash{rng.Uint64(), rng.Uint64()}
		q.insert(q.quotient(h.H1), h.H2>>54)
	}
	hs := make([]Hash, 32)
	for _, touch := range []bool{false, true, false, true} {
		c := cpuNow()
		var hits int
		for range 2_000_000 / 32 {
			for i := range hs {
				hs[i] = Hash{rng.Uint64(), rng.Uint64()}
			}
			if touch {
				q.touch(hs)
			}
			for _, h := range hs {
				if q.tags(q.quotient(h.H1), h.H2>>57) != 0 {
					hits++
				}
			}
		}
		t.Logf("lookup touch=%v: %.1f ns", touch, float64((cpuNow()-c).Nanoseconds())/2e6)
	}
	// pure random reads of meta words for reference
	c := cpuNow()
	var x uint64
	for range 2_000_000 {
		b := rng.Uint64N(nb)
		x += q.occ(b)
	}
	t.Logf("random meta read: %.1f ns (%d)", float64((cpuNow()-c).Nanoseconds())/2e6, x&1)
	c = cpuNow()
	for range 2_000_000 / 32 {
		var bs [32]uint64
		for i := range bs {
			bs[i] = rng.Uint64N(nb)
			x += q.occ(bs[i])
		}
	}
	_ = time.Now
	t.Logf("random meta read, independent: %.1f ns (%d)", float64((cpuNow()-c).Nanoseconds())/2e6, x&1)
}
