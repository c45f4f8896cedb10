package exact

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fill adds n hashes (seeded by gen) to each generation in gens.
func fill(t testing.TB, s *Store, n int, gens ...uint64) {
	t.Helper()
	for _, g := range gens {
		hs := make([]Hash, n)
		for i := range hs {
			hs[i] = hashN(g, uint64(i))
		}
		if err := s.AddBatch(g, hs); err != nil {
			t.Fatal(err)
		}
	}
}

func restoreT(t testing.TB, dir string, files []File, b *bucket, opts Options) *Store {
	t.Helper()
	s, err := Restore(context.Background(), dir, files, b.open, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestCheckpointRestore(t *testing.T) {
	s := openT(t, t.TempDir(), Options{FlushKeys: 1000})
	fill(t, s, 3000, 1, 2, 3)
	if err := s.DropBefore(2); err != nil {
		t.Fatal(err)
	}
	fill(t, s, 500, 4)
	sn := checkpointT(t, s)
	if !slices.Equal(sn.Generations, []uint64{2, 3, 4}) || sn.Floor != 2 {
		t.Errorf("snapshot generations %v floor %d, want [2 3 4] floor 2", sn.Generations, sn.Floor)
	}
	if !slices.IsSortedFunc(sn.Files, func(a, b File) int { return strings.Compare(a.Name, b.Name) }) {
		t.Error("snapshot files not sorted by name")
	}
	b := newBucket()
	b.upload(t, sn)
	// Added after the checkpoint: not in it.
	mustAdd(t, s, 4, hashN(99, 1))

	r := restoreT(t, t.TempDir(), sn.Files, b, Options{})
	if got := r.Generations(); !slices.Equal(got, []uint64{2, 3, 4}) {
		t.Errorf("restored generations %v, want [2 3 4]", got)
	}
	if r.Floor() != 2 {
		t.Errorf("restored floor %d, want 2", r.Floor())
	}
	for _, g := range []uint64{1, 2, 3, 4} {
		n := 3000
		if g == 4 {
			n = 500
		}
		for i := range n + 100 {
			want := g >= 2 && i < n
			if got := mustHas(t, r, g, hashN(g, uint64(i))); got != want {
				t.Fatalf("restored Has(%d, #%d) = %v, want %v", g, i, got, want)
			}
		}
	}
	if mustHas(t, r, 4, hashN(99, 1)) {
		t.Error("a hash added after the checkpoint is in the restored store")
	}
	if err := r.Add(1, hashN(1, 0)); !errors.Is(err, ErrDropped) {
		t.Errorf("restored store accepts adds below its floor: %v", err)
	}
}

func TestSnapshotOutlivesCompaction(t *testing.T) {
	s := openT(t, t.TempDir(), Options{FlushKeys: 1000})
	fill(t, s, 5000, 1)
	sn := checkpointT(t, s)
	// The store merges and deletes its runs; the snapshot's links stay.
	fill(t, s, 5000, 2)
	if err := s.DropBefore(2); err != nil {
		t.Fatal(err)
	}
	if err := s.mergeAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := newBucket()
	b.upload(t, sn)
	r := restoreT(t, t.TempDir(), sn.Files, b, Options{})
	if !mustHas(t, r, 1, hashN(1, 4999)) || mustContain(t, r, hashN(2, 0)) {
		t.Error("snapshot changed after the store compacted")
	}
	if err := sn.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := sn.Open(sn.Files[0].Name); err == nil {
		t.Error("Open after Release: want an error")
	}
}

func TestRestoreCorrupt(t *testing.T) {
	s := openT(t, t.TempDir(), Options{FlushKeys: 1000})
	fill(t, s, 2000, 1)
	good := checkpointT(t, s)
	fill(t, s, 2000, 2)
	sn := checkpointT(t, s)
	b := newBucket()
	b.upload(t, good)
	b.upload(t, sn)

	var runFile File
	for _, f := range sn.Files {
		if strings.HasSuffix(f.Name, runExt) {
			runFile = f
		}
	}
	if runFile.Name == "" {
		t.Fatal("checkpoint has no run")
	}
	withObject := func(f File, data []byte) *bucket {
		c := newBucket()
		for k, v := range b.objects {
			c.objects[k] = v
		}
		c.objects[f] = data
		return c
	}
	without := func(name string) []File {
		return slices.DeleteFunc(slices.Clone(sn.Files), func(f File) bool { return f.Name == name })
	}
	flipped := bytes.Clone(b.objects[runFile])
	flipped[len(flipped)/2] ^= 0x40
	manifest := manifestName
	renamed := slices.Clone(sn.Files)
	for i := range renamed {
		if renamed[i].Name == runFile.Name {
			renamed[i].Name = "../" + runFile.Name
		}
	}

	tests := []struct {
		name    string
		files   []File
		bucket  *bucket
		corrupt bool // errors.Is(err, ErrCorrupt); else the bucket's not-found
	}{
		{"flipped bit in a run", sn.Files, withObject(runFile, flipped), true},
		{"truncated run", sn.Files, withObject(runFile, b.objects[runFile][:runFile.Size-1]), true},
		{"longer run", sn.Files, withObject(runFile, append(bytes.Clone(b.objects[runFile]), 0)), true},
		{"run missing in the bucket", sn.Files, func() *bucket { c := withObject(runFile, nil); delete(c.objects, runFile); return c }(), false},
		{"run missing from the list", without(runFile.Name), b, true},
		{"manifest missing from the list", without(manifest), b, true},
		{"name leaving the directory", renamed, b, true},
		{"empty list", nil, b, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			r, err := Restore(context.Background(), dir, tt.files, tt.bucket.open, Options{})
			if err == nil {
				r.Close()
				t.Fatal("Restore succeeded")
			}
			if r != nil {
				t.Error("Restore returned a store with its error")
			}
			if got := errors.Is(err, ErrCorrupt); got != tt.corrupt {
				t.Errorf("err = %v; errors.Is(err, ErrCorrupt) = %v, want %v", err, got, tt.corrupt)
			}
			if !tt.corrupt && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("err = %v, want the bucket's not-found error wrapped", err)
			}
			// The caller falls back to the older checkpoint, in the same
			// directory.
			r = restoreT(t, dir, good.Files, b, Options{})
			if !mustHas(t, r, 1, hashN(1, 1999)) || mustContain(t, r, hashN(2, 0)) {
				t.Error("fallback restore does not hold the older checkpoint")
			}
		})
	}
}

