package exact

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

func TestAddHas(t *testing.T) {
	s := openT(t, t.TempDir(), Options{BatchKeys: 10})
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
	s := openT(t, t.TempDir(), Options{BatchKeys: 64})
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
	if err := s.Add(MaxGeneration+1, Hash{}); err == nil {
		t.Error("Add to the reserved generation: want an error")
	}
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
	s, err := Open(dir, Options{BatchKeys: 7})
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

// TestDropFreesDisk checks that dropping generations deletes their tables
// (delete-only compactions) rather than leaving them to a later rewrite.
func TestDropFreesDisk(t *testing.T) {
	s := openT(t, t.TempDir(), Options{MemTableBytes: 1 << 20, CacheBytes: 4 << 20})
	const perGen = 20000
	for g := uint64(1); g <= 4; g++ {
		hs := make([]Hash, perGen)
		for i := range hs {
			hs[i] = hashN(g, uint64(i))
		}
		if err := s.AddBatch(g, hs); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	dropped := func() uint64 { return sizeOf(tablesOf(t, s, 1)) + sizeOf(tablesOf(t, s, 2)) }
	before := dropped()
	if before == 0 {
		t.Fatal("no tables for generations 1 and 2")
	}
	if err := s.DropBefore(3); err != nil {
		t.Fatal(err)
	}
	// What may stay is the two small tables holding the range deletions
	// themselves, until a compaction elides them.
	deadline := time.Now().Add(20 * time.Second)
	for {
		left := dropped()
		if left < 8<<10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d bytes of tables of dropped generations still live after 20 s", left, before)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := len(tablesOf(t, s, 3)); n == 0 {
		t.Error("generation 3 lost its tables")
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
		if s, err := Open(dir, Options{}); err == nil {
			s.Close()
			t.Fatal("Open of a directory with foreign files: want an error")
		}
	})
	t.Run("pebble store of another layout", func(t *testing.T) {
		dir := t.TempDir()
		db, err := pebble.Open(dir, &pebble.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Set([]byte("some key"), []byte("v"), pebble.Sync); err != nil {
			t.Fatal(err)
		}
		db.Close()
		s, err := Open(dir, Options{})
		if err == nil {
			s.Close()
			t.Fatal("Open of a foreign pebble store: want an error")
		}
		if !strings.Contains(err.Error(), "not an exact store") {
			t.Errorf("error %q does not say what is wrong", err)
		}
	})
	t.Run("bad options", func(t *testing.T) {
		if _, err := Open(t.TempDir(), Options{BloomBitsPerKey: 99}); err == nil {
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
		{"bloom filters", Options{BloomBitsPerKey: 10}, true},
		{"negative cache", Options{CacheBytes: -1}, false},
		{"tiny memtable", Options{MemTableBytes: 1000}, false},
		{"huge memtable", Options{MemTableBytes: 2 << 30}, false},
		{"cache below two memtables", Options{CacheBytes: 8 << 20, MemTableBytes: 8 << 20}, false},
		{"shared cache ignores cache bytes", Options{Cache: &Cache{}, MemTableBytes: 64 << 20}, true},
		{"bloom bits out of range", Options{BloomBitsPerKey: 33}, false},
		{"negative batch", Options{BatchKeys: -1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.o.Validate(); (err == nil) != tt.ok {
				t.Errorf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestSharedCache(t *testing.T) {
	c, err := NewCache(16 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a := openT(t, t.TempDir(), Options{Cache: c, MemTableBytes: 1 << 20})
	b := openT(t, t.TempDir(), Options{Cache: c, MemTableBytes: 1 << 20})
	mustAdd(t, a, 1, hashN(0, 1))
	mustAdd(t, b, 1, hashN(0, 2))
	if !mustHas(t, a, 1, hashN(0, 1)) || mustHas(t, a, 1, hashN(0, 2)) || !mustHas(t, b, 1, hashN(0, 2)) {
		t.Error("stores sharing a cache see each other's keys or lose their own")
	}
}
