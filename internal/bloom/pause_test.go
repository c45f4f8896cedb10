package bloom

import (
	"slices"
	"testing"
	"time"
)

// BenchmarkGrowPause measures how long the owner is blocked when a shard
// grows: a rotation (Shard.Advance opens a generation whose first
// sub-filter is sized for the plan) and an overflow stack (the insert that
// reaches the newest sub-filter's capacity adds a sub-filter twice as
// large), at Capacity 100 M, p = 1 %, G = 2 (a 147 MB first sub-filter and
// a 480 MB stack). Each iteration rotates once and stacks once; from the
// second iteration on, the dropped generation's memory is there to be
// reused. After each event the next 200 k inserts are timed too, since a
// lazily allocated filter pays for its memory on first writes.
//
// Metrics (max and median over iterations): rotate-ms and stack-ms (the
// call that grows), after-max-ms (slowest single insert of the 200 k after
// it), after-ms (those 200 k inserts together) and, for reference,
// steady-ms (the next 200 k inserts after a rotation's, into memory by then
// mapped).
//
//	go test -run '^$' -bench GrowPause -benchtime 5x ./internal/bloom/
func BenchmarkGrowPause(b *testing.B) {
	if testing.Short() {
		b.Skip("allocates ~1.3 GB of filters; not in -short")
	}
	const after = 200_000
	cfg := Config{Window: time.Hour, Generations: 2, Capacity: 100_000_000, FPR: 0.01}
	s, err := NewShard(cfg)
	if err != nil {
		b.Fatal(err)
	}
	g := keyGen{seed: 900}
	next := uint64(0)
	// insertTimed inserts n new keys into span idx and returns the slowest
	// insert and the total.
	insertTimed := func(idx int64, n int) (slowest, total time.Duration) {
		ts := at(time.Hour, idx, 0)
		start := time.Now()
		prev := start
		for range n {
			s.TestAndAdd(g.hash(next), ts)
			next++
			now := time.Now()
			slowest = max(slowest, now.Sub(prev))
			prev = now
		}
		return slowest, prev.Sub(start)
	}
	var rot, rotMax, rotAfter, steady, stk, stkMax, stkAfter []float64
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	idx := int64(490_000)
	for b.Loop() {
		idx++
		t0 := time.Now()
		s.Advance(at(time.Hour, idx, 0))
		rot = append(rot, ms(time.Since(t0)))
		m, tot := insertTimed(idx, after)
		rotMax, rotAfter = append(rotMax, ms(m)), append(rotAfter, ms(tot))
		_, tot = insertTimed(idx, after)
		steady = append(steady, ms(tot))

		// Jump the newest generation to one insert short of its capacity:
		// the next new key stacks.
		gen := s.gens[len(s.gens)-1]
		gen.inserts += gen.subs[0].capacity - 1 - gen.subInserts[0]
		gen.subInserts[0] = gen.subs[0].capacity - 1
		t0 = time.Now()
		for len(gen.subs) == 1 {
			s.TestAndAdd(g.hash(next), at(time.Hour, idx, 0))
			next++
		}
		stk = append(stk, ms(time.Since(t0)))
		m, tot = insertTimed(idx, after)
		stkMax, stkAfter = append(stkMax, ms(m)), append(stkAfter, ms(tot))
	}
	report := func(name string, xs []float64) {
		xs = slices.Clone(xs)
		slices.Sort(xs)
		b.ReportMetric(xs[len(xs)-1], name+"-max")
		b.ReportMetric(xs[len(xs)/2], name+"-med")
	}
	report("rotate-ms", rot)
	report("rotate-after-max-ms", rotMax)
	report("rotate-after-ms", rotAfter)
	report("steady-ms", steady)
	report("stack-ms", stk)
	report("stack-after-max-ms", stkMax)
	report("stack-after-ms", stkAfter)
	b.Logf("rotate ms %.3f, after max %.3f, after %.1f, next %.1f; stack ms %.3f, after max %.3f, after %.1f", rot, rotMax, rotAfter, steady, stk, stkMax, stkAfter)
}