func TestRestoreReusesLocalFiles(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{FlushKeys: 1000})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, s, 5000, 1)
	sn, err := s.Checkpoint(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b := newBucket()
	b.upload(t, sn)
	sn.Release()
	fill(t, s, 5000, 2) // the local directory moves past the checkpoint
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// A stray file and a stale partial download are removed.
	if err := os.WriteFile(filepath.Join(dir, "0000000000000001-0000000999.run.restoring"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := restoreT(t, dir, sn.Files, b, Options{})
	if mustContain(t, r, hashN(2, 0)) {
		t.Error("restore kept adds made after the checkpoint")
	}
	if !mustHas(t, r, 1, hashN(1, 4999)) {
		t.Error("restore lost a checkpointed hash")
	}
	var runs int
	for _, f := range sn.Files {
		if strings.HasSuffix(f.Name, runExt) {
			runs++
		}
	}
	if b.gets >= len(sn.Files) || runs == 0 {
		t.Errorf("restore read %d of %d files from the bucket (%d runs): want local runs reused", b.gets, len(sn.Files), runs)
	}
	if _, err := os.Stat(filepath.Join(dir, "0000000000000001-0000000999.run.restoring")); !errors.Is(err, fs.ErrNotExist) {
		t.Error("stale partial download not removed")
	}
}

func TestRestoreRefusesOpenDirectory(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{})
	fill(t, s, 10, 1)
	sn := checkpointT(t, s)
	b := newBucket()
	b.upload(t, sn)
	if r, err := Restore(context.Background(), dir, sn.Files, b.open, Options{}); err == nil {
		r.Close()
		t.Fatal("Restore into the directory of an open store: want an error")
	}
	if !mustHas(t, s, 1, hashN(1, 9)) {
		t.Error("the open store was damaged")
	}
}

func TestRestoreCanceled(t *testing.T) {
	s := openT(t, t.TempDir(), Options{})
	fill(t, s, 100, 1)
	sn := checkpointT(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	open := func(context.Context, File) (io.ReadCloser, error) {
		cancel()
		return nil, context.Canceled
	}
	_, err := Restore(ctx, t.TempDir(), sn.Files, open, Options{})
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrCorrupt) {
		t.Errorf("err = %v, want context.Canceled and not ErrCorrupt", err)
	}
}

// TestCheckpointWhileAdding takes checkpoints while another goroutine adds.
// Each restored checkpoint must hold exactly a prefix of the add sequence,
// at least every add that returned before Checkpoint was called, and no
// add that started after it returned.
func TestCheckpointWhileAdding(t *testing.T) {
	s := openT(t, t.TempDir(), Options{FlushKeys: 100})
	const (
		total  = 20000
		perGen = 8000
	)
	genOf := func(i int64) uint64 { return 1 + uint64(i)/perGen }
	var started, added atomic.Int64 // adds that have started, returned
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range int64(total) {
			started.Add(1)
			if err := s.Add(genOf(i), hashN(0, uint64(i))); err != nil {
				t.Error(err)
				return
			}
			added.Add(1)
			if i%1000 == 0 {
				if _, err := s.Contains(hashN(0, uint64(i/2))); err != nil {
					t.Error(err)
					return
				}
			}
		}
	})
	type taken struct {
		sn     *Snapshot
		lo, hi int64
	}
	var snaps []taken
	b := newBucket()
	for _, at := range []int64{1000, 5000, 9000, 13000, 17000} {
		for added.Load() < at && !t.Failed() {
			time.Sleep(100 * time.Microsecond)
		}
		lo := added.Load()
		sn := checkpointT(t, s)
		hi := started.Load()
		b.upload(t, sn)
		snaps = append(snaps, taken{sn, lo, hi})
	}
	wg.Wait()
	var cut int
	for i, tk := range snaps {
		r := restoreT(t, t.TempDir(), tk.sn.Files, b, Options{})
		// The prefix length k: adds 0..k-1 present, the rest absent.
		k := int64(0)
		for k < total && mustHas(t, r, genOf(k), hashN(0, uint64(k))) {
			k++
		}
		if k < tk.lo || k > tk.hi {
			t.Errorf("checkpoint %d holds the first %d adds, want between %d and %d", i, k, tk.lo, tk.hi)
		}
		if k < tk.hi {
			cut++
		}
		for j := k; j < total; j++ {
			if mustHas(t, r, genOf(j), hashN(0, uint64(j))) {
				t.Fatalf("checkpoint %d holds add %d but not add %d: not a prefix", i, j, k)
			}
		}
		r.Close()
	}
	t.Logf("%d of %d checkpoints were cut while adds went on", cut, len(snaps))
}

