package bloom

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
)

// Sealed set format v1, little-endian, streamed: the sealed generations of
// a fingerprint table (sealed.go), to be stored beside its live table.
//
//	header   magic "\x89BGSET\r\n", version u16 = 1, flags u16 (0),
//	         length u32 of the fields up to the header CRC, quotients u64,
//	         remainder bits u32, tag bits u32, entries u64, set chunks u32
//	         (quotients / 16384), reserved u32 (0), then 2^tag bits counts
//	         u64 (entries per tag); CRC-32C u32 of all the header bytes
//	         before it.
//	sizes    entries u32 per set chunk; CRC-32C u32 of them.
//	pieces   each set chunk's words — its unary quotient code (entries +
//	         16384 bits), then its packed entries (entries × (r + a) bits)
//	         — in pieces of at most 8192 words, framed as the pages of the
//	         table format (kind, length, CRC, payload: raw, zstd, or all
//	         zero).
//	trailer  magic "BGSETEND", pieces u64, bytes before the trailer u64,
//	         CRC-32C u32 of the trailer bytes before it.
//
// The decoder checks every field's range, the declared size before
// allocating (ErrTooLarge), each piece's CRC, and each chunk's code in
// O(words): as many ones as entries, a 0 ending the last quotient, no bits
// past the code or the entries. Every lookup and merge then stays inside
// the set, and it re-encodes to the same bytes. The order of entries
// within a quotient and their tags are the encoder's, covered by the
// CRCs, as the table format's layout check covers the table's structure,
// not each entry.
const (
	sealedVersion  = 1
	sealedHdrFixed = 8 + 4 + 4 + 8 + 4 + 4
)

var (
	sealedMagic        = [8]byte{0x89, 'B', 'G', 'S', 'E', 'T', '\r', '\n'}
	sealedTrailerMagic = [8]byte{'B', 'G', 'S', 'E', 'T', 'E', 'N', 'D'}
)

// wordsLen is the number of words of the chunk's code and of its entries.
func (c *ssChunk) wordsLen(s uint) (high, low uint64) {
	return (c.n + ssChunkQ + 63) / 64, (c.n*uint64(s) + 63) / 64
}

// WriteTo encodes the set in sealed set format v1. Sets never change once
// built, so a set may be encoded while its table goes on taking inserts.
func (s *sealedSet) WriteTo(w io.Writer) (int64, error) {
	bw := bufio.NewWriterSize(w, 256<<10)
	cw := &countingWriter{w: bw}
	if err := s.write(cw); err != nil {
		return cw.n, err
	}
	if err := bw.Flush(); err != nil {
		return cw.n, fmt.Errorf("writing sealed set: %w", err)
	}
	return cw.n, nil
}

// write encodes the set into cw (unflushed): alone, or inside a table.
func (s *sealedSet) write(cw *countingWriter) error {
	start := cw.n
	ntags := 1 << s.a
	hlen := sealedHdrFixed + 8*ntags
	hdr := appendHeader(make([]byte, 0, preambleSz+4+hlen+4), sealedMagic, sealedVersion, 0, hlen)
	hdr = binary.LittleEndian.AppendUint64(hdr, s.nq)
	hdr = binary.LittleEndian.AppendUint32(hdr, uint32(s.r))
	hdr = binary.LittleEndian.AppendUint32(hdr, uint32(s.a))
	hdr = binary.LittleEndian.AppendUint64(hdr, s.n)
	hdr = binary.LittleEndian.AppendUint32(hdr, uint32(len(s.chunks)))
	hdr = binary.LittleEndian.AppendUint32(hdr, 0)
	for _, c := range s.counts {
		hdr = binary.LittleEndian.AppendUint64(hdr, c)
	}
	hdr = appendSum(hdr)
	sizes := make([]byte, 0, 4*len(s.chunks)+4)
	for _, c := range s.chunks {
		sizes = binary.LittleEndian.AppendUint32(sizes, uint32(c.n))
	}
	sizes = appendSum(sizes)
	if err := cw.write(hdr); err != nil {
		return fmt.Errorf("writing sealed set header: %w", err)
	}
	if err := cw.write(sizes); err != nil {
		return fmt.Errorf("writing sealed set sizes: %w", err)
	}
	pc := pageChunks{cw: cw}
	defer pc.close()
	var words []uint64
	for _, c := range s.chunks {
		words = append(append(words[:0], c.high...), c.low...)
		for len(words) > 0 {
			n := min(len(words), pageWords)
			if err := pc.write(words[:n]); err != nil {
				return fmt.Errorf("writing sealed set piece: %w", err)
			}
			words = words[n:]
		}
	}
	if err := cw.write(appendTrailer(make([]byte, 0, trailerSz), sealedTrailerMagic, pc.chunks, cw.n-start)); err != nil {
		return fmt.Errorf("writing sealed set trailer: %w", err)
	}
	return nil
}

