package worker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/kafkatest"
	"github.com/bloomgate/bloomgate/internal/memory"
)

// TestCheckpointObjectDeletedWhileRunning: while a worker runs, its
// checkpoint's sealed generation (uploaded once, named by every later
// manifest) is deleted from the file:// store behind its back — in exact
// mode also the exact store's files. The worker's next checkpoint uploads
// it again from memory, says so at error level and counts it, so that the
// newest checkpoint restores whole while the worker still runs; a
// successor on that checkpoint (in exact mode on a new disk) restores
// without losing a generation and remembers every key.
func TestCheckpointObjectDeletedWhileRunning(t *testing.T) {
	t.Parallel()
	for _, exact := range []bool{false, true} {
		name := "ring"
		if exact {
			name = "exact"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testObjectDeletedWhileRunning(t, exact)
		})
	}
}

func testObjectDeletedWhileRunning(t *testing.T, exact bool) {
	brokers := newCluster(t, 1)
	dir := t.TempDir()
	ex := realExtractor(t)

	// 2,000 events over 30 minutes of event time: the first 20 minutes
	// fill a generation that is sealed, the rest the live one.
	a := genEvents(2000, 1, 0.2, 71, base)
	for i := range a {
		a[i].TS = base.Add(time.Duration(i) * 900 * time.Millisecond)
	}
	produce(t, brokers, a)
	logs := &kafkatest.LogBuffer{}
	reg := prometheus.NewRegistry()
	w := startWorkerWith(t, realConfig(brokers), deletionState(t, dir, exact, logs, reg), ex, nil)
	m := waitWhole(t, dir, int64(len(a)))
	if len(m.Generations) < 2 || !m.Generations[0].Sealed {
		t.Fatalf("want a sealed generation: %+v", m.Generations)
	}
	deleted := []string{"g/" + tIn + "/0/" + m.Generations[0].Key}
	if exact {
		if m.Exact == nil || len(m.Exact.Files) == 0 {
			t.Fatalf("exact mode, but the checkpoint names no exact store files: %+v", m.Exact)
		}
		for _, f := range m.Exact.Files {
			deleted = append(deleted, "g/"+tIn+"/0/"+f.Key)
		}
	}
	for _, k := range deleted {
		if err := os.Remove(filepath.Join(dir, filepath.FromSlash(k))); err != nil {
			t.Fatal(err)
		}
	}

	// New input: the next checkpoint finds the objects gone.
	b := genEvents(100, 1, 0, 72, base.Add(31*time.Minute))
	for i := range b {
		b[i].Key = []byte(fmt.Sprintf("b-%d", i))
	}
	produce(t, brokers, b)
	m2 := waitWhole(t, dir, int64(len(a)+len(b)))
	if m2.Generations[0].Key == m.Generations[0].Key {
		t.Errorf("the newest checkpoint still names the deleted object %s", m.Generations[0].Key)
	}
	out := logs.String()
	if !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "checkpoint object "+deleted[0]+" of partition "+tIn+"/0, named by manifest ") ||
		!strings.Contains(out, "is missing from the store") ||
		!strings.Contains(out, "sealed generation "+fmt.Sprint(m.Generations[0].ID)+" is uploaded whole again from memory") {
		t.Errorf("no error line names the deleted object, the partition and what was done:\n%s", out)
	}
	n := metricWith(t, reg, "bloomgate_checkpoint_objects_missing_total", map[string]string{"topic": tIn, "partition": "0"})
	switch {
	case !exact && n != 1:
		t.Errorf("bloomgate_checkpoint_objects_missing_total = %v, want 1", n)
	case exact && (n < 2 || n > float64(len(deleted))):
		// Exact store files merged away since are not named again.
		t.Errorf("bloomgate_checkpoint_objects_missing_total = %v, want 2 to %d", n, len(deleted))
	}
	if err := w.stop(t); err != nil {
		t.Fatal(err)
	}

	// A successor restores the newest checkpoint whole: repeats of keys
	// of the sealed generation and of the others are duplicates.
	c := genEvents(200, 1, 0, 73, base.Add(32*time.Minute))
	for i := range c {
		c[i].Key = []byte(fmt.Sprintf("c-%d", i))
		if i%2 == 1 {
			c[i].Key = a[(i*37)%len(a)].Key
		}
	}
	produce(t, brokers, c)
	all := append(append(append([]event{}, a...), b...), c...)
	s := startWorkerWith(t, realConfig(brokers), deletionState(t, dir, exact, nil, prometheus.NewRegistry()), ex, nil)
	caughtUp(t, s, map[int]int64{0: int64(len(all))})
	if n := s.metricSum(t, "bloomgate_checkpoint_generations_lost_total"); n != 0 {
		t.Errorf("the successor lost %v generations", n)
	}
	if err := s.stop(t); err != nil {
		t.Fatal(err)
	}
	wantOut, wantDup, _ := expectation(all, time.Hour)
	checkKeys(t, "output", readTopic(t, brokers, tOut, 1), wantOut)
	checkKeys(t, "duplicates", readTopic(t, brokers, tDup, 1), wantDup)
}

// deletionState is the production state store on file://dir, logging
// into logs (nil: the test log) with its checkpoint metrics in reg; in
// exact mode with its exact stores on a disk of its own.
func deletionState(t *testing.T, dir string, exact bool, logs *kafkatest.LogBuffer, reg *prometheus.Registry) *memory.Store {
	t.Helper()
	log := testLogger(t)
	if logs != nil {
		log = slog.New(slog.NewTextHandler(io.MultiWriter(logs, testWriter{t}), nil))
	}
	ck, err := checkpoint.Open(context.Background(), "file://"+dir, checkpoint.Options{Logger: log, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ck.Close() })
	st := memory.New(ck, "g")
	if exact {
		st.Exact = memory.ExactOptions{Dir: t.TempDir(), FlushKeys: 256, Registerer: prometheus.NewRegistry(), Logger: testLogger(t)}
		t.Cleanup(func() {
			if err := st.Close(); err != nil {
				t.Errorf("closing exact stores: %v", err)
			}
		})
	}
	return st
}

// waitWhole waits until the newest checkpoint of the input's partition 0
// in file://dir covers offset and restores whole (every object it names
// is there and verifies), and returns its manifest.
func waitWhole(t *testing.T, dir string, offset int64) *checkpoint.Manifest {
	t.Helper()
	ck, err := checkpoint.Open(context.Background(), "file://"+dir, checkpoint.Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var m *checkpoint.Manifest
	waitFor(t, 30*time.Second, fmt.Sprintf("a whole checkpoint at input offset %d", offset), func() bool {
		got, err := ck.Partition("g", tIn, 0).Restore(t.Context(), readObjects)
		if err != nil || got.InputOffset < offset {
			return false
		}
		m = got
		return true
	})
	return m
}

// readObjects is a Restore loader that reads (and so verifies) every
// object m names.
func readObjects(m *checkpoint.Manifest, open func(context.Context, checkpoint.GenerationRef) (io.ReadCloser, error)) error {
	var refs []checkpoint.GenerationRef
	for _, g := range m.Generations {
		refs = append(refs, g)
		for _, l := range g.Log {
			refs = append(refs, l.Ref())
		}
	}
	if m.Exact != nil {
		for _, f := range m.Exact.Files {
			refs = append(refs, f.Ref())
		}
	}
	for _, ref := range refs {
		r, err := open(context.Background(), ref)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, r)
		if cerr := r.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}
