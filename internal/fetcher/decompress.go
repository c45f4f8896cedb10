package fetcher

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/segmentio/kafka-go/compress"
)

// What one compressed record batch may decompress to: 1024 times its
// compressed size (deflate's ceiling is ~1032), and at least 16 MiB, which
// is 16 times the largest batch the common producers build (kafka-go's
// Writer and franz-go cap a batch at 1 MiB before compression). A batch
// beyond it is an error at its offset (the partition stops there, visibly)
// instead of an allocation of gigabytes: kafka-go's snappy reader
// allocated whatever a xerial frame or a snappy block declared (up to
// 4 GiB for a 30-byte batch, which FuzzDecodeRaw found), and a zstd
// frame may declare a window of gigabytes.
const (
	decompressFloor = 16 << 20
	decompressRatio = 1024
	// zstdMaxWindow bounds the history a zstd frame may ask for (the
	// format's recommended decoder minimum is 8 MiB; the Java and
	// librdkafka producers' default levels use 2 MiB or less).
	zstdMaxWindow = 32 << 20
)

// errInflated: a batch that decompresses to more than decompressLimit.
var errInflated = errors.New("decompresses beyond the bound")

func decompressLimit(compressed int) int {
	return max(decompressFloor, decompressRatio*compressed)
}

// decompress returns the records of a batch compressed with codec, in a
// buffer of setPool.
func decompress(codec compress.Compression, src []byte) ([]byte, error) {
	limit := decompressLimit(len(src))
	switch codec {
	case compress.Snappy:
		return decodeSnappy(src, limit)
	case compress.Lz4:
		return decodeLZ4(src, limit)
	case compress.Zstd:
		return decodeZstd(src, limit)
	}
	cd := codec.Codec()
	if cd == nil {
		return nil, fmt.Errorf("unsupported compression codec %d", codec)
	}
	r := cd.NewReader(bytes.NewReader(src))
	defer r.Close()
	return readLimited(r, len(src), limit)
}

var zstdDecoders sync.Pool // *zstd.Decoder

// zstdRatio is the output-to-input ratio, in sixteenths, of the last zstd
// batch decoded: what the next one's output buffer is sized by.
var zstdRatio atomic.Uint32

// decodeZstd decodes a batch's zstd frames with DecodeAll into a buffer of
// setPool, which is also the decoder's window: a streaming decoder kept a
// history buffer of its own, as large as a batch's output, in each pooled
// decoder (at 8 partitions of zstd input the peak RSS was 87-89 MiB, 70-76
// with DecodeAll; docs/benchmarks-journal.md, "zstd decoded in place").
//
// The buffer is the frame's declared size when it declares one, else a
// quarter over the last batch's ratio. The decoder stops at the buffer's
// capacity (WithDecodeAllCapLimit); a failed decode is tried again with a
// buffer four times larger, up to limit, where the failure stands: beyond
// the bound, errInflated. A short buffer fails in more than one way
// (ErrDecoderSizeExceeded, or a block that does not fit), so every failure
// climbs: a corrupt batch costs a few decodes and buffers up to ~1.3 times
// the bound before its error.
func decodeZstd(src []byte, limit int) ([]byte, error) {
	d, _ := zstdDecoders.Get().(*zstd.Decoder)
	if d == nil {
		var err error
		d, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(zstdMaxWindow), zstd.WithDecodeAllCapLimit(true))
		if err != nil {
			return nil, err
		}
	}
	defer zstdDecoders.Put(d)
	inflated := func() error {
		return fmt.Errorf("%w of %d bytes for %d compressed bytes", errInflated, limit, len(src))
	}
	size := 0
	var h zstd.Header
	if h.Decode(src) == nil && h.HasFCS {
		if h.FrameContentSize > uint64(limit) {
			return nil, inflated()
		}
		size = int(h.FrameContentSize) // frames after it are tried again
	}
	if size == 0 {
		ratio := int(zstdRatio.Load())
		if ratio == 0 {
			ratio = 8 << 4
		}
		size = len(src) * ratio * 5 / 4 >> 4
	}
	for {
		buf := setPool.get(min(max(size, minPooled), limit))
		out, err := d.DecodeAll(src, buf[:0])
		if cap(out) != cap(buf) || err != nil || len(out) > limit {
			setPool.put(buf) // not used, or not handed out
		}
		switch {
		case err == nil && len(out) <= limit:
			zstdRatio.Store(uint32(min(len(out)<<4/max(len(src), 1), decompressRatio<<4)))
			return out, nil
		case err == nil:
			return nil, inflated()
		case cap(buf) < limit:
			size = 4 * cap(buf)
		case errors.Is(err, zstd.ErrDecoderSizeExceeded) || strings.Contains(err.Error(), "output bigger than max block size"):
			return nil, inflated()
		default:
			return nil, err
		}
	}
}

