package memory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/bloomgate/bloomgate/internal/bloom"
	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/kafkatest"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// tinyParams is a small filter at a high false-positive rate: false
// positives are frequent, so exact mode has work to do.
var tinyParams = worker.FilterParams{Window: time.Hour, Generations: 4, Capacity: 3_000, FPR: 0.3}

// exactState opens a memory on the checkpoint location url with exact mode
// in dir (flushing every flushKeys adds, so that runs, merges and sealing
// happen in small tests).
func exactMemory(t *testing.T, url, dir string, flushKeys int, log *kafkatest.LogBuffer) (*Store, *prometheus.Registry) {
	t.Helper()
	return exactMemoryOf(t, KindRing, url, dir, flushKeys, log)
}

// exactKinds are the filter kinds exact mode works with: the tests that
// say so run for each.
var exactKinds = []string{KindRing, KindFingerprint}

// exactMemoryOf is exactMemory with a filter of the given kind.
func exactMemoryOf(t *testing.T, kind, url, dir string, flushKeys int, log *kafkatest.LogBuffer) (*Store, *prometheus.Registry) {
	t.Helper()
	logger := testLogger(t)
	if log != nil {
		logger = slog.New(slog.NewTextHandler(log, nil))
	}
	st := openState(t, url, logger)
	st.Kind = kind
	reg := prometheus.NewRegistry()
	st.Exact = ExactOptions{Dir: dir, FlushKeys: flushKeys, Registerer: reg}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("closing memory: %v", err)
		}
	})
	return st, reg
}

// take restores partition 0 (or creates its memory) and claims it, as the
// worker does.
func take(t *testing.T, st *Store, params worker.FilterParams) (worker.PartitionStore, *filter, *worker.Restored) {
	t.Helper()
	ctx := context.Background()
	h := st.Partition(tIn, 0)
	r, err := h.Restore(ctx, params)
	switch {
	case errors.Is(err, worker.ErrNoCheckpoint):
		f, err := h.(worker.PartitionFilterMaker).NewFilter(params)
		if err != nil {
			t.Fatalf("new filter: %v", err)
		}
		r = &worker.Restored{Filter: f, InputOffset: -1}
	case err != nil:
		t.Fatalf("restore: %v", err)
	}
	if err := h.Claim(ctx, "t"); err != nil {
		t.Fatalf("claim: %v", err)
	}
	return h, r.Filter.(*filter), r
}

func commitT(t *testing.T, h worker.PartitionStore, f worker.Filter, params worker.FilterParams, off int64) {
	t.Helper()
	sn := f.Snapshot()
	defer sn.Release()
	if err := h.Commit(context.Background(), worker.Checkpoint{InputOffset: off, Params: params, Snapshot: sn, Owner: "t"}); err != nil {
		t.Fatalf("commit at %d: %v", off, err)
	}
}

// record is one input record of a stream.
type record struct {
	key string
	ts  time.Time
}

// stream is n records from t0 on, about 2 records a second of event time,
// 5 % of them up to 10 minutes late; 20 % repeat a key (half among the
// latest 300, half from the whole history, so repeats span every age
// around the window), the rest are new.
func stream(seed uint64, n int, t0 time.Time) []record {
	r := rand.New(rand.NewPCG(seed, 17))
	out := make([]record, 0, n)
	now, next := t0, 0
	for range n {
		now = now.Add(time.Duration(r.IntN(1000)) * time.Millisecond)
		ts := now
		if r.IntN(20) == 0 {
			ts = now.Add(-time.Duration(r.IntN(600)) * time.Second)
		}
		k := next
		switch x := r.IntN(10); {
		case x >= 2 || next == 0:
			next++
		case x == 0:
			k = next - 1 - r.IntN(min(next, 300))
		default:
			k = r.IntN(next)
		}
		out = append(out, record{fmt.Sprintf("order-%d", k), ts})
	}
	return out
}

// truth follows a filter record by record and knows, from the shard's own
// generations (Spans), which keys each generation really holds: the exact
// answer to every TestAndAdd is whether a generation the filter holds after
// the call held the key before it.
type truth struct {
	in map[bloom.Span]map[string]bool
}

func newTruth() *truth { return &truth{in: map[bloom.Span]map[string]bool{}} }

