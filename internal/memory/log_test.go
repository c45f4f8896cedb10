package memory

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// encodeFilter encodes every generation of f, legacy first, ring oldest
// first.
func encodeFilter(t *testing.T, f worker.Filter) [][]byte {
	t.Helper()
	sn := f.(*filter).shard().Snapshot()
	defer sn.Release()
	var out [][]byte
	for _, g := range sn.Generations {
		var b bytes.Buffer
		if _, err := g.WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		out = append(out, b.Bytes())
	}
	return out
}

func sameEncoding(t *testing.T, what string, got, want [][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d generations, want %d", what, len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("%s: generation %d of %d encodes differently", what, i, len(want))
		}
	}
}

// logFeed is a deterministic input: key i at event time base + i·step.
type logFeed struct {
	step time.Duration
	keys [][]byte
	ts   []time.Time
}

func newLogFeed(n int, step time.Duration) *logFeed {
	f := &logFeed{step: step}
	for i := range n {
		// Every fifth record repeats an earlier key.
		k := uint64(i)
		if i%5 == 4 {
			k = uint64(i / 2)
		}
		f.keys = append(f.keys, binary.LittleEndian.AppendUint64([]byte("key-"), k))
		f.ts = append(f.ts, base.Add(time.Duration(i)*step))
	}
	return f
}

// feed gives records [from, to) to f in batches of 100.
func (l *logFeed) feed(f worker.Filter, from, to int) {
	seen := make([]bool, 100)
	for lo := from; lo < to; lo += 100 {
		hi := min(lo+100, to)
		f.TestAndAddBatch(l.keys[lo:hi], l.ts[lo:hi], seen)
	}
}

