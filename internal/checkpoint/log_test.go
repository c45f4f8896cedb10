package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// byteSource writes fixed bytes (a log segment, opaque here).
type byteSource []byte

func (b byteSource) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(b)
	return int64(n), err
}

func segment(seed byte, n int) *GenerationLog {
	return &GenerationLog{Entries: int64(n / 16), Source: byteSource(bytes.Repeat([]byte{seed}, n))}
}

// loadChains is a Restore loader that reads every generation object and
// its log segments, and records the digest of their concatenation.
func loadChains(got *[][32]byte) func(m *Manifest, open func(ctx context.Context, g GenerationRef) (io.ReadCloser, error)) error {
	return func(m *Manifest, open func(ctx context.Context, g GenerationRef) (io.ReadCloser, error)) error {
		*got = (*got)[:0]
		for _, g := range m.Generations {
			h := sha256.New()
			for _, ref := range append([]GenerationRef{g}, logRefs(g)...) {
				r, err := open(context.Background(), ref)
				if err != nil {
					return err
				}
				if _, err := io.Copy(h, r); err != nil {
					r.Close()
					return err
				}
				if err := r.Close(); err != nil {
					return err
				}
			}
			*got = append(*got, [32]byte(h.Sum(nil)))
		}
		return nil
	}
}

func logRefs(g GenerationRef) []GenerationRef {
	var out []GenerationRef
	for _, l := range g.Log {
		out = append(out, l.Ref())
	}
	return out
}

// chainDigest is the digest of a base source and segments, as loadChains
// computes it.
func chainDigest(base GenerationSource, segs ...*GenerationLog) [32]byte {
	h := sha256.New()
	base.WriteTo(h)
	for _, s := range segs {
		s.Source.WriteTo(h)
	}
	return [32]byte(h.Sum(nil))
}

