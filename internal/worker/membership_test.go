package worker

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestStaticRollingRestart: three static members (--group-instance-id)
// with the default group timings; each is stopped and started again in
// turn, as a rolling restart does. The members not being restarted give up
// no partition and join no new generation; each restarted member gets the
// same partitions back and processes again within 2 s of its start; no
// event is lost or forwarded twice.
func TestStaticRollingRestart(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 6)
	evs := genEvents(6000, 6, 0.2, 99, base)
	store := newMemStore()
	cfg := testConfig(brokers)
	defaultGroupTimings(&cfg)
	start := func(i int) *runningWorker {
		c := cfg
		c.Owner, c.InstanceID = fmt.Sprintf("w%d", i), fmt.Sprintf("bloomgate-%d", i)
		return startWorker(t, c, store, nil)
	}
	ws := []*runningWorker{start(0), start(1), start(2)}
	produce(t, brokers, evs[:2000])
	waitFor(t, 60*time.Second, "three members with two partitions each", func() bool {
		for _, w := range ws {
			s := w.w.Status()
			if !s.Ready || len(s.Assigned) != 2 {
				return false
			}
		}
		return true
	})
	// Where the partitions stand, over every member (a restarted member's
	// counters start again).
	consumed := func() (n float64) {
		for _, w := range ws {
			for _, p := range w.w.Status().Partitions {
				n += float64(p.NextOffset)
			}
		}
		return n
	}
	waitFor(t, 60*time.Second, "the first part consumed", func() bool { return consumed() == 2000 })
	for i := range ws {
		had := ws[i].w.Status().Assigned
		others := map[int][]int{}
		gens := map[int]float64{}
		for j, w := range ws {
			if j != i {
				others[j] = w.w.Status().Assigned
				gens[j] = w.metricSum(t, "bloomgate_rebalances_total")
			}
		}
		if err := ws[i].stop(t); err != nil {
			t.Fatalf("w%d: %v", i, err)
		}
		began := time.Now()
		ws[i] = start(i)
		waitFor(t, 30*time.Second, fmt.Sprintf("w%d processing again", i), func() bool {
			s := ws[i].w.Status()
			return s.Ready && len(s.Assigned) == 2
		})
		d := time.Since(began)
		t.Logf("w%d processing again %v after its start", i, d.Round(time.Millisecond))
		// Goal 2 s; the bound leaves room for a loaded machine.
		if d > 5*time.Second {
			t.Errorf("w%d processed again %v after its start, want within 2s (bound 5s)", i, d.Round(time.Millisecond))
		}
		if got := ws[i].w.Status().Assigned; !slices.Equal(got, had) {
			t.Errorf("w%d had %v and got %v back", i, had, got)
		}
		for j, was := range others {
			if now := ws[j].w.Status().Assigned; !slices.Equal(now, was) {
				t.Errorf("w%d's partitions changed from %v to %v while w%d restarted", j, was, now, i)
			}
			if n := ws[j].metricSum(t, "bloomgate_rebalances_total"); n != gens[j] {
				t.Errorf("w%d joined %v new generations while w%d restarted, want none", j, n-gens[j], i)
			}
		}
		lo, hi := 2000+i*1000, 3000+i*1000
		produce(t, brokers, evs[lo:hi])
		waitFor(t, 60*time.Second, "the next part consumed", func() bool { return consumed() == float64(hi) })
	}
	for _, w := range ws {
		w.stop(t)
	}
	wantOut, wantDup, _ := expectation(evs[:5000], time.Hour)
	checkKeys(t, "output", readTopic(t, brokers, tOut, 6), wantOut)
	checkKeys(t, "duplicates", readTopic(t, brokers, tDup, 6), wantDup)
}
