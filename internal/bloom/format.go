package bloom

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"math/bits"
	"unsafe"

	"github.com/klauspost/compress/zstd"
)

// Binary format v1 of one generation, little-endian, streamed:
//
//	header   magic "\x89BGGEN\r\n", version u16 = 1, flags u16 (bit 0:
//	         saturated), length u32 of the fields up to the header CRC,
//	         id u64, start i64, end i64 (Unix ns), capacity u64, fpr f64,
//	         inserts u64, page bytes u32 (65536), sub-filters u32, then per
//	         sub-filter: capacity u64, fpr f64, inserts u64, blocks u64,
//	         set bits u64, k u32, reserved u32 (0); CRC-32C u32 of all the
//	         header bytes before it.
//	chunks   one per 64 KiB page of each sub-filter, in order: kind u8
//	         (0 raw, 1 zstd, 2 all zero), payload length u32, CRC-32C u32 of
//	         kind, length and payload, payload. zstd is tried only on pages
//	         with ≤ 20 % or ≥ 80 % bits set and kept only if it saves ≥ 1/16.
//	trailer  magic "BGGENEND", chunks u64, bytes before the trailer u64,
//	         CRC-32C u32 of the trailer bytes before it.
const (
	formatVersion = 1
	flagSaturated = 1 << 0

	kindRaw  = 0
	kindZstd = 1
	kindZero = 2

	hdrFixed  = 8 + 8 + 8 + 8 + 8 + 8 + 4 + 4 // id … sub-filter count
	hdrPerSub = 8 + 8 + 8 + 8 + 8 + 4 + 4
	chunkHdr  = 1 + 4 + 4
	trailerSz = 8 + 8 + 8 + 4
)

var (
	magic        = [8]byte{0x89, 'B', 'G', 'G', 'E', 'N', '\r', '\n'}
	trailerMagic = [8]byte{'B', 'G', 'G', 'E', 'N', 'E', 'N', 'D'}
	castagnoli   = crc32.MakeTable(crc32.Castagnoli)
	littleEndian = func() bool { x := uint16(1); return *(*byte)(unsafe.Pointer(&x)) == 1 }()
)

// pageAsBytes views a page as its little-endian bytes (no copy on
// little-endian machines).
func pageAsBytes(p []uint64) []byte {
	if len(p) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&p[0])), len(p)*8)
}

type countingWriter struct {
	w *bufio.Writer
	n int64
}

func (c *countingWriter) write(b []byte) error {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return err
}

