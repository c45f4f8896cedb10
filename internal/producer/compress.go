package producer

import (
	"bytes"
	"fmt"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"
	kcompress "github.com/segmentio/kafka-go/compress"
)

// Codec is the compression of a record batch: the codec ids of the batch
// attributes, as every Kafka client writes them.
type Codec int8

// Codecs.
const (
	None   Codec = 0
	Gzip   Codec = 1
	Snappy Codec = 2
	LZ4    Codec = 3
	Zstd   Codec = 4
)

var codecNames = [...]string{None: "none", Gzip: "gzip", Snappy: "snappy", LZ4: "lz4", Zstd: "zstd"}

func (c Codec) String() string {
	if c >= 0 && int(c) < len(codecNames) {
		return codecNames[c]
	}
	return fmt.Sprintf("codec(%d)", int8(c))
}

// CodecNames lists the codecs' names, none first.
func CodecNames() []string { return codecNames[:] }

// ParseCodec reads a codec by its name (none, gzip, snappy, lz4, zstd).
func ParseCodec(s string) (Codec, error) {
	for c, name := range codecNames {
		if strings.EqualFold(s, name) {
			return Codec(c), nil
		}
	}
	return None, fmt.Errorf("unknown compression %q (none, gzip, snappy, lz4 or zstd)", s)
}

// zstdEncoder compresses every zstd batch of the process (EncodeAll is
// safe for concurrent use and allocates nothing given room in dst). Its
// window is 1 MiB, the largest batch the worker builds by default
// (writeBatchBytes and --max-batch-bytes are below it): a larger window
// only costs memory. Made at the first zstd batch.
var zstdEncoder = sync.OnceValues(func() (*zstd.Encoder, error) {
	return zstd.NewWriter(nil, zstd.WithWindowSize(1<<20), zstd.WithEncoderLevel(zstd.SpeedDefault),
		zstd.WithLowerEncoderMem(true), zstd.WithZeroFrames(true))
})

// compress returns the batch header hdr followed by src compressed with
// c: zstd appended to dst[:0] by one shared encoder; gzip, snappy (xerial
// framing, which every Kafka consumer reads) and lz4 (the frame format
// Kafka uses) written to scratch by kafka-go's codecs, whose writers are
// pooled.
func compress(dst []byte, scratch *bytes.Buffer, hdr []byte, c Codec, src []byte) ([]byte, error) {
	if c == Zstd {
		enc, err := zstdEncoder()
		if err != nil {
			return dst, err
		}
		return enc.EncodeAll(src, append(dst[:0], hdr...)), nil
	}
	cd := kcompress.Compression(c).Codec()
	if cd == nil {
		return dst, fmt.Errorf("unsupported compression %v", c)
	}
	scratch.Reset()
	scratch.Write(hdr)
	w := cd.NewWriter(scratch)
	if _, err := w.Write(src); err != nil {
		w.Close()
		return dst, err
	}
	if err := w.Close(); err != nil {
		return dst, err
	}
	return scratch.Bytes(), nil
}