// TestSealedGenerationUploadedOnce: once a generation is no longer the
// newest and it has been merged into one run, that run appears unchanged in
// every later checkpoint until it is dropped, so it is uploaded once;
// dropping an older generation does not rewrite it either.
func TestSealedGenerationUploadedOnce(t *testing.T) {
	s := openT(t, t.TempDir(), Options{FlushKeys: 1000})
	const keep = 2                // generations in the window
	sealed := map[string]uint64{} // run file → generation, of sealed generations
	var prev []File
	for gen := uint64(1); gen <= 5; gen++ {
		// Rotation: gen is the newest from here on; the one before is
		// sealed, the one leaving the window dropped.
		fill(t, s, 1000, gen)
		if gen > keep {
			if err := s.DropBefore(gen - keep + 1); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.mergeAll(context.Background()); err != nil {
			t.Fatal(err)
		}
		for i := range 4 {
			fill(t, s, 8000, gen) // the live generation grows and compacts
			sn := checkpointT(t, s)
			for _, f := range NewFiles(sn.Files, prev) {
				if g, ok := sealed[f.Name]; ok {
					t.Errorf("generation %d, checkpoint %d: run %s of sealed generation %d uploaded again", gen, i, f.Name, g)
				}
			}
			for name, g := range sealed {
				if g < sn.Floor {
					continue
				}
				if !slices.ContainsFunc(sn.Files, func(f File) bool { return f.Name == name }) {
					t.Errorf("generation %d, checkpoint %d: run %s of sealed generation %d rewritten", gen, i, name, g)
				}
			}
			prev = sn.Files
			if i == 0 && gen > 1 {
				for name := range runsOf(s, gen-1) {
					sealed[name] = gen - 1
				}
			}
		}
	}
	if len(sealed) == 0 {
		t.Fatal("no sealed runs observed")
	}
}

// TestCutThenDescribe: a snapshot cut on one goroutine and described on
// another while the store goes on (adds, flushes, merges, a drop) holds
// exactly what was added before the cut, and the same files as a
// Checkpoint at that point would.
func TestCutThenDescribe(t *testing.T) {
	s := openT(t, t.TempDir(), Options{FlushKeys: 500})
	fill(t, s, 2000, 1, 2)
	sn, err := s.Cut()
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	if sn.Files != nil {
		t.Fatalf("cut snapshot lists files before Describe: %v", sn.Files)
	}
	if sn.Keys != 4000 {
		t.Errorf("cut snapshot counts %d keys, want 4000", sn.Keys)
	}
	done := make(chan error, 1)
	go func() { done <- sn.Describe(context.Background()) }()
	fill(t, s, 3000, 3)
	if err := s.DropBefore(2); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := sn.Describe(context.Background()); err != nil {
		t.Fatalf("second Describe: %v", err)
	}
	b := newBucket()
	b.upload(t, sn)
	r := restoreT(t, t.TempDir(), sn.Files, b, Options{})
	for _, g := range []uint64{1, 2, 3} {
		for i := range 2000 {
			want := g < 3
			if got := mustHas(t, r, g, hashN(g, uint64(i))); got != want {
				t.Fatalf("restored Has(%d, #%d) = %v, want %v", g, i, got, want)
			}
		}
	}
	if err := sn.Release(); err != nil {
		t.Fatal(err)
	}
	if err := sn.Describe(context.Background()); err != nil {
		t.Errorf("Describe of a described, released snapshot: %v", err)
	}
}