// answer is the true answer to the TestAndAdd of key that f just made, and
// records key in f's newest generation.
func (tr *truth) answer(f *filter, key string) bool {
	spans := f.k.Spans(nil)
	held := map[bloom.Span]bool{}
	seen := false
	for _, sp := range spans {
		held[sp] = true
		seen = seen || tr.in[sp][key]
	}
	for sp := range tr.in {
		if !held[sp] {
			delete(tr.in, sp)
		}
	}
	newest := spans[len(spans)-1]
	if tr.in[newest] == nil {
		tr.in[newest] = map[string]bool{}
	}
	tr.in[newest][key] = true
	return seen
}

func (tr *truth) clone() *truth {
	c := newTruth()
	for sp, ks := range tr.in {
		c.in[sp] = map[string]bool{}
		for k := range ks {
			c.in[sp][k] = true
		}
	}
	return c
}

// feed runs recs through f one by one, checking every answer against tr;
// it returns how many answers were "seen".
func feed(t *testing.T, f *filter, tr *truth, recs []record) (seen int) {
	t.Helper()
	for i, r := range recs {
		got := f.TestAndAdd([]byte(r.key), r.ts)
		if want := tr.answer(f, r.key); got != want {
			t.Fatalf("record %d (%s at %v): seen=%v, the generations held say %v", i, r.key, r.ts.Format(time.TimeOnly), got, want)
		}
		if got {
			seen++
		}
	}
	if err := f.Err(); err != nil {
		t.Fatal(err)
	}
	return seen
}

// feedBatches runs recs through f in batches of random sizes and returns
// the answers.
func feedBatches(t *testing.T, f *filter, recs []record, seed uint64) []bool {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 3))
	out := make([]bool, 0, len(recs))
	for i := 0; i < len(recs); {
		n := min(1+r.IntN(300), len(recs)-i)
		keys := make([][]byte, n)
		ts := make([]time.Time, n)
		for j := range n {
			keys[j], ts[j] = []byte(recs[i+j].key), recs[i+j].ts
		}
		seen := make([]bool, n)
		f.TestAndAddBatch(keys, ts, seen)
		out = append(out, seen...)
		i += n
	}
	if err := f.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// counterValue reads one series of a counter vector in reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			return metricValue(m)
		}
	}
	return 0
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	}
	return 0
}

// TestExactAnswers: with exact mode, every answer over several windows of
// a stream with repeats of every age, late records and rotations is the
// true one (no false positive, no false negative); the filter alone on the
// same stream has false positives, which exact mode refuted and counted.
// Batches answer as records one by one.
func TestExactAnswers(t *testing.T) {
	t.Parallel()
	for _, kind := range exactKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			testExactAnswers(t, kind)
		})
	}
}

