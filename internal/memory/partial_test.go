package memory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/bloom"
	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// history is a partition's input as the tests below feed it, and what the
// original run did with it.
type history struct {
	recs  []record
	filed []uint64 // per record: the index of the ring's newest generation after it
	// at each commit: the input offset, the manifest and the filter's
	// generations encoded
	commits []committed
}

type committed struct {
	offset int64
	m      *checkpoint.Manifest
	enc    [][]byte
}

// partialParams: spans of 20 minutes, small generations that stack.
var partialParams = worker.FilterParams{Window: time.Hour, Generations: 4, Capacity: 3_000, FPR: 0.05}

// runHistory feeds a stream through a new memory at url and commits as a
// worker would: every 1,500 records, then, inside the last span, a whole
// upload of the live generation (A), a few new keys (B: a log segment), and
// repeats only (C, D: the same chain). Some records are stamped hours
// ahead and clamped by MaxTimeJump; 5 % are late.
func runHistory(t *testing.T, url string) *history {
	t.Helper()
	st := openState(t, url, testLogger(t))
	st.MaxTimeJump = 2 * time.Minute
	h, f, _ := take(t, st, partialParams)
	f.ReadingFrom(0, false)
	hist := &history{recs: stream(7, 6_000, base)}
	for i := range hist.recs {
		if i%700 == 350 {
			hist.recs[i].ts = hist.recs[i].ts.Add(3 * time.Hour) // a producer clock ahead
		}
	}
	last := hist.recs[len(hist.recs)-1].ts
	// B: five new keys; C, D: keys the live generation holds.
	for i := range 5 {
		hist.recs = append(hist.recs, record{fmt.Sprintf("late-new-%d", i), last})
	}
	for range 40 {
		hist.recs = append(hist.recs, record{hist.recs[len(hist.recs)-3].key, last})
	}
	n := 6_000
	commitAt := func(off int) {
		commitT(t, h, f, partialParams, int64(off))
		hist.commits = append(hist.commits, committed{offset: int64(off), m: newestManifest(t, st), enc: encodeFilter(t, f)})
	}
	for i, r := range hist.recs {
		if i > 0 && (i%1_500 == 0 && i <= n || i == n+5 || i == n+25) {
			commitAt(i)
		}
		f.TestAndAdd([]byte(r.key), r.ts)
		_, id, _ := f.shard().Newest()
		hist.filed = append(hist.filed, id)
	}
	commitAt(len(hist.recs))
	if f.clamped == 0 {
		t.Fatal("no timestamp was clamped: the test does not cover --max-time-jump")
	}
	return hist
}

// newest is the history's last manifest, and its generations.
func (h *history) newest() *checkpoint.Manifest { return h.commits[len(h.commits)-1].m }

// rebuild does what the worker does with a restored memory: it re-reads
// the input from the smallest recorded start (or from, if later) to the
// checkpoint's offset and hands the keys to the filter.
func rebuild(t *testing.T, r *worker.Restored, recs []record, from int64) {
	t.Helper()
	start := int64(-1)
	for _, lg := range r.Lost {
		if lg.KeysFrom >= 0 && (start < 0 || lg.KeysFrom < start) {
			start = lg.KeysFrom
		}
	}
	if start < 0 {
		return
	}
	start = max(start, from)
	rb := r.Filter.(worker.Rebuilder)
	rb.StartRebuild(start)
	for o := start; o < r.InputOffset; o++ {
		if !rb.RebuildKey(o, []byte(recs[o].key), recs[o].ts) {
			break // no later record goes into a lost generation
		}
	}
	rb.FinishRebuild()
}

// objectPath is the file of a checkpoint object of partition 0.
func objectPath(bucket, key string) string { return filepath.Join(bucket, "g", tIn, "0", key) }

