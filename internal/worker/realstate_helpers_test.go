package worker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/kafkatest"
	"github.com/bloomgate/bloomgate/internal/keys"
	"github.com/bloomgate/bloomgate/internal/memory"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// The worker with the production state store (internal/memory): the
// package's own harness (export_test.go) under the names its tests use.

const (
	tIn  = "in"
	tOut = "out"
	tDup = "dups"
	tDLQ = "dlq"
)

var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type event = kafkatest.Event

var (
	readTopic   = kafkatest.ReadTopic
	expectation = kafkatest.Expectation
	checkKeys   = kafkatest.CheckKeys
	genEvents   = kafkatest.GenEvents
	waitFor     = kafkatest.WaitFor
	testLogger  = worker.TestLogger
	values      = kafkatest.Values
)

func newCluster(t *testing.T, partitions int32) []string {
	return kafkatest.NewCluster(t, partitions, tIn, tOut, tDup, tDLQ)
}

func produce(t *testing.T, brokers []string, evs []event) { kafkatest.Produce(t, brokers, tIn, evs) }

// runningWorker gives the harness's worker the shape its tests use.
type runningWorker struct {
	*worker.RunningWorker
	w    *worker.Worker
	done chan error
}

func startWorkerWith(t *testing.T, cfg worker.Config, store worker.StateStore, ex worker.Extractor, tweak func(*worker.Worker)) *runningWorker {
	t.Helper()
	rw := worker.StartWorkerWith(t, cfg, store, ex, tweak)
	return &runningWorker{RunningWorker: rw, w: rw.Worker(), done: rw.Done()}
}

func (rw *runningWorker) cancel()                 { rw.Cancel() }
func (rw *runningWorker) stop(t *testing.T) error { return rw.Stop(t) }
func (rw *runningWorker) consumed() uint64        { return rw.Consumed() }
func (rw *runningWorker) metricSum(t *testing.T, name string) float64 {
	return rw.MetricSum(t, name)
}

// openState opens the checkpoint store at url with the real filter.
func openState(t *testing.T, url string, log *slog.Logger) *memory.Store {
	t.Helper()
	st, err := checkpoint.Open(context.Background(), url, checkpoint.Options{Logger: log, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatalf("opening checkpoint store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return memory.New(st, "g")
}

// realState opens a file:// checkpoint store in dir.
func realState(t *testing.T, dir string) *memory.Store {
	return openState(t, "file://"+dir, testLogger(t))
}

// memState opens mem://name, logging into logs.
func memState(t *testing.T, name string, logs *kafkatest.LogBuffer) *memory.Store {
	if logs == nil {
		return openState(t, "mem://"+name, testLogger(t))
	}
	return openState(t, "mem://"+name, slog.New(slog.NewTextHandler(logs, nil)))
}

// evolveName is a mem:// bucket name unique to the test.
func evolveName(t *testing.T) string {
	return strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()) + fmt.Sprint(time.Now().UnixNano())
}

func realExtractor(t *testing.T) worker.Extractor {
	t.Helper()
	ex, err := keys.NewExtractor("key", "none", 1024)
	if err != nil {
		t.Fatal(err)
	}
	return ex
}

// realConfig keeps the false-positive rate negligible so that exact
// expectations hold with the Bloom filter.
func realConfig(brokers []string) worker.Config {
	cfg := worker.TestConfig(brokers)
	cfg.Filter.FPR = 1e-7
	return cfg
}

func caughtUp(t *testing.T, rw *runningWorker, want map[int]int64) { rw.CaughtUp(t, want) }

// newestManifest reads the newest manifest of the input's partition 0 in
// the file:// store at dir.
func newestManifest(t *testing.T, dir string) *checkpoint.Manifest {
	t.Helper()
	st, err := checkpoint.Open(t.Context(), "file://"+dir, checkpoint.Options{Logger: testLogger(t), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m, err := st.Partition("g", tIn, 0).Restore(t.Context(),
		func(*checkpoint.Manifest, func(context.Context, checkpoint.GenerationRef) (io.ReadCloser, error)) error {
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	return m
}
