package exact

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

func TestAddHas(t *testing.T) {
	s := openT(t, t.TempDir(), Options{FlushKeys: 10})
	for g := uint64(10); g < 13; g++ {
		for i := range uint64(100) {
			mustAdd(t, s, g, hashN(g, i))
		}
	}
	tests := []struct {
		name string
		gen  uint64
		h    Hash
		want bool
	}{
		{"added", 11, hashN(11, 5), true},
		{"added, newest generation, still buffered", 12, hashN(12, 99), true},
		{"other generation", 10, hashN(11, 5), false},
		{"never added", 11, hashN(11, 1000), false},
		{"generation never added to", 9, hashN(10, 1), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustHas(t, s, tt.gen, tt.h); got != tt.want {
				t.Errorf("Has(%d, …) = %v, want %v", tt.gen, got, tt.want)
			}
		})
	}
	if !mustContain(t, s, hashN(10, 3)) || mustContain(t, s, hashN(10, 300)) {
		t.Error("Contains: want true for an added hash, false for another")
	}
	if got, want := s.Generations(), []uint64{10, 11, 12}; !slices.Equal(got, want) {
		t.Errorf("Generations = %v, want %v", got, want)
	}
}

func TestAddBatch(t *testing.T) {
	s := openT(t, t.TempDir(), Options{FlushKeys: 64})
	hs := make([]Hash, 1000)
	for i := range hs {
		hs[i] = hashN(1, uint64(i))
	}
	if err := s.AddBatch(7, hs); err != nil {
		t.Fatal(err)
	}
	for i, h := range hs {
		if !mustHas(t, s, 7, h) {
			t.Fatalf("hash %d of the batch not found", i)
		}
	}
}

func TestAddRefused(t *testing.T) {
	s := openT(t, t.TempDir(), Options{})
	mustAdd(t, s, 5, hashN(0, 1))
	if err := s.DropBefore(5); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(4, hashN(0, 2)); !errors.Is(err, ErrDropped) {
		t.Errorf("Add below the floor: err = %v, want ErrDropped", err)
	}
	if err := s.AddBatch(4, []Hash{hashN(0, 2)}); !errors.Is(err, ErrDropped) {
		t.Errorf("AddBatch below the floor: err = %v, want ErrDropped", err)
	}
}

func TestDropBefore(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{FlushKeys: 7})
	if err != nil {
		t.Fatal(err)
	}
	for g := uint64(1); g <= 4; g++ {
		for i := range uint64(50) {
			mustAdd(t, s, g, hashN(g, i))
		}
	}
	if err := s.DropBefore(3); err != nil {
		t.Fatal(err)
	}
	if err := s.DropBefore(2); err != nil { // below the floor: nothing
		t.Fatal(err)
	}
	check := func(s *Store) {
		t.Helper()
		for g := uint64(1); g <= 4; g++ {
			want := g >= 3
			for i := range uint64(50) {
				if got := mustHas(t, s, g, hashN(g, i)); got != want {
					t.Fatalf("Has(%d, #%d) = %v, want %v", g, i, got, want)
				}
				if got := mustContain(t, s, hashN(g, i)); got != want {
					t.Fatalf("Contains(#%d of %d) = %v, want %v", i, g, got, want)
				}
			}
		}
		if got := s.Generations(); !slices.Equal(got, []uint64{3, 4}) {
			t.Errorf("Generations = %v, want [3 4]", got)
		}
		if got := s.Floor(); got != 3 {
			t.Errorf("Floor = %d, want 3", got)
		}
	}
	check(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir, Options{})
	check(s)
	if err := s.Add(2, hashN(2, 0)); !errors.Is(err, ErrDropped) {
		t.Errorf("after reopening, Add below the floor: err = %v, want ErrDropped", err)
	}
}

// TestDropFreesDisk: dropping generations deletes their run files at once.
func TestDropFreesDisk(t *testing.T) {
	s := openT(t, t.TempDir(), Options{FlushKeys: 1000})
	fill(t, s, 20000, 1, 2, 3, 4)
	var files []string
	for _, g := range []uint64{1, 2} {
		for name := range runsOf(s, g) {
			files = append(files, filepath.Join(s.dir, name))
		}
	}
	if len(files) == 0 {
		t.Fatal("no runs for generations 1 and 2")
	}
	before := s.Stats().DiskBytes
	if err := s.DropBefore(3); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, err := os.Stat(f); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("run %s of a dropped generation: stat err = %v, want not exist", f, err)
		}
	}
	if after := s.Stats().DiskBytes; after >= before*3/5 {
		t.Errorf("disk bytes %d after dropping half the generations, %d before", after, before)
	}
	if len(runsOf(s, 3)) == 0 {
		t.Error("generation 3 lost its runs")
	}
}

func TestReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustAdd(t, s, 1, hashN(0, 1)) // buffered only: Close must apply and flush it
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(1, hashN(0, 2)); !errors.Is(err, ErrClosed) {
		t.Errorf("Add after Close: %v, want ErrClosed", err)
	}
	if _, err := s.Has(1, hashN(0, 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("Has after Close: %v, want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	s = openT(t, dir, Options{})
	if !mustHas(t, s, 1, hashN(0, 1)) {
		t.Error("hash added before Close missing after reopening")
	}
}

func TestOpenRefuses(t *testing.T) {
	t.Run("foreign files", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hi"), 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := Open(dir, Options{})
		if err == nil {
			s.Close()
			t.Fatal("Open of a directory with foreign files: want an error")
		}
		if _, err := os.Stat(filepath.Join(dir, "notes.txt")); err != nil {
			t.Errorf("Open removed a foreign file: %v", err)
		}
	})
	t.Run("not closed", func(t *testing.T) {
		dir := t.TempDir()
		s := openT(t, dir, Options{FlushKeys: 10})
		fill(t, s, 100, 1) // runs on disk, no manifest until Close
		s2, err := Open(dir, Options{})
		if err == nil {
			s2.Close()
			t.Fatal("Open of a directory in use: want an error")
		}
		// A process that died with the store open: no lock, no manifest.
		s.lock.Close()
		s2, err = Open(dir, Options{})
		if err == nil {
			s2.Close()
			t.Fatal("Open of a store that was not closed: want an error")
		}
		if !strings.Contains(err.Error(), "restore it from a checkpoint") {
			t.Errorf("error %q does not say what to do", err)
		}
	})
	t.Run("other layout", func(t *testing.T) {
		dir := t.TempDir()
		s := openT(t, dir, Options{})
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, manifestName)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, bytes.Replace(b, []byte(LayoutName), []byte("bloomgate-exact-runs-v0"), 1), 0o644); err != nil {
			t.Fatal(err)
		}
		if s, err := Open(dir, Options{}); err == nil {
			s.Close()
			t.Fatal("Open of another layout: want an error")
		}
	})
	t.Run("bad options", func(t *testing.T) {
		if _, err := Open(t.TempDir(), Options{FlushKeys: -1}); err == nil {
			t.Fatal("want an error")
		}
	})
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		o    Options
		ok   bool
	}{
		{"zero value", Options{}, true},
		{"small flushes", Options{FlushKeys: 1}, true},
		{"negative flush keys", Options{FlushKeys: -1}, false},
		{"huge flush keys", Options{FlushKeys: 1 << 30}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.o.Validate(); (err == nil) != tt.ok {
				t.Errorf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

// TestMerges: runs of the newest generation are merged by size class, the
// others into one run each; answers do not change.
func TestMerges(t *testing.T) {
	s := openT(t, t.TempDir(), Options{FlushKeys: 100})
	add := func(gen, from, n uint64) {
		t.Helper()
		for i := from; i < from+n; i++ {
			mustAdd(t, s, gen, hashN(gen, i))
		}
	}
	add(1, 0, 4000)  // 40 flushes
	add(1, 1000, 50) // again, into other runs
	if err := s.mergeAll(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := len(runsOf(s, 1)); n > 3*3 {
		t.Errorf("newest generation has %d runs after merging, want at most 9", n)
	}
	add(2, 0, 100)
	if err := s.mergeAll(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := len(runsOf(s, 1)); n != 1 {
		t.Errorf("sealed generation has %d runs, want 1", n)
	}
	for i := range uint64(4000) {
		if !mustHas(t, s, 1, hashN(1, i)) {
			t.Fatalf("hash %d lost in merges", i)
		}
	}
	if mustHas(t, s, 1, hashN(1, 4000)) {
		t.Error("merges invented a hash")
	}
	if st := s.Stats(); st.Keys != 4000+100 {
		t.Errorf("Stats().Keys = %d, want 4100 (duplicates merged away)", st.Keys)
	}
}

// TestLookupsDuringMergesAndDrops: lookups from another goroutine while
// small flushes keep the merger busy and generations are dropped under it.
// A lookup reading a run that a merge or a drop unmapped would crash.
func TestLookupsDuringMergesAndDrops(t *testing.T) {
	s := openT(t, t.TempDir(), Options{FlushKeys: 50})
	const gens, perGen = 12, 3000
	done := make(chan struct{})
	var lookups int
	go func() {
		defer close(done)
		for i := uint64(0); ; i++ {
			select {
			case <-t.Context().Done():
				return
			default:
			}
			g := s.Floor()
			if _, err := s.Contains(hashN(g, i%perGen)); err != nil {
				if errors.Is(err, ErrClosed) {
					return
				}
				t.Error(err)
				return
			}
			if _, err := s.Has(g, hashN(g, i%perGen)); err != nil {
				t.Error(err)
				return
			}
			lookups++
			if g == gens {
				return
			}
		}
	}()
	for g := uint64(1); g <= gens; g++ {
		fill(t, s, perGen, g)
		if g > 2 {
			if err := s.DropBefore(g - 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.DropBefore(gens); err != nil {
		t.Fatal(err)
	}
	<-done
	if err := s.mergeAll(t.Context()); err != nil {
		t.Fatal(err)
	}
	for i := range uint64(perGen) {
		if !mustHas(t, s, gens, hashN(gens, i)) {
			t.Fatalf("hash %d of the last generation lost", i)
		}
	}
	t.Logf("%d lookups ran alongside the merges and drops", lookups)
}

// TestCreate: Create empties a directory for a new store, but removes
// nothing while another store holds it.
func TestCreate(t *testing.T) {
	t.Run("in use", func(t *testing.T) {
		dir := t.TempDir()
		s := openT(t, dir, Options{FlushKeys: 10})
		fill(t, s, 100, 1) // runs on disk
		before, _ := os.ReadDir(dir)
		s2, err := Create(dir, Options{})
		if err == nil {
			s2.Close()
			t.Fatal("Create of a directory in use: want an error")
		}
		if !strings.Contains(err.Error(), "in use by another store") {
			t.Errorf("error %q does not say the directory is in use", err)
		}
		after, _ := os.ReadDir(dir)
		if len(after) != len(before) {
			t.Fatalf("Create removed files of a store in use: %d entries before, %d after", len(before), len(after))
		}
		if !mustHas(t, s, 1, hashN(1, 7)) {
			t.Fatal("the store in use lost a key")
		}
	})
	t.Run("leftovers", func(t *testing.T) {
		dir := t.TempDir()
		s := openT(t, dir, Options{FlushKeys: 10})
		fill(t, s, 100, 1)
		s.lock.Close() // a process that died with the store open
		if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hi"), 0o644); err != nil {
			t.Fatal(err)
		}
		s2, err := Create(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Close()
		if mustHas(t, s2, 1, hashN(1, 7)) {
			t.Error("a created store holds a key of the directory's earlier store")
		}
		if st := s2.Stats(); st.Keys != 0 || st.Runs != 0 {
			t.Errorf("created store: %d keys in %d runs, want none", st.Keys, st.Runs)
		}
	})
}

// TestAddsBelowALegacyGeneration: after a plan change and back, adds can go
// to a generation below a higher one that receives none (a legacy
// generation). The receiving generation is merged by size class, not
// sealed after every flush (which rewrote all of it each time).
func TestAddsBelowALegacyGeneration(t *testing.T) {
	s := openT(t, t.TempDir(), Options{FlushKeys: 10})
	mustAdd(t, s, 5, hashN(5, 1)) // the legacy generation
	const n = 400
	for i := 0; i < n; i += 10 {
		hs := make([]Hash, 10)
		for j := range hs {
			hs[j] = hashN(4, uint64(i+j))
		}
		if err := s.AddBatch(4, hs); err != nil {
			t.Fatal(err)
		}
		if err := s.mergeAll(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	var m dto.Metric
	if err := s.m.written.Write(&m); err != nil {
		t.Fatal(err)
	}
	written := m.GetCounter().GetValue()
	// Merging by class rewrites a hash about log₄(n/FlushKeys) ≈ 2.7
	// times; sealing after every flush rewrote it ~n/(2·FlushKeys) = 20.
	if limit := float64(n * 16 * 5); written > limit {
		t.Errorf("%.0f bytes written for %d adds of 16 bytes (limit %.0f): the receiving generation is rewritten after every flush", written, n, limit)
	}
	for i := range n {
		if !mustHas(t, s, 4, hashN(4, uint64(i))) {
			t.Fatalf("key %d of generation 4 missing", i)
		}
	}
	if !mustHas(t, s, 5, hashN(5, 1)) {
		t.Fatal("the legacy generation lost its key")
	}
}