func testExactAnswers(t *testing.T, kind string) {
	recs := stream(1, 12_000, base) // ~100 min: rotations, and keys leaving the window
	st, reg := exactMemoryOf(t, kind, "file://"+t.TempDir(), t.TempDir(), 500, nil)
	_, f, _ := take(t, st, tinyParams)
	tr := newTruth()
	seen := feed(t, f, tr, recs)

	ps := realState(t, t.TempDir())
	ps.Kind = kind
	plain, err := ps.NewFilter(tinyParams)
	if err != nil {
		t.Fatal(err)
	}
	plain.(*filter).seed = f.seed
	fp := 0
	tr2 := newTruth()
	for _, r := range recs {
		got := plain.TestAndAdd([]byte(r.key), r.ts)
		if want := tr2.answer(plain.(*filter), r.key); got && !want {
			fp++
		} else if !got && want {
			t.Fatalf("filter alone: false negative for %s", r.key)
		}
	}
	refuted := counterValue(t, reg, "bloomgate_exact_positives_total", map[string]string{"result": "refuted"})
	confirmed := counterValue(t, reg, "bloomgate_exact_positives_total", map[string]string{"result": "confirmed"})
	t.Logf("%d records, %d duplicates; the filter alone had %d false positives; exact mode refuted %v", len(recs), seen, fp, refuted)
	if fp < 100 {
		t.Fatalf("only %d false positives of the filter alone: the test does not exercise exact mode", fp)
	}
	if int(refuted) != fp || int(confirmed) != seen {
		t.Errorf("positives: %v refuted, %v confirmed; want %d (the filter's false positives) and %d (the duplicates)", refuted, confirmed, fp, seen)
	}
	if got := f.Stats().Exact; got == nil || got.RefutedPositives != uint64(fp) || got.Keys == 0 || got.DiskBytes == 0 {
		t.Errorf("stats %+v", got)
	}
	for _, name := range []string{"bloomgate_exact_lookups_total", "bloomgate_exact_lookup_seconds", "bloomgate_exact_disk_bytes"} {
		if !hasMetric(t, reg, name, map[string]string{"topic": tIn, "partition": "0"}) {
			t.Errorf("no %s{topic=%q,partition=\"0\"}", name, tIn)
		}
	}

	// The same stream in batches, on another memory with the same seed and
	// another flush size: the same (true) answers.
	one, _ := exactMemoryOf(t, kind, "file://"+t.TempDir(), t.TempDir(), 0, nil)
	_, g, _ := take(t, one, tinyParams)
	g.seed = f.seed
	want := make([]bool, len(recs))
	tr3 := newTruth()
	for i, r := range recs {
		want[i] = g.TestAndAdd([]byte(r.key), r.ts)
		if w := tr3.answer(g, r.key); w != want[i] {
			t.Fatalf("record %d: seen=%v, the generations held say %v", i, want[i], w)
		}
	}
	batched, _ := exactMemoryOf(t, kind, "file://"+t.TempDir(), t.TempDir(), 7, nil)
	_, k, _ := take(t, batched, tinyParams)
	k.seed = f.seed
	got := feedBatches(t, k, recs, 11)
	for i := range recs {
		if got[i] != want[i] {
			t.Fatalf("record %d: batched seen=%v, one by one %v", i, got[i], want[i])
		}
	}
}

func hasMetric(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) bool {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for k, v := range labels {
				found := false
				for _, lp := range m.GetLabel() {
					found = found || lp.GetName() == k && lp.GetValue() == v
				}
				if !found {
					continue next
				}
			}
			return true
		}
	}
	return false
}

// TestExactRotationDrops: the store holds only the generations the filter
// holds; dropped ones are deleted from disk.
func TestExactRotationDrops(t *testing.T) {
	t.Parallel()
	for _, kind := range exactKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			testExactRotationDrops(t, kind)
		})
	}
}

func testExactRotationDrops(t *testing.T, kind string) {
	dir := t.TempDir()
	st, _ := exactMemoryOf(t, kind, "file://"+t.TempDir(), dir, 200, nil)
	_, f, _ := take(t, st, tinyParams)
	tr := newTruth()
	recs := stream(2, 20_000, base) // ~3 h: the ring turns over more than twice
	feed(t, f, tr, recs)
	x := f.x
	held := map[uint64]bool{}
	for _, g := range x.gens {
		held[g] = true
	}
	gens := x.st.Generations()
	for _, g := range gens {
		if !held[g] {
			t.Errorf("store keeps generation %d, the filter holds %v", g, x.gens)
		}
	}
	if len(gens) > tinyParams.Generations || x.next <= uint64(tinyParams.Generations)+1 {
		t.Errorf("store generations %v, next %d: want at most %d after several rotations", gens, x.next, tinyParams.Generations)
	}
	runs, err := filepath.Glob(filepath.Join(st.exactDir(topicPartition{tIn, 0}), "*.run"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		var g uint64
		fmt.Sscanf(filepath.Base(r), "%016x", &g)
		if !held[g] {
			t.Errorf("run %s of a dropped generation still on disk", filepath.Base(r))
		}
	}
}

// TestExactCheckpointRoundTrip: a memory checkpointed in the middle of a
// stream and restored — into another directory (the local disk lost), and
// into the same one (files reused) — answers the rest of the stream as the
// original does, every answer true; a checkpoint after rotations uploads
// only new store files.
func TestExactCheckpointRoundTrip(t *testing.T) {
	t.Parallel()
	for _, kind := range exactKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			testExactCheckpointRoundTrip(t, kind)
		})
	}
}

