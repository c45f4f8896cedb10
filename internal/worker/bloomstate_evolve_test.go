package worker

import (
	"bytes"
	"context"
	"errors"
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

// filterGenerations encodes every generation of f's current state.
func filterGenerations(t *testing.T, f Filter) [][]byte {
	t.Helper()
	sn := f.(*bloomFilter).s.Snapshot()
	defer sn.Release()
	var out [][]byte
	for _, g := range sn.Generations {
		var buf bytes.Buffer
		if _, err := g.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		out = append(out, buf.Bytes())
	}
	return out
}

// remembers reports whether f holds key, without changing it.
func remembers(f Filter, key string) bool {
	bf := f.(*bloomFilter)
	return bf.s.Test(bf.seed.Hash([]byte(key)))
}

// TestBloomStateEvolve goes through BloomState and a mem:// store the way a
// restart with --window 72h over 24 h checkpoints does: the old checkpoint
// restores (no refusal), keys seen inside the old window are still known,
// the change is logged once with readable durations; a second restore of
// the same checkpoint (a crash right after the change) replays exactly; the
// next checkpoint records the new plan next to the old generations and
// restores to the same state. Also the two notices about what a checkpoint
// does not record or records differently: the key settings (missing) and
// the isolation level (changed).
func TestBloomStateEvolve(t *testing.T) {
	ctx := context.Background()
	name := evolveName(t)
	p24 := FilterParams{Window: 24 * time.Hour, Generations: 4, Capacity: 20_000, FPR: 1e-6}
	p72 := FilterParams{Window: 72 * time.Hour, Generations: 4, Capacity: 60_000, FPR: 1e-6}
	t0 := time.Date(2026, 3, 1, 5, 17, 0, 0, time.UTC)
	keyAt := func(i int) (string, time.Time) {
		return fmt.Sprintf("order-%d", i), t0.Add(time.Duration(i) * 10 * time.Minute)
	}

	// Before: 100 h of keys, one every 10 minutes, under 24 h.
	a := memState(t, name, nil)
	a.Isolation = ReadUncommitted
	h := a.Partition("in", 0)
	if _, err := h.Restore(ctx, p24); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("first restore = %v, want ErrNoCheckpoint", err)
	}
	if err := h.Claim(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	f, err := a.NewFilter(p24)
	if err != nil {
		t.Fatal(err)
	}
	const before = 600
	for i := range before {
		k, ts := keyAt(i)
		f.TestAndAdd([]byte(k), ts)
	}
	if err := h.Commit(ctx, Checkpoint{InputOffset: before, Params: p24, Snapshot: f.Snapshot(), Owner: "a"}); err != nil {
		t.Fatal(err)
	}
	_, frontier := keyAt(before - 1)

	// The restart with 72 h, twice: the second restore is the replay after
	// a crash before any checkpoint of the new settings.
	logs := &logBuffer{}
	b := memState(t, name, logs)
	b.Key = checkpoint.KeyIdentity{Spec: "key", Normalize: "none", Hash: "murmur3-x64-128"}
	b.Isolation = ReadUncommitted
	restore := func(st *BloomState, offset int64) (PartitionStore, Filter) {
		t.Helper()
		h := st.Partition("in", 0)
		r, err := h.Restore(ctx, p72)
		if err != nil {
			t.Fatalf("restore with window 72h: %v", err)
		}
		if r.InputOffset != offset {
			t.Fatalf("restored input offset %d, want %d", r.InputOffset, offset)
		}
		return h, r.Filter
	}
	hb, fb := restore(b, before)
	_, replay := restore(b, before)
	for i := range before {
		k, ts := keyAt(i)
		if frontier.Sub(ts) < p24.Window && !remembers(fb, k) {
			t.Fatalf("key seen %v before the change forgotten by the restore", frontier.Sub(ts))
		}
	}
	if st := fb.Stats(); st.Generations != 4 || st.Bytes == 0 {
		t.Fatalf("restored filter %+v, want the 4 generations of the checkpoint", st)
	}
	out := logs.String()
	for _, want := range []string{
		"filter settings changed since checkpoint 2 (window 24h → 72h, capacity 20000 → 60000): new generations follow the new settings",
		"the checkpoint's 4 generations of another time span (new ones span 24h) keep answering lookups until event time passes their end + 72h",
		"does not record what defines a key", "assuming it was written with this worker's key key, normalize none, hash murmur3-x64-128",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("restore log lacks %q:\n%s", want, out)
		}
	}
	for _, once := range []string{"filter settings changed", "does not record what defines a key"} {
		if n := strings.Count(out, once); n != 1 {
			t.Errorf("%q logged %d times for two restores of one partition, want once", once, n)
		}
	}
	if strings.Contains(out, "0m0s") || strings.Contains(out, "isolation") {
		t.Errorf("restore log has unreadable durations or an isolation notice:\n%s", out)
	}
	if err := hb.Claim(ctx, "b"); err != nil {
		t.Fatal(err)
	}

	// After: 50 h more. Keys from before are re-sighted at ages around both
	// windows; both restores answer alike.
	const after = 300
	seen := 0
	for i := before; i < before+after; i++ {
		k, ts := keyAt(i)
		if i%3 == 0 {
			k, _ = keyAt(i - 150 - i%300) // last seen 25-75 h earlier
		}
		got := fb.TestAndAdd([]byte(k), ts)
		if again := replay.TestAndAdd([]byte(k), ts); again != got {
			t.Fatalf("record %d: the second restore says %v, the first %v", i, again, got)
		}
		if got {
			seen++
		}
	}
	if seen == 0 {
		t.Fatal("no key from before the change was recognised after it")
	}
	x, y := filterGenerations(t, fb), filterGenerations(t, replay)
	if len(x) != len(y) {
		t.Fatalf("%d generations, %d after the replayed restore", len(x), len(y))
	}
	for i := range x {
		if !bytes.Equal(x[i], y[i]) {
			t.Fatalf("generation %d differs after the replayed restore", i)
		}
	}

	// A checkpoint under the new settings: the new plan, the old generations
	// still inside the new window, the key record and the isolation level.
	if err := hb.Commit(ctx, Checkpoint{InputOffset: before + after, Params: p72, Snapshot: fb.Snapshot(), Owner: "b"}); err != nil {
		t.Fatal(err)
	}
	m := newestManifest(t, b)
	spans := map[time.Duration]int{}
	for _, g := range m.Generations {
		spans[g.End.Sub(g.Start)]++
	}
	if m.Filter.Window != 72*time.Hour || m.Key == nil || m.Isolation != string(ReadUncommitted) || spans[8*time.Hour] == 0 || spans[24*time.Hour] == 0 {
		t.Fatalf("manifest after the change: window %v, key %v, isolation %q, generations by span %v; want 72h, a key, read_uncommitted, 8h and 24h spans",
			m.Filter.Window, m.Key, m.Isolation, spans)
	}

	// Restored by a worker that reads at read_committed: the same state
	// (encode → restore → same answers), and one warning naming both levels.
	logs = &logBuffer{}
	c := memState(t, name, logs)
	c.Key = b.Key
	c.Isolation = ReadCommitted
	_, fc := restore(c, before+after)
	restore(c, before+after) // a second assignment: no second warning
	x, y = filterGenerations(t, fb), filterGenerations(t, fc)
	if len(x) != len(y) {
		t.Fatalf("restored %d generations, want %d", len(y), len(x))
	}
	for i := range x {
		if !bytes.Equal(x[i], y[i]) {
			t.Fatalf("generation %d restored differently", i)
		}
	}
	for i := before + after; i < before+after+200; i++ {
		k, ts := keyAt(i - 300) // 50 h old: in legacy and ring generations
		ts = ts.Add(50 * time.Hour)
		if got, want := fc.TestAndAdd([]byte(k), ts), fb.TestAndAdd([]byte(k), ts); got != want {
			t.Fatalf("record %d: restored filter says %v, the original %v", i, got, want)
		}
	}
	out = logs.String()
	for _, want := range []string{"was built reading at read_uncommitted; this worker reads at read_committed",
		"are replayed at read_committed", fmt.Sprintf("up to input offset %d (keys of aborted transactions included)", before+after)} {
		if !strings.Contains(out, want) {
			t.Errorf("restore log lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "this worker reads at"); n != 1 {
		t.Errorf("isolation change logged %d times, want once", n)
	}
	if strings.Contains(out, "does not record what defines a key") || strings.Contains(out, "filter settings changed") {
		t.Errorf("notices for a checkpoint that records the key and the current plan:\n%s", out)
	}
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