func TestCommitLogChain(t *testing.T) {
	ctx := context.Background()
	s := openT(t, "mem://"+t.Name(), testOptions(prometheus.NewRegistry()))
	p := s.Partition("g", "t", 0)
	if _, err := p.Restore(ctx, loadChains(new([][32]byte))); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatal(err)
	}
	if err := p.Claim(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	sealed := gen(1, true, 1, 10_000)
	live := gen(2, false, 2, 40_000) // logs up to 10,000 bytes
	commit := func(log *GenerationLog) *Manifest {
		t.Helper()
		l := live
		l.Log = log
		m, err := p.Commit(ctx, state{offset: 1, gens: []Generation{sealed, l}}.checkpoint())
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	restoreWant := func(want [32]byte) *Manifest {
		t.Helper()
		var got [][32]byte
		m, err := s.Partition("g", "t", 0).Restore(ctx, loadChains(&got))
		if err != nil {
			t.Fatal(err)
		}
		if got[1] != want {
			t.Fatal("restored chain differs from the one committed")
		}
		return m
	}

	m1 := commit(nil) // no log: whole
	base := m1.Generations[1]
	if len(base.Log) != 0 || base.Tail() != base.Key {
		t.Fatalf("first commit: %+v", base)
	}
	s1, s2 := segment(1, 4000), segment(2, 4000)
	s1.After = base.Key
	m2 := commit(s1)
	g := m2.Generations[1]
	if g.Key != base.Key || len(g.Log) != 1 || !strings.HasPrefix(g.Log[0].Key, "logs/") || g.Log[0].Bytes != 4000 || g.Log[0].Entries != 250 || g.Log[0].Seq != m2.Seq {
		t.Fatalf("second commit: %+v", g)
	}
	if c := live.Source.(*randSource).calls.Load(); c != 1 {
		t.Errorf("live generation written %d times, want once (then logged)", c)
	}
	restoreWant(chainDigest(live.Source, s1))

	// Nothing new: nothing uploaded, the same chain.
	empty := &GenerationLog{After: g.Tail(), Source: byteSource(nil)}
	m3 := commit(empty)
	if !reflect.DeepEqual(m3.Generations[1].Log, g.Log) {
		t.Fatalf("empty log changed the chain: %+v", m3.Generations[1])
	}
	// A log after an earlier object of the chain (here its base) holds
	// what the later segments added: it replaces them (a merge).
	s2.After = base.Key
	m4 := commit(s2)
	if g := m4.Generations[1]; len(g.Log) != 1 || g.Key != base.Key || g.Log[0].Seq != m4.Seq {
		t.Fatalf("log after the base did not replace the chain: %+v", g)
	}
	restoreWant(chainDigest(live.Source, s2))
	// A log after an object the chain does not hold: whole upload.
	s3 := segment(3, 4000)
	s3.After = "logs/" + strings.Repeat("0", 64)
	m4 = commit(s3)
	if g := m4.Generations[1]; len(g.Log) != 0 || g.Key == base.Key {
		t.Fatalf("log after an unknown object was used: %+v", g)
	}
	// Chains grow up to MaxLogShare of the base's stored size.
	tail := m4.Generations[1].Tail()
	var segs []*GenerationLog
	for i := range 3 {
		sg := segment(byte(10+i), 4000)
		sg.After = tail
		m := commit(sg)
		g := m.Generations[1]
		if i < 2 {
			segs = append(segs, sg)
			if len(g.Log) != i+1 {
				t.Fatalf("segment %d: chain of %d", i, len(g.Log))
			}
			restoreWant(chainDigest(live.Source, segs...))
		} else if len(g.Log) != 0 {
			t.Fatalf("chain of %d bytes over a %d-byte base: %+v", g.LogBytes(), g.Bytes, g)
		}
		tail = g.Tail()
	}
	restoreWant(chainDigest(live.Source))

	// A sealed generation is never logged.
	sealed.Log = &GenerationLog{After: m4.Generations[0].Tail(), Entries: 1, Source: byteSource("x")}
	m5 := commit(nil)
	if len(m5.Generations[0].Log) != 0 {
		t.Fatal("sealed generation logged")
	}
}

// TestCorruptLogSegmentFallsBack: a missing or corrupt segment makes the
// manifest unusable; Restore takes the previous one.
func TestCorruptLogSegmentFallsBack(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir, key string)
	}{
		{"flipped bit", func(t *testing.T, dir, key string) {
			path := filepath.Join(dir, "g", "t", "0", key)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			data[7] ^= 1
			os.WriteFile(path, data, 0o644)
		}},
		{"missing", func(t *testing.T, dir, key string) { os.Remove(filepath.Join(dir, "g", "t", "0", key)) }},
		{"truncated", func(t *testing.T, dir, key string) { os.Truncate(filepath.Join(dir, "g", "t", "0", key), 100) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			reg := prometheus.NewRegistry()
			s := openT(t, "file://"+dir, testOptions(reg))
			p := s.Partition("g", "t", 0)
			p.Restore(ctx, loadChains(new([][32]byte)))
			if err := p.Claim(ctx, "t"); err != nil {
				t.Fatal(err)
			}
			live := gen(2, false, 2, 40_000)
			m1, err := p.Commit(ctx, state{offset: 1, gens: []Generation{live}}.checkpoint())
			if err != nil {
				t.Fatal(err)
			}
			l := live
			l.Log = segment(3, 1600)
			l.Log.After = m1.Generations[0].Tail()
			m2, err := p.Commit(ctx, state{offset: 2, gens: []Generation{l}}.checkpoint())
			if err != nil {
				t.Fatal(err)
			}
			tc.damage(t, dir, m2.Generations[0].Log[0].Key)
			var got [][32]byte
			m, err := s.Partition("g", "t", 0).Restore(ctx, loadChains(&got))
			if err != nil {
				t.Fatal(err)
			}
			if m.Seq != m1.Seq || got[0] != chainDigest(live.Source) {
				t.Fatalf("restored manifest %d, want %d (the one before the broken segment)", m.Seq, m1.Seq)
			}
		})
	}
}

