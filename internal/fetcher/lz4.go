package fetcher

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/pierrec/lz4/v4"
)

// LZ4 frames are decoded here, block by block, straight into a buffer of
// setPool sized to the frame's content. pierrec/lz4's Reader (kafka-go's
// codec) takes a buffer of the frame's declared block size from a
// sync.Pool for every frame: kafka-go and pierrec's writers declare 4 MiB
// blocks, so each batch of a few hundred KB allocated 4 MiB again
// whenever a collection had emptied the pool, and the peak RSS at 4 M keys
// over 8 partitions of lz4 input was ~145 MiB against ~67 uncompressed
// (docs/benchmarks-journal.md, "Compressed input").
//
// The frames' own checksums (header, blocks, content: xxHash32) are not
// verified: the record batch's CRC-32C, checked before, covers the
// compressed bytes.

const (
	lz4Magic          = 0x184D2204
	lz4SkippableMagic = 0x184D2A50 // 0x184D2A50-0x184D2A5F
	lz4SkippableMask  = 0xFFFFFFF0
	lz4WindowSize     = 64 << 10 // a linked block refers back at most this far
)

var errLZ4 = errors.New("lz4")

// decodeLZ4 decodes the LZ4 frames of src (one or more, concatenated) into
// a buffer of setPool, failing with errInflated beyond limit bytes.
func decodeLZ4(src []byte, limit int) ([]byte, error) {
	out := setPool.get(min(4*len(src), limit+1))[:0]
	fail := func(err error) ([]byte, error) {
		setPool.put(out)
		return nil, err
	}
	for len(src) > 0 {
		if len(src) < 4 {
			return fail(fmt.Errorf("%w: %d bytes after the last frame", errLZ4, len(src)))
		}
		magic := binary.LittleEndian.Uint32(src)
		if magic&lz4SkippableMask == lz4SkippableMagic {
			if len(src) < 8 {
				return fail(fmt.Errorf("%w: skippable frame cut short", errLZ4))
			}
			n := uint64(binary.LittleEndian.Uint32(src[4:]))
			if n > uint64(len(src)-8) {
				return fail(fmt.Errorf("%w: skippable frame of %d bytes with %d left", errLZ4, n, len(src)-8))
			}
			src = src[8+n:]
			continue
		}
		if magic != lz4Magic {
			return fail(fmt.Errorf("%w: bad frame magic %#x", errLZ4, magic))
		}
		var err error
		if out, src, err = decodeLZ4Frame(out, src[4:], limit); err != nil {
			return fail(err)
		}
	}
	return out, nil
}

