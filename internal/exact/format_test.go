package exact

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// goldenRun is the run the golden file holds: ten hashes of generation 7.
func goldenRun(t *testing.T) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "r.run")
	w, err := createRun(path, 7)
	if err != nil {
		t.Fatal(err)
	}
	hs := make([]Hash, 10)
	for i := range hs {
		hs[i] = hashN(7, uint64(i))
	}
	sortHashes(hs)
	for _, h := range hs {
		if err := w.add(h.halves()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.finish(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sortHashes(hs []Hash) {
	for i := 1; i < len(hs); i++ {
		for j := i; j > 0 && bytes.Compare(hs[j][:], hs[j-1][:]) < 0; j-- {
			hs[j], hs[j-1] = hs[j-1], hs[j]
		}
	}
}

// TestGoldenFormat pins the run file and manifest formats: a change that
// makes stored checkpoints unreadable fails here (then change LayoutName,
// and keep reading the old layout or say why not).
func TestGoldenFormat(t *testing.T) {
	run := goldenRun(t)
	m := &manifest{Layout: LayoutName, Floor: 5, NextSeq: 9, Runs: []runRecord{{Name: runName(7, 8), Gen: 7, Keys: 10}}}
	man, err := encodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []struct {
		file string
		got  []byte
	}{{"run-v1.run", run}, {"manifest-v1.json", man}} {
		path := filepath.Join("testdata", g.file)
		if *update {
			if err := os.WriteFile(path, g.got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update to create it)", err)
		}
		if !bytes.Equal(g.got, want) {
			t.Errorf("%s: this build writes other bytes than the golden file", g.file)
		}
	}
	// And the golden files read back.
	golden, _ := os.ReadFile(filepath.Join("testdata", "run-v1.run"))
	r, err := parseRun("run-v1.run", golden)
	if err != nil {
		t.Fatal(err)
	}
	if r.gen != 7 || r.n != 10 {
		t.Errorf("golden run: generation %d, %d hashes; want 7, 10", r.gen, r.n)
	}
	for i := range uint64(10) {
		if !r.has(hashN(7, i)) {
			t.Errorf("golden run lacks hash %d", i)
		}
	}
	gm, _ := os.ReadFile(filepath.Join("testdata", "manifest-v1.json"))
	if got, err := decodeManifest(gm); err != nil || got.Floor != 5 || got.NextSeq != 9 || len(got.Runs) != 1 {
		t.Errorf("golden manifest: %+v, %v", got, err)
	}
}

// FuzzParseRun: any bytes either fail to parse or give a run whose hashes
// are strictly ascending and each found by has.
func FuzzParseRun(f *testing.F) {
	f.Add(goldenRunBytes(f))
	f.Add([]byte(runMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := parseRun("fuzz", data)
		if err != nil {
			if r != nil {
				t.Fatal("error with a run")
			}
			return
		}
		for i := 0; i < r.n; i++ {
			h := r.at(i)
			if i > 0 {
				p := r.at(i - 1)
				if bytes.Compare(p[:], h[:]) >= 0 {
					t.Fatal("accepted a run out of order")
				}
			}
			if !r.has(h) {
				t.Fatalf("has misses hash %d of %d", i, r.n)
			}
		}
	})
}

func goldenRunBytes(f *testing.F) []byte {
	b, err := os.ReadFile(filepath.Join("testdata", "run-v1.run"))
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// FuzzDecodeManifest: an accepted manifest names only valid run files of
// generations at or above its floor, each once.
func FuzzDecodeManifest(f *testing.F) {
	b, err := os.ReadFile(filepath.Join("testdata", "manifest-v1.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"layout":"bloomgate-exact-runs-v1","floor":0,"next_seq":1,"runs":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decodeManifest(data)
		if err != nil {
			if m != nil {
				t.Fatal("error with a manifest")
			}
			return
		}
		seen := map[string]bool{}
		for _, r := range m.Runs {
			if !validName(r.Name) || !strings.HasSuffix(r.Name, runExt) || seen[r.Name] || r.Gen < m.Floor {
				t.Fatalf("accepted run record %+v", r)
			}
			seen[r.Name] = true
		}
	})
}

// TestRunLookupEdges: lookups below, between and above a run's hashes, and
// hashes sharing their first half (where the fences must not mislead).
func TestRunLookupEdges(t *testing.T) {
	var hs []Hash
	for i := range uint64(1000) {
		hs = append(hs, HashOf(i/7, i)) // runs of 7 equal first halves
	}
	path := filepath.Join(t.TempDir(), "e.run")
	w, err := createRun(path, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if err := w.add(h.halves()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.finish(); err != nil {
		t.Fatal(err)
	}
	r, err := openRun(path, "e.run")
	if err != nil {
		t.Fatal(err)
	}
	defer r.release()
	for _, h := range hs {
		if !r.has(h) {
			t.Fatalf("missing %x", h)
		}
	}
	for _, h := range []Hash{HashOf(0, 1000), HashOf(142, 0), HashOf(500, 0), HashOf(1<<63, 0)} {
		if r.has(h) {
			t.Errorf("found absent %x", h)
		}
	}
}