// decodeSealedSet reads a set in sealed set format v1 whose memory is at
// most maxBytes (≤ 0: MaxFilterBytes). Format problems are *FormatError
// wrapping ErrCorrupt, ErrUnsupportedVersion or ErrTooLarge; a non-nil
// error means a nil set.
func decodeSealedSet(r io.Reader, maxBytes int64) (*sealedSet, error) {
	if maxBytes <= 0 || maxBytes > MaxFilterBytes {
		maxBytes = MaxFilterBytes
	}
	return readSealedSet(&decoder{r: r}, maxBytes)
}

// readSealedSet reads a set from d: alone, or inside a table.
func readSealedSet(d *decoder, maxBytes int64) (*sealedSet, error) {
	start := d.off
	_, b, err := d.header(header{magic: sealedMagic, noun: "sealed set", version: sealedVersion, minLen: sealedHdrFixed + 8*2,
		maxLen: sealedHdrFixed + 8<<6, unit: 8, fixed: sealedHdrFixed})
	if err != nil {
		return nil, err
	}
	hlen := uint32(len(b))
	u64 := func() uint64 { x := binary.LittleEndian.Uint64(b); b = b[8:]; return x }
	u32 := func() uint32 { x := binary.LittleEndian.Uint32(b); b = b[4:]; return x }
	nq, r32, a32, n, nchunks, res := u64(), u32(), u32(), u64(), u32(), u32()
	switch {
	case res != 0:
		return nil, d.fail("header", fmt.Sprintf("reserved field %#x", res), ErrUnsupportedVersion)
	case a32 < 1 || a32 > 6 || hlen != sealedHdrFixed+8<<a32:
		return nil, d.fail("header", fmt.Sprintf("%d tag bits in a %d-byte header", a32, hlen), ErrCorrupt)
	case r32 < 1 || r32+a32 >= ssMaxS:
		return nil, d.fail("header", fmt.Sprintf("remainder of %d bits", r32), ErrCorrupt)
	case nq == 0 || nq%ssChunkQ != 0 || nq/ssChunkQ != uint64(nchunks):
		return nil, d.fail("header", fmt.Sprintf("%d quotients in %d chunks", nq, nchunks), ErrCorrupt)
	case uint64(nchunks)*8 > uint64(maxBytes):
		return nil, d.fail("header", fmt.Sprintf("%d chunks, limit %d bytes", nchunks, maxBytes), ErrTooLarge)
	}
	set := &sealedSet{nq: nq, r: uint(r32), a: uint(a32), s: uint(r32 + a32), n: n, counts: make([]uint64, 1<<a32)}
	var sum uint64
	for t := range set.counts {
		set.counts[t] = u64()
		sum += set.counts[t]
		if sum < set.counts[t] {
			return nil, d.fail("header", "tag counts overflow", ErrCorrupt)
		}
	}
	if sum != n {
		return nil, d.fail("header", fmt.Sprintf("%d entries, tags count %d", n, sum), ErrCorrupt)
	}
	sizes := make([]byte, 4*int(nchunks)+4)
	if err := d.read("sizes", sizes); err != nil {
		return nil, err
	}
	if !d.summed(sizes) {
		return nil, d.fail("sizes", "checksum mismatch", ErrCorrupt)
	}
	// The memory, before any of it is allocated: each chunk's code,
	// entries, index and structure (ssChunk.bytes).
	total, entries := uint64(nchunks)*8, uint64(0)
	for i := range nchunks {
		cn := uint64(binary.LittleEndian.Uint32(sizes[4*i:]))
		if cn > ssMaxChunkEntries {
			return nil, d.fail("sizes", fmt.Sprintf("set chunk %d of %d entries, at most %d", i, cn, ssMaxChunkEntries), ErrCorrupt)
		}
		entries += cn
		c := ssChunk{n: cn}
		hw, lw := c.wordsLen(set.s)
		total += (hw+lw)*8 + ssChunkQ/ssBlockQ*4 + 96
		if total > uint64(maxBytes) {
			return nil, d.fail("sizes", fmt.Sprintf("set of more than %d bytes", maxBytes), ErrTooLarge)
		}
	}
	if entries != n {
		return nil, d.fail("sizes", fmt.Sprintf("chunks of %d entries in a set of %d", entries, n), ErrCorrupt)
	}
	set.chunks = make([]*ssChunk, nchunks)
	cr := &chunkReader{d: d}
	defer cr.Close()
	var words []uint64
	for i := range set.chunks {
		cn := uint64(binary.LittleEndian.Uint32(sizes[4*i:]))
		c := &ssChunk{n: cn}
		hw, lw := c.wordsLen(set.s)
		words = make([]uint64, hw+lw)
		for rest := words; len(rest) > 0; {
			piece := rest[:min(len(rest), pageWords)]
			if err := cr.words(piece, "piece"); err != nil {
				return nil, err
			}
			rest = rest[len(piece):]
		}
		c.high, c.low = words[:hw:hw], words[hw:]
		if len(c.low) == 0 {
			c.low = nil
		}
		if err := c.index(set.s); err != nil {
			return nil, d.fail("chunk", fmt.Sprintf("set chunk %d: %v", i, err), ErrCorrupt)
		}
		if cn == 0 {
			c = ssEmptyChunk
		}
		set.chunks[i] = c
	}
	if err := d.trailer(sealedTrailerMagic, cr.chunks, start); err != nil {
		return nil, err
	}
	return set, nil
}