func encodeGeneration(w io.Writer, m *genMeta, views []filterView) (int64, error) {
	bw := bufio.NewWriterSize(w, 256<<10)
	cw := &countingWriter{w: bw}

	hdr := make([]byte, 0, 8+2+2+4+hdrFixed+len(views)*hdrPerSub+4)
	hdr = append(hdr, magic[:]...)
	hdr = binary.LittleEndian.AppendUint16(hdr, formatVersion)
	var flags uint16
	if m.saturated {
		flags |= flagSaturated
	}
	hdr = binary.LittleEndian.AppendUint16(hdr, flags)
	hdr = binary.LittleEndian.AppendUint32(hdr, uint32(hdrFixed+len(views)*hdrPerSub))
	hdr = binary.LittleEndian.AppendUint64(hdr, m.id)
	hdr = binary.LittleEndian.AppendUint64(hdr, uint64(m.start))
	hdr = binary.LittleEndian.AppendUint64(hdr, uint64(m.end))
	hdr = binary.LittleEndian.AppendUint64(hdr, m.capacity)
	hdr = binary.LittleEndian.AppendUint64(hdr, math.Float64bits(m.fpr))
	hdr = binary.LittleEndian.AppendUint64(hdr, m.inserts)
	hdr = binary.LittleEndian.AppendUint32(hdr, pageBytes)
	hdr = binary.LittleEndian.AppendUint32(hdr, uint32(len(views)))
	for i, v := range views {
		hdr = binary.LittleEndian.AppendUint64(hdr, v.capacity)
		hdr = binary.LittleEndian.AppendUint64(hdr, math.Float64bits(v.fpr))
		hdr = binary.LittleEndian.AppendUint64(hdr, m.subInserts[i])
		hdr = binary.LittleEndian.AppendUint64(hdr, v.nblocks)
		hdr = binary.LittleEndian.AppendUint64(hdr, v.ones)
		hdr = binary.LittleEndian.AppendUint32(hdr, v.k)
		hdr = binary.LittleEndian.AppendUint32(hdr, 0)
	}
	hdr = binary.LittleEndian.AppendUint32(hdr, crc32.Checksum(hdr, castagnoli))
	if err := cw.write(hdr); err != nil {
		return cw.n, fmt.Errorf("writing generation header: %w", err)
	}

	var (
		enc     *zstd.Encoder
		zbuf    []byte
		swapped []uint64
		chunks  uint64
		ch      [chunkHdr]byte
	)
	for _, v := range views {
		for i := range v.pages {
			p := pageSlice(v.pages, i, v.nblocks)
			if !littleEndian {
				swapped = append(swapped[:0], p...)
				for i := range swapped {
					swapped[i] = bits.ReverseBytes64(swapped[i])
				}
				p = swapped
			}
			raw := pageAsBytes(p)
			kind, payload := byte(kindRaw), raw
			ones := popcountWords(p)
			switch {
			case ones == 0:
				kind, payload = kindZero, nil
			case ones*5 <= uint64(len(p))*64 || ones*5 >= uint64(len(p))*64*4:
				if enc == nil {
					var err error
					enc, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest),
						zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(false))
					if err != nil {
						return cw.n, fmt.Errorf("creating zstd encoder: %w", err)
					}
					defer enc.Close()
				}
				zbuf = enc.EncodeAll(raw, zbuf[:0])
				if len(zbuf) <= len(raw)-len(raw)/16 {
					kind, payload = kindZstd, zbuf
				}
			}
			ch[0] = kind
			binary.LittleEndian.PutUint32(ch[1:5], uint32(len(payload)))
			crc := crc32.Update(crc32.Checksum(ch[:5], castagnoli), castagnoli, payload)
			binary.LittleEndian.PutUint32(ch[5:9], crc)
			if err := cw.write(ch[:]); err != nil {
				return cw.n, fmt.Errorf("writing generation chunk: %w", err)
			}
			if err := cw.write(payload); err != nil {
				return cw.n, fmt.Errorf("writing generation chunk: %w", err)
			}
			chunks++
		}
	}

	tr := make([]byte, 0, trailerSz)
	tr = append(tr, trailerMagic[:]...)
	tr = binary.LittleEndian.AppendUint64(tr, chunks)
	tr = binary.LittleEndian.AppendUint64(tr, uint64(cw.n))
	tr = binary.LittleEndian.AppendUint32(tr, crc32.Checksum(tr, castagnoli))
	if err := cw.write(tr); err != nil {
		return cw.n, fmt.Errorf("writing generation trailer: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return cw.n, fmt.Errorf("writing generation: %w", err)
	}
	return cw.n, nil
}

func popcountWords(p []uint64) uint64 {
	var n int
	for _, w := range p {
		n += bits.OnesCount64(w)
	}
	return uint64(n)
}

// decoder reads a generation with offsets for error messages.
type decoder struct {
	r       io.Reader // unbuffered: payloads are read straight into the pages
	off     int64
	version uint16 // the format version header read
}

// header describes the preamble and header of a format: magic, version,
// the header's length (fixed + a multiple of unit, within minLen and
// maxLen), a CRC-32C after it, and the flags this build knows.
type header struct {
	magic                       [8]byte
	noun                        string // "generation", "table": in the bad-magic message
	version                     uint16
	newest                      uint16 // versions version … newest are read (0: version only)
	fixed, unit, minLen, maxLen uint32
	flags                       uint16
}