// TestPartialRestoreRebuildsIdentical: an object every kept manifest names
// goes bad (a sealed generation, the live generation's base, a log segment
// of its chain; flipped, or removed). The newest manifest restores with
// that generation lost and every other one loaded; rebuilt from the input
// as the worker does, the filter is byte-identical to the original at the
// checkpoint; a commit then names no bad object, and restores whole.
func TestPartialRestoreRebuildsIdentical(t *testing.T) {
	t.Parallel()
	bucket := t.TempDir()
	hist := runHistory(t, "file://"+bucket)
	m := hist.newest()
	// The kept manifests (the last three) must all name the victims.
	kept := hist.commits[len(hist.commits)-3:]
	live := m.Generations[len(m.Generations)-1]
	if len(live.Log) != 1 {
		t.Fatalf("the live generation has a chain of %d segments, want 1 (tune the history): %+v", len(live.Log), live)
	}
	sealed := m.Generations[0]
	if !sealed.Sealed {
		t.Fatal("no sealed generation")
	}
	for _, c := range kept {
		names := map[string]bool{}
		for _, g := range c.m.Generations {
			names[g.Key] = true
			for _, l := range g.Log {
				names[l.Key] = true
			}
		}
		for _, k := range []string{sealed.Key, live.Key, live.Log[0].Key} {
			if !names[k] {
				t.Fatalf("manifest %d does not name %s", c.m.Seq, k)
			}
		}
	}
	victims := []struct {
		name string
		key  string
		gen  checkpoint.GenerationRef
	}{
		{"sealed generation", sealed.Key, sealed},
		{"live base", live.Key, live},
		{"log segment", live.Log[0].Key, live},
	}
	for _, v := range victims {
		// "header" flips the high bytes of a log segment's entry count
		// (a count over the limit, refused before the checksum is read)
		// and bytes of a generation's header.
		for _, damage := range []string{"flipped", "header", "removed"} {
			t.Run(v.name+"/"+damage, func(t *testing.T) {
				dir := t.TempDir()
				if err := os.CopyFS(dir, os.DirFS(bucket)); err != nil {
					t.Fatal(err)
				}
				path := objectPath(dir, v.key)
				if damage == "removed" {
					if err := os.Remove(path); err != nil {
						t.Fatal(err)
					}
				} else {
					b, err := os.ReadFile(path)
					if err != nil {
						t.Fatal(err)
					}
					at := len(b) / 2
					if damage == "header" {
						at = 72
					}
					for i := range 4 {
						b[(at+i*13)%len(b)] ^= 1 << i
						if damage == "header" {
							b[at+i] = 0x7f
						}
					}
					if err := os.WriteFile(path, b, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				st := openState(t, "file://"+dir, testLogger(t))
				st.MaxTimeJump = 2 * time.Minute
				h, f, r := take(t, st, partialParams)
				if r.Sequence != m.Seq || r.InputOffset != int64(len(hist.recs)) {
					t.Fatalf("restored checkpoint %d at %d, want the newest, %d at %d", r.Sequence, r.InputOffset, m.Seq, len(hist.recs))
				}
				if len(r.Lost) != 1 || r.Lost[0].ID != v.gen.ID || r.Lost[0].ExactOnly || r.Lost[0].Reason == "" {
					t.Fatalf("lost %+v, want generation %d", r.Lost, v.gen.ID)
				}
				lg := r.Lost[0]
				if lg.KeysFrom < 0 || lg.KeysFrom > r.InputOffset || lg.Keys != v.gen.Inserts || !lg.Until.After(lg.End) {
					t.Fatalf("lost generation record: %+v", lg)
				}
				// Before the rebuild the generation is empty, the others as stored.
				want := hist.commits[len(hist.commits)-1].enc
				got := encodeFilter(t, f)
				for i, g := range m.Generations {
					if same := string(got[i]) == string(want[i]); same == (g.ID == v.gen.ID) {
						t.Fatalf("before the rebuild, generation %d identical: %v", g.ID, same)
					}
				}
				rebuild(t, r, hist.recs, 0)
				sameEncoding(t, "rebuilt", encodeFilter(t, f), want)

				// The next checkpoint uploads the generation afresh.
				commitT(t, h, f, partialParams, int64(len(hist.recs)))
				m2 := newestManifest(t, st)
				for _, g := range m2.Generations {
					if g.IsLost() || g.Key == v.key || slices.ContainsFunc(g.Log, func(l checkpoint.LogRef) bool { return l.Key == v.key }) {
						t.Fatalf("manifest %d names the bad object or a lost generation: %+v", m2.Seq, g)
					}
					if g.ID == v.gen.ID && (g.Seq != m2.Seq || g.KeysFrom == nil || g.KeysFrom.Offset != lg.KeysFrom) {
						t.Fatalf("rebuilt generation stored as %+v, want uploaded now with its start %d", g, lg.KeysFrom)
					}
				}
				st2 := openState(t, "file://"+dir, testLogger(t))
				_, f2, r2 := take(t, st2, partialParams)
				if len(r2.Lost) != 0 || r2.Sequence != m2.Seq {
					t.Fatalf("restore after the commit: checkpoint %d, lost %+v", r2.Sequence, r2.Lost)
				}
				sameEncoding(t, "restored after the rebuild", encodeFilter(t, f2), want)
			})
		}
	}
}

// TestPartialRestoreRetentionRemovedStart: when the input no longer holds
// the start of a lost generation's keys, the rebuild from the log start
// gives it every key of the retained records it held (and possibly keys of
// records filed into older generations), never fewer.
func TestPartialRestoreRetentionRemovedStart(t *testing.T) {
	t.Parallel()
	bucket := t.TempDir()
	hist := runHistory(t, "file://"+bucket)
	m := hist.newest()
	var victim checkpoint.GenerationRef
	for _, g := range m.Generations {
		if g.Sealed && g.KeysFrom != nil && g.KeysFrom.Offset > 0 {
			victim = g
		}
	}
	if victim.Key == "" {
		t.Fatal("no sealed generation with a recorded start past 0")
	}
	if err := os.Remove(objectPath(bucket, victim.Key)); err != nil {
		t.Fatal(err)
	}
	st := openState(t, "file://"+bucket, testLogger(t))
	st.MaxTimeJump = 2 * time.Minute
	_, f, r := take(t, st, partialParams)
	if len(r.Lost) != 1 || r.Lost[0].ID != victim.ID {
		t.Fatalf("lost %+v", r.Lost)
	}
	logStart := r.Lost[0].KeysFrom + 300
	if r.Lost[0].RebuiltFrom(logStart) {
		t.Fatal("a rebuild past the start claims to be exact")
	}
	rebuild(t, r, hist.recs, logStart)
	sp := bloom.Span{Start: victim.Start.UnixNano(), End: victim.End.UnixNano()}
	pos := slices.Index(f.shard().Spans(nil), sp)
	held, missing := 0, 0
	for o := logStart; o < r.InputOffset; o++ {
		if hist.filed[o] != victim.ID {
			continue
		}
		held++
		if !slices.Contains(f.shard().Matching(f.seed.Hash([]byte(hist.recs[o].key)), nil), pos) {
			missing++
		}
	}
	if held == 0 || missing > 0 {
		t.Fatalf("%d of the %d retained records filed into generation %d are missing from it after the rebuild", missing, held, victim.ID)
	}
}

// TestNoStartAfterForeignKeys: generations opened while keys of another
// topic come in record no start, so their loss is not rebuilt.
func TestNoStartAfterForeignKeys(t *testing.T) {
	t.Parallel()
	bucket := t.TempDir()
	st := openState(t, "file://"+bucket, testLogger(t))
	h, f, _ := take(t, st, partialParams)
	f.ReadingFrom(0, true) // a seed topic first
	recs := stream(9, 3_000, base)
	for _, r := range recs[:1000] {
		f.TestAndAdd([]byte(r.key), r.ts)
	}
	sn := f.Snapshot()
	err := h.Commit(context.Background(), worker.Checkpoint{InputOffset: 0, Params: partialParams, Snapshot: sn, Owner: "t",
		Seed: &worker.SeedProgress{Topic: "seed", Next: 1000, End: 3000}})
	sn.Release()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs[1000:] {
		f.TestAndAdd([]byte(r.key), r.ts)
	}
	commitT(t, h, f, partialParams, 0) // the seed read is done
	for _, g := range newestManifest(t, st).Generations {
		if g.KeysFrom != nil {
			t.Fatalf("generation %d filled from a seed topic records a start %+v", g.ID, g.KeysFrom)
		}
	}
	for _, r := range stream(10, 3_000, recs[len(recs)-1].ts.Add(time.Hour)) {
		f.TestAndAdd([]byte(r.key), r.ts)
	}
	commitT(t, h, f, partialParams, 3000)
	m := newestManifest(t, st)
	if g := m.Generations[len(m.Generations)-1]; g.KeysFrom == nil || g.KeysFrom.Offset != 0 {
		t.Fatalf("generation opened after the seed read: start %+v, want offset 0", g.KeysFrom)
	}
}

// TestLostTwice: a generation lost without a recorded start is forgotten;
// it keeps taking keys after the restore, and the next commit gives it the
// point where that session began (with the generation itself as the
// newest there). Lost again, it is rebuilt from there byte-identical, late
// records filed into it before any later span included.
func TestLostTwice(t *testing.T) {
	t.Parallel()
	bucket := t.TempDir()
	url := "file://" + bucket
	st := openState(t, url, testLogger(t))
	h, f, _ := take(t, st, partialParams)
	f.ReadingFrom(0, true) // no start is recorded for what is there now
	recs := stream(11, 3_000, base)
	for _, r := range recs {
		f.TestAndAdd([]byte(r.key), r.ts)
	}
	commitT(t, h, f, partialParams, int64(len(recs)))
	m1 := newestManifest(t, st)
	live := m1.Generations[len(m1.Generations)-1]
	if live.KeysFrom != nil {
		t.Fatalf("live generation records a start: %+v", live.KeysFrom)
	}
	if err := os.Remove(objectPath(bucket, live.Key)); err != nil {
		t.Fatal(err)
	}

	st2 := openState(t, url, testLogger(t))
	h2, f2, r := take(t, st2, partialParams)
	if len(r.Lost) != 1 || r.Lost[0].KeysFrom != -1 || r.Lost[0].RebuiltFrom(0) {
		t.Fatalf("lost %+v, want the live generation, without a start", r.Lost)
	}
	rebuild(t, r, recs, 0) // nothing to read
	f2.ReadingFrom(r.InputOffset, false)
	// Late records first (before the live span: into it all the same),
	// then more of its span.
	more := []record{{"late-a", live.Start.Add(-time.Minute)}, {"late-b", live.Start.Add(-2 * time.Minute)}}
	for i := range 200 {
		more = append(more, record{fmt.Sprintf("more-%d", i), live.Start.Add(time.Duration(i) * time.Second)})
	}
	all := append(slices.Clone(recs), more...)
	for _, x := range more {
		f2.TestAndAdd([]byte(x.key), x.ts)
	}
	commitT(t, h2, f2, partialParams, int64(len(all)))
	want := encodeFilter(t, f2)
	m2 := newestManifest(t, st2)
	g := m2.Generations[len(m2.Generations)-1]
	if g.ID != live.ID || g.KeysFrom == nil || g.KeysFrom.Offset != int64(len(recs)) || g.KeysFrom.NewestID != live.ID {
		t.Fatalf("generation lost at the restore, committed as %+v (start %+v)", g, g.KeysFrom)
	}
	if err := os.Remove(objectPath(bucket, g.Key)); err != nil {
		t.Fatal(err)
	}
	// The claim of the first restore loads whole but names the generation
	// lost without a start; the commit after it loses the same generation
	// with a start, and is restored in part.
	st3 := openState(t, url, testLogger(t))
	_, f3, r3 := take(t, st3, partialParams)
	if r3.Sequence != m2.Seq || len(r3.Lost) != 1 || !r3.Lost[0].RebuiltFrom(int64(len(recs))) {
		t.Fatalf("restored %d with lost %+v", r3.Sequence, r3.Lost)
	}
	rebuild(t, r3, all, 0)
	sameEncoding(t, "rebuilt the second time", encodeFilter(t, f3), want)
}

// TestPartialRestoreExactStoreFile: in exact mode, a store file every kept
// manifest names goes bad. The filter's generations all load; the exact
// store starts empty and every generation it had verified is reported
// (ExactOnly): its positives are unverified until it leaves the window, so
// no answer is a false negative. The next commit names no bad file.
func TestPartialRestoreExactStoreFile(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ kind, damage string }{
		{KindRing, "flipped"}, {KindRing, "removed"}, {KindFingerprint, "flipped"}, {KindFingerprint, "removed"},
	} {
		kind, damage := c.kind, c.damage
		t.Run(kind+"/"+damage, func(t *testing.T) {
			t.Parallel()
			bucket := t.TempDir()
			url := "file://" + bucket
			recs := stream(12, 8_000, base)
			st, _ := exactMemoryOf(t, kind, url, t.TempDir(), 300, nil)
			h, f, _ := take(t, st, tinyParams)
			f.ReadingFrom(0, false)
			tr := newTruth()
			var ms []*checkpoint.Manifest
			for _, cut := range []int{2000, 4000, 4010, 4020} {
				feed(t, f, tr, recs[offsetOf(ms):cut])
				commitT(t, h, f, tinyParams, int64(cut))
				ms = append(ms, newestManifest(t, st))
			}
			var victim string
			for _, x := range ms[1].Exact.Files {
				if !strings.HasSuffix(x.Name, ".run") {
					continue
				}
				if slices.ContainsFunc(ms[3].Exact.Files, func(y checkpoint.ExactFile) bool { return y.Key == x.Key }) {
					victim = x.Key
				}
			}
			if victim == "" {
				t.Fatal("no run file named by every kept manifest")
			}
			path := objectPath(bucket, victim)
			if damage == "removed" {
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
			} else {
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				for i := range 4 {
					b[(len(b)/2+i*13)%len(b)] ^= 1 << i
				}
				if err := os.WriteFile(path, b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			st2, reg := exactMemoryOf(t, kind, url, t.TempDir(), 300, nil)
			h2, g, r := take(t, st2, tinyParams)
			if r.Sequence != ms[3].Seq || r.InputOffset != 4020 {
				t.Fatalf("restored %d at %d, want %d at 4020", r.Sequence, r.InputOffset, ms[3].Seq)
			}
			verified := 0
			for _, x := range ms[3].Generations {
				if x.ExactGen != 0 || len(x.ExactGens) > 0 {
					verified++
				}
			}
			if len(r.Lost) != verified || verified == 0 {
				t.Fatalf("lost %+v, want the %d generations the store verified", r.Lost, verified)
			}
			for _, lg := range r.Lost {
				if !lg.ExactOnly || lg.RebuiltFrom(0) {
					t.Fatalf("lost %+v, want exact only, not rebuilt", lg)
				}
			}
			encode := encodeFilter
			if kind == KindFingerprint {
				encode = encodeTables
			}
			sameEncoding(t, "filter without its exact store", encode(t, g), encode(t, f))
			tr2 := tr.clone()
			for i, rec := range recs[4020:] {
				if got, want := g.TestAndAdd([]byte(rec.key), rec.ts), tr2.answer(g, rec.key); want && !got {
					t.Fatalf("record %d: a repeat answered unseen (false negative)", 4020+i)
				}
			}
			if n := counterValue(t, reg, "bloomgate_exact_positives_total", map[string]string{"result": "unverified"}); n == 0 {
				t.Error("no positive counted unverified")
			}
			commitT(t, h2, g, tinyParams, int64(len(recs)))
			m := newestManifest(t, st2)
			if m.Exact == nil || slices.ContainsFunc(m.Exact.Files, func(x checkpoint.ExactFile) bool { return x.Key == victim }) {
				t.Fatalf("manifest %d: exact %+v names the bad file %s", m.Seq, m.Exact, victim)
			}
		})
	}
}

// offsetOf is the input offset of the last manifest of ms (0: none).
func offsetOf(ms []*checkpoint.Manifest) int {
	if len(ms) == 0 {
		return 0
	}
	return int(ms[len(ms)-1].InputOffset)
}

// TestRebuildProperty: over random plans, --max-time-jump settings and
// streams (late records, clamped far-future stamps, repeats of every age,
// rotations, gaps), with checkpoints at random points, every object of one
// random generation is removed. Whatever the restore takes (the newest
// checkpoint in part, or an older one whole), rebuilding as the worker does
// and replaying the rest of the input gives a filter byte-identical to the
// original; and a rebuild that starts later (retention) holds every key of
// the retained records filed into the lost generation. (An older
// checkpoint is taken whole when the lost generation is newer than it.)
func TestRebuildProperty(t *testing.T) {
	t.Parallel()
	trials := 40
	if testing.Short() {
		trials = 8
	}
	partial := 0
	for trial := range trials {
		r := rand.New(rand.NewPCG(uint64(trial), 99))
		params := worker.FilterParams{Window: time.Duration(1+r.IntN(2)) * time.Hour, Generations: []int{2, 3, 4, 6}[r.IntN(4)],
			Capacity: 2_000, FPR: 0.05}
		jump := []time.Duration{0, time.Minute, 5 * time.Minute}[r.IntN(3)]
		n := 2_000 + r.IntN(3_000)
		recs := make([]record, n)
		filed := make([]uint64, n)
		now := base
		for i := range recs {
			now = now.Add(time.Duration(r.IntN(2_000)) * time.Millisecond)
			if r.IntN(500) == 0 {
				now = now.Add(time.Duration(r.IntN(90)) * time.Minute) // a gap
			}
			ts := now
			switch x := r.IntN(100); {
			case x < 5:
				ts = now.Add(-time.Duration(r.IntN(900)) * time.Second)
			case x == 5:
				ts = now.Add(time.Duration(1+r.IntN(48)) * time.Hour)
			}
			k := i
			if i > 0 && r.IntN(5) == 0 {
				k = r.IntN(i)
			}
			recs[i] = record{fmt.Sprintf("k%d", k), ts}
		}
		cuts := []int{}
		for range 2 + r.IntN(5) {
			cuts = append(cuts, 1+r.IntN(n-1))
		}
		cuts = append(cuts, n)
		slices.Sort(cuts)
		cuts = slices.Compact(cuts)

		bucket := t.TempDir()
		st := openState(t, "file://"+bucket, nil)
		st.MaxTimeJump = jump
		h, f, _ := take(t, st, params)
		f.ReadingFrom(0, false)
		from := 0
		for _, cut := range cuts {
			for i := from; i < cut; i++ {
				f.TestAndAdd([]byte(recs[i].key), recs[i].ts)
				_, filed[i], _ = f.shard().Newest()
			}
			commitT(t, h, f, params, int64(cut))
			from = cut
		}
		want := encodeFilter(t, f)
		m := newestManifest(t, st)
		victim := m.Generations[r.IntN(len(m.Generations))]
		if r.IntN(2) == 0 {
			// The oldest: most likely named by every kept checkpoint,
			// which makes the restore partial.
			victim = m.Generations[0]
		}
		gens := filepath.Join(bucket, "g", tIn, "0", "gens")
		ents, err := os.ReadDir(gens)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), fmt.Sprintf("%020d-", victim.ID)) {
				os.Remove(filepath.Join(gens, e.Name()))
			}
		}
		for _, l := range victim.Log {
			os.Remove(objectPath(bucket, l.Key))
		}

		st2 := openState(t, "file://"+bucket, nil)
		st2.MaxTimeJump = jump
		_, g, rs := take(t, st2, params)
		if len(rs.Lost) > 0 {
			partial++
		}
		rebuild(t, rs, recs, 0)
		for _, x := range recs[rs.InputOffset:] {
			g.TestAndAdd([]byte(x.key), x.ts)
		}
		sameEncoding(t, fmt.Sprintf("trial %d (%+v, jump %v, lost %+v)", trial, params, jump, rs.Lost), encodeFilter(t, g), want)

		if len(rs.Lost) != 1 || rs.Lost[0].KeysFrom < 0 || rs.Lost[0].KeysFrom+1 >= rs.InputOffset {
			continue
		}
		st3 := openState(t, "file://"+bucket, nil)
		st3.MaxTimeJump = jump
		_, g3, r3 := take(t, st3, params)
		logStart := r3.Lost[0].KeysFrom + 1 + r.Int64N(r3.InputOffset-r3.Lost[0].KeysFrom-1)
		rebuild(t, r3, recs, logStart)
		pos := slices.Index(g3.shard().Spans(nil), bloom.Span{Start: victim.Start.UnixNano(), End: victim.End.UnixNano()})
		for o := logStart; o < r3.InputOffset; o++ {
			if filed[o] == victim.ID && !slices.Contains(g3.shard().Matching(g3.seed.Hash([]byte(recs[o].key)), nil), pos) {
				t.Fatalf("trial %d: record %d, filed into lost generation %d, missing after a rebuild from %d", trial, o, victim.ID, logStart)
			}
		}
	}
	if partial < trials/4 {
		t.Errorf("only %d of %d trials restored in part", partial, trials)
	}
	t.Logf("%d of %d trials restored in part", partial, trials)
}
