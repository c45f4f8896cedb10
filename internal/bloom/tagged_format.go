package bloom

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/bloomgate/bloomgate/internal/filterplan"
)

// Table format v1, little-endian, streamed:
//
//	header   magic "\x89BGTAB\r\n", version u16 = 1, flags u16 (bit 0:
//	         closed), length u32 of the fields up to the header CRC,
//	         serial u64, first u64, newest u64 (generations), span i64
//	         (ns), generations u32, level u32, remainder bits u32, tag bits
//	         u32, blocks u64, capacity u64, fpr f64, entries u64, adds u64,
//	         page bytes u32 (65536), metadata pages u32, entry pages u32,
//	         reserved u32 (0), then 2^tag bits counts u64 (entries per
//	         tag); CRC-32C u32 of all the header bytes before it.
//	chunks   one per page, metadata pages first, each page's used words
//	         only: kind u8 (0 raw, 1 zstd, 2 all zero), payload length u32,
//	         CRC-32C u32 of kind, length and payload, payload. zstd is tried
//	         on pages with ≤ 20 % of their bits set (a young table) and kept
//	         if it saves ≥ 1/16.
//	trailer  magic "BGTABEND", chunks u64, bytes before the trailer u64,
//	         CRC-32C u32 of the trailer bytes before it.
//
// The pages are the table itself (qtable.go), canonical: the same entries
// give the same bytes whatever the order they were added in.
//
// Table format v2 is a sealed table (a live table beside a static set of
// the sealed generations, sealed.go): the header of v1 with version 2 and
// quotients u64 (the set's) before the counts; blocks, capacity and
// entries are the live table's, whose entries are d + remainder bits (d
// from the quotients and the live slots, liveMap); the counts are per tag
// over the set and the live table (whose entries are all of the newest
// generation; the set may hold some of it too, after an early seal), and
// capacity is the whole table's. After the live table's pages the set, in sealed set format
// v1 (sealed_format.go), then the trailer. Tagged tables are still
// written as v1.
const (
	tableVersion       = 1
	tableSealedVersion = 2
	tableFlagClosed    = 1 << 0
	tableHdrFixed      = 8*3 + 8 + 4*4 + 8*5 + 4*4
)

var (
	tableMagic        = [8]byte{0x89, 'B', 'G', 'T', 'A', 'B', '\r', '\n'}
	tableTrailerMagic = [8]byte{'B', 'G', 'T', 'A', 'B', 'E', 'N', 'D'}
)

// WriteTo encodes the table in table format v1. Only the owning goroutine
// may call it; use FingerprintShard.Snapshot to encode concurrently.
func (tb *Table) WriteTo(w io.Writer) (int64, error) {
	v := qtableView{meta: tb.q.meta, ents: tb.q.ents, entries: tb.q.entries}
	m := tb.meta()
	var set *sealedSet
	if tb.h != nil {
		set = tb.h.set
	}
	return encodeTable(w, &m, &v, set)
}

// WriteTo encodes the table as it was at snapshot time (table format v1,
// v2 for a sealed table).
func (ts *TableSnapshot) WriteTo(w io.Writer) (int64, error) {
	return encodeTable(w, &ts.meta, &ts.view, ts.set)
}

// entryBits is the bits of an entry of the table's pages: remainder and
// tag, or a sealed table's live entry (d + remainder bits).
func (m *tableMeta) entryBits() uint {
	if m.size.nq > 0 {
		return newLiveMap(m.size.nq, m.size.nblocks*qSlots).d + m.size.r
	}
	return m.size.r + m.a
}

// tableUsed is the number of words of each page a table uses.
func tableUsed(pblocks, bpp uint64, s uint, meta bool, pi uint64) uint64 {
	if meta {
		return min(1<<qMetaShift, pblocks-pi<<qMetaShift) * 2
	}
	return (min(bpp, pblocks-pi*bpp)*qSlots*uint64(s) + 63) / 64
}

