package worker_test

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/kafkatest"
	"github.com/bloomgate/bloomgate/internal/memory"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// TestSettingsChangeRefused: checkpoints written with another key
// definition are refused before the group is joined, with one error for
// the process naming the partitions, both settings as flags and the way
// out, worded once (no "no usable checkpoint" stutter), and nothing of it
// logged by the worker at ERROR (Run returns it; its caller reports it).
// --on-restore-failure empty then starts a new memory from the retained
// input: counted, and reported at ERROR asking to remove the setting; a
// later start that still has it but needs it for nothing warns once and
// discards nothing. (A window or generation change is carried over:
// TestWindowChangeKeepsMemory.)
func TestSettingsChangeRefused(t *testing.T) {
	t.Parallel()
	keyA := checkpoint.KeyIdentity{Spec: "json:order_id", Normalize: "none", Hash: "murmur3-x64-128"}
	keyB := keyA
	keyB.Spec = "json:id"
	brokers := newCluster(t, 2)
	dir := t.TempDir()
	evs := genEvents(400, 2, 0.3, 71, base)
	produce(t, brokers, evs)
	perPartition := map[int]int64{}
	for _, e := range evs {
		perPartition[e.Partition]++
	}
	ex := realExtractor(t)
	withLogs := func(logs *kafkatest.LogBuffer) func(*worker.Worker) {
		return func(w *worker.Worker) { w.SetTestLogger(slog.New(slog.NewTextHandler(logs, nil))) }
	}

	st := realState(t, dir)
	st.Key = keyA
	a := startWorkerWith(t, realConfig(brokers), st, ex, nil)
	caughtUp(t, a, perPartition)
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}

	// Another --key, default policy: refused, nothing written.
	cfg := realConfig(brokers)
	st = realState(t, dir)
	st.Key = keyB
	var logs kafkatest.LogBuffer
	b := startWorkerWith(t, cfg, st, ex, withLogs(&logs))
	select {
	case err := <-b.done:
		b.done <- nil
		if !errors.Is(err, worker.ErrIncompatible) || !errors.Is(err, worker.ErrNoUsableCheckpoint) {
			t.Fatalf("Run = %v, want worker.ErrIncompatible", err)
		}
		want := (&memory.IncompatibleError{Group: "g", Topic: tIn, Partitions: []int{0, 1}, RecordedKey: keyA, CurrentKey: keyB,
			RecordedKind: memory.KindRing, CurrentKind: memory.KindRing}).Error()
		if err.Error() != want {
			t.Errorf("Run =\n%s\nwant\n%s", err, want)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("worker accepted a checkpoint of other settings")
	}
	if n := strings.Count(logs.String(), "level=ERROR"); n != 0 {
		t.Errorf("the worker logged %d ERROR lines besides returning the error:\n%s", n, logs.String())
	}
	wantOut, _, _ := expectation(evs, time.Hour)
	checkKeys(t, "output after the refusal", readTopic(t, brokers, tOut, 2), wantOut)

	// The user's explicit choice: a new memory from the retained input.
	cfg.OnRestoreFailure = worker.RestoreEmpty
	logs = kafkatest.LogBuffer{}
	c := startWorkerWith(t, cfg, st, ex, withLogs(&logs))
	caughtUp(t, c, perPartition)
	c.stop(t)
	if n := c.metricSum(t, "bloomgate_recovery_replayed_records_total"); n != float64(len(evs)) {
		t.Errorf("new memory replayed %v records, want the %d retained", n, len(evs))
	}
	if n := c.metricSum(t, "bloomgate_checkpoint_restores_discarded_total"); n != 2 {
		t.Errorf("bloomgate_checkpoint_restores_discarded_total = %v, want 2", n)
	}
	// One line per round of restores: partitions restored together share it.
	reported := 0
	for _, l := range strings.Split(logs.String(), "\n") {
		if !strings.Contains(l, "level=ERROR") {
			continue
		}
		var n int
		if _, err := fmt.Sscanf(l[strings.Index(l, "started_empty="):], "started_empty=%d", &n); err != nil ||
			!strings.Contains(l, "Remove --on-restore-failure empty now") {
			t.Errorf("unexpected ERROR line: %s", l)
		}
		reported += n
	}
	if reported != 2 {
		t.Errorf("ERROR lines report %d partitions started empty, want 2:\n%s", reported, logs.String())
	}

	// Left in place, needed for nothing: one WARN, nothing discarded.
	logs = kafkatest.LogBuffer{}
	d := startWorkerWith(t, cfg, st, ex, withLogs(&logs))
	caughtUp(t, d, perPartition)
	d.stop(t)
	if n := d.metricSum(t, "bloomgate_checkpoint_restores_discarded_total"); n != 0 {
		t.Errorf("restart with the memory rebuilt: %v partitions discarded, want 0", n)
	}
	out := logs.String()
	if n := strings.Count(out, "--on-restore-failure empty is set, and no checkpoint needs it now"); n != 1 || strings.Contains(out, "level=ERROR") {
		t.Errorf("restart with the memory rebuilt: %d WARN lines about the setting, want 1, and no ERROR:\n%s", n, out)
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