// header reads and checks a preamble and header as h describes them and
// returns the flags and the header's body (after the 16-byte preamble,
// without the checksum).
func (d *decoder) header(h header) (flags uint16, body []byte, err error) {
	var pre [16]byte
	if err := d.read("header", pre[:]); err != nil {
		return 0, nil, err
	}
	if [8]byte(pre[:8]) != h.magic {
		return 0, nil, d.fail("header", "bad magic: not a bloomgate "+h.noun, ErrCorrupt)
	}
	d.version = binary.LittleEndian.Uint16(pre[8:])
	if v := d.version; v < h.version || v > max(h.version, h.newest) {
		reads := fmt.Sprint(h.version)
		if h.newest > h.version {
			reads = fmt.Sprintf("%d to %d", h.version, h.newest)
		}
		return 0, nil, d.fail("header", fmt.Sprintf("version %d, this build reads %s", v, reads), ErrUnsupportedVersion)
	}
	flags = binary.LittleEndian.Uint16(pre[10:])
	hlen := binary.LittleEndian.Uint32(pre[12:])
	if hlen < h.minLen || hlen > h.maxLen || (hlen-h.fixed)%h.unit != 0 {
		return 0, nil, d.fail("header", fmt.Sprintf("header length %d", hlen), ErrCorrupt)
	}
	hdr := make([]byte, 16+hlen+4)
	copy(hdr, pre[:])
	if err := d.read("header", hdr[16:]); err != nil {
		return 0, nil, err
	}
	if crc32.Checksum(hdr[:16+hlen], castagnoli) != binary.LittleEndian.Uint32(hdr[16+hlen:]) {
		return 0, nil, d.fail("header", "checksum mismatch", ErrCorrupt)
	}
	if flags&^h.flags != 0 {
		return 0, nil, d.fail("header", fmt.Sprintf("unknown flags %#x", flags), ErrUnsupportedVersion)
	}
	return flags, hdr[16 : 16+hlen], nil
}

// chunkReader reads the page chunks of a format (a header of kind,
// length and CRC-32C; a raw, zstd or zero payload) into pages, counting
// them for the trailer. Close releases its zstd decoder.
type chunkReader struct {
	d      *decoder
	dec    *zstd.Decoder
	zbuf   []byte
	chunks uint64
	ch     [chunkHdr]byte
	off    int64 // where the chunk being read began
}

// next reads a chunk's header: its kind and its payload's length. The
// caller checks them against the page, then calls fill.
func (c *chunkReader) next() (kind byte, n uint32, err error) {
	c.off = c.d.off
	if err := c.d.read("chunk", c.ch[:]); err != nil {
		return 0, 0, err
	}
	return c.ch[0], binary.LittleEndian.Uint32(c.ch[1:5]), nil
}

// fill reads the payload of the chunk next read (kind, n bytes), checks
// its checksum and puts the page into raw: read straight into it (raw),
// decompressed into it (zstd), or left as it is (zero).
func (c *chunkReader) fill(kind byte, n uint32, raw []byte) error {
	var payload []byte
	switch kind {
	case kindRaw:
		payload = raw
	case kindZstd:
		if cap(c.zbuf) < int(n) {
			c.zbuf = make([]byte, pageBytes)
		}
		payload = c.zbuf[:n]
	}
	if err := c.d.read("chunk", payload); err != nil {
		return err
	}
	if crc32.Update(crc32.Checksum(c.ch[:5], castagnoli), castagnoli, payload) != binary.LittleEndian.Uint32(c.ch[5:9]) {
		c.d.off = c.off
		return c.d.fail("chunk", "checksum mismatch", ErrCorrupt)
	}
	if kind == kindZstd {
		if c.dec == nil {
			var err error
			c.dec, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecodeAllCapLimit(true),
				zstd.WithDecoderMaxMemory(pageBytes))
			if err != nil {
				return fmt.Errorf("creating zstd decoder: %w", err)
			}
		}
		out, err := c.dec.DecodeAll(payload, raw[:0])
		if err != nil || len(out) != len(raw) || (len(out) > 0 && &out[0] != &raw[0]) {
			c.d.off = c.off
			return c.d.fail("chunk", "zstd payload does not decode to one page", ErrCorrupt)
		}
	}
	c.chunks++
	return nil
}

