package bloom

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var goldenFingerprintCfg = Config{Window: 3 * time.Hour, Generations: 4, Capacity: 6_000, FPR: 0.01}

// goldenFingerprint feeds a fixed (key, timestamp) sequence: three hours of
// keys at twice the planned rate (the plan's table overflows into a level
// 1 table, and generations leave the window), then a gap.
func goldenFingerprint(t testing.TB) *FingerprintShard {
	s, err := NewFingerprintShard(goldenFingerprintCfg)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(0, 0).Add(500_000 * s.Span())
	for i := range uint64(12_000) {
		k := i
		if i%10 == 0 {
			k = i / 2 // repeats, some in an older generation
		}
		s.TestAndAdd(keyHash(k), at.Add(time.Duration(i)*900*time.Millisecond))
	}
	return s
}

func encodeTables(t testing.TB, s *FingerprintShard) [][]byte {
	t.Helper()
	sn := s.Snapshot()
	defer sn.Release()
	var out [][]byte
	for _, ts := range sn.Tables {
		var b bytes.Buffer
		n, err := ts.WriteTo(&b)
		if err != nil || n != int64(b.Len()) {
			t.Fatalf("encoding table %d: %d bytes, %v", ts.Serial, n, err)
		}
		out = append(out, b.Bytes())
	}
	return out
}

// encodeOpenBase encodes the table taking inserts as a chain's base and
// marks it merged there, so that its next log starts from it.
func encodeOpenBase(t testing.TB, s *FingerprintShard) []byte {
	t.Helper()
	sn := s.Snapshot()
	defer sn.Release()
	ts := sn.Tables[len(sn.Tables)-1]
	var base bytes.Buffer
	if _, err := ts.WriteTo(&base); err != nil {
		t.Fatal(err)
	}
	ts.MarkMerged("base", 0)
	return base.Bytes()
}

// encodeOpenLog encodes the log the table taking inserts added since its
// journal's mark and marks the chain at that segment (chain segments).
func encodeOpenLog(t testing.TB, s *FingerprintShard, chain int) []byte {
	t.Helper()
	sn := s.Snapshot()
	defer sn.Release()
	ts := sn.Tables[len(sn.Tables)-1]
	m, ok := ts.JournalMark()
	if !ok {
		t.Fatal("fingerprint: no journal mark")
	}
	l, ok := ts.LogSince(m.Pos)
	if !ok {
		t.Fatal("fingerprint: no log")
	}
	var b bytes.Buffer
	n, err := l.WriteTo(&b)
	if err != nil || n != l.Size() {
		t.Fatalf("log: %d bytes (size %d), %v", n, l.Size(), err)
	}
	ts.Mark("seg", chain)
	return b.Bytes()
}

func decodeTables(t testing.TB, enc [][]byte) []*Table {
	t.Helper()
	var out []*Table
	for i, e := range enc {
		tb, err := DecodeTable(bytes.NewReader(e), 0)
		if err != nil {
			t.Fatalf("decoding table %d: %v", i, err)
		}
		out = append(out, tb)
	}
	return out
}

// TestTableGolden pins table format v1: the decoder reads the golden
// files, the encoder reproduces them, and the keys survive.
func TestTableGolden(t *testing.T) {
	s := goldenFingerprint(t)
	enc := encodeTables(t, s)
	if len(enc) != 2 {
		t.Fatalf("golden shard shape changed: %d tables", len(enc))
	}
	for i, name := range []string{"table_v1_closed.bin", "table_v1_open.bin"} {
		path := filepath.Join("testdata", name)
		if *update {
			if err := os.WriteFile(path, enc[i], 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test -run TestTableGolden -update to create)", err)
		}
		if _, err := DecodeTable(bytes.NewReader(want), 0); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if !bytes.Equal(enc[i], want) {
			t.Errorf("%s: encoding differs from the golden file (format v1 changed? rerun with -update only if intended)", path)
		}
	}
	r, err := RestoreFingerprintShard(goldenFingerprintCfg, decodeTables(t, enc))
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(11_000); i < 12_000; i++ {
		if i%10 != 0 && !r.Test(keyHash(i)) {
			t.Fatalf("key %d lost through the golden files", i)
		}
	}
}

