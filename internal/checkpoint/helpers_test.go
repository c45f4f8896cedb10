package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/filterplan"
	"github.com/bloomgate/bloomgate/internal/s3test"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// randSource streams size deterministic pseudo-random bytes from seed
// without holding them: a stand-in for a generation snapshot. sparse makes
// most bytes zero (a young generation), which compresses.
type randSource struct {
	seed   uint64
	size   int64
	sparse bool
	calls  atomic.Int64
}

func (s *randSource) WriteTo(w io.Writer) (int64, error) {
	s.calls.Add(1)
	x := s.seed*0x9E3779B97F4A7C15 + 1
	buf := make([]byte, 256<<10)
	var n int64
	for n < s.size {
		chunk := buf[:min(int64(len(buf)), s.size-n)]
		// splitmix64: several GB/s, so the source is not what is measured.
		for i := 0; i+8 <= len(chunk); i += 8 {
			x += 0x9E3779B97F4A7C15
			z := x
			z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
			z = (z ^ (z >> 27)) * 0x94D049BB133111EB
			binary.LittleEndian.PutUint64(chunk[i:], z^(z>>31))
		}
		if s.sparse {
			for i := range chunk {
				if chunk[i] > 8 {
					chunk[i] = 0
				}
			}
		}
		m, err := w.Write(chunk)
		n += int64(m)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// digest is the SHA-256 of what src writes.
func digest(t testing.TB, src GenerationSource) [32]byte {
	t.Helper()
	if rs, ok := src.(*randSource); ok { // do not count the test's own read
		src = &randSource{seed: rs.seed, size: rs.size, sparse: rs.sparse}
	}
	h := sha256.New()
	if _, err := src.WriteTo(h); err != nil {
		t.Fatal(err)
	}
	var d [32]byte
	copy(d[:], h.Sum(nil))
	return d
}

// backend is one store location for the acceptance suite.
type backend struct {
	name string
	url  func(t *testing.T) string
}

var memSeq atomic.Int64

// backends returns mem, file and s3 (versitygw) locations; s3 skips or fails
// per the tools rule when versitygw is absent.
func backends() []backend {
	return []backend{
		{name: "mem", url: func(t *testing.T) string {
			return fmt.Sprintf("mem://%s-%d/prefix", strings.ReplaceAll(t.Name(), "/", "-"), memSeq.Add(1))
		}},
		{name: "file", url: func(t *testing.T) string { return "file://" + t.TempDir() }},
		{name: "s3", url: func(t *testing.T) string {
			srv := s3test.Start(t)
			s3test.SetEnv(t)
			return srv.URL(fmt.Sprintf("ck-%d", memSeq.Add(1)))
		}},
	}
}

func testOptions(reg prometheus.Registerer) Options {
	return Options{
		Registerer:     reg,
		RetryBaseDelay: 5 * time.Millisecond,
		RetryMaxDelay:  50 * time.Millisecond,
		RequestTimeout: 10 * time.Second,
		PartSize:       5 << 20,
	}
}

func openT(t testing.TB, url string, o Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), url, o)
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// state is a test partition state: generations from seeded sources.
type state struct {
	offset int64
	gens   []Generation
}

func gen(id uint64, sealed bool, seed uint64, size int64) Generation {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(id) * time.Hour)
	return Generation{ID: id, Sealed: sealed, Start: start, End: start.Add(time.Hour), Inserts: id * 10,
		EstKeys: id * 9, Fill: 0.25, EstFPR: 0.001, Stacks: 1, Source: &randSource{seed: seed, size: size}}
}

func (st state) checkpoint() Checkpoint {
	return Checkpoint{
		InputOffset:   st.offset,
		OutputOffsets: map[string]map[int]int64{"out": {0: st.offset * 2}},
		Filter:        FilterParams{Params: filterplan.Params{Window: 24 * time.Hour, Generations: 3, Capacity: 1000, FPR: 0.01}},
		Generations:   st.gens,
		Owner:         "test",
	}
}

// loadAll is a Restore loader that reads every generation and records the
// digests of their bytes.
func loadAll(got *[][32]byte) func(m *Manifest, open func(ctx context.Context, g GenerationRef) (io.ReadCloser, error)) error {
	return func(m *Manifest, open func(ctx context.Context, g GenerationRef) (io.ReadCloser, error)) error {
		*got = (*got)[:0]
		for _, g := range m.Generations {
			r, err := open(context.Background(), g)
			if err != nil {
				return err
			}
			h := sha256.New()
			if _, err := io.Copy(h, r); err != nil {
				r.Close()
				return err
			}
			if err := r.Close(); err != nil {
				return err
			}
			var d [32]byte
			copy(d[:], h.Sum(nil))
			*got = append(*got, d)
		}
		return nil
	}
}

// restoreT restores on a new handle and checks the result against st.
func restoreT(t *testing.T, s *Store, st state) (*Partition, *Manifest) {
	t.Helper()
	p := s.Partition("g", "t", 0)
	var got [][32]byte
	m, err := p.Restore(context.Background(), loadAll(&got))
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if m.InputOffset != st.offset {
		t.Fatalf("restored input offset %d, want %d", m.InputOffset, st.offset)
	}
	if len(got) != len(st.gens) {
		t.Fatalf("restored %d generations, want %d", len(got), len(st.gens))
	}
	for i, g := range st.gens {
		if want := digest(t, g.Source); got[i] != want {
			t.Fatalf("generation %d: restored bytes differ", g.ID)
		}
		if m.Generations[i].ID != g.ID || m.Generations[i].Sealed != g.Sealed {
			t.Fatalf("generation %d: ref %+v", i, m.Generations[i])
		}
	}
	return p, m
}

// mutateObject changes a stored object through the store's bucket.
func mutateObject(t *testing.T, s *Store, key string, f func([]byte) []byte) {
	t.Helper()
	ctx := context.Background()
	rc, err := s.bkt.Get(ctx, key, 0)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	data, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.bkt.Put(ctx, key, bytes.NewReader(f(data)), false); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func listKeys(t *testing.T, s *Store, prefix string) []string {
	t.Helper()
	objs, err := s.list(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range objs {
		keys = append(keys, o.Key)
	}
	return keys
}

// counter reads a counter or gauge child.
func counter(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	t.Fatalf("not a counter or gauge: %v", c.Desc())
	return 0
}

// countingBucket counts the requests a Partition makes.
type countingBucket struct {
	bucket
	gets, puts, lists, attrs, deletes atomic.Int64
}

func (b *countingBucket) Get(ctx context.Context, key string, off int64) (io.ReadCloser, error) {
	b.gets.Add(1)
	return b.bucket.Get(ctx, key, off)
}

func (b *countingBucket) Put(ctx context.Context, key string, r io.Reader, createOnly bool) (int64, error) {
	b.puts.Add(1)
	return b.bucket.Put(ctx, key, r, createOnly)
}

func (b *countingBucket) List(ctx context.Context, prefix string, fn func(objectAttrs) error) error {
	b.lists.Add(1)
	return b.bucket.List(ctx, prefix, fn)
}

func (b *countingBucket) Attributes(ctx context.Context, key string) (objectAttrs, error) {
	b.attrs.Add(1)
	return b.bucket.Attributes(ctx, key)
}

func (b *countingBucket) Delete(ctx context.Context, key string) error {
	b.deletes.Add(1)
	return b.bucket.Delete(ctx, key)
}