func testExactCheckpointRoundTrip(t *testing.T, kind string) {
	url := "file://" + t.TempDir()
	dir := t.TempDir()
	recs := stream(3, 16_000, base)
	cut := 9_000
	st, _ := exactMemoryOf(t, kind, url, dir, 300, nil)
	h, f, _ := take(t, st, tinyParams)
	tr := newTruth()
	// A checkpoint every 500 records: each store file is uploaded once,
	// for the first checkpoint that has it, and referenced after (the
	// store's MANIFEST is a new file each time).
	uploads := map[string]checkpoint.ExactFile{}
	reused, total := 0, int64(0)
	for at := 500; at <= cut; at += 500 {
		feed(t, f, tr, recs[at-500:at])
		commitT(t, h, f, tinyParams, int64(at))
		m := newestManifest(t, st)
		if m.Exact == nil {
			t.Fatal("manifest without an exact section")
		}
		for _, g := range m.Generations {
			switch {
			case kind == KindRing && g.ExactGen == 0:
				t.Errorf("generation %d has no exact generation", g.ID)
			case kind == KindFingerprint && (g.ExactGen != 0 || len(g.ExactGens) != len(g.Ages) || len(g.Ages) == 0):
				t.Errorf("table %d: exact generations %v for %d generations (ages %v)", g.ID, g.ExactGens, len(g.Ages), g.Ages)
			}
		}
		for _, e := range m.Exact.Files {
			total += e.Size
			prev, ok := uploads[e.Name+" "+e.SHA256]
			switch {
			case !ok && e.Seq != m.Seq:
				t.Errorf("file %s first listed by checkpoint %d, uploaded for %d", e.Name, m.Seq, e.Seq)
			case ok && prev != e:
				t.Errorf("file %s uploaded again: %+v, before %+v", e.Name, e, prev)
			case ok:
				reused++
			}
			uploads[e.Name+" "+e.SHA256] = e
		}
	}
	var uploaded int64
	for _, e := range uploads {
		uploaded += e.Size
	}
	t.Logf("%d checkpoints listed %d bytes of store files; %d bytes uploaded, %d references reused", cut/500, total, uploaded, reused)
	if reused == 0 || uploaded >= total/2 {
		t.Errorf("store files reused %d times, %d of %d bytes uploaded", reused, uploaded, total)
	}

	trAt := tr.clone()
	rest := recs[cut:]
	want := make([]bool, len(rest))
	for i, r := range rest {
		want[i] = f.TestAndAdd([]byte(r.key), r.ts)
	}

	for _, c := range []struct {
		name string
		dir  string
	}{{"other directory", t.TempDir()}, {"same directory", ""}} {
		t.Run(c.name, func(t *testing.T) {
			d := c.dir
			if d == "" {
				// The original closes first (a restart on the same disk).
				if err := st.Close(); err != nil {
					t.Fatal(err)
				}
				d = dir
			}
			st2, _ := exactMemoryOf(t, kind, url, d, 300, nil)
			_, g, r := take(t, st2, tinyParams)
			if r.InputOffset != int64(cut) {
				t.Fatalf("restored offset %d, want %d", r.InputOffset, cut)
			}
			tr2 := trAt.clone()
			for i, rec := range rest {
				got := g.TestAndAdd([]byte(rec.key), rec.ts)
				if got != want[i] {
					t.Fatalf("record %d after the checkpoint: restored seen=%v, original %v", cut+i, got, want[i])
				}
				if truth := tr2.answer(g, rec.key); got != truth {
					t.Fatalf("record %d after the checkpoint: seen=%v, the generations held say %v", cut+i, got, truth)
				}
			}
		})
	}
}