// decodeLZ4Frame appends the content of the frame whose header starts src
// (after the magic) to out, and returns the bytes after the frame.
func decodeLZ4Frame(out, src []byte, limit int) ([]byte, []byte, error) {
	if len(src) < 3 {
		return out, nil, fmt.Errorf("%w: frame header cut short", errLZ4)
	}
	flg, bd := src[0], src[1]
	if flg>>6 != 1 {
		return out, nil, fmt.Errorf("%w: frame version %d, want 1", errLZ4, flg>>6)
	}
	var (
		indep      = flg&(1<<5) != 0
		blockSum   = flg&(1<<4) != 0
		hasSize    = flg&(1<<3) != 0
		contentSum = flg&(1<<2) != 0
		hasDict    = flg&1 != 0
	)
	if hasDict {
		return out, nil, fmt.Errorf("%w: frames with a dictionary ID are not supported", errLZ4)
	}
	blockMax := 0
	switch (bd >> 4) & 7 {
	case 4:
		blockMax = 64 << 10
	case 5:
		blockMax = 256 << 10
	case 6:
		blockMax = 1 << 20
	case 7:
		blockMax = 4 << 20
	default:
		return out, nil, fmt.Errorf("%w: block size code %d", errLZ4, (bd>>4)&7)
	}
	hdr := 3 // FLG, BD, HC
	if hasSize {
		hdr += 8
	}
	if len(src) < hdr {
		return out, nil, fmt.Errorf("%w: frame header cut short", errLZ4)
	}
	if hasSize {
		// A declared size is a hint for the buffer only; the blocks decide.
		if n := binary.LittleEndian.Uint64(src[2:]); n <= uint64(limit) && int(n) > cap(out)-len(out) {
			out = growPooled(out, len(out)+int(n))
		}
	}
	src = src[hdr:]
	frameStart := len(out)
	for {
		if len(src) < 4 {
			return out, nil, fmt.Errorf("%w: block size cut short", errLZ4)
		}
		size := binary.LittleEndian.Uint32(src)
		src = src[4:]
		if size == 0 { // end mark
			break
		}
		raw := size&(1<<31) != 0
		size &^= 1 << 31
		if int64(size) > int64(len(src)) {
			return out, nil, fmt.Errorf("%w: block of %d bytes with %d left", errLZ4, size, len(src))
		}
		block := src[:size]
		src = src[size:]
		if blockSum {
			if len(src) < 4 {
				return out, nil, fmt.Errorf("%w: block checksum cut short", errLZ4)
			}
			src = src[4:]
		}
		n := len(block)
		if !raw {
			var err error
			if n, err = lz4BlockLen(block); err != nil {
				return out, nil, err
			}
		}
		if n > blockMax {
			return out, nil, fmt.Errorf("%w: a block of %d bytes in a frame of %d-byte blocks", errLZ4, n, blockMax)
		}
		if len(out)+n > limit {
			return out, nil, fmt.Errorf("%w of %d bytes", errInflated, limit)
		}
		if len(out)+n > cap(out) {
			out = growPooled(out, min(max(2*cap(out), len(out)+n), limit+1))
		}
		dst := out[len(out) : len(out)+n]
		if raw {
			copy(dst, block)
		} else {
			var dict []byte
			if !indep {
				dict = out[max(frameStart, len(out)-lz4WindowSize):]
			}
			got, err := lz4.UncompressBlockWithDict(block, dst, dict)
			if err != nil {
				return out, nil, fmt.Errorf("%w: %w", errLZ4, err)
			}
			if got != n {
				return out, nil, fmt.Errorf("%w: a block decoded to %d bytes, its sequences say %d", errLZ4, got, n)
			}
		}
		out = out[:len(out)+n]
	}
	if contentSum {
		if len(src) < 4 {
			return out, nil, fmt.Errorf("%w: content checksum cut short", errLZ4)
		}
		src = src[4:]
	}
	return out, src, nil
}

// lz4BlockLen is the decoded length of an LZ4 block, read from its
// sequences' literal and match lengths without decoding it.
func lz4BlockLen(b []byte) (int, error) {
	n, i := 0, 0
	ext := func(l int) (int, bool) { // a length continued in bytes of 255
		for {
			if i >= len(b) {
				return 0, false
			}
			c := b[i]
			i++
			l += int(c)
			if l > 1<<30 {
				return 0, false
			}
			if c != 255 {
				return l, true
			}
		}
	}
	for {
		if i >= len(b) {
			return 0, fmt.Errorf("%w: block cut short", errLZ4)
		}
		tok := b[i]
		i++
		lit := int(tok >> 4)
		if lit == 15 {
			var ok bool
			if lit, ok = ext(lit); !ok {
				return 0, fmt.Errorf("%w: literal length cut short", errLZ4)
			}
		}
		if lit > len(b)-i {
			return 0, fmt.Errorf("%w: %d literals with %d bytes left", errLZ4, lit, len(b)-i)
		}
		i += lit
		n += lit
		if i == len(b) { // the last sequence: literals only
			return n, nil
		}
		if len(b)-i < 2 {
			return 0, fmt.Errorf("%w: match offset cut short", errLZ4)
		}
		if b[i] == 0 && b[i+1] == 0 {
			return 0, fmt.Errorf("%w: match offset 0", errLZ4)
		}
		i += 2
		ml := int(tok & 15)
		if ml == 15 {
			var ok bool
			if ml, ok = ext(ml); !ok {
				return 0, fmt.Errorf("%w: match length cut short", errLZ4)
			}
		}
		n += ml + 4
		if n > 1<<30 {
			return 0, fmt.Errorf("%w: block decodes beyond 1 GiB", errLZ4)
		}
	}
}
