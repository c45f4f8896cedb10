package memory

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/kafkatest"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// memState opens the shared in-memory checkpoint store mem://name; the
// store logs into logs when it is not nil.
func memState(t *testing.T, name string, logs *kafkatest.LogBuffer) *Store {
	t.Helper()
	log := testLogger(t)
	if logs != nil {
		log = slog.New(slog.NewTextHandler(logs, nil))
	}
	return openState(t, "mem://"+name, log)
}

// evolveName is a mem:// bucket name unique to the test.
func evolveName(t *testing.T) string {
	return strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()) + fmt.Sprint(time.Now().UnixNano())
}

// filterGenerations encodes every generation of f's current state.
func filterGenerations(t *testing.T, f worker.Filter) [][]byte {
	t.Helper()
	sn := f.(*filter).shard().Snapshot()
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
func remembers(f worker.Filter, key string) bool {
	bf := f.(*filter)
	return bf.shard().Test(bf.seed.Hash([]byte(key)))
}

// TestEvolve goes through the Store and a mem:// store the way a
// restart with --window 72h over 24 h checkpoints does: the old checkpoint
// restores (no refusal), keys seen inside the old window are still known,
// the change is logged once with readable durations; a second restore of
// the same checkpoint (a crash right after the change) replays exactly; the
// next checkpoint records the new plan next to the old generations and
// restores to the same state. Also the two notices about what a checkpoint
// does not record or records differently: the key settings (missing) and
// the isolation level (changed).
func TestEvolve(t *testing.T) {
	ctx := context.Background()
	name := evolveName(t)
	p24 := worker.FilterParams{Window: 24 * time.Hour, Generations: 4, Capacity: 20_000, FPR: 1e-6}
	p72 := worker.FilterParams{Window: 72 * time.Hour, Generations: 4, Capacity: 60_000, FPR: 1e-6}
	t0 := time.Date(2026, 3, 1, 5, 17, 0, 0, time.UTC)
	keyAt := func(i int) (string, time.Time) {
		return fmt.Sprintf("order-%d", i), t0.Add(time.Duration(i) * 10 * time.Minute)
	}

	// Before: 100 h of keys, one every 10 minutes, under 24 h.
	a := memState(t, name, nil)
	a.Isolation = worker.ReadUncommitted
	h := a.Partition("in", 0)
	if _, err := h.Restore(ctx, p24); !errors.Is(err, worker.ErrNoCheckpoint) {
		t.Fatalf("first restore = %v, want worker.ErrNoCheckpoint", err)
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
	if err := h.Commit(ctx, worker.Checkpoint{InputOffset: before, Params: p24, Snapshot: f.Snapshot(), Owner: "a"}); err != nil {
		t.Fatal(err)
	}
	_, frontier := keyAt(before - 1)

	// The restart with 72 h, twice: the second restore is the replay after
	// a crash before any checkpoint of the new settings.
	logs := &kafkatest.LogBuffer{}
	b := memState(t, name, logs)
	b.Key = checkpoint.KeyIdentity{Spec: "key", Normalize: "none", Hash: "murmur3-x64-128"}
	b.Isolation = worker.ReadUncommitted
	restore := func(st *Store, offset int64) (worker.PartitionStore, worker.Filter) {
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
	if err := hb.Commit(ctx, worker.Checkpoint{InputOffset: before + after, Params: p72, Snapshot: fb.Snapshot(), Owner: "b"}); err != nil {
		t.Fatal(err)
	}
	m := newestManifest(t, b)
	spans := map[time.Duration]int{}
	for _, g := range m.Generations {
		spans[g.End.Sub(g.Start)]++
	}
	if m.Filter.Window != 72*time.Hour || m.Key == nil || m.Isolation != string(worker.ReadUncommitted) || spans[8*time.Hour] == 0 || spans[24*time.Hour] == 0 {
		t.Fatalf("manifest after the change: window %v, key %v, isolation %q, generations by span %v; want 72h, a key, read_uncommitted, 8h and 24h spans",
			m.Filter.Window, m.Key, m.Isolation, spans)
	}

	// worker.Restored by a worker that reads at read_committed: the same state
	// (encode → restore → same answers), and one warning naming both levels.
	logs = &kafkatest.LogBuffer{}
	c := memState(t, name, logs)
	c.Key = b.Key
	c.Isolation = worker.ReadCommitted
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

// newestManifest reads the newest manifest of partition "in"/0 in st.
func newestManifest(t *testing.T, st *Store) *checkpoint.Manifest {
	t.Helper()
	m, err := st.store.Partition("g", "in", 0).Restore(t.Context(),
		func(*checkpoint.Manifest, func(context.Context, checkpoint.GenerationRef) (io.ReadCloser, error)) error {
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	return m
}