// TestTableGoldenSealed pins table format v2 (a sealed table): the golden
// shard's plan table laid out sealed, closed after its first generation
// overflowed. The decoder reads the golden file, the encoder reproduces
// it, and the keys survive it with the level-1 table.
func TestTableGoldenSealed(t *testing.T) {
	defer func(old int) { sealedLayout = old }(sealedLayout)
	sealedLayout = sealedAlways
	s := goldenFingerprint(t)
	enc := encodeTables(t, s)
	if len(enc) < 2 || s.Tables()[0].h == nil || !s.Tables()[0].closed {
		t.Fatalf("golden shard shape changed: %d tables", len(enc))
	}
	path := filepath.Join("testdata", "table_v2_closed.bin")
	if *update {
		if err := os.WriteFile(path, enc[0], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run TestTableGoldenSealed -update to create)", err)
	}
	if _, err := DecodeTable(bytes.NewReader(want), 0); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if !bytes.Equal(enc[0], want) {
		t.Errorf("%s: encoding differs from the golden file (format v2 changed? rerun with -update only if intended)", path)
	}
	r, err := RestoreFingerprintShard(goldenFingerprintCfg, decodeTables(t, enc))
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(11_000); i < 12_000; i++ {
		if i%10 != 0 && !r.Test(keyHash(i)) {
			t.Fatalf("key %d lost through the golden files", i)
		}
	}
}

// TestTableEncodeDecodeEncode: decode → encode is byte-identical, and a
// restored shard goes on exactly like the original (same answers, same
// bytes), through generation changes and an overflow.
func TestTableEncodeDecodeEncode(t *testing.T) {
	forLayouts(t, func(t *testing.T) {
		s := goldenFingerprint(t)
		enc := encodeTables(t, s)
		for i, tb := range decodeTables(t, enc) {
			var b bytes.Buffer
			if _, err := tb.WriteTo(&b); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b.Bytes(), enc[i]) {
				t.Fatalf("table %d: decode → encode differs", i)
			}
		}
		r, err := RestoreFingerprintShard(goldenFingerprintCfg, decodeTables(t, enc))
		if err != nil {
			t.Fatal(err)
		}
		at := time.Unix(0, 0).Add(500_000*s.Span() + 12_000*900*time.Millisecond)
		for i := range uint64(20_000) {
			k := 100_000 + i
			if i%7 == 0 {
				k = i
			}
			ts := at.Add(time.Duration(i) * 1100 * time.Millisecond)
			if a, b := s.TestAndAdd(keyHash(k), ts), r.TestAndAdd(keyHash(k), ts); a != b {
				t.Fatalf("step %d: original %v, restored %v", i, a, b)
			}
		}
		a, b := encodeTables(t, s), encodeTables(t, r)
		if len(a) != len(b) {
			t.Fatalf("%d tables, restored %d", len(a), len(b))
		}
		for i := range a {
			if !bytes.Equal(a[i], b[i]) {
				t.Fatalf("table %d differs after the same inserts", i)
			}
		}
	})
}

