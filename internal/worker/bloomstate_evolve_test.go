package worker

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomgate/bloomgate/internal/checkpoint"
)

// logBuffer collects log lines from any goroutine.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// memState opens the shared in-memory checkpoint store mem://name with the
// real filter; the store logs into logs when it is not nil.
func memState(t *testing.T, name string, logs *logBuffer) *BloomState {
	t.Helper()
	log := testLogger(t)
	if logs != nil {
		log = slog.New(slog.NewTextHandler(logs, nil))
	}
	st, err := checkpoint.Open(context.Background(), "mem://"+name, checkpoint.Options{
		Logger: log, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatalf("opening checkpoint store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return NewBloomState(st, "g")
}

// evolveName is a mem:// bucket name unique to the test.
func evolveName(t *testing.T) string {
	return strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()) + fmt.Sprint(time.Now().UnixNano())
}

// TestWindowChangeKeepsMemory restarts a worker with --window 3h over
// checkpoints written with 1h (4 generations: spans 20m → 1h): nothing is
// replayed, a key seen inside the old window is still a duplicate (also
// beyond where the old settings would have forgotten it), a key the old
// settings had already forgotten stays forgotten, and the next restart
// restores the checkpoint of the new settings with the old generations.
func TestWindowChangeKeepsMemory(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1)
	name := evolveName(t)
	ex := realExtractor(t)
	at := func(m int) time.Time { return base.Add(time.Duration(m) * time.Minute) }
	key := func(i int) []byte { return []byte(fmt.Sprintf("k%d", i)) }
	var evs []event
	for i := range 100 { // k0..k99 at minutes 0..99
		evs = append(evs, event{key: key(i), value: "a", ts: at(i)})
	}
	produce(t, brokers, evs)
	a := startWorkerWith(t, realConfig(brokers), memState(t, name, nil), ex, nil)
	waitFor(t, 60*time.Second, "first part consumed", func() bool { return a.consumed() == uint64(len(evs)) })
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}

	cfg := realConfig(brokers)
	cfg.Filter.Window = 3 * time.Hour
	second := []event{
		{key: key(60), value: "b", ts: at(105)},       // 45m after: inside both windows
		{key: key(45), value: "b", ts: at(140)},       // 95m after: kept at the change, inside 3h
		{key: key(10), value: "b", ts: at(150)},       // 140m after, 89m before the change: forgotten already
		{key: []byte("new"), value: "b", ts: at(151)}, // never seen
	}
	produce(t, brokers, second)
	logs := &logBuffer{}
	b := startWorkerWith(t, cfg, memState(t, name, logs), ex, nil)
	caughtUp(t, b, map[int]int64{0: int64(len(evs) + len(second))})
	if err := b.stop(t); err != nil {
		t.Fatalf("restart with a longer window: %v", err)
	}
	if n := b.metricSum(t, "bloomgate_recovery_replayed_records_total"); n != 0 {
		t.Errorf("replayed %v records; the checkpoint should have been used", n)
	}
	if out := logs.String(); !strings.Contains(out, "window 1h → 3h") {
		t.Errorf("restart log does not name the window change:\n%s", out)
	}

	third := []event{{key: key(50), value: "c", ts: at(160)}} // 110m after, in an old generation
	produce(t, brokers, third)
	c := startWorkerWith(t, cfg, memState(t, name, nil), ex, nil)
	caughtUp(t, c, map[int]int64{0: int64(len(evs) + len(second) + len(third))})
	c.stop(t)
	if n := c.metricSum(t, "bloomgate_recovery_replayed_records_total"); n != 0 {
		t.Errorf("second restart replayed %v records", n)
	}

	want := []string{}
	for _, e := range evs {
		want = append(want, string(e.key))
	}
	want = append(want, "k10", "new")
	checkKeys(t, "output", readTopic(t, brokers, tOut, 1), map[int][]string{0: want})
	checkKeys(t, "duplicates", readTopic(t, brokers, tDup, 1), map[int][]string{0: {"k60", "k45", "k50"}})
}
