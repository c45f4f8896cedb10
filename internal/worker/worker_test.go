package worker

import (
	"testing"
	"time"
)

var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestDedupEndToEnd: the output holds exactly the first occurrence of each
// key, in input order per partition; duplicates go to their topic; counts add up.
func TestDedupEndToEnd(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 4)
	evs := genEvents(3000, 4, 0.25, 1, base)
	produce(t, brokers, evs)
	store := newMemStore()
	start := time.Now()
	rw := startWorker(t, testConfig(brokers), store, nil)
	waitFor(t, 60*time.Second, "all events consumed", func() bool { return rw.consumed() == uint64(len(evs)) })
	t.Logf("joined and processed %d events in %v", len(evs), time.Since(start))
	if !rw.w.Status().Ready {
		t.Errorf("status not ready after processing: %+v", rw.w.Status())
	}
	if err := rw.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	wantOut, wantDup, _ := expectation(evs, time.Hour)
	checkKeys(t, "output", readTopic(t, brokers, tOut, 4), wantOut)
	checkKeys(t, "duplicates", readTopic(t, brokers, tDup, 4), wantDup)
	c, f, d, _, _ := rw.conservation(t)
	if c != float64(len(evs)) || f != float64(total(wantOut)) || d != float64(total(wantDup)) {
		t.Errorf("counts: consumed %v forwarded %v duplicates %v, want %d %d %d", c, f, d, len(evs), total(wantOut), total(wantDup))
	}
}

func total(m map[int][]string) int {
	n := 0
	for _, v := range m {
		n += len(v)
	}
	return n
}