// TestLogCheckpointsRestoreIdentical: a partition checkpointed every 100
// records (logs while they pay, whole uploads after rotations, stacks and
// past the share), with failed commits in between, restores from its
// newest manifest byte-identical to the live filter; with the newest log
// segment corrupted it restores the previous manifest, and replaying the
// input from that manifest's offset rebuilds the live filter exactly.
func TestLogCheckpointsRestoreIdentical(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := realState(t, dir)
	// The unkeyed hash: where stacks and whole uploads fall depends on the
	// hashes, and with a random seed the last commit was sometimes a whole
	// upload (no log to test at the end).
	st.UnkeyedHash = true
	// Spans of 1 h at 25,000 records per hour; a generation plans for
	// 15,000 keys and receives ~20,000: each one stacks.
	params := worker.FilterParams{Window: 2 * time.Hour, Generations: 3, Capacity: 30_000, FPR: 0.01}
	const n, every = 60_000, 100
	in := newLogFeed(n, time.Hour/25_000)

	h := st.Partition(tIn, 0)
	if _, err := h.Restore(ctx, params); err == nil {
		t.Fatal("restore of an empty store succeeded")
	}
	if err := h.Claim(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	f, err := st.NewFilter(params)
	if err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	var offsets []int64 // input offsets of the successful commits
	for i, c := 0, 0; i < n; i, c = i+every, c+1 {
		in.feed(f, i, i+every)
		cctx := ctx
		if c%7 == 3 {
			cctx = cancelled // this commit fails; the next one carries its entries
		}
		err := h.Commit(cctx, worker.Checkpoint{InputOffset: int64(i + every), Params: params, Snapshot: f.Snapshot(), Owner: "t"})
		if (err != nil) != (cctx == cancelled) {
			t.Fatalf("commit %d: %v", c, err)
		}
		if err == nil {
			offsets = append(offsets, int64(i+every))
		}
	}
	if f.Stats().OverflowStacks == 0 {
		t.Fatal("no generation stacked")
	}
	gs := inspectFirst(t, dir).Generations
	live := gs[len(gs)-1]
	logs, _ := filepath.Glob(filepath.Join(dir, "g", tIn, "0", "logs", "*"))
	if len(live.Log) == 0 || len(logs) < 20 {
		t.Fatalf("newest manifest's live generation has %d log segments, %d stored: want logs (change the test's sizes)", len(live.Log), len(logs))
	}
	t.Logf("live generation: base %d bytes + %d segments (%d bytes, %d entries); %d segment objects stored",
		live.Bytes, len(live.Log), live.LogBytes(), live.LogEntries(), len(logs))

	want := encodeFilter(t, f)
	r, err := realState(t, dir).Partition(tIn, 0).Restore(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if r.InputOffset != n {
		t.Fatalf("restored offset %d, want %d", r.InputOffset, n)
	}
	sameEncoding(t, "restored from the newest manifest", encodeFilter(t, r.Filter), want)

	// Corrupt the newest segment: the previous manifest is restored, and
	// replay from its offset rebuilds the same filter.
	last := filepath.Join(dir, "g", tIn, "0", live.Log[len(live.Log)-1].Key)
	data, err := os.ReadFile(last)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x40
	if err := os.WriteFile(last, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err = realState(t, dir).Partition(tIn, 0).Restore(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if r.InputOffset >= n || r.InputOffset != offsets[len(offsets)-2] {
		t.Fatalf("restored offset %d after corrupting the newest segment, want the previous checkpoint's %d", r.InputOffset, offsets[len(offsets)-2])
	}
	in.feed(r.Filter, int(r.InputOffset), n)
	sameEncoding(t, "previous manifest + replay", encodeFilter(t, r.Filter), want)
}

// TestLogChainContinuesAfterRestore: a filter restored from a chain (not
// reused) logs onto it at its next commit, and the result restores
// byte-identical.
func TestLogChainContinuesAfterRestore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	params := worker.FilterParams{Window: 2 * time.Hour, Generations: 3, Capacity: 200_000, FPR: 0.01}
	in := newLogFeed(41_000, time.Millisecond)
	st := realState(t, dir)
	h := st.Partition(tIn, 0)
	h.Restore(ctx, params)
	if err := h.Claim(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	f, _ := st.NewFilter(params)
	// A base of 40,000 records, then three logs of 200.
	for from, to := 0, 40_000; to <= 40_600; from, to = to, to+200 {
		in.feed(f, from, to)
		if err := h.Commit(ctx, worker.Checkpoint{InputOffset: int64(to), Params: params, Snapshot: f.Snapshot(), Owner: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	// Another process restores and continues.
	st2 := realState(t, dir)
	h2 := st2.Partition(tIn, 0)
	r, err := h2.Restore(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if err := h2.Claim(ctx, "t2"); err != nil {
		t.Fatal(err)
	}
	in.feed(r.Filter, 40_600, 40_800)
	in.feed(f, 40_600, 40_800)
	if err := h2.Commit(ctx, worker.Checkpoint{InputOffset: 40_800, Params: params, Snapshot: r.Filter.Snapshot(), Owner: "t2"}); err != nil {
		t.Fatal(err)
	}
	gens := inspectFirst(t, dir).Generations
	if n := len(gens[len(gens)-1].Log); n != 4 {
		t.Errorf("live generation has %d log segments, want 4 (3 before the restore, 1 after)", n)
	}
	r2, err := realState(t, dir).Partition(tIn, 0).Restore(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	sameEncoding(t, "restored after a continued chain", encodeFilter(t, r2.Filter), encodeFilter(t, f))
}

// inspectFirst is what checkpoint.Inspect reports of the first partition
// of the file store in dir.
func inspectFirst(t *testing.T, dir string) checkpoint.PartitionReport {
	t.Helper()
	ctx := context.Background()
	cs, err := checkpoint.Open(ctx, "file://"+dir, checkpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	rep, err := checkpoint.Inspect(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Partitions) == 0 {
		t.Fatal("no partition in the checkpoint store")
	}
	return rep.Partitions[0]
}
