package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// exactFiles is a stand-in for an exact store's checkpoint: named files
// with given contents, counting how often each is read.
type exactFiles struct {
	data  map[string][]byte
	reads map[string]*atomic.Int64
}

func newExactFiles(kv ...string) *exactFiles {
	f := &exactFiles{data: map[string][]byte{}, reads: map[string]*atomic.Int64{}}
	for i := 0; i+1 < len(kv); i += 2 {
		f.data[kv[i]] = []byte(kv[i+1])
		f.reads[kv[i]] = new(atomic.Int64)
	}
	return f
}

func (f *exactFiles) checkpoint(next uint64) *ExactCheckpoint {
	ec := &ExactCheckpoint{Layout: "test-layout", Floor: 1, NextGen: next, Keys: int64(len(f.data))}
	names := make([]string, 0, len(f.data))
	for n := range f.data {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		b := f.data[n]
		sum := sha256.Sum256(b)
		reads := f.reads[n]
		ec.Files = append(ec.Files, ExactSource{Name: n, Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:]),
			Open: func() (io.ReadCloser, error) { reads.Add(1); return io.NopCloser(bytes.NewReader(b)), nil }})
	}
	return ec
}

// readExact reads every exact file of m through Restore's opener.
func readExact(m *Manifest, open func(ctx context.Context, g GenerationRef) (io.ReadCloser, error)) (map[string][]byte, error) {
	got := map[string][]byte{}
	if m.Exact == nil {
		return got, nil
	}
	for _, f := range m.Exact.Files {
		r, err := open(context.Background(), f.Ref())
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(r)
		cerr := r.Close()
		if err != nil {
			return nil, err
		}
		if cerr != nil {
			return nil, cerr
		}
		got[f.Name] = b
	}
	return got, nil
}

