package bloom

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

var goldenCfg = Config{Window: 2 * time.Hour, Generations: 3, Capacity: 40_000, FPR: 0.01}

// goldenShard feeds a fixed (key, timestamp) sequence: generation A is
// filled past its capacity (one dense sub-filter stored raw, one sparse
// overflow stored zstd), generation B holds a few keys (zstd and all-zero
// pages).
func goldenShard(t testing.TB) *Shard {
	s, err := NewShard(goldenCfg)
	if err != nil {
		t.Fatal(err)
	}
	g := keyGen{seed: 300}
	for i := uint64(0); i < 30_000; i++ {
		s.TestAndAdd(g.hash(i), at(time.Hour, 490_000, time.Duration(i)*time.Millisecond))
	}
	for i := uint64(30_000); i < 30_100; i++ {
		s.TestAndAdd(g.hash(i), at(time.Hour, 490_001, time.Duration(i)*time.Millisecond))
	}
	return s
}

func encodeSnapshot(t testing.TB, s *Shard) [][]byte {
	sn := s.Snapshot()
	defer sn.Release()
	var out [][]byte
	for _, g := range sn.Generations {
		var b bytes.Buffer
		n, err := g.WriteTo(&b)
		if err != nil || n != int64(b.Len()) {
			t.Fatalf("encoding generation %d: n=%d len=%d err=%v", g.ID, n, b.Len(), err)
		}
		out = append(out, b.Bytes())
	}
	return out
}

func TestGolden(t *testing.T) {
	s := goldenShard(t)
	st := s.Stats()
	if len(st.Generations) != 2 || st.Generations[0].Stacks != 1 {
		t.Fatalf("golden shard shape changed: %+v", st.Generations)
	}
	enc := encodeSnapshot(t, s)
	var gens []*Generation
	for i, b := range enc {
		path := filepath.Join("testdata", "generation_v1_"+string(rune('a'+i))+".bin")
		if *update {
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test -run TestGolden -update to create)", err)
		}
		// The decoder must read the pinned bytes whatever the encoder does today.
		g, err := DecodeGeneration(bytes.NewReader(want), 0)
		if err != nil {
			t.Fatalf("decoding %s: %v", path, err)
		}
		gens = append(gens, g)
		if !bytes.Equal(b, want) {
			t.Errorf("%s: encoding differs from the golden file (format v1 changed? zstd upgraded? rerun with -update only if intended)", path)
		}
	}
	r, err := RestoreShard(goldenCfg, gens)
	if err != nil {
		t.Fatal(err)
	}
	g := keyGen{seed: 300}
	for i := uint64(0); i < 30_100; i++ {
		if !r.Test(g.hash(i)) {
			t.Fatalf("key %d lost through the golden file", i)
		}
	}
	if got := r.Stats(); got.Inserts != st.Inserts || got.Stacks != st.Stacks || got.Bytes != st.Bytes {
		t.Fatalf("restored stats %+v, want %+v", got, st)
	}
}

func TestEncodeDecodeEncode(t *testing.T) {
	s := goldenShard(t)
	first := encodeSnapshot(t, s)
	r, err := RestoreShard(goldenCfg, decodeAll(t, first))
	if err != nil {
		t.Fatal(err)
	}
	second := encodeSnapshot(t, r)
	for i := range first {
		if !bytes.Equal(first[i], second[i]) {
			t.Fatalf("generation %d: encode → decode → encode differs", i)
		}
	}
	// Restored and original shards evolve identically.
	g := keyGen{seed: 301}
	for i := uint64(0); i < 20_000; i++ {
		ts := at(time.Hour, 490_001+int64(i/5_000), 0)
		if a, b := s.TestAndAdd(g.hash(i), ts), r.TestAndAdd(g.hash(i), ts); a != b {
			t.Fatalf("key %d: original %v, restored %v", i, a, b)
		}
	}
	x, y := encodeSnapshot(t, s), encodeSnapshot(t, r)
	for i := range x {
		if !bytes.Equal(x[i], y[i]) {
			t.Fatalf("generation %d differs after continuing", i)
		}
	}
}

