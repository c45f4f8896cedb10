package checkpoint

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"testing"

	"github.com/bloomgate/bloomgate/internal/s3test"
	"github.com/prometheus/client_golang/prometheus"
)

// Checkpoint benchmarks against a local versitygw (posix backend on the
// machine's disk). A 100 M-key shard at p = 1 % is about 120 MB of bitsets;
// a half-full filter is random bits, so the sources here stream
// incompressible pseudo-random bytes without holding them.
//
//	BLOOMGATE_VERSITYGW=... go test -run '^$' -bench . -benchtime 5x ./internal/checkpoint/

const shardBytes = 120_000_000

func benchStore(b *testing.B, compression string) *Store {
	srv := s3test.Start(b)
	s3test.SetEnv(b)
	o := Options{Registerer: prometheus.NewRegistry(), Compression: compression}
	s, err := Open(context.Background(), srv.URL("bench"), o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

func benchClaim(b *testing.B, s *Store) *Partition {
	p := s.Partition("g", "t", 0)
	if err := p.Claim(context.Background(), "bench"); err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkCheckpoint: one commit of a 120 MB live generation (the whole
// shard as one object), end to end: stream, checksum, compress (or not),
// multipart upload, manifest, retention.
func BenchmarkCheckpoint(b *testing.B) {
	for _, enc := range []string{encodingNone, encodingZstd} {
		b.Run("120MB-"+enc, func(b *testing.B) {
			s := benchStore(b, enc)
			p := benchClaim(b, s)
			b.SetBytes(shardBytes)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				st := state{offset: int64(i), gens: []Generation{gen(1, false, uint64(i), shardBytes)}}
				if _, err := p.Commit(context.Background(), st.checkpoint()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCheckpointFile: the same 120 MB commit to a file:// location
// (write, fsync, link), for the embedded default.
func BenchmarkCheckpointFile(b *testing.B) {
	s, err := Open(context.Background(), "file://"+b.TempDir(), Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	p := benchClaim(b, s)
	b.SetBytes(shardBytes)
	i := 0
	for b.Loop() {
		i++
		st := state{offset: int64(i), gens: []Generation{gen(1, false, uint64(i), shardBytes)}}
		if _, err := p.Commit(context.Background(), st.checkpoint()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckpointPeriodic: the shard as 4 generations of 30 MB (3 sealed,
// 1 live). After the first checkpoint, each one uploads only the live
// generation; uploaded-bytes/op shows it.
func BenchmarkCheckpointPeriodic(b *testing.B) {
	s := benchStore(b, encodingZstd)
	p := benchClaim(b, s)
	const g = shardBytes / 4
	sealed := []Generation{gen(1, true, 1, g), gen(2, true, 2, g), gen(3, true, 3, g)}
	ctx := context.Background()
	if _, err := p.Commit(ctx, state{offset: 0, gens: append(sealed[:3:3], gen(4, false, 4, g))}.checkpoint()); err != nil {
		b.Fatal(err)
	}
	before := counter(&testing.T{}, p.m.bytes)
	i := 0
	for b.Loop() {
		i++
		st := state{offset: int64(i), gens: append(sealed[:3:3], gen(4, false, uint64(100+i), g))}
		if _, err := p.Commit(ctx, st.checkpoint()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric((counter(&testing.T{}, p.m.bytes)-before)/float64(i), "uploaded-bytes/op")
}

// BenchmarkRestore: restore of the 120 MB checkpoint on a fresh handle:
// list, manifest, download, decode, verify length + SHA-256 + CRC-32C.
func BenchmarkRestore(b *testing.B) {
	for _, enc := range []string{encodingNone, encodingZstd} {
		b.Run("120MB-"+enc, func(b *testing.B) {
			s := benchStore(b, enc)
			p := benchClaim(b, s)
			ctx := context.Background()
			if _, err := p.Commit(ctx, state{offset: 1, gens: []Generation{gen(1, false, 1, shardBytes)}}.checkpoint()); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(shardBytes)
			b.ReportAllocs()
			for b.Loop() {
				q := s.Partition("g", "t", 0)
				_, err := q.Restore(ctx, func(m *Manifest, open func(context.Context, GenerationRef) (io.ReadCloser, error)) error {
					for _, g := range m.Generations {
						r, err := open(ctx, g)
						if err != nil {
							return err
						}
						n, err := io.Copy(io.Discard, r)
						if err != nil {
							return err
						}
						if n != shardBytes {
							return fmt.Errorf("read %d bytes", n)
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSource is the cost of the test source alone (to subtract).
func BenchmarkSource(b *testing.B) {
	b.SetBytes(shardBytes)
	for b.Loop() {
		if _, err := (&randSource{seed: 1, size: shardBytes}).WriteTo(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyCreateOnly: the start-up check of the store (create,
// second create answered 412, read back, delete). warm reuses one store and
// its connections; cold opens a new store per check, as a starting worker
// does (the timer excludes Open, which does not contact the store).
func BenchmarkVerifyCreateOnly(b *testing.B) {
	b.Run("warm", func(b *testing.B) {
		s := benchStore(b, encodingNone)
		b.ReportAllocs()
		for b.Loop() {
			if err := s.VerifyCreateOnly(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cold", func(b *testing.B) {
		srv := s3test.Start(b)
		s3test.SetEnv(b)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			s, err := Open(context.Background(), srv.URL("cold"), Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			err = s.VerifyCreateOnly(context.Background())
			b.StopTimer()
			s.Close()
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
}

// BenchmarkCommitNamedAgain: the periodic checkpoint of a quiet partition,
// where most of what the manifest names was uploaded by earlier commits:
// 8 sealed generations of 64 KiB, a live generation whose chain holds 50
// segments, 20 exact store files. Each commit uploads one 16 KiB segment
// (in place of the chain's last) and the manifest; requests/op and
// lists/op count the store's requests (the check that the objects named
// again are still stored is one LIST). mem and file always, s3 with
// versitygw.
func BenchmarkCommitNamedAgain(b *testing.B) {
	for _, st := range namedAgainStores {
		b.Run(st.name, func(b *testing.B) {
			na := newNamedAgain(b, st.open(b))
			after := na.last.Generations[8].Log[48].Key
			requests := func() int64 {
				cb := na.cb
				return cb.gets.Load() + cb.puts.Load() + cb.lists.Load() + cb.attrs.Load() + cb.deletes.Load()
			}
			reqs, lists := requests(), na.cb.lists.Load()
			b.ReportAllocs()
			for b.Loop() {
				seg := segment(0xee, 16<<10)
				seg.After = after
				if m := na.commit(b, seg); len(m.Generations[8].Log) != 50 {
					b.Fatalf("chain of %d segments", len(m.Generations[8].Log))
				}
			}
			b.ReportMetric(float64(requests()-reqs)/float64(b.N), "requests/op")
			b.ReportMetric(float64(na.cb.lists.Load()-lists)/float64(b.N), "lists/op")
		})
	}
}

// BenchmarkPresenceCheck: the check alone, for the partition of
// BenchmarkCommitNamedAgain (79 objects named again, ~83 in the
// directory): what each such commit pays on top of what it did before.
func BenchmarkPresenceCheck(b *testing.B) {
	for _, st := range namedAgainStores {
		b.Run(st.name, func(b *testing.B) {
			na := newNamedAgain(b, st.open(b))
			var objs []storedObject
			for _, g := range na.last.Generations {
				objs = append(objs, chainObjects(g)...)
			}
			for _, f := range na.last.Exact.Files {
				objs = append(objs, storedObject{f.Key, f.Size})
			}
			b.ReportAllocs()
			for b.Loop() {
				c := &presence{p: na.p, seq: na.last.Seq + 1}
				if gone, err := c.missing(context.Background(), objs); err != nil || len(gone) > 0 {
					b.Fatalf("missing %v: %v", gone, err)
				}
			}
			b.ReportMetric(float64(len(objs)), "objects")
		})
	}
}

var namedAgainStores = []struct {
	name string
	open func(b *testing.B) *Store
}{
	{"mem", func(b *testing.B) *Store {
		return openT(b, fmt.Sprintf("mem://bench-named-again-%d", memSeq.Add(1)), Options{Registerer: prometheus.NewRegistry()})
	}},
	{"file", func(b *testing.B) *Store {
		return openT(b, "file://"+b.TempDir(), Options{Registerer: prometheus.NewRegistry()})
	}},
	{"s3", func(b *testing.B) *Store { return benchStore(b, encodingZstd) }},
}

// namedAgain is the partition of BenchmarkCommitNamedAgain, its requests
// counted.
type namedAgain struct {
	p      *Partition
	cb     *countingBucket
	sealed []Generation
	live   Generation
	files  *exactFiles
	last   *Manifest
}

func newNamedAgain(b *testing.B, s *Store) *namedAgain {
	na := &namedAgain{cb: &countingBucket{bucket: s.bkt}, live: gen(9, false, 9, 4<<20), files: newExactFiles()}
	s.bkt = na.cb
	na.p = benchClaim(b, s)
	for i := range 8 {
		na.sealed = append(na.sealed, gen(uint64(i+1), true, uint64(i+1), 64<<10))
	}
	for i := range 20 {
		name := fmt.Sprintf("%06d.run", i)
		na.files.data[name] = bytes.Repeat([]byte{byte(i)}, 4096)
		na.files.reads[name] = new(atomic.Int64)
	}
	na.commit(b, nil)
	for i := range 50 {
		seg := segment(byte(i), 1024)
		seg.After = na.last.Generations[8].Tail()
		na.commit(b, seg)
	}
	return na
}

func (na *namedAgain) commit(b *testing.B, log *GenerationLog) *Manifest {
	l := na.live
	l.Log = log
	cp := state{offset: 1, gens: append(na.sealed[:8:8], l)}.checkpoint()
	cp.Exact = na.files.checkpoint(10)
	m, err := na.p.Commit(context.Background(), cp)
	if err != nil {
		b.Fatal(err)
	}
	na.last = m
	return m
}