// TestExactLifecycle: the exact store's files are uploaded once (a file a
// previous manifest lists is referenced), named by content, restored
// byte-exact through the generations' opener, kept by retention while a
// retained manifest lists them and collected after; ExactGen follows the
// generation also where its object is reused.
func TestExactLifecycle(t *testing.T) {
	for _, b := range backends()[:2] {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			o := testOptions(nil)
			o.OrphanGrace = time.Nanosecond
			o.Retain = 2
			s := openT(t, b.url(t), o)
			p := s.Partition("g", "t", 0)
			if err := p.Claim(ctx, "w"); err != nil {
				t.Fatal(err)
			}
			files := newExactFiles("MANIFEST", "m1", "a.run", "aaaa", "b.run", "bbbb")
			sealed := gen(1, true, 1, 1000)
			sealed.ExactGen = 1
			st := state{offset: 10, gens: []Generation{sealed, gen(2, false, 2, 1000)}}
			st.gens[1].ExactGen = 2
			cp := st.checkpoint()
			cp.Exact = files.checkpoint(3)
			m1, err := p.Commit(ctx, cp)
			if err != nil {
				t.Fatal(err)
			}
			if m1.Exact == nil || len(m1.Exact.Files) != 3 || m1.Exact.NextGen != 3 || m1.Exact.Layout != "test-layout" {
				t.Fatalf("exact section %+v", m1.Exact)
			}
			for _, f := range m1.Exact.Files {
				if f.Key != "exact/"+f.SHA256 || f.Seq != m1.Seq {
					t.Errorf("file %s stored as %s for seq %d, want exact/<sha256> for %d", f.Name, f.Key, f.Seq, m1.Seq)
				}
			}
			if m1.Generations[0].ExactGen != 1 || m1.Generations[1].ExactGen != 2 {
				t.Errorf("exact generations %d, %d, want 1, 2", m1.Generations[0].ExactGen, m1.Generations[1].ExactGen)
			}
			if m1.Bytes() != m1.Generations[0].Bytes+m1.Generations[1].Bytes+2+4+4 {
				t.Errorf("manifest bytes %d, want generations and exact files", m1.Bytes())
			}

			// Next checkpoint: a.run unchanged, b.run merged away into c.run,
			// a new MANIFEST. Only the new ones are read and uploaded.
			files.data["MANIFEST"] = []byte("m2")
			delete(files.data, "b.run")
			files.data["c.run"] = []byte("cccccc")
			files.reads["c.run"] = new(atomic.Int64)
			st.offset = 20
			cp = st.checkpoint()
			cp.Generations[0].ExactGen = 7 // ExactGen follows the generation, not the stored ref
			cp.Exact = files.checkpoint(4)
			m2, err := p.Commit(ctx, cp)
			if err != nil {
				t.Fatal(err)
			}
			if n := files.reads["a.run"].Load(); n != 1 {
				t.Errorf("a.run read %d times, want once", n)
			}
			if m2.Generations[0].Key != m1.Generations[0].Key || m2.Generations[0].ExactGen != 7 {
				t.Errorf("sealed generation ref %+v, want the stored object with exact generation 7", m2.Generations[0])
			}
			byName := func(m *Manifest, name string) ExactFile {
				for _, f := range m.Exact.Files {
					if f.Name == name {
						return f
					}
				}
				t.Fatalf("%s not in manifest %d", name, m.Seq)
				return ExactFile{}
			}
			if a1, a2 := byName(m1, "a.run"), byName(m2, "a.run"); a2 != a1 {
				t.Errorf("a.run ref %+v, want the first upload's %+v", a2, a1)
			}

			// Restore gets back every file.
			var got map[string][]byte
			_, err = s.Partition("g", "t", 0).Restore(ctx, func(m *Manifest, open func(ctx context.Context, g GenerationRef) (io.ReadCloser, error)) error {
				var err error
				got, err = readExact(m, open)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			for n, want := range files.data {
				if !bytes.Equal(got[n], want) {
					t.Errorf("restored %s = %q, want %q", n, got[n], want)
				}
			}

			// Two more commits: m1 leaves retention; b.run and the first
			// MANIFEST, listed by m1 only, go; a.run stays.
			for i := range 2 {
				files.data["MANIFEST"] = []byte(fmt.Sprint("m", 3+i))
				st.offset += 10
				cp = st.checkpoint()
				cp.Exact = files.checkpoint(4)
				if _, err := p.Commit(ctx, cp); err != nil {
					t.Fatal(err)
				}
			}
			keys := listKeys(t, s, p.dir+"/exact/")
			has := func(name string, m *Manifest) bool { return slices.Contains(keys, p.dir+"/"+byName(m, name).Key) }
			if !has("a.run", m2) || !has("c.run", m2) {
				t.Errorf("files of a retained manifest collected: %v", keys)
			}
			if has("b.run", m1) || has("MANIFEST", m1) {
				t.Errorf("files only an expired manifest listed were kept: %v", keys)
			}

			rep, err := Inspect(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			pr := rep.Partitions[0]
			if pr.Exact == nil || pr.ExactBytes != 2+4+6 || len(pr.Exact.Files) != 3 {
				t.Errorf("inspect: exact %+v, %d bytes", pr.Exact, pr.ExactBytes)
			}
		})
	}
}

// TestExactCorruptFallsBack: a missing or altered exact store file makes
// the manifest unusable, and Restore falls back to the previous one as for
// a corrupt generation.
func TestExactCorruptFallsBack(t *testing.T) {
	for _, damage := range []string{"altered", "missing"} {
		t.Run(damage, func(t *testing.T) {
			ctx := context.Background()
			s := openT(t, "file://"+t.TempDir(), testOptions(nil))
			p := s.Partition("g", "t", 0)
			if err := p.Claim(ctx, "w"); err != nil {
				t.Fatal(err)
			}
			st := state{offset: 10, gens: []Generation{gen(1, false, 1, 100)}}
			cp := st.checkpoint()
			cp.Exact = newExactFiles("MANIFEST", "m1", "a.run", "aaaa").checkpoint(2)
			if _, err := p.Commit(ctx, cp); err != nil {
				t.Fatal(err)
			}
			st.offset = 20
			cp = st.checkpoint()
			cp.Exact = newExactFiles("MANIFEST", "m2", "a.run", "aaaa", "b.run", "bbbb").checkpoint(2)
			m, err := p.Commit(ctx, cp)
			if err != nil {
				t.Fatal(err)
			}
			var bad ExactFile
			for _, f := range m.Exact.Files {
				if f.Name == "b.run" {
					bad = f
				}
			}
			key := p.dir + "/" + bad.Key
			if damage == "missing" {
				if err := s.bkt.Delete(ctx, key); err != nil {
					t.Fatal(err)
				}
			} else {
				mutateObject(t, s, key, func(b []byte) []byte { b[0] ^= 1; return b })
			}
			var errs []error
			got, err := s.Partition("g", "t", 0).Restore(ctx, func(m *Manifest, open func(ctx context.Context, g GenerationRef) (io.ReadCloser, error)) error {
				_, err := readExact(m, open)
				errs = append(errs, err)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if got.InputOffset != 10 || len(errs) != 2 || !errors.Is(errs[0], ErrCorrupt) {
				t.Fatalf("restored offset %d after %v, want the previous checkpoint (10) after ErrCorrupt", got.InputOffset, errs)
			}
		})
	}
}

// TestExactManifestValidation: exact file records that name objects
// outside exact/ or lack a digest are corrupt manifests.
func TestExactManifestValidation(t *testing.T) {
	for _, f := range []ExactFile{
		{Name: "a.run", Size: 1, SHA256: strings.Repeat("a", 64), Key: "gens/" + strings.Repeat("a", 64)},
		{Name: "a.run", Size: 1, SHA256: strings.Repeat("a", 64), Key: "exact/../x"},
		{Name: "a.run", Size: 1, SHA256: "ab", Key: "exact/ab"},
		{Name: "", Size: 1, SHA256: strings.Repeat("a", 64), Key: "exact/" + strings.Repeat("a", 64)},
		{Name: "a.run", Size: -1, SHA256: strings.Repeat("a", 64), Key: "exact/" + strings.Repeat("a", 64)},
	} {
		m := goldenManifest()
		m.Exact = &ExactState{Layout: "x", Files: []ExactFile{f}}
		data, err := encodeManifest(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeManifest(data); !errors.Is(err, ErrCorrupt) {
			t.Errorf("exact file %+v: %v, want ErrCorrupt", f, err)
		}
	}
}

// TestLoaderLocalFailure: a loader failing for a local reason (ErrLocal)
// ends Restore at once; older manifests are not tried.
func TestLoaderLocalFailure(t *testing.T) {
	ctx := context.Background()
	s := openT(t, "mem://local-failure", testOptions(nil))
	p := s.Partition("g", "t", 0)
	if err := p.Claim(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{10, 20} {
		if _, err := p.Commit(ctx, state{offset: off, gens: []Generation{gen(1, false, 1, 100)}}.checkpoint()); err != nil {
			t.Fatal(err)
		}
	}
	calls := 0
	_, err := s.Partition("g", "t", 0).Restore(ctx, func(*Manifest, func(context.Context, GenerationRef) (io.ReadCloser, error)) error {
		calls++
		return fmt.Errorf("%w: disk full", ErrLocal)
	})
	if !errors.Is(err, ErrLocal) || errors.Is(err, ErrNoUsableCheckpoint) || calls != 1 {
		t.Fatalf("Restore: %v after %d loads, want ErrLocal after one", err, calls)
	}
}