// words reads the next chunk into ws — a page of a table or a piece of a
// sealed set (what, for the error) —, checking its kind and length
// against ws's size, its checksum, and putting the words in host order.
func (c *chunkReader) words(ws []uint64, what string) error {
	raw := pageAsBytes(ws)
	kind, n, err := c.next()
	if err != nil {
		return err
	}
	switch {
	case kind == kindRaw && int(n) == len(raw), kind == kindZstd && n > 0 && int(n) < len(raw), kind == kindZero && n == 0:
	default:
		return c.d.fail("chunk", fmt.Sprintf("kind %d with %d bytes for a %d-byte %s", kind, n, len(raw), what), ErrCorrupt)
	}
	if err := c.fill(kind, n, raw); err != nil {
		return err
	}
	if !littleEndian {
		for j := range ws {
			ws[j] = bits.ReverseBytes64(ws[j])
		}
	}
	return nil
}

// Close releases the zstd decoder, if one was made.
func (c *chunkReader) Close() {
	if c.dec != nil {
		c.dec.Close()
	}
}

func (d *decoder) fail(section, detail string, err error) error {
	return &FormatError{Section: section, Offset: d.off, Detail: detail, Err: err}
}

func (d *decoder) read(section string, b []byte) error {
	n, err := io.ReadFull(d.r, b)
	d.off += int64(n)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return d.fail(section, "truncated", ErrCorrupt)
	}
	if err != nil {
		return fmt.Errorf("reading generation %s at byte %d: %w", section, d.off, err)
	}
	return nil
}

