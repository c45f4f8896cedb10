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
