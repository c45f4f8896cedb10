package worker

import (
	"fmt"
	"strings"
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

// TestRestartKeepsState: keys seen before a restart are recognised after it,
// and the state came from the checkpoint (nothing replayed from Kafka).
func TestRestartKeepsState(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 2)
	evs := genEvents(1500, 2, 0.2, 2, base)
	first, second := evs[:800], evs[800:]
	// The second half repeats every key of the first half once more.
	seen := map[string]bool{}
	for _, e := range first {
		if !seen[string(e.Key)] {
			seen[string(e.Key)] = true
			second = append(second, event{Partition: e.Partition, Key: e.Key, Value: "again", TS: base.Add(2 * time.Second)})
		}
	}
	all := append(append([]event(nil), first...), second...)
	store := newMemStore()
	cfg := testConfig(brokers)

	produce(t, brokers, first)
	rw := startWorker(t, cfg, store, nil)
	waitFor(t, 60*time.Second, "first half consumed", func() bool { return rw.consumed() == uint64(len(first)) })
	if err := rw.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for p := 0; p < 2; p++ {
		if _, ok := store.latest(tIn, p); !ok {
			t.Fatalf("no checkpoint of partition %d after shutdown", p)
		}
	}

	produce(t, brokers, second)
	cfg.Owner = "second"
	rw2 := startWorker(t, cfg, store, nil)
	waitFor(t, 60*time.Second, "second half consumed", func() bool { return rw2.consumed() == uint64(len(second)) })
	if err := rw2.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := rw2.metricSum(t, "bloomgate_recovery_replayed_records_total"); n != 0 {
		t.Errorf("restart replayed %v records; the final checkpoint should cover everything", n)
	}
	wantOut, wantDup, _ := expectation(all, time.Hour)
	checkKeys(t, "output", readTopic(t, brokers, tOut, 2), wantOut)
	checkKeys(t, "duplicates", readTopic(t, brokers, tDup, 2), wantDup)
	rw2.conservation(t)
}

// TestWindowExpiry: a key is a duplicate inside the window and forwarded
// again beyond it (event time, not wall clock).
func TestWindowExpiry(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1)
	k := []byte("order-1")
	evs := []event{
		{Key: k, Value: "a", TS: base},
		{Key: k, Value: "b", TS: base.Add(30 * time.Minute)},  // inside: duplicate
		{Key: k, Value: "c", TS: base.Add(95 * time.Minute)},  // beyond the window of the last sighting (b)
		{Key: k, Value: "d", TS: base.Add(100 * time.Minute)}, // inside again
		{Key: []byte("other"), Value: "e", TS: base.Add(101 * time.Minute)},
	}
	produce(t, brokers, evs)
	rw := startWorker(t, testConfig(brokers), newMemStore(), nil)
	waitFor(t, 60*time.Second, "events consumed", func() bool { return rw.consumed() == uint64(len(evs)) })
	rw.stop(t)
	out := readTopic(t, brokers, tOut, 1)[0]
	var got []string
	for _, m := range out {
		got = append(got, string(m.Value))
	}
	if want := "a c e"; fmt.Sprint(strings.Join(got, " ")) != want {
		t.Errorf("forwarded %q, want %q", got, want)
	}
}

// TestTwoWorkersHandOver: a second worker joins, partitions split; the first
// leaves, its partitions move with their state; dedup holds throughout.
func TestTwoWorkersHandOver(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 4)
	evs := genEvents(4000, 4, 0.3, 3, base)
	store := newMemStore()
	cfg := testConfig(brokers)
	defaultGroupTimings(&cfg)
	cfg.Owner = "a"
	a := startWorker(t, cfg, store, nil)
	produce(t, brokers, evs[:1000])
	waitFor(t, 60*time.Second, "a consumed the first part", func() bool { return a.consumed() == 1000 })

	cfg.Owner = "b"
	b := startWorker(t, cfg, store, nil)
	waitFor(t, 60*time.Second, "both workers own partitions", func() bool {
		sa, sb := a.w.Status(), b.w.Status()
		return sa.Ready && sb.Ready && len(sa.Assigned) == 2 && len(sb.Assigned) == 2
	})
	produce(t, brokers, evs[1000:2500])
	waitFor(t, 60*time.Second, "the second part consumed", func() bool {
		return a.metricSum(t, "bloomgate_records_consumed_total")+b.metricSum(t, "bloomgate_records_consumed_total") == 2500
	})
	if err := a.stop(t); err != nil {
		t.Fatalf("a: %v", err)
	}
	waitFor(t, 60*time.Second, "b owns all partitions", func() bool {
		s := b.w.Status()
		return s.Ready && len(s.Assigned) == 4
	})
	produce(t, brokers, evs[2500:])
	waitFor(t, 60*time.Second, "everything consumed", func() bool {
		return a.metricSum(t, "bloomgate_records_consumed_total")+b.metricSum(t, "bloomgate_records_consumed_total") == 4000
	})
	b.stop(t)
	wantOut, wantDup, _ := expectation(evs, time.Hour)
	checkKeys(t, "output", readTopic(t, brokers, tOut, 4), wantOut)
	checkKeys(t, "duplicates", readTopic(t, brokers, tDup, 4), wantDup)
	a.conservation(t)
	b.conservation(t)
	if r := b.metricSum(t, "bloomgate_rebalances_total"); r < 2 {
		t.Errorf("b saw %v generations, want >= 2", r)
	}
}
