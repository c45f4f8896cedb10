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

// TestPartitionStatsCount: a batch's tally reaches the partition's counts
// as the status page shows them (dead letters and drops summed over their
// reasons), the rate counts consumed records only, and replayed records
// make the filter's statistics stale as consumed ones do.
func TestPartitionStatsCount(t *testing.T) {
	at := time.Unix(1000, 0)
	var s partitionStats
	s.startRate(at)
	s.setFilter(FilterStats{Generations: 2}, at)
	s.add(&tally{replayed: 4})
	if !s.filterStale || s.rateCount != 0 {
		t.Fatalf("after a replayed batch: stale %v, rate count %d; want stale, 0", s.filterStale, s.rateCount)
	}
	s.filterStale = false
	t1 := tally{consumed: 10, forwarded: 5, duplicates: 2, markers: 1, aborted: 3}
	t1.dead("no_key")
	t1.dead("no_key")
	t1.dead(ReasonRecordTooLarge)
	t1.drop("too_large")
	s.add(&t1)
	s.add(&tally{consumed: 6, forwarded: 6})
	var ps PartitionStatus
	s.show(&ps)
	got := [7]uint64{ps.Consumed, ps.Forwarded, ps.Duplicates, ps.DeadLettered, ps.Dropped, ps.SkippedMarkers, ps.SkippedAborted}
	if want := [7]uint64{16, 11, 2, 3, 1, 1, 3}; got != want {
		t.Errorf("shown consumed, forwarded, duplicates, dead-lettered, dropped, markers, aborted = %v, want %v", got, want)
	}
	if !s.filterStale {
		t.Error("consumed records did not make the filter's statistics stale")
	}
	if s.rateDue(at.Add(999 * time.Millisecond)) {
		t.Error("rate due before a second passed")
	}
	if !s.rateDue(at.Add(2 * time.Second)) {
		t.Fatal("rate not due after two seconds")
	}
	// Keys came and the input stopped since: the filter is due before the interval.
	if s.filterDue(at.Add(2 * time.Second)) {
		t.Error("filter due while records still come (rate count > 0) and its interval has not passed")
	}
	if r := s.takeRate(at.Add(2 * time.Second)); r != 8 {
		t.Errorf("rate %v, want 16 records / 2 s = 8", r)
	}
	if !s.filterDue(at.Add(2 * time.Second)) {
		t.Error("filter not due once input stopped after keys came")
	}
	s.refreshFilter(FilterStats{Generations: 2}, at)
	if s.filterDue(at.Add(4*time.Second)) || !s.filterDue(at.Add(filterStatsInterval)) {
		t.Error("a current filter is due before its interval, or not at it")
	}
}
