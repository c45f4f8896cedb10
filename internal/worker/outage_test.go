package worker

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// TestBrokerRestart: the broker (with a data directory) stops and starts
// again on the same port; the worker reconnects and nothing is lost or
// forwarded twice.
func TestBrokerRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start := func(port int) (*kfake.Cluster, []string) {
		c, err := kfake.NewCluster(kfake.Ports(port), kfake.DataDir(dir), kfake.SyncWrites(),
			kfake.SeedTopics(2, tIn, tOut, tDup, tDLQ), kfake.GroupMinSessionTimeout(100*time.Millisecond))
		if err != nil {
			t.Fatalf("starting kfake: %v", err)
		}
		return c, c.ListenAddrs()
	}
	c1, brokers := start(0)
	_, portStr, _ := net.SplitHostPort(brokers[0])
	port, _ := strconv.Atoi(portStr)
	evs := genEvents(2000, 2, 0.3, 61, base)
	produce(t, brokers, evs[:1000])
	store := newMemStore()
	cfg := testConfig(brokers)
	cfg.WriteTimeout = 2 * time.Second
	rw := startWorker(t, cfg, store, nil)
	waitFor(t, 60*time.Second, "first part consumed", func() bool { return rw.consumed() == 1000 })
	c1.Close()
	time.Sleep(time.Second)
	c2, _ := start(port)
	t.Cleanup(c2.Close)
	produce(t, brokers, evs[1000:])
	waitFor(t, 90*time.Second, "everything processed after the restart", func() bool {
		s := rw.w.Status()
		var next int64
		for _, p := range s.Partitions {
			next += p.NextOffset
		}
		return s.Ready && next == int64(len(evs))
	})
	rw.stop(t)
	wantOut, wantDup, _ := expectation(evs, time.Hour)
	checkKeys(t, "output", readTopic(t, brokers, tOut, 2), wantOut)
	checkKeys(t, "duplicates", readTopic(t, brokers, tDup, 2), wantDup)
}

// TestRestoreFailurePolicy: checkpoints exist but none loads.
func TestRestoreFailurePolicy(t *testing.T) {
	t.Parallel()
	for _, policy := range []RestorePolicy{RestoreFail, RestoreEmpty} {
		t.Run(string(policy), func(t *testing.T) {
			t.Parallel()
			brokers := newCluster(t, 1)
			evs := genEvents(300, 1, 0.3, 62, base)
			produce(t, brokers, evs)
			store := newMemStore()
			store.unusable.Store(true)
			cfg := testConfig(brokers)
			cfg.OnRestoreFailure = policy
			rw := startWorker(t, cfg, store, nil)
			if policy == RestoreFail {
				select {
				case err := <-rw.done:
					rw.done <- nil
					if err == nil || !errors.Is(err, ErrNoUsableCheckpoint) || !strings.Contains(err.Error(), "on-restore-failure") {
						t.Fatalf("Run = %v, want an unusable-checkpoint error naming on-restore-failure", err)
					}
				case <-time.After(60 * time.Second):
					t.Fatal("worker kept running without a usable checkpoint")
				}
				return
			}
			waitFor(t, 60*time.Second, "events consumed from the retained input", func() bool { return rw.consumed() == uint64(len(evs)) })
			rw.stop(t)
			wantOut, _, _ := expectation(evs, time.Hour)
			checkKeys(t, "output", readTopic(t, brokers, tOut, 1), wantOut)
		})
	}
}

var _ = context.Background

// TestLargeBatchesSplit: batches larger than a produce request may carry are
// split by the writer; a single record above --max-batch-bytes is
// unwritable: dead-lettered (as a reference record: the dead-letter topic
// has the same bound) instead of stopping the worker or retrying forever.
func TestLargeBatchesSplit(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1)
	big := strings.Repeat("x", 20_000)
	evs := make([]event, 300) // ~6 MB in one batch
	for i := range evs {
		evs[i] = event{Key: []byte("k" + strconv.Itoa(i%200)), Value: big, TS: base.Add(time.Duration(i) * time.Millisecond)}
	}
	produce(t, brokers, evs)
	cfg := testConfig(brokers)
	cfg.BatchSize = 1000
	cfg.BatchTimeout = 200 * time.Millisecond
	rw := startWorker(t, cfg, newMemStore(), nil)
	waitFor(t, 60*time.Second, "events consumed", func() bool { return rw.consumed() == uint64(len(evs)) })
	if f := rw.metricSum(t, "bloomgate_output_write_failures_total"); f != 0 {
		t.Errorf("%v write failures", f)
	}
	rw.stop(t)

	// A fresh cluster: on the old one the output already holds every record,
	// so recovery would skip them all.
	brokers = newCluster(t, 1)
	produce(t, brokers, evs[:10])
	cfg.Brokers = brokers
	cfg.MaxBatchBytes = 10_000
	rw2 := startWorker(t, cfg, newMemStore(), nil)
	waitFor(t, 60*time.Second, "events consumed", func() bool { return rw2.consumed() == 10 })
	if d := rw2.metricSum(t, "bloomgate_records_dead_lettered_total"); d != 10 {
		t.Errorf("%v records dead-lettered, want all 10 (each over --max-batch-bytes)", d)
	}
	if f := rw2.metricSum(t, "bloomgate_output_write_failures_total"); f != 0 {
		t.Errorf("%v write failures: a record over the bound was sent", f)
	}
	select {
	case err := <-rw2.done:
		rw2.done <- err
		t.Fatalf("Run = %v: a record over --max-batch-bytes stopped the worker", err)
	default:
	}
}
