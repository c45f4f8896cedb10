package bloom

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"math/bits"

	"github.com/klauspost/compress/zstd"
)

// The framing every binary format of this package shares (one place for
// magic, version, CRC-32C and trailer; the formats' own fields are in
// format.go, log.go, tagged_format.go and sealed_format.go):
//
//	preamble  magic (8 bytes), version u16, flags u16 (reserved, 0, in the
//	          log formats)
//
// The streamed formats (generation, table, sealed set) go on with
//
//	header    length u32 of the fields up to the header CRC, the fields,
//	          CRC-32C u32 of all the header bytes before it (appendHeader,
//	          appendSum; decoder.header)
//	chunks    kind u8 (0 raw, 1 zstd, 2 all zero), payload length u32,
//	          CRC-32C u32 of kind, length and payload, payload
//	          (pageChunks; chunkReader)
//	trailer   trailer magic, chunks u64, bytes before the trailer u64,
//	          CRC-32C u32 of the trailer bytes before it (appendTrailer;
//	          decoder.trailer)
//
// and the log formats (generation log, table log) with their fixed
// fields and entries, then a trailer of CRC-32C u32 of every byte before
// it (sumWriter; decoder.logHeader, decoder.logEnd).
const (
	preambleSz = 8 + 2 + 2
	trailerSz  = 8 + 8 + 8 + 4
	chunkHdr   = 1 + 4 + 4

	// chunk kinds
	kindRaw  = 0
	kindZstd = 1
	kindZero = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendPreamble appends magic, version and flags.
func appendPreamble(b []byte, magic [8]byte, version, flags uint16) []byte {
	b = append(b, magic[:]...)
	b = binary.LittleEndian.AppendUint16(b, version)
	return binary.LittleEndian.AppendUint16(b, flags)
}

// appendHeader appends a streamed format's preamble and header length
// hlen; the caller appends the hlen bytes of fields, then appendSum.
func appendHeader(b []byte, magic [8]byte, version, flags uint16, hlen int) []byte {
	return binary.LittleEndian.AppendUint32(appendPreamble(b, magic, version, flags), uint32(hlen))
}

// appendSum appends the CRC-32C of b.
func appendSum(b []byte) []byte {
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// chunkSum is the CRC-32C of a chunk's kind and length (head) and its
// payload.
func chunkSum(head, payload []byte) uint32 {
	return crc32.Update(crc32.Checksum(head, castagnoli), castagnoli, payload)
}

// appendTrailer appends a streamed format's trailer: after chunks chunks
// and n bytes.
func appendTrailer(b []byte, magic [8]byte, chunks uint64, n int64) []byte {
	b = append(b, magic[:]...)
	b = binary.LittleEndian.AppendUint64(b, chunks)
	b = binary.LittleEndian.AppendUint64(b, uint64(n))
	return appendSum(b)
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

// header describes the preamble and header of a streamed format: magic,
// version, the header's length (fixed + a multiple of unit, within minLen
// and maxLen), a CRC-32C after it, and the flags this build knows.
type header struct {
	magic                       [8]byte
	noun                        string // "generation", "table": in the bad-magic message
	version                     uint16
	newest                      uint16 // versions version … newest are read (0: version only)
	fixed, unit, minLen, maxLen uint32
	flags                       uint16
}

// decoder reads a format with offsets for error messages.
type decoder struct {
	r       io.Reader // unbuffered: payloads are read straight into the pages
	off     int64
	version uint16 // the format version header read
}

// checkVersion checks the version v of a preamble: version … newest
// (newest 0: version only) are read.
func (d *decoder) checkVersion(section string, v, version, newest uint16) error {
	d.version = v
	if v < version || v > max(version, newest) {
		reads := fmt.Sprint(version)
		if newest > version {
			reads = fmt.Sprintf("%d to %d", version, newest)
		}
		return d.fail(section, fmt.Sprintf("version %d, this build reads %s", v, reads), ErrUnsupportedVersion)
	}
	return nil
}

// header reads and checks a preamble and header as h describes them and
// returns the flags and the header's body (after the 16-byte preamble,
// without the checksum).
func (d *decoder) header(h header) (flags uint16, body []byte, err error) {
	var pre [preambleSz + 4]byte
	if err := d.read("header", pre[:]); err != nil {
		return 0, nil, err
	}
	if [8]byte(pre[:8]) != h.magic {
		return 0, nil, d.fail("header", "bad magic: not a bloomgate "+h.noun, ErrCorrupt)
	}
	if err := d.checkVersion("header", binary.LittleEndian.Uint16(pre[8:]), h.version, h.newest); err != nil {
		return 0, nil, err
	}
	flags = binary.LittleEndian.Uint16(pre[10:])
	hlen := binary.LittleEndian.Uint32(pre[12:])
	if hlen < h.minLen || hlen > h.maxLen || (hlen-h.fixed)%h.unit != 0 {
		return 0, nil, d.fail("header", fmt.Sprintf("header length %d", hlen), ErrCorrupt)
	}
	hdr := make([]byte, len(pre)+int(hlen)+4)
	copy(hdr, pre[:])
	if err := d.read("header", hdr[len(pre):]); err != nil {
		return 0, nil, err
	}
	if !d.summed(hdr) {
		return 0, nil, d.fail("header", "checksum mismatch", ErrCorrupt)
	}
	if flags&^h.flags != 0 {
		return 0, nil, d.fail("header", fmt.Sprintf("unknown flags %#x", flags), ErrUnsupportedVersion)
	}
	return flags, hdr[len(pre) : len(pre)+int(hlen)], nil
}

// summed reports whether b ends with the CRC-32C of the bytes before.
func (d *decoder) summed(b []byte) bool {
	n := len(b) - 4
	return crc32.Checksum(b[:n], castagnoli) == binary.LittleEndian.Uint32(b[n:])
}

// trailer reads a streamed format's trailer and checks it against the
// chunks read and the bytes read since start.
func (d *decoder) trailer(magic [8]byte, chunks uint64, start int64) error {
	bodyLen := d.off - start
	var tr [trailerSz]byte
	if err := d.read("trailer", tr[:]); err != nil {
		return err
	}
	if [8]byte(tr[:8]) != magic || !d.summed(tr[:]) ||
		binary.LittleEndian.Uint64(tr[8:]) != chunks || binary.LittleEndian.Uint64(tr[16:]) != uint64(bodyLen) {
		return d.fail("trailer", "bad trailer", ErrCorrupt)
	}
	return nil
}

// sumWriter writes a log format: every byte goes into the CRC-32C that
// finish appends.
type sumWriter struct {
	bw   *bufio.Writer
	cw   countingWriter
	crc  hash.Hash32
	noun string // "log", "table log": in errors
}

func newSumWriter(w io.Writer, noun string) *sumWriter {
	s := &sumWriter{bw: bufio.NewWriterSize(w, 64<<10), crc: crc32.New(castagnoli), noun: noun}
	s.cw.w = s.bw
	return s
}

// write writes b, a part (for errors: "header", "entries") of the format.
func (s *sumWriter) write(part string, b []byte) error {
	s.crc.Write(b)
	if err := s.cw.write(b); err != nil {
		return fmt.Errorf("writing %s %s: %w", s.noun, part, err)
	}
	return nil
}

// finish writes the trailer and flushes, returning the bytes written.
func (s *sumWriter) finish() (int64, error) {
	if err := s.cw.write(binary.LittleEndian.AppendUint32(nil, s.crc.Sum32())); err != nil {
		return s.cw.n, fmt.Errorf("writing %s trailer: %w", s.noun, err)
	}
	if err := s.bw.Flush(); err != nil {
		return s.cw.n, fmt.Errorf("writing %s: %w", s.noun, err)
	}
	return s.cw.n, nil
}

// logHeader reads a log format's header into hdr (preamble, then the
// format's fields) and checks its magic, version and reserved field. It
// returns the CRC-32C of the bytes read, for the entries to go on with
// and logEnd to check.
func (d *decoder) logHeader(hdr []byte, magic [8]byte, noun string, version uint16) (hash.Hash32, error) {
	if err := d.read("log header", hdr); err != nil {
		return nil, err
	}
	crc := crc32.New(castagnoli)
	crc.Write(hdr)
	if [8]byte(hdr[:8]) != magic {
		return nil, d.fail("log header", "bad magic: not a bloomgate "+noun, ErrCorrupt)
	}
	if err := d.checkVersion("log header", binary.LittleEndian.Uint16(hdr[8:]), version, 0); err != nil {
		return nil, err
	}
	if res := binary.LittleEndian.Uint16(hdr[10:]); res != 0 {
		return nil, d.fail("log header", fmt.Sprintf("reserved field %#x", res), ErrUnsupportedVersion)
	}
	return crc, nil
}

// logEnd reads a log format's trailer, checks it against crc (every byte
// before it), and checks that the stream ends there: n, the entry count
// read, is in the message if it does not.
func (d *decoder) logEnd(crc hash.Hash32, n uint64, noun string) error {
	var tr [4]byte
	if err := d.read("log trailer", tr[:]); err != nil {
		return err
	}
	if crc.Sum32() != binary.LittleEndian.Uint32(tr[:]) {
		return d.fail("log trailer", "checksum mismatch", ErrCorrupt)
	}
	var extra [1]byte
	if k, err := io.ReadFull(d.r, extra[:]); k > 0 {
		return d.fail("log trailer", fmt.Sprintf("bytes after %d entries: the entry count does not match the data", n), ErrCorrupt)
	} else if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("reading %s end: %w", noun, err)
	}
	return nil
}

// pageChunks writes pages as the chunks of the generation, table and
// sealed set formats. zstd is tried on pages with ≤ 20 % of their bits
// set, and with dense (the generation format's) on pages with ≥ 80 % too;
// it is kept if it saves ≥ 1/16.
type pageChunks struct {
	cw      *countingWriter
	dense   bool
	enc     *zstd.Encoder
	zbuf    []byte
	swapped []uint64
	chunks  uint64
}

func (pc *pageChunks) close() {
	if pc.enc != nil {
		pc.enc.Close()
	}
}

func (pc *pageChunks) write(p []uint64) error {
	if !littleEndian {
		pc.swapped = append(pc.swapped[:0], p...)
		for i := range pc.swapped {
			pc.swapped[i] = bits.ReverseBytes64(pc.swapped[i])
		}
		p = pc.swapped
	}
	raw := pageAsBytes(p)
	kind, payload := byte(kindRaw), raw
	ones := popcountWords(p)
	switch {
	case ones == 0:
		kind, payload = kindZero, nil
	case ones*5 <= uint64(len(p))*64 || pc.dense && ones*5 >= uint64(len(p))*64*4:
		if pc.enc == nil {
			var err error
			pc.enc, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest),
				zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(false))
			if err != nil {
				return fmt.Errorf("creating zstd encoder: %w", err)
			}
		}
		pc.zbuf = pc.enc.EncodeAll(raw, pc.zbuf[:0])
		if len(pc.zbuf) <= len(raw)-len(raw)/16 {
			kind, payload = kindZstd, pc.zbuf
		}
	}
	var ch [chunkHdr]byte
	ch[0] = kind
	binary.LittleEndian.PutUint32(ch[1:5], uint32(len(payload)))
	binary.LittleEndian.PutUint32(ch[5:9], chunkSum(ch[:5], payload))
	if err := pc.cw.write(ch[:]); err != nil {
		return err
	}
	if err := pc.cw.write(payload); err != nil {
		return err
	}
	pc.chunks++
	return nil
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
	if chunkSum(c.ch[:5], payload) != binary.LittleEndian.Uint32(c.ch[5:9]) {
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
