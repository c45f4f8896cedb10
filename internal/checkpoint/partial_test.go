package checkpoint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomgate/bloomgate/internal/filterplan"
	"github.com/bloomgate/bloomgate/internal/kafkatest"
)

// partialLoader loads every generation with its log chain, and every exact
// store file; in a partial load it hands a generation (or the exact store)
// that does not read to Lose (LoseExact). got[i] is the digest of
// generation i's chain, zero for a lost one.
func partialLoader(got *[][32]byte) func(l *Loading) error {
	return func(l *Loading) error {
		*got = (*got)[:0]
		read := func(ref GenerationRef, h io.Writer) error {
			r, err := l.Open(context.Background(), ref)
			if err != nil {
				return err
			}
			_, err = io.Copy(h, r)
			if cerr := r.Close(); err == nil {
				err = cerr
			}
			return err
		}
		for i, g := range l.Manifest.Generations {
			if g.IsLost() {
				*got = append(*got, [32]byte{})
				continue
			}
			h := sha256.New()
			var err error
			for _, ref := range append([]GenerationRef{g}, logRefs(g)...) {
				if err = read(ref, h); err != nil {
					break
				}
			}
			if err != nil {
				if err := l.Lose(i, err); err != nil {
					return err
				}
				*got = append(*got, [32]byte{})
				continue
			}
			*got = append(*got, [32]byte(h.Sum(nil)))
		}
		if e := l.Manifest.Exact; e != nil {
			for _, f := range e.Files {
				if err := read(f.Ref(), io.Discard); err != nil {
					if err := l.LoseExact(err); err != nil {
						return err
					}
					break
				}
			}
		}
		return nil
	}
}

