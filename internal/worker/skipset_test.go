package worker

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// randomEntry draws a kind and, for a dead letter, a reason: mostly the
// extraction reasons, sometimes none or an unknown one.
func randomEntry(rng *rand.Rand) skipEntry {
	e := skipEntry{kind: writtenKind(rng.IntN(3))}
	if e.kind == toDeadLetter {
		switch x := rng.IntN(10); {
		case x == 0:
		case x == 1:
			e.reason = "custom-" + strconv.Itoa(rng.IntN(5))
		default:
			e.reason = KeyReasons[rng.IntN(len(KeyReasons))]
		}
	}
	return e
}

// TestSkipSetMatchesMap builds the set and a map from the same adds (runs
// of consecutive offsets, scattered offsets, interleaved scans as in hash
// partitioning, repeated offsets) and takes every offset in input order:
// each take and len must agree with the map.
func TestSkipSetMatchesMap(t *testing.T) {
	const base = 1_000_003
	patterns := []struct {
		name string
		span int64 // offsets [base, base+span)
		adds func(rng *rand.Rand, add func(int64))
	}{
		{"consecutive (outage)", 5 * skipChunkSize, func(_ *rand.Rand, add func(int64)) {
			for o := int64(base); o < base+5*skipChunkSize; o++ {
				add(o)
			}
		}},
		{"scattered", 4 * skipChunkSize, func(rng *rand.Rand, add func(int64)) {
			for range 3000 {
				add(base + rng.Int64N(4*skipChunkSize))
			}
		}},
		{"interleaved scans, dense", 3 * skipChunkSize, func(rng *rand.Rand, add func(int64)) {
			// Hash partitioning: each of 6 targets holds an increasing
			// subsequence; targets are scanned one after the other.
			target := make([]int, 3*skipChunkSize)
			for i := range target {
				target[i] = rng.IntN(6)
			}
			for q := range 6 {
				for i, tq := range target {
					if tq == q && rng.IntN(4) > 0 {
						add(base + int64(i))
					}
				}
			}
		}},
		{"interleaved scans, sparse", 3 * skipChunkSize, func(rng *rand.Rand, add func(int64)) {
			for range 4 {
				for o := int64(base); o < base+3*skipChunkSize; o += 1 + rng.Int64N(200) {
					add(o)
				}
			}
		}},
		{"repeats around the dense threshold", 2 * skipChunkSize, func(rng *rand.Rand, add func(int64)) {
			for range 3 * skipDenseAt {
				add(base + rng.Int64N(skipDenseAt+skipDenseAt/2))
			}
			for o := int64(base); o < base+2*skipChunkSize; o += 7 {
				add(o)
			}
		}},
	}
	for _, pt := range patterns {
		for seed := range uint64(3) {
			t.Run(fmt.Sprintf("%s/seed%d", pt.name, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 7))
				s := newSkipSet(base, base+pt.span)
				want := map[int64]skipEntry{}
				pt.adds(rng, func(o int64) {
					e := randomEntry(rng)
					if !s.add(o, e) {
						t.Fatalf("add(%d) refused inside [%d, %d)", o, int64(base), base+pt.span)
					}
					want[o] = e
				})
				if got := s.len(); got != len(want) {
					t.Fatalf("len = %d after adds, want %d", got, len(want))
				}
				for o := int64(base - 10); o < base+pt.span+10; o++ {
					got, ok := s.take(o)
					w, wok := want[o]
					if ok != wok || got != w {
						t.Fatalf("take(%d) = %+v, %v; want %+v, %v", o, got, ok, w, wok)
					}
					delete(want, o)
					if s.len() != len(want) {
						t.Fatalf("len = %d after take(%d), want %d", s.len(), o, len(want))
					}
				}
				if len(s.chunks) != 0 {
					t.Errorf("%d chunks left after taking everything", len(s.chunks))
				}
			})
		}
	}
}

