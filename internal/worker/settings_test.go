package worker_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/memory"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// TestSettingsChangeRefused: a checkpoint written with another key
// definition is refused with an error naming both settings and the way
// out; on-restore-failure=empty starts a new memory from the retained
// input. (A window or generation change is carried over:
// TestWindowChangeKeepsMemory.)
func TestSettingsChangeRefused(t *testing.T) {
	t.Parallel()
	keyA := checkpoint.KeyIdentity{Spec: "json:order_id", Normalize: "none", Hash: "murmur3-x64-128"}
	keyB := keyA
	keyB.Spec = "json:id"
	cases := []struct {
		name   string
		change func(*worker.Config, *memory.Store)
		want   []string
	}{
		{"key", func(_ *worker.Config, s *memory.Store) { s.Key = keyB },
			[]string{"key json:order_id", "key json:id", "on-restore-failure=empty"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			brokers := newCluster(t, 1)
			dir := t.TempDir()
			evs := genEvents(400, 1, 0.3, 71, base)
			produce(t, brokers, evs)
			ex := realExtractor(t)

			st := realState(t, dir)
			st.Key = keyA
			a := startWorkerWith(t, realConfig(brokers), st, ex, nil)
			waitFor(t, 60*time.Second, "consumed", func() bool { return a.consumed() == uint64(len(evs)) })
			if err := a.stop(t); err != nil {
				t.Fatal(err)
			}

			// Changed settings, default policy: refused, nothing written.
			cfg := realConfig(brokers)
			st = realState(t, dir)
			st.Key = keyA
			tc.change(&cfg, st)
			b := startWorkerWith(t, cfg, st, ex, nil)
			select {
			case err := <-b.done:
				b.done <- nil
				if !errors.Is(err, worker.ErrNoUsableCheckpoint) {
					t.Fatalf("Run = %v, want worker.ErrNoUsableCheckpoint", err)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
			case <-time.After(60 * time.Second):
				t.Fatal("worker accepted a checkpoint of other settings")
			}
			wantOut, _, _ := expectation(evs, time.Hour)
			checkKeys(t, "output after the refusal", readTopic(t, brokers, tOut, 1), wantOut)

			// The user's explicit choice: a new memory from the retained input.
			cfg.OnRestoreFailure = worker.RestoreEmpty
			c := startWorkerWith(t, cfg, st, ex, nil)
			caughtUp(t, c, map[int]int64{0: int64(len(evs))})
			c.stop(t)
			if n := c.metricSum(t, "bloomgate_recovery_replayed_records_total"); n != float64(len(evs)) {
				t.Errorf("new memory replayed %v records, want the %d retained", n, len(evs))
			}
		})
	}
}

// TestKeyRecordedInManifest: the key definition is in every manifest, and a
// manifest without one (written before it was recorded) is accepted.
func TestKeyRecordedInManifest(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1)
	dir := t.TempDir()
	evs := genEvents(200, 1, 0.3, 72, base)
	produce(t, brokers, evs)
	ex := realExtractor(t)

	// No key set: manifests without a record, as older versions wrote.
	a := startWorkerWith(t, realConfig(brokers), realState(t, dir), ex, nil)
	waitFor(t, 60*time.Second, "consumed", func() bool { return a.consumed() == uint64(len(evs)) })
	a.stop(t)

	first := newestManifest(t, dir)
	if len(first.HashSeed) != 32 {
		t.Fatalf("manifest hash seed %d characters, want 32 hex digits", len(first.HashSeed))
	}
	st := realState(t, dir)
	st.Key = checkpoint.KeyIdentity{Spec: "key", Normalize: "none", Hash: "murmur3-x64-128"}
	b := startWorkerWith(t, realConfig(brokers), st, ex, nil)
	waitFor(t, 60*time.Second, "running", func() bool {
		s := b.w.Status()
		return s.Ready && len(s.Partitions) == 1 && s.Partitions[0].State == "running"
	})
	// The record comes with the next checkpoint that covers new input.
	produce(t, brokers, genEvents(50, 1, 0, 73, base.Add(time.Minute)))
	caughtUp(t, b, map[int]int64{0: int64(len(evs)) + 50})
	if err := b.stop(t); err != nil {
		t.Fatalf("a checkpoint without a key record was refused: %v", err)
	}
	if n := b.metricSum(t, "bloomgate_recovery_replayed_records_total"); n != 0 {
		t.Errorf("replayed %v records; the checkpoint should have been used", n)
	}
	last := newestManifest(t, dir)
	if last.Key == nil || *last.Key != st.Key {
		t.Errorf("newest manifest records key %v, want %v", last.Key, st.Key)
	}
	if last.HashSeed != first.HashSeed {
		t.Error("the memory's hash seed changed across a restart")
	}
}