// TestRetentionKeepsLogSegments: segments of kept manifests stay, the
// others go once past the grace period.
func TestRetentionKeepsLogSegments(t *testing.T) {
	ctx := context.Background()
	o := testOptions(prometheus.NewRegistry())
	o.Retain = 2
	s := openT(t, "mem://"+t.Name(), o)
	p := s.Partition("g", "t", 0)
	p.Restore(ctx, loadChains(new([][32]byte)))
	if err := p.Claim(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	live := gen(2, false, 2, 40_000)
	m, err := p.Commit(ctx, state{offset: 1, gens: []Generation{live}}.checkpoint())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		l := live
		l.Log = segment(byte(20+i), 1600)
		l.Log.After = m.Generations[0].Tail()
		if m, err = p.Commit(ctx, state{offset: int64(2 + i), gens: []Generation{l}}.checkpoint()); err != nil {
			t.Fatal(err)
		}
	}
	if len(m.Generations[0].Log) != 4 {
		t.Fatalf("chain of %d segments, want 4", len(m.Generations[0].Log))
	}
	// A stray segment no manifest names (a failed commit's).
	if _, err := s.bkt.Put(ctx, p.dir+"/logs/"+strings.Repeat("0", 64), bytes.NewReader([]byte("x")), false); err != nil {
		t.Fatal(err)
	}
	s.opts.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	defer func() { s.opts.now = time.Now }()
	l := live
	l.Log = &GenerationLog{After: m.Generations[0].Tail(), Source: byteSource(nil)}
	if m, err = p.Commit(ctx, state{offset: 9, gens: []Generation{l}}.checkpoint()); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, lr := range m.Generations[0].Log {
		want = append(want, p.dir+"/"+lr.Key)
	}
	slices.Sort(want)
	if got := listKeys(t, s, p.dir+"/logs/"); !slices.Equal(got, want) {
		t.Fatalf("segments after retention:\n%v\nwant the kept chain's\n%v", got, want)
	}
	// The chain's base is kept, too.
	if got := listKeys(t, s, p.dir+"/gens/"); len(got) != 1 || got[0] != p.dir+"/"+m.Generations[0].Key {
		t.Fatalf("generation objects after retention: %v", got)
	}
	// Whole again: the old chain goes once no kept manifest names it.
	for i := range 2 {
		if _, err = p.Commit(ctx, state{offset: int64(10 + i), gens: []Generation{gen(2, false, uint64(30+i), 40_000)}}.checkpoint()); err != nil {
			t.Fatal(err)
		}
	}
	if got := listKeys(t, s, p.dir+"/logs/"); len(got) != 0 {
		t.Fatalf("segments of no kept manifest remain: %v", got)
	}
}

// TestLogChainSegmentLimit: a chain ends at MaxLogSegments segments however
// small they are (the manifest names every one).
func TestLogChainSegmentLimit(t *testing.T) {
	ctx := context.Background()
	s := openT(t, "mem://"+t.Name(), testOptions(prometheus.NewRegistry()))
	p := s.Partition("g", "t", 0)
	p.Restore(ctx, loadChains(new([][32]byte)))
	if err := p.Claim(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	live := gen(2, false, 2, 1<<20)
	m, err := p.Commit(ctx, state{offset: 1, gens: []Generation{live}}.checkpoint())
	if err != nil {
		t.Fatal(err)
	}
	for i := range MaxLogSegments + 1 {
		l := live
		l.Log = &GenerationLog{After: m.Generations[0].Tail(), Entries: 1, Source: byteSource{byte(i), byte(i >> 8)}}
		if m, err = p.Commit(ctx, state{offset: int64(2 + i), gens: []Generation{l}}.checkpoint()); err != nil {
			t.Fatal(err)
		}
		if n, want := len(m.Generations[0].Log), (i+1)%(MaxLogSegments+1); n != want {
			t.Fatalf("commit %d: chain of %d segments, want %d", i, n, want)
		}
	}
}

// TestRetentionSparesReuploadedContent: a content-addressed object that an
// old listing shows as an unreferenced orphan, but that another writer has
// uploaded again since (same content, same key), is not deleted from that
// listing; a generation object (unique name) old in the listing is.
func TestRetentionSparesReuploadedContent(t *testing.T) {
	ctx := context.Background()
	o := testOptions(prometheus.NewRegistry())
	s := openT(t, "mem://"+t.Name(), o)
	p := s.Partition("g", "t", 0)
	old := time.Now().Add(-2 * s.opts.OrphanGrace)
	var listing []objectAttrs
	for _, key := range []string{
		p.dir + "/" + logsDir + strings.Repeat("1", 64),
		p.dir + "/" + exactDir + strings.Repeat("2", 64),
		p.dir + "/" + gensDir + "00000000000000000007-00000000000000000003-a1b2c3d4e5f6.gen",
	} {
		if _, err := s.bkt.Put(ctx, key, bytes.NewReader([]byte("x")), false); err != nil {
			t.Fatal(err)
		}
		listing = append(listing, objectAttrs{Key: key, Size: 1, Modified: old}) // listed before the re-upload
	}
	if err := p.collect(ctx, listing); err != nil {
		t.Fatal(err)
	}
	got := listKeys(t, s, p.dir+"/")
	want := []string{listing[1].Key, listing[0].Key}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("after retention from a stale listing: %v\nwant the re-uploaded content-addressed objects %v", got, want)
	}
}