// index checks a decoded chunk's code (c.n entries, c.high and c.low
// read) and builds its block index, in O(words): as many ones as entries,
// the last quotient ended by a 0, no bits past the code or the entries.
// That is what keeps every lookup and merge inside the chunk; the order of
// entries within a quotient and the tags are the encoder's, covered by the
// CRCs (an out-of-order entry could only be missed by a lookup).
func (c *ssChunk) index(s uint) error {
	hb := c.n + ssChunkQ
	if n := popcountWords(c.high); n != c.n {
		return fmt.Errorf("%d ones for %d entries", n, c.n)
	}
	if hb%64 != 0 && c.high[len(c.high)-1]>>(hb%64) != 0 {
		return fmt.Errorf("bits past the quotient code")
	}
	if c.high[(hb-1)>>6]>>((hb-1)&63)&1 != 0 {
		return fmt.Errorf("the last quotient is not ended")
	}
	if lb := c.n * uint64(s); lb%64 != 0 && c.low[len(c.low)-1]>>(lb%64) != 0 {
		return fmt.Errorf("bits past the entries")
	}
	nb := uint64(ssChunkQ / ssBlockQ)
	c.makeIndex()
	// Block b begins after the (b·ssBlockQ)-th zero of the code.
	b, zeros := uint64(1), uint64(0)
	for wi, w := range c.high {
		z := ^w
		nz := uint64(bits.OnesCount64(z))
		for b < nb && b*ssBlockQ <= zeros+nz {
			c.setBlockStart(b, uint64(wi)<<6|uint64(select64(z, uint(b*ssBlockQ-zeros-1)))+1)
			b++
		}
		zeros += nz
		if b == nb {
			break
		}
	}
	return nil
}