func TestDeterministicEncoding(t *testing.T) {
	a, b := encodeSnapshot(t, goldenShard(t)), encodeSnapshot(t, goldenShard(t))
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			t.Fatalf("generation %d: same events, different bytes", i)
		}
	}
}

func TestDecodeRejectsDamage(t *testing.T) {
	enc := encodeSnapshot(t, goldenShard(t))
	b := enc[1]
	// Every truncation.
	for n := 0; n < len(b); n += 1 + n/50 {
		g, err := DecodeGeneration(bytes.NewReader(b[:n]), 0)
		if g != nil || !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d bytes: %v, %v", n, g, err)
		}
	}
	// Flipped bits all over the object.
	for i := 0; i < len(b); i += 1 + i/20 {
		c := bytes.Clone(b)
		c[i] ^= 0x10
		g, err := DecodeGeneration(bytes.NewReader(c), 0)
		var fe *FormatError
		if g != nil || !errors.As(err, &fe) {
			t.Fatalf("bit flip at %d: %v, %v", i, g, err)
		}
	}
	// Unknown version.
	c := bytes.Clone(b)
	c[8] = 2
	if _, err := DecodeGeneration(bytes.NewReader(c), 0); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("version 2: %v", err)
	}
	// Size cap.
	if _, err := DecodeGeneration(bytes.NewReader(enc[0]), 1024); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over maxBytes: %v", err)
	}
	// Reader errors pass through wrapped.
	boom := errors.New("boom")
	if _, err := DecodeGeneration(&failingReader{b: b[:100], err: boom}, 0); !errors.Is(err, boom) {
		t.Fatalf("reader error: %v", err)
	}
}

type failingReader struct {
	b   []byte
	err error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, r.err
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

func TestRestoreShardChecks(t *testing.T) {
	enc := encodeSnapshot(t, goldenShard(t))
	g, err := DecodeGeneration(bytes.NewReader(enc[0]), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := RestoreShard(goldenCfg, []*Generation{g, nil}); err == nil {
		t.Fatal("restored a nil generation")
	}
	g2, _ := DecodeGeneration(bytes.NewReader(enc[0]), 0)
	if _, err := RestoreShard(goldenCfg, []*Generation{g, g2}); err == nil {
		t.Fatal("restored the same generation twice")
	}
	// Under another span the same generations are legacy ones, and a
	// duplicate is still refused.
	other := goldenCfg
	other.Window = 3 * time.Hour
	g3, _ := DecodeGeneration(bytes.NewReader(enc[0]), 0)
	if _, err := RestoreShard(other, []*Generation{g2, g3}); err == nil {
		t.Fatal("restored the same legacy generation twice")
	}
	s, err := RestoreShard(other, []*Generation{g})
	if err != nil {
		t.Fatalf("restoring under another span: %v", err)
	}
	if st := s.Stats(); st.Legacy != 1 || len(st.Generations) != 1 || !st.Generations[0].Legacy {
		t.Fatalf("restored under another span: %+v, want one legacy generation", st)
	}
}

// TestSnapshotConcurrentEncode encodes snapshots from other goroutines while
// the owner keeps inserting (run with -race), and checks that each decoded
// snapshot holds exactly the state at snapshot time.
// decodeAll decodes encoded generations, failing the test on any error.
func decodeAll(t *testing.T, encoded [][]byte) []*Generation {
	t.Helper()
	var gens []*Generation
	for _, b := range encoded {
		g, err := DecodeGeneration(bytes.NewReader(b), 0)
		if err != nil {
			t.Fatal(err)
		}
		gens = append(gens, g)
	}
	return gens
}

// encodeInBackground encodes every generation of sn on another goroutine
// into *out, then releases sn; wg tracks the goroutine.
func encodeInBackground(t *testing.T, wg *sync.WaitGroup, sn *Snapshot, out *[]byte) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer sn.Release()
		var b bytes.Buffer
		for _, gs := range sn.Generations {
			if _, err := gs.WriteTo(&b); err != nil {
				t.Error(err)
			}
		}
		*out = b.Bytes()
	}()
}