// damages are the ways an object goes bad in the tests below, on file://.
var damages = []struct {
	name   string
	damage func(t *testing.T, dir, key string)
}{
	{"4 flipped bytes", func(t *testing.T, dir, key string) {
		path := filepath.Join(dir, "g", "t", "0", key)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 4 {
			data[(len(data)/2+i*97)%len(data)] ^= 1 << i
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}},
	{"removed", func(t *testing.T, dir, key string) {
		if err := os.Remove(filepath.Join(dir, "g", "t", "0", key)); err != nil {
			t.Fatal(err)
		}
	}},
	{"truncated", func(t *testing.T, dir, key string) {
		if err := os.Truncate(filepath.Join(dir, "g", "t", "0", key), 100); err != nil {
			t.Fatal(err)
		}
	}},
}

// at is the input point of offset o in these tests.
func at(o int64) *KeysFrom { return &KeysFrom{Offset: o, EventTime: o * 1000} }

// commitAt commits gens at input offset off, whose new generations got
// their keys from input offset from.
func commitAt(t *testing.T, p *Partition, off, from int64, gens ...Generation) *Manifest {
	t.Helper()
	cp := state{offset: off, gens: gens}.checkpoint()
	cp.KeysFrom = at(from)
	m, err := p.Commit(context.Background(), cp)
	if err != nil {
		t.Fatalf("commit at %d: %v", off, err)
	}
	return m
}

// claimT restores nothing and claims a new partition handle.
func claimT(t *testing.T, s *Store) *Partition {
	t.Helper()
	p := s.Partition("g", "t", 0)
	if _, err := p.RestoreWith(context.Background(), partialLoader(new([][32]byte))); err != nil && !errors.Is(err, ErrNoCheckpoint) {
		t.Fatal(err)
	}
	if err := p.Claim(context.Background(), "t"); err != nil {
		t.Fatal(err)
	}
	return p
}

// names lists every object key the manifests in the bucket name.
func namedObjects(t *testing.T, s *Store) map[string][]uint64 {
	t.Helper()
	p := s.Partition("g", "t", 0)
	seqs, err := p.listManifestsRetry(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]uint64{}
	for _, seq := range seqs {
		m, err := p.readManifest(context.Background(), seq)
		if err != nil {
			t.Fatalf("manifest %d: %v", seq, err)
		}
		for _, g := range m.Generations {
			for _, k := range g.objects() {
				out[k] = append(out[k], seq)
			}
		}
		if m.Exact != nil {
			for _, f := range m.Exact.Files {
				out[f.Key] = append(out[f.Key], seq)
			}
		}
	}
	return out
}

// TestPartialRestoreSharedObject: an object every kept manifest names (a
// sealed generation, the live generation's base under a log chain) goes
// bad. Restore finds no usable checkpoint, as before; RestoreWith loads the
// newest manifest with that generation lost and everything else verified,
// Claim writes it without the object, and the next commit uploads the
// generation afresh: no later manifest names the bad object.
func TestPartialRestoreSharedObject(t *testing.T) {
	for _, which := range []string{"sealed", "live base"} {
		for _, d := range damages {
			t.Run(which+"/"+d.name, func(t *testing.T) {
				ctx := context.Background()
				dir := t.TempDir()
				var logs kafkatest.LogBuffer
				o := testOptions(prometheus.NewRegistry())
				o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
				s := openT(t, "file://"+dir, o)
				p := claimT(t, s)
				sealed, live := gen(1, true, 1, 30_000), gen(2, false, 2, 40_000)
				m1 := commitAt(t, p, 100, 0, sealed, live)
				l2 := live
				l2.Log = segment(3, 1600)
				l2.Log.After = m1.Generations[1].Tail()
				m2 := commitAt(t, p, 200, 100, sealed, l2)
				l3 := live
				l3.Log = segment(4, 1600)
				l3.Log.After = m2.Generations[1].Tail()
				m3 := commitAt(t, p, 300, 200, sealed, l3)
				victim, lostIdx := m3.Generations[0].Key, 0
				if which == "live base" {
					victim, lostIdx = m3.Generations[1].Key, 1
				}
				if got := namedObjects(t, s)[victim]; len(got) != 3 {
					t.Fatalf("%s named by manifests %v, want all 3", victim, got)
				}
				d.damage(t, dir, victim)

				if _, err := s.Partition("g", "t", 0).Restore(ctx, loadChains(new([][32]byte))); !errors.Is(err, ErrNoUsableCheckpoint) {
					t.Fatalf("whole restore: %v, want ErrNoUsableCheckpoint", err)
				}
				var got [][32]byte
				p2 := s.Partition("g", "t", 0)
				m, err := p2.RestoreWith(ctx, partialLoader(&got))
				if err != nil {
					t.Fatalf("partial restore: %v", err)
				}
				if m.Seq != m3.Seq || m.InputOffset != 300 {
					t.Fatalf("restored manifest %d at %d, want %d at 300", m.Seq, m.InputOffset, m3.Seq)
				}
				wants := [][32]byte{chainDigest(sealed.Source), chainDigest(live.Source, l2.Log, l3.Log)}
				for i, g := range m.Generations {
					if i == lostIdx {
						if !g.IsLost() || g.Key != "" || len(g.Log) != 0 || got[i] != ([32]byte{}) {
							t.Fatalf("generation %d should be lost: %+v", g.ID, g)
						}
						if g.KeysFrom == nil || g.KeysFrom.Offset != 0 || g.Inserts != m3.Generations[i].Inserts {
							t.Errorf("lost generation lost its record: %+v", g)
						}
						if !strings.Contains(g.Lost, victim) {
							t.Errorf("lost reason %q does not name %s", g.Lost, victim)
						}
						continue
					}
					if g.IsLost() || got[i] != wants[i] {
						t.Fatalf("generation %d: lost %q, digest matches %v", g.ID, g.Lost, got[i] == wants[i])
					}
				}
				if n := strings.Count(logs.String(), "checkpoint object corrupt or missing"); n != 1 || !strings.Contains(logs.String(), "[2 3 4]") {
					t.Errorf("corrupt object logged %d times, or without the manifests naming it:\n%s", n, logs.String())
				}

				// A second partial restore of the same damage does not log
				// the object again (once per store).
				if m, err := s.Partition("g", "t", 0).RestoreWith(ctx, partialLoader(new([][32]byte))); err != nil || !m.Generations[lostIdx].IsLost() {
					t.Fatalf("second partial restore: %v", err)
				}
				if n := strings.Count(logs.String(), "checkpoint object corrupt or missing"); n != 1 {
					t.Errorf("corrupt object logged %d times, want once", n)
				}
				if testing.Verbose() {
					t.Log(logs.String())
				}

				// Claim and commit: the bad object is named by no new manifest.
				if err := p2.Claim(ctx, "t"); err != nil {
					t.Fatal(err)
				}
				named := namedObjects(t, s)
				claimSeq := m3.Seq + 1
				if slices.Contains(named[victim], claimSeq) {
					t.Fatalf("the claim names the bad object %s", victim)
				}
				// The generation as the caller holds it now (empty, rebuilt):
				// the same ID, range and counts as before, other bits.
				rebuilt := []Generation{sealed, live}
				rebuilt[lostIdx].Source = &randSource{seed: 99, size: 30_000}
				rebuilt[1].Log = &GenerationLog{After: m.Generations[1].Tail(), Entries: 1, Source: byteSource("x")}
				m5 := commitAt(t, p2, 400, 300, rebuilt...)
				g := m5.Generations[lostIdx]
				if g.IsLost() || g.Key == victim || g.Seq != m5.Seq || len(g.Log) != 0 {
					t.Fatalf("the lost generation was not uploaded afresh: %+v", g)
				}
				if g.KeysFrom == nil || g.KeysFrom.Offset != 0 {
					t.Errorf("uploaded generation lost its input bound: %+v", g.KeysFrom)
				}
				if slices.Contains(namedObjects(t, s)[victim], m5.Seq) {
					t.Fatalf("manifest %d names the bad object", m5.Seq)
				}
				// And it restores whole again.
				if _, err := s.Partition("g", "t", 0).Restore(ctx, loadChains(new([][32]byte))); err != nil {
					t.Fatalf("whole restore after the new commit: %v", err)
				}
			})
		}
	}
}

// TestPartialRestoreOfClaim: a claim of a partial restore names the lost
// generation without an object; restoring it (before any commit) loads
// whole, with the generation still lost, so that a crash before the rebuild
// was checkpointed rebuilds again.
func TestPartialRestoreOfClaim(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openT(t, "file://"+dir, testOptions(prometheus.NewRegistry()))
	p := claimT(t, s)
	sealed, live := gen(1, true, 1, 30_000), gen(2, false, 2, 40_000)
	m1 := commitAt(t, p, 100, 0, sealed, live)
	damages[0].damage(t, dir, m1.Generations[0].Key)
	p2 := s.Partition("g", "t", 0)
	if _, err := p2.RestoreWith(ctx, partialLoader(new([][32]byte))); err != nil {
		t.Fatal(err)
	}
	if err := p2.Claim(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	var got [][32]byte
	m, err := s.Partition("g", "t", 0).RestoreWith(ctx, partialLoader(&got))
	if err != nil {
		t.Fatalf("restoring the claim: %v", err)
	}
	if !m.Claim || m.Seq != m1.Seq+1 || !m.Generations[0].IsLost() || m.Generations[1].IsLost() || got[1] != chainDigest(live.Source) {
		t.Fatalf("claim %d restored as %+v", m.Seq, m.Generations)
	}
}

// TestPartialOrOlderWhole: when an older manifest loads whole, it is taken
// unless the newer one's lost generations all begin after its offset.
func TestPartialOrOlderWhole(t *testing.T) {
	ctx := context.Background()
	// m1 at 10: A sealed. m2 at 20: A, B live (new: keys from 10).
	// m3 at 30: A, B sealed (uploaded again), C live (new: keys from 20).
	setup := func(t *testing.T) (string, *Store, [3]*Manifest) {
		dir := t.TempDir()
		s := openT(t, "file://"+dir, testOptions(prometheus.NewRegistry()))
		p := claimT(t, s)
		a, b, c := gen(1, true, 1, 20_000), gen(2, false, 2, 20_000), gen(3, false, 3, 20_000)
		m1 := commitAt(t, p, 10, 0, a)
		m2 := commitAt(t, p, 20, 10, a, b)
		b.Sealed = true
		m3 := commitAt(t, p, 30, 20, a, b, c)
		return dir, s, [3]*Manifest{m1, m2, m3}
	}
	t.Run("newest lost a generation that began at the older offset", func(t *testing.T) {
		dir, s, ms := setup(t)
		damages[0].damage(t, dir, ms[2].Generations[2].Key) // C
		m, err := s.Partition("g", "t", 0).RestoreWith(ctx, partialLoader(new([][32]byte)))
		if err != nil {
			t.Fatal(err)
		}
		if m.Seq != ms[1].Seq || m.Generations[1].IsLost() {
			t.Fatalf("restored %d (%+v), want the older whole %d", m.Seq, m.Generations, ms[1].Seq)
		}
	})
	t.Run("newest lost a generation that began after the older whole offset", func(t *testing.T) {
		dir, s, ms := setup(t)
		damages[0].damage(t, dir, ms[1].Generations[1].Key) // B in m2: m2 unusable
		damages[0].damage(t, dir, ms[2].Generations[2].Key) // C in m3
		var got [][32]byte
		m, err := s.Partition("g", "t", 0).RestoreWith(ctx, partialLoader(&got))
		if err != nil {
			t.Fatal(err)
		}
		if m.Seq != ms[2].Seq || !m.Generations[2].IsLost() || m.Generations[0].IsLost() || m.Generations[1].IsLost() {
			t.Fatalf("restored %d (%+v), want %d in part (C lost): rebuilding C reads from 20, the older whole state from 10",
				m.Seq, m.Generations, ms[2].Seq)
		}
		if got[2] != ([32]byte{}) || got[0] == ([32]byte{}) {
			t.Fatal("loader state is not the partial manifest's")
		}
	})
	t.Run("newest lost a generation without a recorded start", func(t *testing.T) {
		dir, s, ms := setup(t)
		damages[0].damage(t, dir, ms[1].Generations[1].Key)
		damages[0].damage(t, dir, ms[2].Generations[2].Key)
		// Rewrite m3 so that C records no start (as written before it was
		// recorded).
		m3 := *ms[2]
		m3.Generations = slices.Clone(m3.Generations)
		m3.Generations[2].KeysFrom = nil
		rewriteManifest(t, s, &m3)
		var got [][32]byte
		m, err := s.Partition("g", "t", 0).RestoreWith(ctx, partialLoader(&got))
		if err != nil {
			t.Fatal(err)
		}
		if m.Seq != ms[0].Seq || got[0] != chainDigest(gen(1, true, 1, 20_000).Source) {
			t.Fatalf("restored %d, want the older whole %d (C could not be rebuilt)", m.Seq, ms[0].Seq)
		}
	})
}

// rewriteManifest replaces a stored manifest (tests only).
func rewriteManifest(t *testing.T, s *Store, m *Manifest) {
	t.Helper()
	data, err := encodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	key := manifestKey(partitionDir("g", "t", 0), m.Seq)
	mutateObject(t, s, key, func([]byte) []byte { return data })
}

// TestPartialRestoreExactFile: a bad exact store file every manifest names
// loses the exact store (the result names none, and no generation an exact
// generation); the filter's generations all load. With an older manifest
// that loads whole, that one is taken.
func TestPartialRestoreExactFile(t *testing.T) {
	ctx := context.Background()
	for _, shared := range []bool{true, false} {
		t.Run(map[bool]string{true: "shared", false: "newest only"}[shared], func(t *testing.T) {
			dir := t.TempDir()
			s := openT(t, "file://"+dir, testOptions(prometheus.NewRegistry()))
			p := claimT(t, s)
			run := exactFile("0000000000000001-0000000001.run", "run-one")
			mf := exactFile("MANIFEST", "manifest-one")
			commit := func(off int64, files ...ExactSource) *Manifest {
				cp := state{offset: off, gens: []Generation{gen(1, true, 1, 10_000), gen(2, false, 2, 10_000)}}.checkpoint()
				cp.Generations[0].ExactGen, cp.Generations[1].ExactGen = 1, 2
				cp.KeysFrom = at(0)
				cp.Exact = &ExactCheckpoint{Layout: "x", Floor: 1, NextGen: 3, Keys: 2, Files: files}
				m, err := p.Commit(ctx, cp)
				if err != nil {
					t.Fatal(err)
				}
				return m
			}
			m1 := commit(10, run, mf)
			m2 := commit(20, run, exactFile("MANIFEST", "manifest-two"))
			victim := m2.Exact.Files[1].Key
			if shared {
				victim = m1.Exact.Files[0].Key
			}
			damages[0].damage(t, dir, victim)
			var got [][32]byte
			m, err := s.Partition("g", "t", 0).RestoreWith(ctx, partialLoader(&got))
			if err != nil {
				t.Fatal(err)
			}
			if !shared {
				if m.Seq != m1.Seq || m.Exact == nil {
					t.Fatalf("restored %d, want the older whole %d with its store", m.Seq, m1.Seq)
				}
				return
			}
			if m.Seq != m2.Seq || m.Exact != nil || m.Generations[0].ExactGen != 0 || m.Generations[1].ExactGen != 0 {
				t.Fatalf("restored %d, exact %+v, generations %+v: want %d without its exact store", m.Seq, m.Exact, m.Generations, m2.Seq)
			}
			for i, g := range m.Generations {
				if g.IsLost() || got[i] == ([32]byte{}) {
					t.Fatalf("generation %d lost with the exact store", g.ID)
				}
			}
		})
	}
}

func exactFile(name, content string) ExactSource {
	sum := sha256.Sum256([]byte(content))
	return ExactSource{Name: name, Size: int64(len(content)), SHA256: hex.EncodeToString(sum[:]),
		Open: func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(content)), nil }}
}

