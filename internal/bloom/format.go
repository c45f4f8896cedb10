package bloom

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/bits"
	"unsafe"
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

	hdrFixed  = 8 + 8 + 8 + 8 + 8 + 8 + 4 + 4 // id … sub-filter count
	hdrPerSub = 8 + 8 + 8 + 8 + 8 + 4 + 4
)

var (
	magic        = [8]byte{0x89, 'B', 'G', 'G', 'E', 'N', '\r', '\n'}
	trailerMagic = [8]byte{'B', 'G', 'G', 'E', 'N', 'E', 'N', 'D'}
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

func encodeGeneration(w io.Writer, m *genMeta, views []filterView) (int64, error) {
	bw := bufio.NewWriterSize(w, 256<<10)
	cw := &countingWriter{w: bw}

	hlen := hdrFixed + len(views)*hdrPerSub
	var flags uint16
	if m.saturated {
		flags |= flagSaturated
	}
	hdr := appendHeader(make([]byte, 0, preambleSz+4+hlen+4), magic, formatVersion, flags, hlen)
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
	if err := cw.write(appendSum(hdr)); err != nil {
		return cw.n, fmt.Errorf("writing generation header: %w", err)
	}

	pc := pageChunks{cw: cw, dense: true}
	defer pc.close()
	for _, v := range views {
		for i := range v.pages {
			if err := pc.write(pageSlice(v.pages, i, v.nblocks)); err != nil {
				return cw.n, fmt.Errorf("writing generation chunk: %w", err)
			}
		}
	}
	if err := cw.write(appendTrailer(make([]byte, 0, trailerSz), trailerMagic, pc.chunks, cw.n)); err != nil {
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
	if err := d.subFilters(g, int(nsub), b, maxBytes); err != nil {
		return nil, err
	}
	cr := &chunkReader{d: d}
	defer cr.Close()
	for _, f := range g.subs {
		if err := f.readPages(cr); err != nil {
			return nil, err
		}
	}
	if err := d.trailer(trailerMagic, cr.chunks, 0); err != nil {
		return nil, err
	}
	return g, nil
}

// subFilters reads the header's nsub sub-filter entries (b) into g: their
// sizes (allocated in whole pages, at most maxBytes in all), set bits and
// inserts, which sum to the generation's.
func (d *decoder) subFilters(g *Generation, nsub int, b []byte, maxBytes int64) error {
	u64 := func() uint64 { x := binary.LittleEndian.Uint64(b); b = b[8:]; return x }
	u32 := func() uint32 { x := binary.LittleEndian.Uint32(b); b = b[4:]; return x }
	var total, sumInserts uint64
	for i := range nsub {
		capacity, fpr, ins, nb, ones, k, res := u64(), math.Float64frombits(u64()), u64(), u64(), u64(), u32(), u32()
		if capacity == 0 || !(fpr > 0 && fpr < 1) || k < 1 || k > maxK || nb == 0 || nb > MaxFilterBytes/64 ||
			ones > nb*blockBits || res != 0 || ins > math.MaxUint64-sumInserts {
			return d.fail("header", fmt.Sprintf("sub-filter %d: capacity %d, fpr %v, k %d, blocks %d, set bits %d",
				i, capacity, fpr, k, nb, ones), ErrCorrupt)
		}
		total += (nb + pageBlocks - 1) / pageBlocks * pageBytes // allocated in whole pages
		sumInserts += ins
		if total > uint64(maxBytes) {
			return d.fail("header", fmt.Sprintf("bitsets of %d+ bytes, limit %d", total, maxBytes), ErrTooLarge)
		}
		g.subs = append(g.subs, &Filter{nblocks: nb, k: k, capacity: capacity, fpr: fpr, ones: ones})
		g.subInserts = append(g.subInserts, ins)
	}
	if sumInserts != g.inserts {
		return d.fail("header", fmt.Sprintf("inserts %d, sub-filters sum to %d", g.inserts, sumInserts), ErrCorrupt)
	}
	return nil
}

// readPages reads the sub-filter's pages, one chunk each (an all-zero page
// stays the shared zero page), and checks its set bits against its header.
func (f *Filter) readPages(cr *chunkReader) error {
	d := cr.d
	npages := (f.nblocks + pageBlocks - 1) / pageBlocks
	f.pageEpoch = make([]uint32, npages)
	f.initPages(npages) // declared size, checked against maxBytes by subFilters
	for i := range npages {
		kind, n, err := cr.next()
		if err != nil {
			return err
		}
		size := len(pageSlice(f.pages, int(i), f.nblocks)) * 8
		switch {
		case kind == kindRaw && int(n) == size, kind == kindZstd && n > 0 && int(n) < size:
			if f.pages[i] == zeroPage {
				f.allocSlab(i)
			}
		case kind == kindZero && n == 0:
		default:
			return d.fail("chunk", fmt.Sprintf("kind %d with %d bytes for a %d-byte page", kind, n, size), ErrCorrupt)
		}
		p := pageSlice(f.pages, int(i), f.nblocks)
		if err := cr.fill(kind, n, pageAsBytes(p)); err != nil {
			return err
		}
		if !littleEndian && kind != kindZero { // p may be zeroPage
			for j := range p {
				p[j] = bits.ReverseBytes64(p[j])
			}
		}
	}
	if popcountPages(f.pages, f.nblocks) != f.ones {
		return d.fail("chunk", "set-bit count differs from header", ErrCorrupt)
	}
	return nil
}