// TestExactCorruptStoreFileFallsBack: a corrupt or missing store file of
// the newest checkpoint makes the restore fall back to the previous one,
// whose answers are then exact.
func TestExactCorruptStoreFileFallsBack(t *testing.T) {
	t.Parallel()
	for _, damage := range []string{"corrupt", "missing"} {
		t.Run(damage, func(t *testing.T) {
			bucket := t.TempDir()
			url := "file://" + bucket
			recs := stream(4, 8_000, base)
			st, _ := exactMemory(t, url, t.TempDir(), 300, nil)
			h, f, _ := take(t, st, tinyParams)
			tr := newTruth()
			feed(t, f, tr, recs[:4000])
			commitT(t, h, f, tinyParams, 4000)
			m1 := newestManifest(t, st)
			trAt := tr.clone()
			feed(t, f, tr, recs[4000:6000])
			commitT(t, h, f, tinyParams, 6000)
			m2 := newestManifest(t, st)
			var victim checkpoint.ExactFile
			inM1 := map[string]bool{}
			for _, f := range m1.Exact.Files {
				inM1[f.Key] = true
			}
			for _, f := range m2.Exact.Files {
				if strings.HasSuffix(f.Name, ".run") && !inM1[f.Key] {
					victim = f
				}
			}
			if victim.Key == "" {
				t.Fatal("the second checkpoint uploaded no run file of its own")
			}
			path := filepath.Join(bucket, "g", tIn, "0", victim.Key)
			if damage == "missing" {
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
			} else {
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				b[len(b)/2] ^= 0x40
				if err := os.WriteFile(path, b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			st2, _ := exactMemory(t, url, t.TempDir(), 300, nil)
			_, g, r := take(t, st2, tinyParams)
			if r.InputOffset != 4000 {
				t.Fatalf("restored offset %d, want the previous checkpoint's 4000", r.InputOffset)
			}
			feed(t, g, trAt, recs[4000:])
		})
	}
}

// TestExactFromFilterOnlyCheckpoint: a checkpoint written without exact
// mode restores with it. Positives matching the restored generations count
// as duplicates (unverified, no key is forwarded twice); once those
// generations left the window every answer is exact again. The change is
// logged once.
func TestExactFromFilterOnlyCheckpoint(t *testing.T) {
	t.Parallel()
	for _, kind := range exactKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			testExactFromFilterOnlyCheckpoint(t, kind)
		})
	}
}

func testExactFromFilterOnlyCheckpoint(t *testing.T, kind string) {
	url := "file://" + t.TempDir()
	recs := stream(5, 20_000, base)
	plain := openState(t, url, testLogger(t))
	plain.Kind = kind
	h, f, _ := take(t, plain, tinyParams)
	tr := newTruth() // what each generation really holds
	for _, r := range recs[:5000] {
		f.TestAndAdd([]byte(r.key), r.ts)
		tr.answer(f, r.key)
	}
	commitT(t, h, f, tinyParams, 5000)

	var logs kafkatest.LogBuffer
	st, reg := exactMemoryOf(t, kind, url, t.TempDir(), 300, &logs)
	_, g, r := take(t, st, tinyParams)
	if r.InputOffset != 5000 {
		t.Fatalf("restored offset %d", r.InputOffset)
	}
	restored := map[bloom.Span]bool{}
	for _, sp := range g.k.Spans(nil) {
		restored[sp] = true
	}
	// Positives that match only the restored generations are the
	// filter's answer.
	fpBefore := 0
	for i, rec := range recs[5000:] {
		got := g.TestAndAdd([]byte(rec.key), rec.ts)
		want := tr.answer(g, rec.key)
		old := false
		for _, sp := range g.k.Spans(nil) {
			old = old || restored[sp]
		}
		switch {
		case !got && want:
			t.Fatalf("record %d: false negative (a duplicate forwarded)", 5000+i)
		case got && !want && old:
			fpBefore++
		case got && !want:
			t.Fatalf("record %d: false positive after the restored generations left", 5000+i)
		}
	}
	if n := counterValue(t, reg, "bloomgate_exact_positives_total", map[string]string{"result": "unverified"}); n == 0 || int(n) < fpBefore {
		t.Errorf("%v unverified positives, %d false positives while restored generations were held", n, fpBefore)
	}
	for _, sp := range g.k.Spans(nil) {
		if restored[sp] {
			t.Fatalf("the stream did not outlast the restored generations")
		}
	}
	if n := strings.Count(logs.String(), "written without exact mode"); n != 1 {
		t.Errorf("notice logged %d times, want once:\n%s", n, logs.String())
	}
}