func TestSnapshotConcurrentEncode(t *testing.T) {
	cfg := Config{Window: time.Hour, Generations: 2, Capacity: 400_000, FPR: 0.01}
	s, err := NewShard(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g := keyGen{seed: 400}
	ts := at(time.Hour, 490_000, 0)
	next := uint64(0)
	insert := func(n uint64) {
		for end := next + n; next < end; next++ {
			s.TestAndAdd(g.hash(next), ts)
		}
	}
	type result struct {
		inserted uint64
		want     []byte // owner-side encoding at snapshot time
		got      []byte // encoded concurrently
	}
	var wg sync.WaitGroup
	results := make([]*result, 3)
	for round := range results {
		insert(50_000)
		want := encodeGenerations(t, s)
		sn := s.Snapshot()
		res := &result{inserted: next, want: want}
		results[round] = res
		encodeInBackground(t, &wg, sn, &res.got)
		insert(30_000) // writes race with the encoder unless pages are cloned
	}
	wg.Wait()
	for i, res := range results {
		if !bytes.Equal(res.want, res.got) {
			t.Fatalf("round %d: concurrent snapshot encoding differs from the state at snapshot time", i)
		}
	}
	// After release the owner writes in place again.
	insert(1000)
	for _, gen := range s.gens {
		for _, f := range gen.subs {
			if f.cow {
				t.Fatal("copy-on-write still active after every snapshot was released")
			}
		}
	}
}

func encodeGenerations(t *testing.T, s *Shard) []byte {
	var b bytes.Buffer
	for _, g := range s.gens {
		if _, err := g.WriteTo(&b); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

func FuzzDecodeGeneration(f *testing.F) {
	// Small seeds only: the fuzzer minimizes every new input, which is slow
	// for the 90 KB golden file.
	a, err := os.ReadFile(filepath.Join("testdata", "generation_v1_a.bin"))
	if err != nil {
		f.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("testdata", "generation_v1_b.bin"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(b[:len(b)/2])
	f.Add(b[:40])
	f.Add(a[:4096])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) { fuzzDecode(t, data, 1<<20) })
}

// FuzzDecodeLazyGeneration decodes into lazy sub-filters (two slabs or
// more): seeds are an empty one (all chunks zero) and one with a key.
func FuzzDecodeLazyGeneration(f *testing.F) {
	lazy := newFilter(1_000_000, 0.01, 6, lazyBlocks)
	f.Add(encodeFilter(f, lazy))
	lazy.TestAndAdd(Hash{1 << 63, 2})
	f.Add(encodeFilter(f, lazy))
	f.Fuzz(func(t *testing.T, data []byte) { fuzzDecode(t, data, 3*slabPages*pageBytes) })
}

// fuzzDecode checks that data decodes to a generation that re-encodes and
// decodes again, or fails with a *FormatError and no generation.
func fuzzDecode(t *testing.T, data []byte, maxBytes int64) {
	g, err := DecodeGeneration(bytes.NewReader(data), maxBytes)
	if err != nil {
		if g != nil {
			t.Fatal("error with a non-nil generation")
		}
		var fe *FormatError
		if !errors.As(err, &fe) {
			t.Fatalf("untyped error: %v", err)
		}
		return
	}
	var b bytes.Buffer
	if _, err := g.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeGeneration(&b, maxBytes); err != nil {
		t.Fatalf("re-encoded generation does not decode: %v", err)
	}
}

func TestRestoreShardDropsStaleGenerations(t *testing.T) {
	enc := encodeSnapshot(t, goldenShard(t)) // generations 490000 and 490001
	s, _ := NewShard(goldenCfg)
	s.TestAndAdd(HashKey([]byte("late")), at(time.Hour, 490_003, 0))
	enc = append(enc, encodeSnapshot(t, s)...)
	r, err := RestoreShard(goldenCfg, decodeAll(t, enc))
	if err != nil {
		t.Fatal(err)
	}
	st := r.Stats()
	if len(st.Generations) != 2 || st.Generations[0].ID != 490_001 || st.Generations[1].ID != 490_003 {
		t.Fatalf("restored generations %+v, want 490001 and 490003 (G = 3)", st.Generations)
	}
}
