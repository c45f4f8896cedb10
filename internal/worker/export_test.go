package worker

import (
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The harness of this package's tests, for its external tests (package
// worker_test): those run the worker with the production state store,
// internal/memory, which imports this package.

// RunningWorker is a worker started in the background by StartWorkerWith.
type RunningWorker = runningWorker

var (
	TestConfig          = testConfig
	TestLogger          = testLogger
	DefaultGroupTimings = defaultGroupTimings
)

// StartWorkerWith starts a worker with the test registry and logger; it
// stops with the test.
func StartWorkerWith(t *testing.T, cfg Config, store StateStore, ex Extractor, tweak func(*Worker)) *RunningWorker {
	t.Helper()
	return startWorkerWith(t, cfg, store, ex, tweak)
}

func (rw *runningWorker) Worker() *Worker           { return rw.w }
func (rw *runningWorker) Cancel()                   { rw.cancel() }
func (rw *runningWorker) Done() chan error          { return rw.done }
func (rw *runningWorker) Stop(t *testing.T) error   { return rw.stop(t) }
func (rw *runningWorker) Consumed() uint64          { return rw.consumed() }
func (rw *runningWorker) Conservation(t *testing.T) { rw.conservation(t) }
func (rw *runningWorker) MetricSum(t *testing.T, name string) float64 {
	return rw.metricSum(t, name)
}

// TestHooks are the worker's hooks (Deps.Hooks, or the ones it made).
func (w *Worker) TestHooks() *Hooks { return w.hooks }

// CaughtUp waits until every partition of want runs at its offset.
func (rw *runningWorker) CaughtUp(t *testing.T, want map[int]int64) { caughtUp(t, rw, want) }

// SetTestLogger replaces the worker's logger (call it from a tweak, before
// Run), for tests that check what was logged.
func (w *Worker) SetTestLogger(l *slog.Logger) {
	w.log = l.With("group", w.cfg.Group, "input", w.cfg.Input)
}

// Registry is the worker's metric registry.
func (rw *runningWorker) Registry() *prometheus.Registry { return rw.reg }