// TestExactPlanChange: a memory of exact mode restored under another
// window and generation count (legacy generations beside a ring of the new
// plan, with span indexes of different spans) stays exact: every answer
// before, across and after the change is the true one, also after a
// checkpoint taken during the transition is restored.
func TestExactPlanChange(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		old, new worker.FilterParams
	}{
		{"window 1h to 3h", tinyParams, worker.FilterParams{Window: 3 * time.Hour, Generations: 4, Capacity: 9_000, FPR: 0.3}},
		{"window 1h to 20m", tinyParams, worker.FilterParams{Window: 20 * time.Minute, Generations: 4, Capacity: 1_000, FPR: 0.3}},
		{"generations 4 to 7", tinyParams, worker.FilterParams{Window: time.Hour, Generations: 7, Capacity: 3_000, FPR: 0.3}},
		// The same span (20 minutes): the fingerprint kind's legacy table
		// has generations of the plan's spans.
		{"window 1h to 2h, generations 4 to 7", tinyParams, worker.FilterParams{Window: 2 * time.Hour, Generations: 7, Capacity: 6_000, FPR: 0.3}},
	} {
		for _, kind := range exactKinds {
			t.Run(kind+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				url := "file://" + t.TempDir()
				recs := stream(6, 40_000, base)
				a, _ := exactMemoryOf(t, kind, url, t.TempDir(), 200, nil)
				h, f, _ := take(t, a, c.old)
				tr := newTruth()
				feed(t, f, tr, recs[:8000])
				commitT(t, h, f, c.old, 8000)

				b, _ := exactMemoryOf(t, kind, url, t.TempDir(), 200, nil)
				h2, g, _ := take(t, b, c.new)
				// A ring keeps generations of the same span as its own.
				sameSpan := span(c.old.Window, c.old.Generations) == span(c.new.Window, c.new.Generations)
				if legacy, _, _ := g.k.legacy(); legacy == 0 && (kind == KindFingerprint || !sameSpan) {
					t.Fatalf("no legacy generations after the change")
				}
				tr2 := tr.clone()
				feed(t, g, tr2, recs[8000:9000])
				commitT(t, h2, g, c.new, 9000) // during the transition
				trAt := tr2.clone()
				feed(t, g, tr2, recs[9000:])

				d, _ := exactMemoryOf(t, kind, url, t.TempDir(), 200, nil)
				_, k, r := take(t, d, c.new)
				if r.InputOffset != 9000 {
					t.Fatalf("restored offset %d", r.InputOffset)
				}
				feed(t, k, trAt, recs[9000:])
				if legacy, _, _ := g.k.legacy(); legacy != 0 {
					t.Errorf("the stream did not outlast the legacy generations")
				}
			})
		}
	}
}

// TestExactReuseAndRelease: a partition that comes back to the process
// that checkpointed it last reuses its filter with the store open; one
// that does not has its store closed and restored in the same directory;
// Retain closes the stores of partitions no longer assigned.
func TestExactReuseAndRelease(t *testing.T) {
	t.Parallel()
	url := "file://" + t.TempDir()
	st, _ := exactMemory(t, url, t.TempDir(), 100, nil)
	recs := stream(7, 3000, base)
	h, f, _ := take(t, st, tinyParams)
	tr := newTruth()
	feed(t, f, tr, recs[:1000])
	commitT(t, h, f, tinyParams, 1000)

	h, g, _ := take(t, st, tinyParams)
	if g != f || st.Reused() != 1 {
		t.Fatalf("unchanged filter not reused")
	}
	feed(t, g, tr, recs[1000:2000])
	commitT(t, h, g, tinyParams, 2000)
	trAt := tr.clone()
	g.TestAndAdd([]byte("changed since"), recs[1999].ts)

	_, k, _ := take(t, st, tinyParams) // restored in the same directory: g's store closed first
	if k == g {
		t.Fatal("changed filter reused")
	}
	if g.Err() == nil {
		t.Error("the replaced filter's store is still open")
	}
	feed(t, k, trAt, recs[2000:])

	st.Retain(tIn, []int{1})
	if k.Err() == nil {
		t.Error("Retain left the store of an unassigned partition open")
	}
	_, k2, _ := take(t, st, tinyParams)
	if k2.Err() != nil {
		t.Fatal(k2.Err())
	}
}

