package worker

import (
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestFilterStatsAfterBacklog: a partition that worked off its backlog
// shows the filter's keys within about a second of its clock, not after
// the stats interval (5 s). The worker's clock runs at a quarter of real
// time here, so that the interval (20 s real) cannot be what refreshed
// them.
func TestFilterStatsAfterBacklog(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1)
	evs := genEvents(500, 1, 0.2, 72, base)
	produce(t, brokers, evs)
	distinct := map[string]bool{}
	for _, e := range evs {
		distinct[string(e.Key)] = true
	}
	start := time.Now()
	rw := startWorker(t, testConfig(brokers), newMemStore(), func(w *Worker) {
		w.deps.Now = func() time.Time { return start.Add(time.Since(start) / 4) }
	})
	waitFor(t, 60*time.Second, "500 records consumed", func() bool { return rw.consumed() == 500 })
	waitFor(t, 10*time.Second, "the status showing every key", func() bool {
		ps := rw.w.Status().Partitions
		return len(ps) == 1 && ps[0].Filter.EstKeys == uint64(len(distinct))
	})
}

// TestPlannedFilterMemory: the start-up line names the filter memory as
// planned and allocated as keys arrive, and the status carries the plan of
// the assigned partitions for the page to set against what is allocated.
func TestPlannedFilterMemory(t *testing.T) {
	var buf lockedBuffer
	cfg := testConfig([]string{"127.0.0.1:1"})
	w, err := New(cfg, Deps{Logger: slog.New(slog.NewTextHandler(&buf, nil)), State: planningStore{newMemStore(), 1e9}, Extractor: keyExtractor{}})
	if err != nil {
		t.Fatal(err)
	}
	w.partitions = map[string]int{cfg.Input: 8}
	w.logStart()
	per := w.params.Capacity // planningStore plans a byte per key
	for _, want := range []string{"filter_memory_planned_per_partition=", "filter_memory_planned_all_partitions=", `filter_memory_allocated="as keys arrive"`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("start-up line lacks %q: %s", want, buf.String())
		}
	}
	w.mu.Lock()
	w.status.Assigned = []int{0, 3, 5}
	w.mu.Unlock()
	if got := w.Status().PlannedFilterBytes; got != 3*per {
		t.Errorf("PlannedFilterBytes %d, want %d (3 partitions of %d)", got, 3*per, per)
	}
}