// DecodeGeneration reads one generation in binary format v1. It checks the
// declared bitsets (rounded up to 64 KiB pages) against maxBytes (≤ 0:
// MaxFilterBytes; ErrTooLarge), then allocates them as a new filter would
// (a large sub-filter a slab at a time, only for slabs with a chunk that
// is not all zero) and reads the chunks straight into them.
// Format problems are *FormatError wrapping ErrCorrupt,
// ErrUnsupportedVersion or ErrTooLarge; a non-nil error means a nil
// Generation.
func DecodeGeneration(r io.Reader, maxBytes int64) (*Generation, error) {
	if maxBytes <= 0 || maxBytes > MaxFilterBytes {
		maxBytes = MaxFilterBytes
	}
	d := &decoder{r: r}
	flags, b, err := d.header(header{magic: magic, noun: "generation", version: formatVersion, minLen: hdrFixed + hdrPerSub,
		maxLen: hdrFixed + maxStacks*hdrPerSub, unit: hdrPerSub, fixed: hdrFixed, flags: flagSaturated})
	if err != nil {
		return nil, err
	}
	hlen := uint32(len(b))
	u64 := func() uint64 { x := binary.LittleEndian.Uint64(b); b = b[8:]; return x }
	u32 := func() uint32 { x := binary.LittleEndian.Uint32(b); b = b[4:]; return x }
	g := &Generation{
		id: u64(), start: int64(u64()), end: int64(u64()), capacity: u64(),
		fpr: math.Float64frombits(u64()), inserts: u64(), saturated: flags&flagSaturated != 0,
	}
	pb, nsub := u32(), u32()
	switch {
	case pb != pageBytes:
		return nil, d.fail("header", fmt.Sprintf("page size %d", pb), ErrUnsupportedVersion)
	case nsub != (hlen-hdrFixed)/hdrPerSub:
		return nil, d.fail("header", fmt.Sprintf("%d sub-filters in a %d-byte header", nsub, hlen), ErrCorrupt)
	case g.start < 0 || g.end <= g.start || g.id > math.MaxInt64/uint64(g.end-g.start) ||
		int64(g.id)*(g.end-g.start) != g.start:
		return nil, d.fail("header", fmt.Sprintf("span [%d, %d) does not match id %d", g.start, g.end, g.id), ErrCorrupt)
	case g.capacity == 0 || !(g.fpr > 0 && g.fpr < 1):
		return nil, d.fail("header", fmt.Sprintf("capacity %d, fpr %v", g.capacity, g.fpr), ErrCorrupt)
	}
	var total, sumInserts uint64
	for i := range int(nsub) {
		capacity, fpr, ins, nb, ones, k, res := u64(), math.Float64frombits(u64()), u64(), u64(), u64(), u32(), u32()
		if capacity == 0 || !(fpr > 0 && fpr < 1) || k < 1 || k > maxK || nb == 0 || nb > MaxFilterBytes/64 ||
			ones > nb*blockBits || res != 0 || ins > math.MaxUint64-sumInserts {
			return nil, d.fail("header", fmt.Sprintf("sub-filter %d: capacity %d, fpr %v, k %d, blocks %d, set bits %d",
				i, capacity, fpr, k, nb, ones), ErrCorrupt)
		}
		total += (nb + pageBlocks - 1) / pageBlocks * pageBytes // allocated in whole pages
		sumInserts += ins
		if total > uint64(maxBytes) {
			return nil, d.fail("header", fmt.Sprintf("bitsets of %d+ bytes, limit %d", total, maxBytes), ErrTooLarge)
		}
		g.subs = append(g.subs, &Filter{nblocks: nb, k: k, capacity: capacity, fpr: fpr, ones: ones})
		g.subInserts = append(g.subInserts, ins)
	}
	if sumInserts != g.inserts {
		return nil, d.fail("header", fmt.Sprintf("inserts %d, sub-filters sum to %d", g.inserts, sumInserts), ErrCorrupt)
	}

	cr := &chunkReader{d: d}
	defer cr.Close()
	for _, f := range g.subs {
		npages := (f.nblocks + pageBlocks - 1) / pageBlocks
		f.pageEpoch = make([]uint32, npages)
		f.initPages(npages) // declared size, checked against maxBytes above
		for i := range npages {
			kind, n, err := cr.next()
			if err != nil {
				return nil, err
			}
			size := len(pageSlice(f.pages, int(i), f.nblocks)) * 8
			switch {
			case kind == kindRaw && int(n) == size, kind == kindZstd && n > 0 && int(n) < size:
				if f.pages[i] == zeroPage {
					f.allocSlab(i)
				}
			case kind == kindZero && n == 0:
			default:
				return nil, d.fail("chunk", fmt.Sprintf("kind %d with %d bytes for a %d-byte page", kind, n, size), ErrCorrupt)
			}
			p := pageSlice(f.pages, int(i), f.nblocks)
			if err := cr.fill(kind, n, pageAsBytes(p)); err != nil {
				return nil, err
			}
			if !littleEndian && kind != kindZero { // p may be zeroPage
				for j := range p {
					p[j] = bits.ReverseBytes64(p[j])
				}
			}
		}
		if popcountPages(f.pages, f.nblocks) != f.ones {
			return nil, d.fail("chunk", "set-bit count differs from header", ErrCorrupt)
		}
	}

	bodyLen := d.off
	var tr [trailerSz]byte
	if err := d.read("trailer", tr[:]); err != nil {
		return nil, err
	}
	if [8]byte(tr[:8]) != trailerMagic ||
		crc32.Checksum(tr[:trailerSz-4], castagnoli) != binary.LittleEndian.Uint32(tr[trailerSz-4:]) ||
		binary.LittleEndian.Uint64(tr[8:]) != cr.chunks || binary.LittleEndian.Uint64(tr[16:]) != uint64(bodyLen) {
		return nil, d.fail("trailer", "bad trailer", ErrCorrupt)
	}
	return g, nil
}
