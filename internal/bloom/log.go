package bloom

import (
	"encoding/binary"
	"fmt"
	"io"
)

// Log segment format v1, little-endian: the hashes that set bits in one
// sub-filter of a generation between two checkpoints, and the generation's
// counters after them.
//
//	header   magic "\x89BGLOG\r\n", version u16 = 1, reserved u16 (0),
//	         generation id u64, start i64, end i64 (Unix ns), sub-filter
//	         index u32, sub-filters u32 (of the generation), generation
//	         inserts u64, sub-filter inserts u64, sub-filter set bits u64
//	         (after the entries), entries u64
//	entries  per entry H1 u64, H2 u64 (the key's Hash)
//	trailer  CRC-32C u32 of every byte before it
const (
	logVersion    = 1
	logHeaderSize = 8 + 2 + 2 + 8 + 8 + 8 + 4 + 4 + 8 + 8 + 8 + 8
	logEntrySize  = 16
)

var logMagic = [8]byte{0x89, 'B', 'G', 'L', 'O', 'G', '\r', '\n'}

// LogSegment is what one checkpoint adds to a generation stored earlier:
// the hashes that set bits since, all in sub-filter Sub, and the counters
// the generation has after them (see Generation.ApplyLog).
type LogSegment struct {
	ID         uint64
	Start, End int64 // the generation's span, Unix ns
	Sub, Subs  uint32
	Inserts    uint64 // the generation's inserts after the segment
	SubInserts uint64 // sub-filter Sub's inserts after the segment
	SetBits    uint64 // sub-filter Sub's set bits after the segment
	Entries    []Hash
}

// Size is the encoded size in bytes.
func (s *LogSegment) Size() int64 {
	return logHeaderSize + logEntrySize*int64(len(s.Entries)) + 4
}

// WriteTo encodes the segment in log format v1.
func (s *LogSegment) WriteTo(w io.Writer) (int64, error) {
	sw := newSumWriter(w, "log")
	b := appendPreamble(make([]byte, 0, logHeaderSize), logMagic, logVersion, 0)
	b = binary.LittleEndian.AppendUint64(b, s.ID)
	b = binary.LittleEndian.AppendUint64(b, uint64(s.Start))
	b = binary.LittleEndian.AppendUint64(b, uint64(s.End))
	b = binary.LittleEndian.AppendUint32(b, s.Sub)
	b = binary.LittleEndian.AppendUint32(b, s.Subs)
	b = binary.LittleEndian.AppendUint64(b, s.Inserts)
	b = binary.LittleEndian.AppendUint64(b, s.SubInserts)
	b = binary.LittleEndian.AppendUint64(b, s.SetBits)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(s.Entries)))
	if err := sw.write("header", b); err != nil {
		return sw.cw.n, err
	}
	var e [logEntrySize * 256]byte
	for lo := 0; lo < len(s.Entries); lo += 256 {
		chunk := s.Entries[lo:min(lo+256, len(s.Entries))]
		for i, h := range chunk {
			binary.LittleEndian.PutUint64(e[i*16:], h.H1)
			binary.LittleEndian.PutUint64(e[i*16+8:], h.H2)
		}
		if err := sw.write("entries", e[:len(chunk)*logEntrySize]); err != nil {
			return sw.cw.n, err
		}
	}
	return sw.finish()
}

