package producer

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"
)

// Layout of a record batch (magic 2), as it travels in a produce request:
// the int32 size of the record set (kafka-go's RawRecordSet is written as
// is), then the batch. Offsets are from the start of the batch.
const (
	sizePrefix = 4

	offBaseOffset      = 0
	offBatchLength     = 8
	offLeaderEpoch     = 12
	offMagic           = 16
	offCRC             = 17
	offAttributes      = 21 // the CRC covers everything from here on
	offLastOffsetDelta = 23
	offFirstTimestamp  = 27
	offMaxTimestamp    = 35
	offProducerID      = 43
	offProducerEpoch   = 51
	offBaseSequence    = 53
	offRecordCount     = 57

	// BatchOverhead is the size of an empty batch as the broker counts it
	// against max.message.bytes: offset and length (12 bytes), then the
	// batch header (49 bytes).
	BatchOverhead = 61
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Batch encodes records into one record batch (magic 2,
// CRC-32C, create-time timestamps, no producer ID). The zero value is an
// empty batch; Reset empties it keeping its buffer. Appending copies the
// record's bytes into the batch: nothing of the record is referenced
// afterwards, and no allocation happens once the buffer has grown to the
// batch's size.
//
// Fields are encoded as kafka-go's Writer encodes them, so that written
// records are byte for byte what they were: a nil key, value or header
// value is null (length -1), a non-nil empty one is empty (length 0);
// timestamps are milliseconds since the epoch (time.Time.UnixNano()/1e6),
// and a record whose timestamp is 0 (the zero time.Time, or the epoch)
// gets the time of the first Append of the batch.
type Batch struct {
	buf     []byte
	n       int
	first   int64 // timestamp of the first record
	max     int64
	now     int64
	sealed  bool
	started bool
	// lastAt is where the last record appended starts in buf, and lastMax
	// the batch's max timestamp before it (PopLast); lastAt 0: none.
	lastAt  int
	lastMax int64

	// codec compresses the batch as it is sent (SetCodec); wire is what is
	// sent: buf, or the compressed form in zbuf or zscratch.
	codec    Codec
	wire     []byte
	zbuf     []byte
	zscratch bytes.Buffer
}

// Reset empties b; its codec stays.
func (b *Batch) Reset() {
	b.buf, b.wire = b.buf[:0], nil
	b.n, b.first, b.max, b.now, b.sealed, b.started = 0, 0, 0, 0, false, false
	b.lastAt, b.lastMax = 0, 0
}

// SetCodec makes b compressed with c when it is sent. Sizes (Size,
// SizeWith) stay those of the records uncompressed, a bound of what the
// broker counts against max.message.bytes: a batch that does not shrink
// is sent uncompressed.
func (b *Batch) SetCodec(c Codec) {
	b.codec, b.sealed = c, false
}

// WireSize is the size of b as it is sent (compressed, if it shrank).
func (b *Batch) WireSize() int {
	if !b.started {
		return BatchOverhead
	}
	return len(b.encoded()) - sizePrefix
}

// Len is the number of records in b.
func (b *Batch) Len() int { return b.n }

// Size is b's size as the broker counts it against the topic's
// max.message.bytes (BatchOverhead for an empty batch).
func (b *Batch) Size() int64 {
	if !b.started {
		return BatchOverhead
	}
	return int64(len(b.buf) - sizePrefix)
}

// timestamp is kafka-go's conversion of a record's time.
func timestamp(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano() / int64(time.Millisecond)
}

// SizeWith is b's size if m, with the headers extra after its own, were
// appended next.
func (b *Batch) SizeWith(m *kafka.Message, extra ...kafka.Header) int64 {
	ts := b.ts(m.Time)
	var delta int64
	if b.n > 0 {
		delta = ts - b.first
	}
	body := recordBody(m, extra, delta, int64(b.n))
	return b.Size() + int64(varintLen(int64(body))+body)
}

// AloneSize is the size of a batch holding m (with the headers extra after
// its own) alone: the least max.message.bytes of a topic that takes it.
func AloneSize(m *kafka.Message, extra ...kafka.Header) int64 {
	body := recordBody(m, extra, 0, 0)
	return BatchOverhead + int64(varintLen(int64(body))+body)
}

// ts is the timestamp m's time is written with in b.
func (b *Batch) ts(t time.Time) int64 {
	ts := timestamp(t)
	if ts == 0 {
		if b.now == 0 {
			return timestamp(time.Now())
		}
		return b.now
	}
	return ts
}

// recordBody is the size of a record after its length.
func recordBody(m *kafka.Message, extra []kafka.Header, tsDelta, offDelta int64) int {
	return 1 + varintLen(tsDelta) + varintLen(offDelta) +
		nullBytesLen(m.Key) + nullBytesLen(m.Value) + varintLen(int64(len(m.Headers)+len(extra))) +
		headersLen(m.Headers) + headersLen(extra)
}

func headersLen(hs []kafka.Header) int {
	n := 0
	for i := range hs {
		h := &hs[i]
		n += varintLen(int64(len(h.Key))) + len(h.Key) + nullBytesLen(h.Value)
	}
	return n
}

func nullBytesLen(b []byte) int {
	if b == nil {
		return 1
	}
	return varintLen(int64(len(b))) + len(b)
}

// MaxRecordSize bounds the bytes Append adds for m, whatever its position
// in a batch: its encoded size with the largest timestamp and offset
// deltas. Summed over a run of records it sizes Grow without falling
// short (a short Grow makes append regrow the buffer, by a quarter, and
// the old buffer becomes garbage).
func MaxRecordSize(m *kafka.Message, extra ...kafka.Header) int {
	const deltaSlack = 9 + 4 // varint lengths of the largest deltas, less the 1 byte each of recordBody(m, extra, 0, 0)
	body := recordBody(m, extra, 0, 0) + deltaSlack
	return varintLen(int64(body)) + body
}

// Grow makes room for n more bytes of records, so that appending them
// allocates once.
func (b *Batch) Grow(n int) {
	if !b.started {
		b.start()
	}
	b.buf = slices.Grow(b.buf, n)
}

// Append adds a copy of m's key, value, headers and time (its topic,
// partition and offset are not used), with the headers extra after m's
// own, to b. Writing a record's added headers this way spares building
// a message with a header array for each record written.
func (b *Batch) Append(m *kafka.Message, extra ...kafka.Header) {
	if !b.started {
		b.start()
	}
	if b.now == 0 {
		b.now = timestamp(time.Now())
	}
	ts := b.ts(m.Time)
	if b.n == 0 {
		b.first, b.max = ts, ts
	}
	b.lastAt, b.lastMax = len(b.buf), b.max
	b.max = max(b.max, ts)
	delta := ts - b.first
	body := recordBody(m, extra, delta, int64(b.n))
	buf := binary.AppendVarint(b.buf, int64(body))
	buf = append(buf, 0) // record attributes
	buf = binary.AppendVarint(buf, delta)
	buf = binary.AppendVarint(buf, int64(b.n))
	buf = appendNullBytes(buf, m.Key)
	buf = appendNullBytes(buf, m.Value)
	buf = binary.AppendVarint(buf, int64(len(m.Headers)+len(extra)))
	buf = appendHeaders(buf, m.Headers)
	b.buf = appendHeaders(buf, extra)
	b.n++
	b.sealed = false
}

// PopLast removes the record appended last, so that it can be appended
// again with other headers (once: it reports false when there is none to
// remove, or it was removed already).
func (b *Batch) PopLast() bool {
	if b.lastAt == 0 {
		return false
	}
	b.buf = b.buf[:b.lastAt]
	b.n--
	b.max = b.lastMax
	b.lastAt = 0
	b.sealed = false
	return true
}

func appendHeaders(buf []byte, hs []kafka.Header) []byte {
	for i := range hs {
		h := &hs[i]
		buf = binary.AppendVarint(buf, int64(len(h.Key)))
		buf = append(buf, h.Key...)
		buf = appendNullBytes(buf, h.Value)
	}
	return buf
}

func appendNullBytes(buf, v []byte) []byte {
	if v == nil {
		return binary.AppendVarint(buf, -1)
	}
	buf = binary.AppendVarint(buf, int64(len(v)))
	return append(buf, v...)
}

func (b *Batch) start() {
	b.started = true
	b.buf = append(b.buf[:0], make([]byte, sizePrefix+BatchOverhead)...)
	h := b.buf[sizePrefix:]
	binary.BigEndian.PutUint32(h[offLeaderEpoch:], 0xffffffff) // -1: unknown
	h[offMagic] = 2
	binary.BigEndian.PutUint64(h[offProducerID:], 0xffffffffffffffff) // -1: none
	binary.BigEndian.PutUint16(h[offProducerEpoch:], 0xffff)
	binary.BigEndian.PutUint32(h[offBaseSequence:], 0xffffffff)
}

// encoded completes the header and returns the record set as a produce
// request carries it: its int32 size, then the batch, compressed with b's
// codec if that makes it smaller. It stays valid until the next Append,
// Reset or SetCodec.
func (b *Batch) encoded() []byte {
	if b.sealed {
		return b.wire
	}
	binary.BigEndian.PutUint32(b.buf, uint32(len(b.buf)-sizePrefix))
	h := b.buf[sizePrefix:]
	binary.BigEndian.PutUint32(h[offBatchLength:], uint32(len(h)-12))
	binary.BigEndian.PutUint32(h[offLastOffsetDelta:], uint32(b.n-1))
	binary.BigEndian.PutUint64(h[offFirstTimestamp:], uint64(b.first))
	binary.BigEndian.PutUint64(h[offMaxTimestamp:], uint64(b.max))
	binary.BigEndian.PutUint32(h[offRecordCount:], uint32(b.n))
	binary.BigEndian.PutUint16(h[offAttributes:], 0)
	b.wire = b.buf
	compressed := false
	if b.codec != None {
		hdr := b.buf[:sizePrefix+BatchOverhead]
		z, err := compress(b.zbuf, &b.zscratch, hdr, b.codec, b.buf[sizePrefix+BatchOverhead:])
		if b.codec == Zstd {
			b.zbuf = z
		}
		if err == nil && len(z) < len(b.buf) {
			binary.BigEndian.PutUint32(z, uint32(len(z)-sizePrefix))
			zh := z[sizePrefix:]
			binary.BigEndian.PutUint32(zh[offBatchLength:], uint32(len(zh)-12))
			binary.BigEndian.PutUint16(zh[offAttributes:], uint16(b.codec))
			binary.BigEndian.PutUint32(zh[offCRC:], crc32.Checksum(zh[offAttributes:], castagnoli))
			b.wire, compressed = z, true
		}
	}
	if !compressed {
		binary.BigEndian.PutUint32(h[offCRC:], crc32.Checksum(h[offAttributes:], castagnoli))
	}
	b.sealed = true
	return b.wire
}

// varintLen is the length of i as a zig-zag varint.
func varintLen(i int64) int {
	u := uint64((i << 1) ^ (i >> 63))
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}