func encodeTable(w io.Writer, m *tableMeta, v *qtableView, set *sealedSet) (int64, error) {
	bw := bufio.NewWriterSize(w, 256<<10)
	cw := &countingWriter{w: bw}
	ntags := 1 << m.a
	version, fixed := uint16(tableVersion), tableHdrFixed
	if set != nil {
		version, fixed = tableSealedVersion, tableHdrFixed+8
	}
	var flags uint16
	if m.closed {
		flags |= tableFlagClosed
	}
	hlen := fixed + 8*ntags
	hdr := appendHeader(make([]byte, 0, preambleSz+4+hlen+4), tableMagic, version, flags, hlen)
	for _, x := range []uint64{m.serial, m.first, m.newest, uint64(m.span)} {
		hdr = binary.LittleEndian.AppendUint64(hdr, x)
	}
	for _, x := range []uint32{uint32(m.gens), uint32(m.size.level), uint32(m.size.r), uint32(m.a)} {
		hdr = binary.LittleEndian.AppendUint32(hdr, x)
	}
	for _, x := range []uint64{m.size.nblocks, m.size.capacity, math.Float64bits(m.size.fpr), m.entries, m.adds} {
		hdr = binary.LittleEndian.AppendUint64(hdr, x)
	}
	for _, x := range []uint32{pageBytes, uint32(len(v.meta)), uint32(len(v.ents)), 0} {
		hdr = binary.LittleEndian.AppendUint32(hdr, x)
	}
	if set != nil {
		hdr = binary.LittleEndian.AppendUint64(hdr, set.nq)
	}
	for _, c := range m.counts {
		hdr = binary.LittleEndian.AppendUint64(hdr, c)
	}
	if err := cw.write(appendSum(hdr)); err != nil {
		return cw.n, fmt.Errorf("writing table header: %w", err)
	}
	es := m.entryBits()
	pblocks, bpp, _, _ := qGeometry(m.size.nblocks, es)
	pc := pageChunks{cw: cw}
	defer pc.close()
	for i, p := range v.meta {
		if err := pc.write(p[:tableUsed(pblocks, bpp, es, true, uint64(i))]); err != nil {
			return cw.n, fmt.Errorf("writing table chunk: %w", err)
		}
	}
	for i, p := range v.ents {
		if err := pc.write(p[:tableUsed(pblocks, bpp, es, false, uint64(i))]); err != nil {
			return cw.n, fmt.Errorf("writing table chunk: %w", err)
		}
	}
	if set != nil {
		if err := set.write(cw); err != nil {
			return cw.n, err
		}
	}
	if err := cw.write(appendTrailer(make([]byte, 0, trailerSz), tableTrailerMagic, pc.chunks, cw.n)); err != nil {
		return cw.n, fmt.Errorf("writing table trailer: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return cw.n, fmt.Errorf("writing table: %w", err)
	}
	return cw.n, nil
}

// DecodeTable reads one table in table format v1. It checks the declared
// size (whole pages) against maxBytes (≤ 0: MaxFilterBytes; ErrTooLarge)
// before allocating, reads the chunks straight into the pages, then
// checks the table's layout (qtable.checkLayout), so that every operation
// on it stays inside it. Format problems are *FormatError
// wrapping ErrCorrupt, ErrUnsupportedVersion or ErrTooLarge; a non-nil
// error means a nil Table.
func DecodeTable(r io.Reader, maxBytes int64) (*Table, error) {
	if maxBytes <= 0 || maxBytes > MaxFilterBytes {
		maxBytes = MaxFilterBytes
	}
	d := &decoder{r: r}
	th, err := d.tableHeader(maxBytes)
	if err != nil {
		return nil, err
	}
	m := &th.m
	cr := &chunkReader{d: d}
	defer cr.Close()
	q, err := th.readPages(cr)
	if err != nil {
		return nil, err
	}
	var h *hybrid
	if th.sealed {
		if h, err = th.readSealed(d, q, maxBytes-int64((th.mp+th.ep)*pageBytes)); err != nil {
			return nil, err
		}
	}
	if err := d.trailer(tableTrailerMagic, cr.chunks, 0); err != nil {
		return nil, err
	}
	q.entries = m.entries
	if err := q.checkLayout(); err != nil {
		return nil, d.fail("table", err.Error(), ErrCorrupt)
	}
	tb := &Table{q: q, h: h, a: m.a, serial: m.serial, first: m.first, newest: m.newest, span: m.span, gens: m.gens,
		size: m.size, closed: m.closed, counts: m.counts, adds: m.adds}
	tb.setLive(oldestHeld(m))
	return tb, nil
}

// tableHeader is a table's header as DecodeTable checked it: its metadata
// and the geometry of its pages.
type tableHeader struct {
	m                    tableMeta
	sealed               bool
	pblocks, bpp, mp, ep uint64
}

// oldestHeld is the oldest generation whose entries the table can hold.
func oldestHeld(m *tableMeta) uint64 {
	lo := m.first
	if m.newest+1 > uint64(m.gens) {
		lo = max(lo, m.newest+1-uint64(m.gens))
	}
	return lo
}

// tableHeader reads and checks a table's header (format v1 or v2).
func (d *decoder) tableHeader(maxBytes int64) (*tableHeader, error) {
	flags, b, err := d.header(header{magic: tableMagic, noun: "table", version: tableVersion, newest: tableSealedVersion,
		minLen: tableHdrFixed + 8*2, maxLen: tableHdrFixed + 8 + 8*filterplan.MaxGenerations, unit: 8, fixed: tableHdrFixed, flags: tableFlagClosed})
	if err != nil {
		return nil, err
	}
	th := &tableHeader{sealed: d.version == tableSealedVersion}
	hlen := uint32(len(b))
	fixed := uint32(tableHdrFixed)
	if th.sealed {
		fixed += 8
	}
	u64 := func() uint64 { x := binary.LittleEndian.Uint64(b); b = b[8:]; return x }
	u32 := func() uint32 { x := binary.LittleEndian.Uint32(b); b = b[4:]; return x }
	m := &th.m
	*m = tableMeta{serial: u64(), first: u64(), newest: u64(), span: int64(u64()), closed: flags&tableFlagClosed != 0}
	m.gens, m.size.level, m.size.r, m.a = int(u32()), int(u32()), uint(u32()), uint(u32())
	m.size.nblocks, m.size.capacity, m.size.fpr = u64(), u64(), math.Float64frombits(u64())
	m.entries, m.adds = u64(), u64()
	pb, mpages, epages, res := u32(), u32(), u32(), u32()
	if th.sealed {
		m.size.nq = u64()
	}
	if err := d.checkTableMeta(m, th.sealed, pb, res, hlen, fixed, maxBytes); err != nil {
		return nil, err
	}
	th.pblocks, th.bpp, th.mp, th.ep = qGeometry(m.size.nblocks, m.entryBits())
	switch {
	case uint64(mpages) != th.mp || uint64(epages) != th.ep:
		return nil, d.fail("header", fmt.Sprintf("%d+%d pages for %d blocks", mpages, epages, m.size.nblocks), ErrCorrupt)
	case (th.mp+th.ep)*pageBytes > uint64(maxBytes):
		return nil, d.fail("header", fmt.Sprintf("table of %d bytes, limit %d", (th.mp+th.ep)*pageBytes, maxBytes), ErrTooLarge)
	case (!th.sealed && m.size.capacity > th.pblocks*qSlots) || m.entries > th.pblocks*qSlots:
		return nil, d.fail("header", fmt.Sprintf("capacity %d, %d entries in %d slots", m.size.capacity, m.entries, th.pblocks*qSlots), ErrCorrupt)
	}
	if err := d.tableCounts(m, th.sealed, b); err != nil {
		return nil, err
	}
	return th, nil
}

// checkTableMeta checks the fixed fields of a table's header: pb is its
// page size, res its reserved field, hlen its length (fixed without the
// counts). One case per error message: its complexity is the list of
// checks, read top to bottom.
func (d *decoder) checkTableMeta(m *tableMeta, sealed bool, pb, res, hlen, fixed uint32, maxBytes int64) error {
	switch {
	case pb != pageBytes:
		return d.fail("header", fmt.Sprintf("page size %d", pb), ErrUnsupportedVersion)
	case res != 0:
		return d.fail("header", fmt.Sprintf("reserved field %#x", res), ErrUnsupportedVersion)
	case m.gens < 2 || m.gens > filterplan.MaxGenerations || m.a != tagBits(m.gens) || hlen != fixed+8<<m.a:
		return d.fail("header", fmt.Sprintf("%d generations, %d tag bits in a %d-byte header", m.gens, m.a, hlen), ErrCorrupt)
	case m.size.r < 1 || m.size.r+m.a >= qMaxBits || m.size.nblocks == 0 || m.size.nblocks >= qMaxBlocks ||
		m.size.level < 0 || m.size.level > maxTableLevels || !(m.size.fpr > 0 && m.size.fpr < 1):
		return d.fail("header", fmt.Sprintf("remainder %d bits, %d blocks, level %d, fpr %v", m.size.r, m.size.nblocks, m.size.level, m.size.fpr), ErrCorrupt)
	case m.serial == 0 || m.span <= 0 || m.first > m.newest || m.newest >= math.MaxInt64/uint64(m.span):
		return d.fail("header", fmt.Sprintf("table %d: generations %d … %d of %d ns", m.serial, m.first, m.newest, m.span), ErrCorrupt)
	case sealed && (m.size.nq == 0 || m.size.nq%ssChunkQ != 0 || m.size.nq > uint64(maxBytes)*8 || m.size.level != 0 || m.size.r+m.a >= ssMaxS ||
		m.entryBits() >= qMaxBits):
		return d.fail("header", fmt.Sprintf("sealed table of %d quotients, level %d, remainder %d bits", m.size.nq, m.size.level, m.size.r), ErrCorrupt)
	}
	return nil
}

// tableCounts reads the header's entries per tag (b) into m.counts: only
// of generations the table can hold, and (v1) summing to its entries.
func (d *decoder) tableCounts(m *tableMeta, sealed bool, b []byte) error {
	m.counts = make([]uint64, 1<<m.a)
	var sum uint64
	held := (&Table{a: m.a, first: m.first, newest: m.newest}).tagMask(oldestHeld(m), m.newest)
	for t := range m.counts {
		m.counts[t] = binary.LittleEndian.Uint64(b[8*t:])
		if m.counts[t] != 0 && held>>t&1 == 0 {
			return d.fail("header", fmt.Sprintf("entries with tag %d, of no generation the table holds", t), ErrCorrupt)
		}
		sum += m.counts[t]
		if sum < m.counts[t] {
			return d.fail("header", "tag counts overflow", ErrCorrupt)
		}
	}
	if !sealed && sum != m.entries {
		return d.fail("header", fmt.Sprintf("%d entries, tags count %d", m.entries, sum), ErrCorrupt)
	}
	return nil
}

// readPages reads the table's pages, metadata pages first: the live table
// of a sealed table (whose entries are d + remainder bits), else the table.
func (th *tableHeader) readPages(cr *chunkReader) (*qtable, error) {
	m := &th.m
	es := m.entryBits()
	var q *qtable
	if th.sealed {
		q = newQtable(m.size.nblocks, es, 0)
	} else {
		q = newQtable(m.size.nblocks, m.size.r, m.a)
	}
	for i, p := range append(append([]*[pageWords]uint64(nil), q.meta...), q.ents...) {
		isMeta := i < len(q.meta)
		pi := uint64(i)
		if !isMeta {
			pi -= uint64(len(q.meta))
		}
		if err := cr.words(p[:tableUsed(th.pblocks, th.bpp, es, isMeta, pi)], "page"); err != nil {
			return nil, err
		}
	}
	return q, nil
}

// readSealed reads a sealed table's set, after its live table q, and
// checks the counts per tag against the two.
func (th *tableHeader) readSealed(d *decoder, q *qtable, maxBytes int64) (*hybrid, error) {
	m := &th.m
	set, err := readSealedSet(d, maxBytes)
	if err != nil {
		return nil, err
	}
	tnew := (&Table{a: m.a}).tag(m.newest)
	if set.nq != m.size.nq || set.r != m.size.r || set.a != m.a {
		return nil, d.fail("table", fmt.Sprintf("set of %d quotients, %d+%d bits in a table of %d, %d+%d", set.nq, set.r, set.a, m.size.nq, m.size.r, m.a), ErrCorrupt)
	}
	for t := range m.counts {
		want := set.counts[t]
		if uint64(t) == tnew {
			want += m.entries // the live table's, all of the newest generation
		}
		if m.counts[t] != want {
			return nil, d.fail("table", fmt.Sprintf("tag %d: %d entries, the set and live table hold %d", t, m.counts[t], want), ErrCorrupt)
		}
	}
	return &hybrid{live: q, set: set, m: newLiveMap(set.nq, m.size.nblocks*qSlots), r: m.size.r}, nil
}

// Table log format v1, little-endian: the entries one table added between
// two checkpoints, all of its newest generation, and its counters after
// them.
//
//	header   magic "\x89BGTLG\r\n", version u16 = 1, reserved u16 (0),
//	         serial u64, first u64, newest u64, entries u64 and adds u64
//	         (after the segment), count u64
//	entries  count × u64: the home slot's index << entry bits | the entry
//	trailer  CRC-32C u32 of every byte before it
const (
	tableLogVersion    = 1
	tableLogHeaderSize = 8 + 2 + 2 + 8*6
	tableLogEntrySize  = 8
)

var tableLogMagic = [8]byte{0x89, 'B', 'G', 'T', 'L', 'G', '\r', '\n'}

// TableLog is what one checkpoint adds to a table stored earlier (see
// Table.ApplyLog).
type TableLog struct {
	Serial, First, Newest uint64
	Entries, Adds         uint64 // the table's counters after the segment
	Added                 []uint64
}

// Size is the encoded size in bytes.
func (l *TableLog) Size() int64 {
	return tableLogHeaderSize + tableLogEntrySize*int64(len(l.Added)) + 4
}

// WriteTo encodes the segment in table log format v1.
func (l *TableLog) WriteTo(w io.Writer) (int64, error) {
	sw := newSumWriter(w, "table log")
	b := appendPreamble(make([]byte, 0, tableLogHeaderSize), tableLogMagic, tableLogVersion, 0)
	for _, x := range []uint64{l.Serial, l.First, l.Newest, l.Entries, l.Adds, uint64(len(l.Added))} {
		b = binary.LittleEndian.AppendUint64(b, x)
	}
	if err := sw.write("header", b); err != nil {
		return sw.cw.n, err
	}
	var e [8 * 512]byte
	for lo := 0; lo < len(l.Added); lo += 512 {
		chunk := l.Added[lo:min(lo+512, len(l.Added))]
		for i, x := range chunk {
			binary.LittleEndian.PutUint64(e[8*i:], x)
		}
		if err := sw.write("entries", e[:8*len(chunk)]); err != nil {
			return sw.cw.n, err
		}
	}
	return sw.finish()
}

// DecodeTableLog reads one table log segment and checks that the stream
// ends right after it; more than maxEntries entries are refused
// (ErrTooLarge) before they are read. Errors are as DecodeLog's; a
// non-nil error means a nil segment.
func DecodeTableLog(r io.Reader, maxEntries int) (*TableLog, error) {
	d := &decoder{r: r}
	var hdr [tableLogHeaderSize]byte
	crc, err := d.logHeader(hdr[:], tableLogMagic, "table log", tableLogVersion)
	if err != nil {
		return nil, err
	}
	b := hdr[preambleSz:]
	u64 := func() uint64 { x := binary.LittleEndian.Uint64(b); b = b[8:]; return x }
	l := &TableLog{Serial: u64(), First: u64(), Newest: u64(), Entries: u64(), Adds: u64()}
	n := u64()
	if n > uint64(max(maxEntries, 0)) {
		return nil, d.fail("log header", fmt.Sprintf("%d entries, limit %d", n, maxEntries), ErrTooLarge)
	}
	var buf [8 * 1024]byte
	for left := n; left > 0; {
		k := min(left, 1024)
		p := buf[:8*k]
		if err := d.read("log entries", p); err != nil {
			return nil, err
		}
		crc.Write(p)
		for i := range k {
			l.Added = append(l.Added, binary.LittleEndian.Uint64(p[8*i:]))
		}
		left -= k
	}
	if err := d.logEnd(crc, n, "table log"); err != nil {
		return nil, err
	}
	return l, nil
}

// ApplyLog replays l onto tb, the table as stored when the segment's
// entries started (or later in the same chain: an entry replayed twice
// changes nothing): it adds the entries, takes the counters, and checks
// that the table then holds exactly as many entries as the segment
// records. An error wraps ErrCorrupt; tb is then unusable. Only the owning
// goroutine may call it.
func (tb *Table) ApplyLog(l *TableLog) error { return tb.ApplyLogs([]*TableLog{l}) }

// ApplyLogs replays a chain's segments, in chain order, onto tb: their
// counters are checked one after the other, then all their entries go in
// at once, sorted (a radix sort) and merged into the table in one pass
// that moves each stretch of entries once (qtable.merge; the table is
// canonical, so this gives the table their inserts one by one would), and
// the table must hold the last segment's entry count.
func (tb *Table) ApplyLogs(ls []*TableLog) error {
	fail := func(detail string) error {
		return fmt.Errorf("replaying log onto table %d: %s: %w", tb.serial, detail, ErrCorrupt)
	}
	if tb.closed && len(ls) > 0 {
		return fail("the table is closed")
	}
	entries, adds, n := tb.q.entries, tb.adds, 0
	for i, l := range ls {
		switch {
		case l.Serial != tb.serial || l.First != tb.first || l.Newest != tb.newest:
			return fail(fmt.Sprintf("segment %d of table %d, generations %d … %d", i+1, l.Serial, l.First, l.Newest))
		case l.Adds < adds || l.Entries < entries || l.Adds-adds > uint64(len(l.Added)) || l.Entries-entries != l.Adds-adds:
			return fail(fmt.Sprintf("segment %d: counters %d/%d after %d entries, table at %d/%d", i+1, l.Entries, l.Adds, len(l.Added), entries, adds))
		}
		entries, adds, n = l.Entries, l.Adds, n+len(l.Added)
	}
	if len(ls) == 0 {
		return nil
	}
	added := make([]uint64, 0, n)
	for _, l := range ls {
		added = append(added, l.Added...)
	}
	sortEntries(added)
	s := tb.q.s
	tag := tb.tag(tb.newest)
	for _, e := range added {
		if idx, v := e>>s, e&(1<<s-1); idx >= tb.q.slots() || (tb.h == nil && v&(1<<tb.a-1) != tag) {
			return fail(fmt.Sprintf("entry %#x: home slot %d of %d, or not of generation %d", e, idx, tb.q.slots(), tb.newest))
		}
	}
	n64, ok := tb.q.merge(added)
	tb.counts[tag] += n64
	if !ok {
		return fail("the table cannot take the entries")
	}
	if tb.q.entries != entries {
		return fail(fmt.Sprintf("%d entries after the segments, the last says %d", tb.q.entries, entries))
	}
	tb.adds = adds
	return nil
}