// TestPartialRestoreNothingSound: with every manifest object bad there is
// nothing to load even in part.
func TestPartialRestoreNothingSound(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openT(t, "file://"+dir, testOptions(prometheus.NewRegistry()))
	p := claimT(t, s)
	m1 := commitAt(t, p, 10, 0, gen(1, false, 1, 10_000))
	m2 := commitAt(t, p, 20, 0, gen(1, false, 2, 10_000))
	for _, m := range []*Manifest{m1, m2} {
		mutateObject(t, s, manifestKey(partitionDir("g", "t", 0), m.Seq), func(b []byte) []byte {
			b[len(b)/2] ^= 1
			return b
		})
	}
	_, err := s.Partition("g", "t", 0).RestoreWith(ctx, partialLoader(new([][32]byte)))
	if !errors.Is(err, ErrNoUsableCheckpoint) {
		t.Fatalf("restore: %v, want ErrNoUsableCheckpoint", err)
	}
}

// TestCommitRecordsKeysFrom: a generation new in a commit gets the
// commit's input point; one the last manifest holds keeps its own; one
// lost without a point gets the commit's (it was opened empty at the
// restore); one that rejoins the ring after a plan change and back loses
// its point.
func TestCommitRecordsKeysFrom(t *testing.T) {
	ctx := context.Background()
	s := openT(t, "mem://"+t.Name(), testOptions(prometheus.NewRegistry()))
	p := claimT(t, s)
	a := gen(1, true, 1, 1000)
	m1 := commitAt(t, p, 10, 0, a)
	b := gen(2, false, 2, 1000)
	m2 := commitAt(t, p, 20, 10, a, b)
	if kf := m2.Generations[0].KeysFrom; kf == nil || kf.Offset != 0 {
		t.Errorf("kept generation: %+v, want its own point 0", kf)
	}
	if kf := m2.Generations[1].KeysFrom; kf == nil || *kf != *at(10) {
		t.Errorf("new generation: %+v, want the commit's point", kf)
	}
	// Without a point (keys of another topic came in): new generations
	// have none, kept ones keep theirs.
	cp := state{offset: 30, gens: []Generation{a, b, gen(3, false, 3, 1000)}}.checkpoint()
	m3, err := p.Commit(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	if m3.Generations[2].KeysFrom != nil || m3.Generations[1].KeysFrom == nil {
		t.Errorf("commit without a point: %+v", m3.Generations)
	}
	_ = m1

	// A lost generation without a point takes the next commit's.
	p.last.Generations[2] = p.last.Generations[2].asLost("test")
	m4 := commitAt(t, p, 40, 35, a, b, gen(3, false, 4, 1000))
	if kf := m4.Generations[2].KeysFrom; kf == nil || kf.Offset != 35 {
		t.Errorf("lost generation without a point: %+v, want the commit's 35", kf)
	}

	// A generation of another span (legacy in the last manifest's plan,
	// 1 h in a 24 h/3 plan of 12 h spans) that is a ring generation of
	// the commit's plan loses its point.
	cp = state{offset: 50, gens: []Generation{a, b}}.checkpoint()
	cp.Filter = FilterParams{Params: filterplan.Params{Window: 2 * time.Hour, Generations: 3, Capacity: 1000, FPR: 0.01}} // spans of 1 h
	cp.KeysFrom = at(45)
	m5, err := p.Commit(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	if kf := m5.Generations[0].KeysFrom; kf != nil {
		t.Errorf("generation rejoining the ring kept its point %+v", kf)
	}
}
