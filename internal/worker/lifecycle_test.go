package worker

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// runLabelled runs w.Run(ctx) in a goroutine labelled with the test's name
// (pprof labels pass to every goroutine it starts), so that
// workerGoroutines can tell this worker's goroutines from other tests'.
func runLabelled(t *testing.T, w *Worker, ctx context.Context) <-chan error {
	done := make(chan error, 1)
	go pprof.Do(ctx, pprof.Labels("lifecycle_test", t.Name()), func(ctx context.Context) {
		done <- w.Run(ctx)
	})
	return done
}

// ownCode matches a frame of the worker's or the group's code (not a
// test's) in a goroutine profile.
var ownCode = regexp.MustCompile(`/internal/(worker|group)/\w+\.go:\d+`)

// workerGoroutines returns the stacks of the goroutines started by
// runLabelled for t that still run code of the worker or the group: after
// Run returned, none may.
func workerGoroutines(t *testing.T) []string {
	t.Helper()
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		t.Fatal(err)
	}
	label := `"lifecycle_test":"` + t.Name() + `"`
	var out []string
	for _, rec := range strings.Split(b.String(), "\n\n") {
		if !strings.Contains(rec, label) {
			continue
		}
		for _, f := range ownCode.FindAllString(rec, -1) {
			if !strings.Contains(f, "_test.go:") {
				out = append(out, rec)
				break
			}
		}
	}
	return out
}

// noWorkerGoroutines fails t if a goroutine of its worker outlived Run.
func noWorkerGoroutines(t *testing.T) {
	t.Helper()
	if left := workerGoroutines(t); len(left) > 0 {
		t.Errorf("%d goroutine groups of the worker still run after Run returned:\n%s", len(left), strings.Join(left, "\n\n"))
	}
}

// TestRunJoinsItsGoroutines: after an ordinary shutdown nothing the worker
// started runs on (the committer, the watchers, the member, the agreement
// checks started on each join, the partitions).
func TestRunJoinsItsGoroutines(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 2)
	evs := genEvents(500, 2, 0.2, 38, base)
	produce(t, brokers, evs)
	w, err := New(testConfig(brokers), Deps{Logger: testLogger(t), Registerer: prometheus.NewRegistry(), State: newMemStore(), Extractor: keyExtractor{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runLabelled(t, w, ctx)
	waitFor(t, 60*time.Second, "everything consumed", func() bool {
		var n int64
		for _, p := range w.Status().Partitions {
			n += p.NextOffset
		}
		return n == int64(len(evs))
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return within 60s of its ctx ending")
	}
	noWorkerGoroutines(t)
}

// TestShutdownTimeoutJoinsPartitions: a partition that does not stop
// within the shutdown timeout (stuck after a write) makes Run say so, and
// Run still waits for it: it does not return, closing the committer under
// a member whose partitions run on, until the partition has stopped.
func TestShutdownTimeoutJoinsPartitions(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1)
	produce(t, brokers, genEvents(200, 1, 0, 39, base))
	cfg := testConfig(brokers)
	cfg.ShutdownTimeout = time.Second // the subject: the path taken past it
	overdue := make(chan struct{})
	logger := slog.New(&noticeHandler{Handler: testLogger(t).Handler(), msg: "shutdown did not finish in time", seen: overdue, once: new(sync.Once)})
	w, err := New(cfg, Deps{Logger: logger, Registerer: prometheus.NewRegistry(), State: newMemStore(), Extractor: keyExtractor{}})
	if err != nil {
		t.Fatal(err)
	}
	stuck, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var returned atomic.Bool
	w.hooks.AfterWrite = func(int, int64) {
		once.Do(func() {
			close(stuck)
			<-release
			returned.Store(true)
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runLabelled(t, w, ctx)
	defer close(release)
	select {
	case <-stuck:
	case <-time.After(60 * time.Second):
		t.Fatal("no output write within 60s")
	}
	cancel()
	select {
	case <-overdue:
	case err := <-done:
		t.Fatalf("Run returned (%v) before its shutdown timeout with a partition stuck", err)
	case <-time.After(60 * time.Second):
		t.Fatal("no overdue shutdown reported within 60s")
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) past its shutdown timeout while a partition still ran", err)
	case <-time.After(2 * time.Second): // Run waits however long: this only bounds the watch
	}
	release <- struct{}{}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return within 60s of the partition's release")
	}
	if !returned.Load() {
		t.Error("Run returned before the stuck partition's goroutine went on")
	}
	noWorkerGoroutines(t)
}

// noticeHandler closes seen at the first record whose message starts with
// msg.
type noticeHandler struct {
	slog.Handler
	msg  string
	seen chan struct{}
	once *sync.Once
}

func (h *noticeHandler) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.msg) {
		h.once.Do(func() { close(h.seen) })
	}
	return h.Handler.Handle(ctx, r)
}

func (h *noticeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &noticeHandler{Handler: h.Handler.WithAttrs(as), msg: h.msg, seen: h.seen, once: h.once}
}

func (h *noticeHandler) WithGroup(name string) slog.Handler {
	return &noticeHandler{Handler: h.Handler.WithGroup(name), msg: h.msg, seen: h.seen, once: h.once}
}
