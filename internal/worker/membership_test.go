package worker

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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

// TestDuplicateInstanceIDNoFencingLoop: two workers given one
// --group-instance-id (the default group timings). The second one's join
// fences the first, which then stays idle: it does not rejoin (which would
// fence the second in turn) and does not return from Run (a supervisor
// would restart it into the group), says why on /readyz, and keeps /healthz
// at 200. The second keeps every partition, in one generation, for three
// session timeouts.
func TestDuplicateInstanceIDNoFencingLoop(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 4)
	cfg := testConfig(brokers)
	defaultGroupTimings(&cfg)
	cfg.InstanceID = "dedup-1"
	a := startWorker(t, cfg, newMemStore(), nil)
	waitFor(t, 60*time.Second, "the first worker ready", func() bool { return a.w.Status().Ready })
	cb := cfg
	cb.Owner = "b"
	b := startWorker(t, cb, newMemStore(), nil)
	waitFor(t, 60*time.Second, "the first worker fenced", func() bool { return a.w.Status().Fenced != "" })
	waitFor(t, 60*time.Second, "the second worker with every partition", func() bool {
		s := b.w.Status()
		return s.Ready && len(s.Assigned) == 4
	})
	gen := b.w.Status().Generation
	hold := 3 * cfg.SessionTimeout
	deadline := time.Now().Add(hold)
	for time.Now().Before(deadline) {
		if s := b.w.Status(); !s.Joined || s.Generation != gen || len(s.Assigned) != 4 {
			t.Fatalf("the second worker: joined=%v generation %d (was %d), partitions %v: the fenced one came back", s.Joined, s.Generation, gen, s.Assigned)
		}
		select {
		case err := <-a.done:
			t.Fatalf("the fenced worker's Run returned (%v): a supervisor would restart it into the group", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	s := a.w.Status()
	if s.Joined || len(s.Assigned) != 0 || !strings.Contains(s.Fenced, "--group-instance-id") {
		t.Errorf("the fenced worker: joined=%v partitions %v fenced %q", s.Joined, s.Assigned, s.Fenced)
	}
	h := a.w.Handler(prometheus.NewRegistry())
	for path, want := range map[string]int{"/healthz": http.StatusOK, "/readyz": http.StatusServiceUnavailable} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != want || (path == "/readyz" && !strings.Contains(rec.Body.String(), "fenced")) {
			t.Errorf("%s: %d %q, want %d", path, rec.Code, rec.Body.String(), want)
		}
	}
}