// TestSkipSetTakeRemoves: within a chunk, sparse or dense, takes in any
// order return each entry once; a repeated take finds nothing.
func TestSkipSetTakeRemoves(t *testing.T) {
	for _, n := range []int{10, skipDenseAt / 2, skipDenseAt, skipChunkSize / 2} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(n), 1))
			s := newSkipSet(0, skipChunkSize)
			want := map[int64]skipEntry{}
			for len(want) < n {
				o, e := rng.Int64N(skipChunkSize), randomEntry(rng)
				s.add(o, e)
				want[o] = e
			}
			// Repeated offsets count towards the threshold until settled.
			dense := s.chunks[0].kinds != nil
			if dense != (n >= skipDenseAt) {
				t.Errorf("dense = %v with %d entries, threshold %d", dense, n, skipDenseAt)
			}
			for _, o := range rng.Perm(skipChunkSize) {
				got, ok := s.take(int64(o))
				w, wok := want[int64(o)]
				if ok != wok || got != w {
					t.Fatalf("take(%d) = %+v, %v; want %+v, %v", o, got, ok, w, wok)
				}
				if _, again := s.take(int64(o)); again {
					t.Fatalf("second take(%d) found an entry", o)
				}
				delete(want, int64(o))
				if s.len() != len(want) {
					t.Fatalf("len = %d, want %d", s.len(), len(want))
				}
			}
		})
	}
}

// TestSkipSetReasons: every extraction reason, no reason and unknown
// reasons come back as added; unknown reasons beyond the intern table's
// size come back as "other", which is how the metrics count them anyway.
func TestSkipSetReasons(t *testing.T) {
	for _, dense := range []bool{false, true} {
		t.Run(fmt.Sprintf("dense=%v", dense), func(t *testing.T) {
			s := newSkipSet(0, 4*skipChunkSize)
			reasons := append([]string{""}, KeyReasons...)
			for i := range 2 * skipMaxReasons {
				reasons = append(reasons, "unknown-"+strconv.Itoa(i))
			}
			stride := int64(skipChunkSize / (skipDenseAt / 2))
			if dense {
				stride = 1
				for o := range int64(skipDenseAt) {
					s.add(skipChunkSize/2+o, skipEntry{kind: toOutput})
				}
			}
			for i, r := range reasons {
				s.add(int64(i)*stride, skipEntry{kind: toDeadLetter, reason: r})
			}
			if got := s.chunks[0].kinds != nil; got != dense {
				t.Fatalf("chunk dense = %v, want %v", got, dense)
			}
			kept := 0
			for i, r := range reasons {
				e, ok := s.take(int64(i) * stride)
				if !ok || e.kind != toDeadLetter {
					t.Fatalf("take(%d) = %+v, %v", int64(i)*stride, e, ok)
				}
				switch {
				case e.reason == r:
					kept++
				case e.reason != "other" || i < 1+len(KeyReasons):
					t.Fatalf("reason %q came back as %q", r, e.reason)
				}
			}
			if kept != skipMaxReasons { // the table's size
				t.Errorf("%d reasons kept as added, want %d", kept, skipMaxReasons)
			}
		})
	}
}

// TestSkipSetReleasesChunks: a take in a later chunk releases the chunks
// below it with what they still hold (input offsets never delivered, e.g. a
// compacted input); len no longer counts them.
func TestSkipSetReleasesChunks(t *testing.T) {
	s := newSkipSet(100, 100+10*skipChunkSize)
	for c := range int64(4) {
		for i := range int64(5000) { // dense
			s.add(100+c*skipChunkSize+i, skipEntry{kind: toOutput})
		}
	}
	s.add(100+9*skipChunkSize, skipEntry{kind: toDuplicates})
	if s.len() != 4*5000+1 || len(s.chunks) != 5 {
		t.Fatalf("len %d, %d chunks; want %d, 5", s.len(), len(s.chunks), 4*5000+1)
	}
	if _, ok := s.take(100 + 2*skipChunkSize + 17); !ok {
		t.Fatal("take in chunk 2 found nothing")
	}
	if s.len() != 2*5000-1+1 || len(s.chunks) != 3 {
		t.Errorf("after a take in chunk 2: len %d, %d chunks; want %d, 3", s.len(), len(s.chunks), 2*5000)
	}
	if _, ok := s.take(100 + 5); ok {
		t.Error("take in a released chunk found an entry")
	}
	// A jump far ahead walks the chunk map rather than every index.
	if e, ok := s.take(100 + 9*skipChunkSize); !ok || e.kind != toDuplicates {
		t.Errorf("take in chunk 9 = %+v, %v", e, ok)
	}
	if s.len() != 0 || len(s.chunks) != 0 {
		t.Errorf("len %d, %d chunks at the end", s.len(), len(s.chunks))
	}
}

