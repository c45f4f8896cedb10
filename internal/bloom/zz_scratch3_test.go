package bloom

import (
	"math/rand/v2"
	"syscall"
	"testing"
	"time"
)

func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestRetainScratch(t *testing.T) {
	nb := uint64(18_800_000 / 56)
	q := newQtable(nb, 7, 3)
	rng := rand.New(rand.NewPCG(1, 2))
	for q.entries < uint64(0.9*float64(q.slots())) {
		h := Hash{rng.Uint64(), rng.Uint64()}
		q.insert(q.quotient(h.H1), h.H2>>54)
	}
	for i := range 3 {
		st, c := time.Now(), cpuNow()
		q.drop(1 << i)
		t.Logf("retain wall %v cpu %v entries %d", time.Since(st), cpuNow()-c, q.entries)
	}
	st, c := time.Now(), cpuNow()
	for range 10 {
		for _, p := range q.ents {
			for i := range p {
				p[i]++
			}
		}
	}
	t.Logf("10 passes incrementing every word: wall %v cpu %v", time.Since(st), cpuNow()-c)
}