// TestTableLogReplay: a base stored at one checkpoint plus the segments of
// the following ones decode to exactly the table of the last one.
func TestTableLogReplay(t *testing.T) {
	forLayouts(t, func(t *testing.T) {
		s, err := NewFingerprintShard(Config{Window: 10 * time.Hour, Generations: 8, Capacity: 100_000, FPR: 0.01})
		if err != nil {
			t.Fatal(err)
		}
		s.EnableJournal(0.25, 10_000_000)
		at := time.Unix(0, 0).Add(400_000 * s.Span())
		next := uint64(0)
		add := func(n uint64) {
			for range n {
				s.TestAndAdd(keyHash(next%9_000), at) // repeats included
				next++
			}
		}
		add(3000)
		base := encodeOpenBase(t, s)
		var segs [][]byte
		for i := range 3 {
			add(2000)
			segs = append(segs, encodeOpenLog(t, s, i+1))
		}
		want := encodeTables(t, s)
		tb, err := DecodeTable(bytes.NewReader(base), 0)
		if err != nil {
			t.Fatal(err)
		}
		for i, seg := range segs {
			l, err := DecodeTableLog(bytes.NewReader(seg), 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if err := tb.ApplyLog(l); err != nil {
				t.Fatalf("segment %d: %v", i, err)
			}
		}
		var got bytes.Buffer
		if _, err := tb.WriteTo(&got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want[len(want)-1]) {
			t.Fatal("base + segments differ from the table")
		}
		// All segments at once (as a restore replays a chain): the same.
		all, err := DecodeTable(bytes.NewReader(base), 0)
		if err != nil {
			t.Fatal(err)
		}
		var ls []*TableLog
		for _, seg := range segs {
			l, err := DecodeTableLog(bytes.NewReader(seg), 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, l)
		}
		if err := all.ApplyLogs(ls); err != nil {
			t.Fatal(err)
		}
		got.Reset()
		if _, err := all.WriteTo(&got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want[len(want)-1]) {
			t.Fatal("base + all segments at once differ from the table")
		}
		// Segments out of chain order are refused.
		again, _ := DecodeTable(bytes.NewReader(base), 0)
		if err := again.ApplyLogs([]*TableLog{ls[1], ls[0]}); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("segments out of order: %v", err)
		}
		// A segment replayed onto the wrong state is refused.
		l, _ := DecodeTableLog(bytes.NewReader(segs[0]), 1<<20)
		l.Entries++
		fresh, _ := DecodeTable(bytes.NewReader(base), 0)
		if err := fresh.ApplyLog(l); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("inconsistent segment: %v", err)
		}
		// A generation change gives the journal up: the next checkpoint
		// stores the table whole.
		s.TestAndAdd(keyHash(1), at.Add(s.Span()))
		sn := s.Snapshot()
		defer sn.Release()
		ts := sn.Tables[len(sn.Tables)-1]
		if m, ok := ts.JournalMark(); ok {
			if _, ok := ts.LogSince(m.Pos); ok {
				t.Fatal("a log across a generation change")
			}
		}
	})
}

// TestTableDecodeErrors: truncations, flipped bytes and a size over the
// limit are refused with the right error and a nil table.
func TestTableDecodeErrors(t *testing.T) {
	forLayouts(t, func(t *testing.T) {
		enc := encodeTables(t, goldenFingerprint(t))[1]
		for _, n := range []int{0, 10, 16, 100, len(enc) / 2, len(enc) - 1} {
			tb, err := DecodeTable(bytes.NewReader(enc[:n]), 0)
			if tb != nil || !errors.Is(err, ErrCorrupt) {
				t.Errorf("truncated at %d: %v", n, err)
			}
		}
		for _, i := range []int{9, 20, 100, 200, len(enc) / 3, len(enc) - 10} {
			bad := bytes.Clone(enc)
			bad[i] ^= 0x10
			if tb, err := DecodeTable(bytes.NewReader(bad), 0); tb != nil || err == nil {
				t.Errorf("flipped byte %d accepted", i)
			}
		}
		if tb, err := DecodeTable(bytes.NewReader(enc), 1000); tb != nil || !errors.Is(err, ErrTooLarge) {
			t.Errorf("limit 1000 bytes: %v", err)
		}
		var fe *FormatError
		if _, err := DecodeTable(bytes.NewReader(append([]byte("\x89BGGEN\r\n"), enc[8:]...)), 0); !errors.As(err, &fe) {
			t.Errorf("generation magic: %v", err)
		}
	})
}

