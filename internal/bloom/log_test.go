package bloom

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func encodeBytes(t testing.TB, wt func(*bytes.Buffer) (int64, error)) []byte {
	t.Helper()
	var b bytes.Buffer
	if _, err := wt(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func decodeGen(t testing.TB, data []byte) *Generation {
	t.Helper()
	g, err := DecodeGeneration(bytes.NewReader(data), 0)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// chain stands for a checkpoint chain of one generation: its base encoding
// and the segments since.
type chain struct {
	base []byte
	segs [][]byte
}

// checkpointShard keeps, per generation ID, the chain a checkpoint layer
// would store, and commits a snapshot as log when the journal allows it.
type checkpointShard struct {
	t      testing.TB
	chains map[uint64]*chain
	logs   int
	fulls  int
}

func (c *checkpointShard) commit(sn *Snapshot, fail bool) {
	c.t.Helper()
	defer sn.Release()
	type done struct {
		gs    *GenerationSnapshot
		token string
		ch    *chain
	}
	var marks []done
	next := map[uint64]*chain{}
	for _, gs := range sn.Generations {
		prev := c.chains[gs.ID]
		token := ""
		if prev != nil {
			token = fmt.Sprintf("%d/%d", gs.ID, len(prev.segs))
		}
		m, ok := gs.JournalMark()
		if seg, lok := gs.LogSince(m.Pos); !gs.Sealed && prev != nil && ok && m.Token == token && lok {
			ch := &chain{base: prev.base, segs: append(prev.segs[:len(prev.segs):len(prev.segs)], encodeBytes(c.t, func(b *bytes.Buffer) (int64, error) { return seg.WriteTo(b) }))}
			next[gs.ID] = ch
			marks = append(marks, done{gs, fmt.Sprintf("%d/%d", gs.ID, len(ch.segs)), ch})
			c.logs++
			continue
		}
		ch := &chain{base: encodeBytes(c.t, func(b *bytes.Buffer) (int64, error) { return gs.WriteTo(b) })}
		next[gs.ID] = ch
		marks = append(marks, done{gs, fmt.Sprintf("%d/0", gs.ID), ch})
		c.fulls++
	}
	if fail {
		return
	}
	c.chains = next
	for _, d := range marks {
		d.gs.Mark(d.token)
	}
}

// restore decodes every chain and replays its segments.
func (c *checkpointShard) restore(cfg Config) *Shard {
	c.t.Helper()
	var gens []*Generation
	for _, ch := range c.chains {
		g := decodeGen(c.t, ch.base)
		for _, sb := range ch.segs {
			seg, err := DecodeLog(bytes.NewReader(sb), 1<<30)
			if err != nil {
				c.t.Fatal(err)
			}
			if err := g.ApplyLog(seg); err != nil {
				c.t.Fatal(err)
			}
		}
		gens = append(gens, g)
	}
	s, err := RestoreShard(cfg, gens)
	if err != nil {
		c.t.Fatal(err)
	}
	return s
}

func shardEncodings(t testing.TB, s *Shard) map[uint64][]byte {
	t.Helper()
	out := map[uint64][]byte{}
	for _, gs := range [2][]*Generation{s.legacy, s.gens} {
		for _, g := range gs {
			out[g.id] = encodeBytes(t, func(b *bytes.Buffer) (int64, error) { return g.WriteTo(b) })
		}
	}
	return out
}

// TestJournalReplayIdentical feeds a shard with checkpoints every few
// thousand inserts (some failing), across rotations and overflow stacks,
// and checks that the stored chains restore to byte-identical generations.
func TestJournalReplayIdentical(t *testing.T) {
	cfg := Config{Window: 3 * time.Hour, Generations: 4, Capacity: 90_000, FPR: 0.01}
	s, err := NewShard(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.EnableJournal(0.25, 10_000_000)
	cp := &checkpointShard{t: t}
	rng := rand.New(rand.NewPCG(1, 2))
	t0 := time.Unix(1_800_000_000, 0).Truncate(time.Hour)
	const n = 300_000
	hs := make([]Hash, 0, 256)
	ts := make([]time.Time, 0, 256)
	seen := make([]bool, 256)
	for i := 0; i < n; {
		hs, ts = hs[:0], ts[:0]
		for j := 0; j < 200 && i < n; j, i = j+1, i+1 {
			k := rng.Uint64N(400_000) // repeats included
			// An hour gets ~55 k new keys against a planned 30 k: it stacks.
			ts = append(ts, t0.Add(time.Duration(i)*5*time.Hour/n))
			hs = append(hs, HashKey(binary.LittleEndian.AppendUint64(nil, k)))
		}
		if rng.IntN(2) == 0 {
			s.TestAndAddBatch(hs, ts, seen)
		} else {
			for j := range hs {
				s.TestAndAdd(hs[j], ts[j])
			}
		}
		if i%1400 < 200 {
			cp.commit(s.Snapshot(), rng.IntN(5) == 0)
		}
	}
	cp.commit(s.Snapshot(), false)
	if cp.logs == 0 || cp.fulls == 0 {
		t.Fatalf("logs %d, full uploads %d: want both", cp.logs, cp.fulls)
	}
	if s.Stats().Stacks == 0 {
		t.Fatal("no generation stacked")
	}
	want := shardEncodings(t, s)
	got := shardEncodings(t, cp.restore(cfg))
	if len(got) != len(want) {
		t.Fatalf("%d generations restored, want %d", len(got), len(want))
	}
	for id, w := range want {
		if !bytes.Equal(got[id], w) {
			t.Errorf("generation %d: restored encoding differs from the live one", id)
		}
	}
	t.Logf("%d log commits, %d full uploads", cp.logs, cp.fulls)
}

func TestJournalLimitAndStack(t *testing.T) {
	s, err := NewShard(Config{Window: time.Hour, Generations: 2, Capacity: 2000, FPR: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	s.EnableJournal(0.25, 1500) // a 2,000-key filter is small: the floor of 1,024 entries applies
	ts := time.Unix(1_800_000_000, 0)
	next := 0
	add := func(n int) {
		for ; n > 0; next++ {
			if !s.TestAndAdd(HashKey(binary.LittleEndian.AppendUint64(nil, uint64(next))), ts) {
				n--
			}
		}
	}
	// commit takes a snapshot, asks for the log since the last mark and
	// marks the snapshot.
	commit := func(token string) (*LogSegment, bool) {
		sn := s.Snapshot()
		defer sn.Release()
		g := sn.Generations[len(sn.Generations)-1]
		m, _ := g.JournalMark()
		seg, ok := g.LogSince(m.Pos)
		g.Mark(token)
		return seg, ok
	}
	add(500)
	if seg, ok := commit("a"); !ok || len(seg.Entries) != 500 {
		t.Fatalf("first log: ok %v", ok)
	}
	add(1200) // over the limit
	if _, ok := commit("b"); ok {
		t.Error("journal over its limit still gives a log")
	}
	add(100)
	if seg, ok := commit("c"); !ok || len(seg.Entries) != 100 {
		t.Fatalf("log after the mark: ok %v", ok)
	}
	add(250) // 2,050 inserts: the first sub-filter is full, a second one stacks
	if s.Stats().Stacks == 0 {
		t.Fatal("no stack")
	}
	if _, ok := commit("d"); ok {
		t.Error("journal across a new sub-filter still gives a log")
	}
	add(10)
	if seg, ok := commit("e"); !ok || len(seg.Entries) != 10 || seg.Sub != 1 || seg.Subs != 2 {
		t.Fatalf("log into the new sub-filter: ok %v, %+v", ok, seg)
	}
}

func TestJournalOffByDefault(t *testing.T) {
	s, err := NewShard(Config{Window: time.Hour, Generations: 2, Capacity: 1000, FPR: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	s.TestAndAdd(HashKey([]byte("a")), time.Unix(1_800_000_000, 0))
	sn := s.Snapshot()
	defer sn.Release()
	g := sn.Generations[0]
	if _, ok := g.LogSince(0); ok {
		t.Error("log without a journal")
	}
	if _, ok := g.JournalMark(); ok {
		t.Error("mark without a journal")
	}
}

func testSegment() *LogSegment {
	seg := &LogSegment{ID: 7, Start: 7 * 3600e9, End: 8 * 3600e9, Sub: 1, Subs: 2, Inserts: 1234, SubInserts: 34, SetBits: 999}
	for i := range 5 {
		seg.Entries = append(seg.Entries, HashKey([]byte{byte(i)}))
	}
	return seg
}

func TestLogGolden(t *testing.T) {
	data := encodeBytes(t, func(b *bytes.Buffer) (int64, error) { return testSegment().WriteTo(b) })
	if int64(len(data)) != testSegment().Size() {
		t.Errorf("encoded %d bytes, Size says %d", len(data), testSegment().Size())
	}
	path := filepath.Join("testdata", "log_v1.bin")
	if *update {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	golden, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run TestLogGolden -update to create)", err)
	}
	if !bytes.Equal(golden, data) {
		t.Fatalf("%s: encoding differs from the golden file (log format v1 changed?)", path)
	}
	seg, err := DecodeLog(bytes.NewReader(golden), 100)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(seg) != fmt.Sprint(testSegment()) {
		t.Errorf("decoded %+v, want %+v", seg, testSegment())
	}
}

func TestDecodeLogRejects(t *testing.T) {
	good := encodeBytes(t, func(b *bytes.Buffer) (int64, error) { return testSegment().WriteTo(b) })
	recrc := func(b []byte) []byte {
		binary.LittleEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], castagnoli))
		return b
	}
	edit := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for _, tc := range []struct {
		name string
		data []byte
		want error
		text string
	}{
		{"empty", nil, ErrCorrupt, "truncated"},
		{"truncated header", good[:20], ErrCorrupt, "truncated"},
		{"truncated entries", good[:logHeaderSize+20], ErrCorrupt, "truncated"},
		{"no trailer", good[:len(good)-4], ErrCorrupt, "truncated"},
		{"bad magic", edit(func(b []byte) []byte { b[1] = 'X'; return b }), ErrCorrupt, "bad magic"},
		{"bad version", edit(func(b []byte) []byte { b[8] = 2; return recrc(b) }), ErrUnsupportedVersion, "version 2"},
		{"flipped entry bit", edit(func(b []byte) []byte { b[logHeaderSize+3] ^= 1; return b }), ErrCorrupt, "checksum"},
		{"flipped crc", edit(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), ErrCorrupt, "checksum"},
		{"count too small", edit(func(b []byte) []byte { binary.LittleEndian.PutUint64(b[logHeaderSize-8:], 4); return b }), ErrCorrupt, "checksum"},
		{"count too large", edit(func(b []byte) []byte { binary.LittleEndian.PutUint64(b[logHeaderSize-8:], 6); return recrc(b) }), ErrCorrupt, "truncated"},
		{"trailing bytes", append(append([]byte(nil), good...), 0), ErrCorrupt, "does not match"},
		{"over the limit", edit(func(b []byte) []byte { binary.LittleEndian.PutUint64(b[logHeaderSize-8:], 1<<40); return b }), ErrTooLarge, "limit"},
		{"sub out of range", edit(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[36:], 2); return recrc(b) }), ErrCorrupt, "sub-filter 2 of 2"},
	} {
		seg, err := DecodeLog(bytes.NewReader(tc.data), 100)
		if seg != nil || !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, %v; want %v", tc.name, seg, err, tc.want)
			continue
		}
		if !bytes.Contains([]byte(err.Error()), []byte(tc.text)) {
			t.Errorf("%s: error %q does not say %q", tc.name, err, tc.text)
		}
	}
}

func TestApplyLogRejects(t *testing.T) {
	s, err := NewShard(Config{Window: time.Hour, Generations: 2, Capacity: 1000, FPR: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	s.EnableJournal(0.25, 1000)
	ts := time.Unix(1_800_000_000, 0)
	s.TestAndAdd(HashKey([]byte("base")), ts)
	base := encodeBytes(t, func(b *bytes.Buffer) (int64, error) { return s.gens[0].WriteTo(b) })
	for i := range 10 {
		s.TestAndAdd(HashKey([]byte{byte(i)}), ts)
	}
	sn := s.Snapshot()
	defer sn.Release()
	seg, ok := sn.Generations[0].LogSince(1)
	if !ok {
		t.Fatal("no log")
	}
	if err := decodeGen(t, base).ApplyLog(seg); err != nil {
		t.Fatalf("good segment: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(s *LogSegment)
	}{
		{"other generation", func(s *LogSegment) { s.ID++ }},
		{"other span", func(s *LogSegment) { s.End++ }},
		{"other structure", func(s *LogSegment) { s.Subs = 2; s.Sub = 1 }},
		{"missing entry", func(s *LogSegment) { s.Entries = s.Entries[1:] }},
		{"set bits", func(s *LogSegment) { s.SetBits++ }},
		{"counters", func(s *LogSegment) { s.Inserts++ }},
		{"counters going back", func(s *LogSegment) { s.Inserts, s.SubInserts = 0, 0 }},
	} {
		bad := *seg
		bad.Entries = append([]Hash(nil), seg.Entries...)
		tc.edit(&bad)
		if err := decodeGen(t, base).ApplyLog(&bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", tc.name, err)
		}
	}
}

func FuzzDecodeLog(f *testing.F) {
	good, _ := os.ReadFile(filepath.Join("testdata", "log_v1.bin"))
	f.Add(good)
	f.Add(good[:logHeaderSize])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		seg, err := DecodeLog(bytes.NewReader(data), 1<<20)
		if err != nil {
			if seg != nil {
				t.Fatal("error with a non-nil segment")
			}
			return
		}
		again := encodeBytes(t, func(b *bytes.Buffer) (int64, error) { return seg.WriteTo(b) })
		if !bytes.Equal(again, data) {
			t.Fatal("accepted input does not re-encode to itself")
		}
	})
}

// TestJournalConcurrentCommit: a committer reads the log of a snapshot and
// marks it while the owner keeps inserting (run with -race); every
// segment holds exactly the keys inserted between its snapshots.
func TestJournalConcurrentCommit(t *testing.T) {
	s, err := NewShard(Config{Window: time.Hour, Generations: 2, Capacity: 1 << 20, FPR: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	s.EnableJournal(0.25, 10_000_000)
	ts := time.Unix(1_800_000_000, 0)
	jobs := make(chan *Snapshot)
	done := make(chan int)
	go func() {
		total := 0
		for sn := range jobs {
			g := sn.Generations[len(sn.Generations)-1]
			m, _ := g.JournalMark()
			seg, ok := g.LogSince(m.Pos)
			if !ok {
				t.Error("no log")
			} else {
				total += len(seg.Entries)
				if _, err := seg.WriteTo(io.Discard); err != nil {
					t.Error(err)
				}
			}
			g.Mark("x")
			sn.Release()
			done <- total
		}
		close(done)
	}()
	inserted, logged, atSnapshot := 0, 0, 0
	for round := range 20 {
		for i := range 3000 {
			if !s.TestAndAdd(HashKey(binary.LittleEndian.AppendUint64(nil, uint64(round*3000+i))), ts) {
				inserted++
			}
			if i == 1500 {
				atSnapshot = inserted
				jobs <- s.Snapshot()
			}
		}
		logged = <-done
	}
	close(jobs)
	<-done
	if logged != atSnapshot {
		t.Errorf("segments hold %d entries, %d keys were inserted before the last snapshot", logged, atSnapshot)
	}
}