// DecodeLog reads one log segment and checks that the stream ends right
// after it. A segment of more than maxEntries entries is refused
// (ErrTooLarge) before its entries are read. Format problems are
// *FormatError wrapping ErrCorrupt (truncated, bad magic, checksum
// mismatch, trailing bytes), ErrUnsupportedVersion or ErrTooLarge; a
// non-nil error means a nil segment.
func DecodeLog(r io.Reader, maxEntries int) (*LogSegment, error) {
	d := &decoder{r: r}
	var hdr [logHeaderSize]byte
	crc, err := d.logHeader(hdr[:], logMagic, "log segment", logVersion)
	if err != nil {
		return nil, err
	}
	b := hdr[preambleSz:]
	u64 := func() uint64 { x := binary.LittleEndian.Uint64(b); b = b[8:]; return x }
	u32 := func() uint32 { x := binary.LittleEndian.Uint32(b); b = b[4:]; return x }
	s := &LogSegment{ID: u64(), Start: int64(u64()), End: int64(u64()), Sub: u32(), Subs: u32(),
		Inserts: u64(), SubInserts: u64(), SetBits: u64()}
	n := u64()
	if n > uint64(max(maxEntries, 0)) {
		return nil, d.fail("log header", fmt.Sprintf("%d entries, limit %d", n, maxEntries), ErrTooLarge)
	}
	// Entries are read in pieces: a count that the data does not back
	// costs no allocation beyond what was read.
	var buf [logEntrySize * 1024]byte
	for left := n; left > 0; {
		m := min(left, 1024)
		p := buf[:m*logEntrySize]
		if err := d.read("log entries", p); err != nil {
			return nil, err
		}
		crc.Write(p)
		for i := range m {
			s.Entries = append(s.Entries, Hash{H1: binary.LittleEndian.Uint64(p[i*16:]), H2: binary.LittleEndian.Uint64(p[i*16+8:])})
		}
		left -= m
	}
	if err := d.logEnd(crc, n, "log segment"); err != nil {
		return nil, err
	}
	if s.Sub >= s.Subs || s.Subs > maxStacks {
		return nil, d.fail("log header", fmt.Sprintf("sub-filter %d of %d", s.Sub, s.Subs), ErrCorrupt)
	}
	return s, nil
}

// ApplyLog replays seg onto g, which must be the generation as stored when
// the segment's entries started (or later in the same chain: replaying an
// entry twice changes nothing). It sets the entries' bits in sub-filter
// seg.Sub, takes the segment's counters, and checks that the sub-filter
// then has exactly the set bits the segment records. An error wraps
// ErrCorrupt; g is then unusable. Only the owning goroutine may call it.
func (g *Generation) ApplyLog(seg *LogSegment) error {
	fail := func(detail string) error {
		return fmt.Errorf("replaying log onto generation %d: %s: %w", g.id, detail, ErrCorrupt)
	}
	switch {
	case seg.ID != g.id || seg.Start != g.start || seg.End != g.end:
		return fail(fmt.Sprintf("segment of generation %d [%d, %d)", seg.ID, seg.Start, seg.End))
	case int(seg.Subs) != len(g.subs) || seg.Sub >= seg.Subs:
		return fail(fmt.Sprintf("segment for sub-filter %d of %d, generation has %d", seg.Sub, seg.Subs, len(g.subs)))
	}
	f := g.subs[seg.Sub]
	dIns, dSub := seg.Inserts-g.inserts, seg.SubInserts-g.subInserts[seg.Sub]
	if seg.Inserts < g.inserts || seg.SubInserts < g.subInserts[seg.Sub] || dIns != dSub || dIns > uint64(len(seg.Entries)) {
		return fail(fmt.Sprintf("counters %d/%d after %d entries, generation at %d/%d",
			seg.Inserts, seg.SubInserts, len(seg.Entries), g.inserts, g.subInserts[seg.Sub]))
	}
	if seg.SetBits > f.Bits() {
		return fail(fmt.Sprintf("%d set bits in a %d-bit sub-filter", seg.SetBits, f.Bits()))
	}
	for _, h := range seg.Entries {
		f.TestAndAdd(h)
	}
	if f.ones != seg.SetBits {
		return fail(fmt.Sprintf("sub-filter %d has %d set bits after the entries, segment says %d", seg.Sub, f.ones, seg.SetBits))
	}
	g.inserts, g.subInserts[seg.Sub] = seg.Inserts, seg.SubInserts
	return nil
}
