package worker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/kafkatest"
	"github.com/prometheus/client_golang/prometheus"
)

// The helpers shared with other packages' tests (internal/kafkatest).
type (
	event             = kafkatest.Event
	partitionBalancer = kafkatest.PartitionBalancer
)

var (
	readTopic   = kafkatest.ReadTopic
	expectation = kafkatest.Expectation
	checkKeys   = kafkatest.CheckKeys
	genEvents   = kafkatest.GenEvents
	waitFor     = kafkatest.WaitFor
	values      = kafkatest.Values
)

// newCluster starts an in-process broker on 127.0.0.1 with the test topics.
func newCluster(t *testing.T, partitions int32) []string {
	return kafkatest.NewCluster(t, partitions, tIn, tOut, tDup, tDLQ)
}

// produce writes evs to the input topic.
func produce(t *testing.T, brokers []string, evs []event) { kafkatest.Produce(t, brokers, tIn, evs) }

const (
	tIn  = "in"
	tOut = "out"
	tDup = "dups"
	tDLQ = "dlq"
)

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("BLOOMGATE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}

func testConfig(brokers []string) Config {
	return Config{
		Brokers:    brokers,
		Group:      "g",
		Input:      tIn,
		Output:     tOut,
		Duplicates: tDup,
		DeadLetter: tDLQ,
		Filter:     FilterParams{Window: time.Hour, Generations: 4, Capacity: 100_000, FPR: 0.01},

		CheckpointInterval: 200 * time.Millisecond,
		BatchSize:          200,
		BatchTimeout:       2 * time.Millisecond,
		CommitInterval:     100 * time.Millisecond,
		ShutdownTimeout:    5 * time.Second,
		WriteTimeout:       5 * time.Second,
		SessionTimeout:     2 * time.Second,
		RebalanceTimeout:   6 * time.Second,
		HeartbeatInterval:  200 * time.Millisecond,
		JoinGroupBackoff:   200 * time.Millisecond,
		Owner:              "test",
	}
}

// defaultGroupTimings sets the group timings a user runs with (session
// 10 s, heartbeat 1 s, the rebalance timeout's default). Tests about the
// group use them: a test that passes only with tuned timings reports a bug.
// testConfig keeps tuned ones for tests whose subject is elsewhere and that
// kill workers (each kill then costs a session timeout).
func defaultGroupTimings(cfg *Config) {
	cfg.SessionTimeout, cfg.HeartbeatInterval, cfg.RebalanceTimeout, cfg.JoinGroupBackoff = 10*time.Second, time.Second, 0, time.Second
}

// runningWorker is a worker started in the background.
type runningWorker struct {
	w      *Worker
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
}

func startWorker(t *testing.T, cfg Config, store StateStore, tweak func(*Worker)) *runningWorker {
	t.Helper()
	return startWorkerWith(t, cfg, store, keyExtractor{}, tweak)
}

func startWorkerWith(t *testing.T, cfg Config, store StateStore, ex Extractor, tweak func(*Worker)) *runningWorker {
	t.Helper()
	reg := prometheus.NewRegistry()
	w, err := New(cfg, Deps{Logger: testLogger(t).With("owner", cfg.Owner), Registerer: reg, State: store, Extractor: ex})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if tweak != nil {
		tweak(w)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rw := &runningWorker{w: w, reg: reg, cancel: cancel, done: make(chan error, 1)}
	go func() { rw.done <- w.Run(ctx) }()
	t.Cleanup(func() { rw.stop(t) })
	return rw
}

// stop cancels the worker and waits for Run; it returns Run's error.
func (rw *runningWorker) stop(t *testing.T) error {
	rw.cancel()
	select {
	case err, ok := <-rw.done:
		if ok {
			close(rw.done)
		}
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("worker did not stop within 30s")
		return nil
	}
}

// totals sums the partition counters of the worker's status.
func (rw *runningWorker) consumed() uint64 {
	var n uint64
	for _, p := range rw.w.Status().Partitions {
		n += p.Consumed
	}
	return n
}

// metricSum sums every series of a counter or gauge in the worker's registry.
func (rw *runningWorker) metricSum(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := rw.reg.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	var s float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if c := m.GetCounter(); c != nil {
				s += c.GetValue()
			}
			if g := m.GetGauge(); g != nil {
				s += g.GetValue()
			}
		}
	}
	return s
}

// conservation checks consumed = forwarded + duplicates + dead-lettered +
// dropped from the metrics and returns the counts.
func (rw *runningWorker) conservation(t *testing.T) (consumed, forwarded, dups, dead, dropped float64) {
	t.Helper()
	consumed = rw.metricSum(t, "bloomgate_records_consumed_total")
	forwarded = rw.metricSum(t, "bloomgate_records_forwarded_total")
	dups = rw.metricSum(t, "bloomgate_records_duplicates_total")
	dead = rw.metricSum(t, "bloomgate_records_dead_lettered_total")
	dropped = rw.metricSum(t, "bloomgate_records_dropped_total")
	if consumed != forwarded+dups+dead+dropped {
		t.Errorf("conservation: consumed %v != forwarded %v + duplicates %v + dead-lettered %v + dropped %v",
			consumed, forwarded, dups, dead, dropped)
	}
	return
}

// testProvenance is a provenance as the worker's for input partition p
// (under no key), for tests that build written records.
func testProvenance(p int) *provenance { return newProvenance(nil, "g", tIn, p) }

// housekept waits, up to a minute, until partition p's housekeeping (the
// checkpoint schedule, commit offers, the status; once a second of the
// worker's clock) has run n more times, seen as n changes of the rate in
// its status (each pass folds the last second's count into it, so it
// moves while records come and decays after). A test that asserts that
// something did not happen waits for this first, so that the partition
// had its chances whatever the machine's speed.
func (rw *runningWorker) housekept(t *testing.T, p, n int) {
	t.Helper()
	rate := func() float64 {
		for _, ps := range rw.w.Status().Partitions {
			if ps.Partition == p {
				return ps.Rate
			}
		}
		return -1
	}
	last, seen := rate(), 0
	waitFor(t, time.Minute, fmt.Sprintf("%d housekeeping passes of partition %d", n, p), func() bool {
		if r := rate(); r != last {
			last, seen = r, seen+1
		}
		return seen >= n
	})
}