// TestSkipSetGarbledOffsets: an offset outside [base, limit) is refused
// and allocates nothing; offsets spread over a huge range allocate one small
// sparse chunk each, never a dense one.
func TestSkipSetGarbledOffsets(t *testing.T) {
	s := newSkipSet(1000, 5000)
	for _, o := range []int64{1 << 62, 5000, 999, -1, 1<<63 - 1} {
		if s.add(o, skipEntry{kind: toOutput}) {
			t.Errorf("add(%d) accepted outside [1000, 5000)", o)
		}
		if _, ok := s.take(o); ok {
			t.Errorf("take(%d) found an entry", o)
		}
	}
	if s.len() != 0 || len(s.chunks) != 0 {
		t.Errorf("len %d, %d chunks after refused adds", s.len(), len(s.chunks))
	}

	// A limit at the far end of int64: every add lands in its own chunk.
	s = newSkipSet(0, 1<<63-1)
	rng := rand.New(rand.NewPCG(1, 2))
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	const n = 10_000
	for range n {
		s.add(rng.Int64N(1<<63-1), skipEntry{kind: toOutput})
	}
	s.add(1<<62, skipEntry{kind: toDeadLetter, reason: "missing"})
	runtime.ReadMemStats(&ms1)
	for _, c := range s.chunks {
		if c.kinds != nil || c.reasons != nil {
			t.Fatal("a chunk with one entry turned dense")
		}
	}
	per := float64(ms1.TotalAlloc-ms0.TotalAlloc) / n
	t.Logf("%.0f bytes allocated per entry, one chunk each", per)
	if per > 400 {
		t.Errorf("%.0f bytes allocated per scattered entry, want at most 400", per)
	}
	if e, ok := s.take(1 << 62); !ok || e.reason != "missing" {
		t.Errorf("take(1<<62) = %+v, %v", e, ok)
	}
}

// heapAfter runs build and returns the live heap it leaves (after GC) and
// how long it took.
func heapAfter(build func() any) (uint64, time.Duration, any) {
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	start := time.Now()
	v := build()
	took := time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	return ms1.HeapAlloc - ms0.HeapAlloc, took, v
}

// BenchmarkSkipSetMemory builds a skip set of 10 M entries, as a map (the
// earlier representation) and as a skipSet, for consecutive offsets (the
// bucket-outage case: every record written during the outage), every 16th
// offset, and consecutive dead letters; it reports live bytes per entry.
//
//	go test -run '^$' -bench SkipSetMemory -benchtime 1x ./internal/worker/
func BenchmarkSkipSetMemory(b *testing.B) {
	const n = 10_000_000
	const base = 123_456_789
	cases := []struct {
		name   string
		stride int64
		e      skipEntry
	}{
		{"consecutive", 1, skipEntry{kind: toOutput}},
		{"every16th", 16, skipEntry{kind: toDuplicates}},
		{"deadletters", 1, skipEntry{kind: toDeadLetter, reason: "malformed_json"}},
	}
	for _, c := range cases {
		reason := func() string { return string([]byte(c.e.reason)) } // one string per record, as read from headers
		b.Run(c.name+"/map", func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				bytes, took, v := heapAfter(func() any {
					m := map[int64]skipEntry{}
					for i := range int64(n) {
						m[base+i*c.stride] = skipEntry{kind: c.e.kind, reason: reason()}
					}
					return m
				})
				runtime.KeepAlive(v)
				b.ReportMetric(float64(bytes)/n, "bytes/entry")
				b.ReportMetric(float64(took.Nanoseconds())/n, "ns/add")
			}
		})
		b.Run(c.name+"/skipset", func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				bytes, took, v := heapAfter(func() any {
					s := newSkipSet(base, base+n*c.stride)
					for i := range int64(n) {
						s.add(base+i*c.stride, skipEntry{kind: c.e.kind, reason: reason()})
					}
					return s
				})
				runtime.KeepAlive(v)
				b.ReportMetric(float64(bytes)/n, "bytes/entry")
				b.ReportMetric(float64(took.Nanoseconds())/n, "ns/add")
				s := v.(*skipSet)
				start := time.Now()
				for i := range int64(n) {
					if _, ok := s.take(base + i*c.stride); !ok {
						b.Fatalf("take(%d) found nothing", base+i*c.stride)
					}
				}
				b.ReportMetric(float64(time.Since(start).Nanoseconds())/n, "ns/take")
			}
		})
	}
}