// TestExactLocalOpenFailureIsNotCorrupt: a failure of this machine while
// the restored store opens (here a metrics registration conflict, standing
// in for EMFILE, ENOMEM or a lock held by another process) is reported as
// local, not as a corrupt checkpoint: Restore neither falls back to older
// manifests nor ends in ErrNoUsableCheckpoint (which stops the worker, or
// with on-restore-failure=empty throws a sound memory away).
func TestExactLocalOpenFailureIsNotCorrupt(t *testing.T) {
	url := "file://" + t.TempDir()
	recs := stream(14, 4000, base)
	a, _ := exactMemory(t, url, t.TempDir(), 200, nil)
	h, f, _ := take(t, a, tinyParams)
	tr := newTruth()
	feed(t, f, tr, recs[:2000])
	commitT(t, h, f, tinyParams, 2000)
	feed(t, f, tr, recs[2000:])
	commitT(t, h, f, tinyParams, 4000)
	a.Close()

	b, reg := exactMemory(t, url, t.TempDir(), 200, nil)
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "bloomgate_exact_inserts_total", Help: "Hashes added to the exact store (including ones already present).",
		ConstLabels: prometheus.Labels{"topic": tIn, "partition": "0"},
	}))
	_, err := b.Partition(tIn, 0).Restore(context.Background(), tinyParams)
	if err == nil {
		t.Fatal("restore succeeded although the store's metrics could not be registered")
	}
	if errors.Is(err, worker.ErrNoUsableCheckpoint) || errors.Is(err, checkpoint.ErrCorrupt) {
		t.Fatalf("a local failure was taken for a corrupt checkpoint: %v", err)
	}
	if !errors.Is(err, checkpoint.ErrLocal) {
		t.Fatalf("restore error %v: want checkpoint.ErrLocal", err)
	}
}

// TestPlanBackDoesNotReuseStaleGeneration: after a plan change and back, a
// generation the intermediate plan listed as sealed (a legacy generation)
// rejoins the ring as the newest one and takes inserts again. The next
// checkpoint must upload it again, not reference the object stored while
// it was sealed: restored from that object, the filter would miss the
// keys added since, and every record after the checkpoint is checked
// against the truth (a missed repeat is a duplicate forwarded).
func TestPlanBackDoesNotReuseStaleGeneration(t *testing.T) {
	p1 := tinyParams
	p2 := worker.FilterParams{Window: 90 * time.Minute, Generations: 4, Capacity: 4500, FPR: 0.3}
	url := "file://" + t.TempDir()
	recs := stream(13, 40_000, base)
	a, _ := exactMemory(t, url, t.TempDir(), 200, nil)
	h, f, _ := take(t, a, p1)
	tr := newTruth()
	feed(t, f, tr, recs[:8000])
	commitT(t, h, f, p1, 8000)
	b, _ := exactMemory(t, url, t.TempDir(), 200, nil)
	h, f, _ = take(t, b, p2)
	feed(t, f, tr, recs[8000:8100])
	commitT(t, h, f, p2, 8100)
	c, _ := exactMemory(t, url, t.TempDir(), 200, nil)
	h, f, _ = take(t, c, p1)
	// Records until the newest ring generation rotates, no commit between.
	first := f.shard().Spans(nil)[len(f.shard().Spans(nil))-1]
	i := 8100
	for ; i < len(recs); i++ {
		feed(t, f, tr, recs[i:i+1])
		if sp := f.shard().Spans(nil); sp[len(sp)-1] != first {
			break
		}
	}
	i++
	if i >= len(recs) {
		t.Fatal("the stream never rotated the newest generation")
	}
	commitT(t, h, f, p1, int64(i))
	live := map[uint64]uint64{}
	for _, g := range f.shard().Stats().Generations {
		live[g.ID] = g.Inserts
	}
	for _, g := range newestManifest(t, c).Generations {
		if n, ok := live[g.ID]; ok && n != g.Inserts {
			t.Errorf("manifest lists generation %d with %d inserts (uploaded for seq %d); the filter's has %d", g.ID, g.Inserts, g.Seq, n)
		}
	}
	d, _ := exactMemory(t, url, t.TempDir(), 200, nil)
	r, err := d.Partition(tIn, 0).Restore(context.Background(), p1)
	if err != nil {
		t.Fatal(err)
	}
	if r.InputOffset != int64(i) {
		t.Fatalf("restored offset %d, want %d", r.InputOffset, i)
	}
	feed(t, r.Filter.(*filter), tr.clone(), recs[i:])
}