// readLimited reads r to its end into a buffer of setPool, failing with
// errInflated beyond limit bytes.
func readLimited(r io.Reader, compressed, limit int) ([]byte, error) {
	out := setPool.get(min(4*compressed, limit+1))[:0]
	for {
		if len(out) == cap(out) {
			if len(out) > limit {
				setPool.put(out)
				return nil, fmt.Errorf("%w of %d bytes for %d compressed bytes", errInflated, limit, compressed)
			}
			out = growPooled(out, min(2*cap(out), limit+1))
		}
		n, err := r.Read(out[len(out):cap(out)])
		out = out[:len(out)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			setPool.put(out)
			return nil, err
		}
	}
	if len(out) > limit {
		setPool.put(out)
		return nil, fmt.Errorf("%w of %d bytes for %d compressed bytes", errInflated, limit, compressed)
	}
	return out, nil
}

// growPooled returns a buffer of setPool of capacity >= size holding b's
// bytes, and hands b back.
func growPooled(b []byte, size int) []byte {
	nb := setPool.get(size)[:len(b)]
	copy(nb, b)
	setPool.put(b)
	return nb
}

// xerialMagic starts the framing the Java client's snappy codec writes
// (magic, version, compatible version; then blocks of a 4-byte length and
// a snappy block). Without it a batch is one snappy block.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

// decodeSnappy decodes raw or xerial-framed snappy, checking each
// declared length against what is there and the bound before allocating.
func decodeSnappy(src []byte, limit int) ([]byte, error) {
	if len(src) < 16 || !bytes.Equal(src[:8], xerialMagic) {
		return decodeSnappyBlock(nil, src, limit)
	}
	var out []byte
	for p := src[16:]; len(p) > 0; {
		if len(p) < 4 {
			return nil, errors.New("snappy: xerial frame length cut short")
		}
		n := binary.BigEndian.Uint32(p)
		p = p[4:]
		if uint64(n) > uint64(len(p)) {
			return nil, fmt.Errorf("snappy: xerial frame of %d bytes with %d left", n, len(p))
		}
		var err error
		if out, err = decodeSnappyBlock(out, p[:n], limit); err != nil {
			return nil, err
		}
		p = p[n:]
	}
	return out, nil
}

// decodeSnappyBlock appends the decoding of one snappy block to out.
func decodeSnappyBlock(out, block []byte, limit int) ([]byte, error) {
	n, err := snappy.DecodedLen(block)
	if err != nil {
		return nil, fmt.Errorf("snappy: %w", err)
	}
	if n > limit-len(out) {
		return nil, fmt.Errorf("%w of %d bytes: a snappy block declares %d bytes", errInflated, limit, n)
	}
	if cap(out)-len(out) < n {
		if out == nil {
			out = setPool.get(n)[:0]
		} else {
			out = growPooled(out, len(out)+max(n, len(out)))
		}
	}
	d, err := snappy.Decode(out[len(out):len(out)+n], block)
	if err != nil {
		return nil, fmt.Errorf("snappy: %w", err)
	}
	return out[:len(out)+len(d)], nil
}
