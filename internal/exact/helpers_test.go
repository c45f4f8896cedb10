package exact

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"sync"
	"testing"
)

// hashN is the n-th test hash: distinct for distinct (seed, n), spread over
// the key space like real murmur3 output.
func hashN(seed, n uint64) Hash {
	x := n*0x9e3779b97f4a7c15 + seed
	mix := func(z uint64) uint64 {
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		return z ^ (z >> 31)
	}
	// The second half keeps n itself, so distinct n never collide.
	return HashOf(mix(x), n^seed<<48)
}

func openT(t testing.TB, dir string, opts Options) *Store {
	t.Helper()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func mustAdd(t testing.TB, s *Store, gen uint64, h Hash) {
	t.Helper()
	if err := s.Add(gen, h); err != nil {
		t.Fatal(err)
	}
}

func mustHas(t testing.TB, s *Store, gen uint64, h Hash) bool {
	t.Helper()
	ok, err := s.Has(gen, h)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func mustContain(t testing.TB, s *Store, h Hash) bool {
	t.Helper()
	ok, err := s.Contains(h)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func checkpointT(t testing.TB, s *Store) *Snapshot {
	t.Helper()
	sn, err := s.Checkpoint(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sn.Release() })
	return sn
}

// bucket stands in for object storage: files by name, size and digest
// (what a manifest would reference), with counters.
type bucket struct {
	mu      sync.Mutex
	objects map[File][]byte
	puts    int
	putB    int64
	gets    int
	getB    int64
}

func newBucket() *bucket { return &bucket{objects: make(map[File][]byte)} }

// upload stores the snapshot's files that the bucket does not hold yet and
// returns how many bytes that took.
func (b *bucket) upload(t testing.TB, sn *Snapshot) int64 {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var n int64
	for _, f := range sn.Files {
		if _, ok := b.objects[f]; ok {
			continue
		}
		r, err := sn.Open(f.Name)
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		b.objects[f] = data
		b.puts++
		n += int64(len(data))
	}
	b.putB += n
	return n
}

func (b *bucket) open(_ context.Context, f File) (io.ReadCloser, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	data, ok := b.objects[f]
	if !ok {
		return nil, fmt.Errorf("object %s: %w", f.Name, fs.ErrNotExist)
	}
	b.gets++
	b.getB += int64(len(data))
	return io.NopCloser(bytes.NewReader(data)), nil
}

// runsOf returns the run files of generation gen, by name, with sizes.
func runsOf(s *Store, gen uint64) map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int64)
	for _, r := range s.runs[gen] {
		out[r.name] = r.size
	}
	return out
}