func FuzzDecodeTable(f *testing.F) {
	for _, name := range []string{"table_v1_closed.bin", "table_v1_open.bin", "table_v2_closed.bin"} {
		good, _ := os.ReadFile(filepath.Join("testdata", name))
		f.Add(good)
		f.Add(good[:min(len(good), 200)])
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		// 4 MiB: the golden tables fit, a forged header cannot make the
		// decoder allocate more.
		tb, err := DecodeTable(bytes.NewReader(data), 4<<20)
		if err != nil {
			if tb != nil {
				t.Fatal("error with a non-nil table")
			}
			return
		}
		var b bytes.Buffer
		if _, err := tb.WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b.Bytes(), data) {
			t.Fatal("accepted input does not re-encode to itself")
		}
		// Operations on an accepted table stay inside it.
		s, err := RestoreFingerprintShard(Config{Window: time.Duration(tb.gens-1) * time.Duration(tb.span), Generations: tb.gens,
			Capacity: 1000, FPR: 0.01}, []*Table{tb})
		if err != nil {
			return
		}
		at := time.Unix(0, int64(tb.newest)*tb.span)
		for i := range uint64(300) {
			s.TestAndAdd(keyHash(i), at)
		}
		s.TestAndAdd(keyHash(1), at.Add(time.Duration(tb.span)))
		// A sealed table's set and live table through seals, an early
		// one and one that drops a generation, whatever they hold.
		if tb.h != nil {
			tb.h.seal(tb.tag(tb.newest), 0)
			tb.h.seal(tb.tag(tb.newest), 1<<tb.tag(tb.newest+1))
			for i := range uint64(100) {
				tb.h.testAndAdd(keyHash(i))
			}
		}
	})
}

func FuzzDecodeTableLog(f *testing.F) {
	l := &TableLog{Serial: 3, First: 10, Newest: 12, Entries: 5, Adds: 7, Added: []uint64{1, 2 << 10, 3<<10 | 4}}
	var b bytes.Buffer
	if _, err := l.WriteTo(&b); err != nil {
		f.Fatal(err)
	}
	f.Add(b.Bytes())
	f.Add(b.Bytes()[:tableLogHeaderSize])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := DecodeTableLog(bytes.NewReader(data), 1<<16)
		if err != nil {
			if l != nil {
				t.Fatal("error with a non-nil segment")
			}
			return
		}
		var b bytes.Buffer
		if _, err := l.WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b.Bytes(), data) {
			t.Fatal("accepted input does not re-encode to itself")
		}
	})
}

// TestTableSnapshotConcurrentEncode: snapshots encoded on another
// goroutine while the owner keeps inserting, changes generation (a drop
// rewrites the table) and overflows (run with -race) encode exactly the
// state at snapshot time.
func TestTableSnapshotConcurrentEncode(t *testing.T) {
	forLayouts(t, func(t *testing.T) {
		s, err := NewFingerprintShard(Config{Window: 3 * time.Hour, Generations: 4, Capacity: 20_000, FPR: 0.01})
		if err != nil {
			t.Fatal(err)
		}
		s.EnableJournal(0.25, 10_000_000)
		type job struct {
			sn   *FingerprintSnapshot
			want [][]byte
		}
		jobs := make(chan job, 4)
		errs := make(chan error, 1)
		go func() {
			defer close(errs)
			for j := range jobs {
				for i, ts := range j.sn.Tables {
					var b bytes.Buffer
					if _, err := ts.WriteTo(&b); err != nil {
						errs <- err
						return
					}
					if m, ok := ts.JournalMark(); ok {
						ts.LogSince(m.Pos)
					}
					if !bytes.Equal(b.Bytes(), j.want[i]) {
						errs <- errors.New("a snapshot encoded concurrently differs from the state at snapshot time")
						return
					}
					ts.Mark("t", 0)
				}
				j.sn.Release()
			}
		}()
		at := time.Unix(0, 0).Add(700_000 * s.Span())
		for i := range uint64(60_000) {
			s.TestAndAdd(keyHash(i), at.Add(time.Duration(i)*500*time.Millisecond))
			if i%3000 == 0 {
				sn := s.Snapshot()
				var want [][]byte
				for _, tb := range s.Tables() {
					var b bytes.Buffer
					if _, err := tb.WriteTo(&b); err != nil {
						t.Fatal(err)
					}
					want = append(want, b.Bytes())
				}
				jobs <- job{sn, want}
			}
		}
		close(jobs)
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		if st := s.Stats(); st.Overflow == 0 {
			t.Fatal("no overflow table: the test should overflow")
		}
	})
}
