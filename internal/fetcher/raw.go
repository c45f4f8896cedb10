package fetcher

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	fetchapi "github.com/segmentio/kafka-go/protocol/fetch"
)

// The fetcher decodes record batches itself. kafka-go's decoder (its
// protocol.RecordSet) copies each batch into pooled pages, allocates a page
// reference per key and per value and a header slice per record, after
// which the fetcher copied keys and values once more into its arenas: 1.2
// of the 2.2 GB a 64-partition run had allocated, and a quarter of the
// CPU per event at 8 partitions (docs/benchmarks-journal.md, "Buffers per
// partition, and record batches decoded in place"). Here a
// partition's record set is read into one buffer as the broker sent it, and
// the keys, values and header values of uncompressed batches are slices of
// that buffer; a compressed batch is decompressed into one buffer of its
// own. The buffer lives as long as any record of the fetch is referenced,
// as the arenas did.
//
// The response type of kafka-go's Fetch API is replaced for the process
// (protocol.Register, the way kafka-go's own API packages install theirs):
// a fetch.Request sent with kafka.Transport.RoundTrip returns a *Response.
// kafka.Client.Fetch, which expects kafka-go's type, is not used by
// bloomgate; kafka.Conn and kafka.Reader have codecs of their own and are
// not affected.
func init() {
	protocol.Register(&fetchapi.Request{}, &Response{})
}

// Response is a Fetch response (versions 0-11, kafka-go's fetch.Response)
// whose record sets are kept as bytes.
type Response struct {
	ThrottleTimeMs int32           `kafka:"min=v1,max=v11"`
	ErrorCode      int16           `kafka:"min=v7,max=v11"`
	SessionID      int32           `kafka:"min=v7,max=v11"`
	Topics         []ResponseTopic `kafka:"min=v0,max=v11"`
}

// ApiKey is protocol.Fetch.
func (r *Response) ApiKey() protocol.ApiKey { return protocol.Fetch }

type ResponseTopic struct {
	Topic      string              `kafka:"min=v0,max=v11"`
	Partitions []ResponsePartition `kafka:"min=v0,max=v11"`
}

type ResponsePartition struct {
	Partition            int32                          `kafka:"min=v0,max=v11"`
	ErrorCode            int16                          `kafka:"min=v0,max=v11"`
	HighWatermark        int64                          `kafka:"min=v0,max=v11"`
	LastStableOffset     int64                          `kafka:"min=v4,max=v11"`
	LogStartOffset       int64                          `kafka:"min=v5,max=v11"`
	AbortedTransactions  []fetchapi.ResponseTransaction `kafka:"min=v4,max=v11"`
	PreferredReadReplica int32                          `kafka:"min=v11,max=v11"`
	Records              RawRecords                     `kafka:"min=v0,max=v11"`
}

// RawRecords is a partition's record set as the broker sent it: record
// batches, the last of which may be cut short by the response's size limit.
type RawRecords struct{ B []byte }

// ReadFrom reads the record set's size and bytes (kafka-go's decoder
// calls it for the field).
func (r *RawRecords) ReadFrom(rd io.Reader) (int64, error) {
	var size [4]byte
	if n, err := io.ReadFull(rd, size[:]); err != nil {
		return int64(n), err
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n <= 0 {
		r.B = nil
		return 4, nil
	}
	b := setPool.get(int(n)) // back to the pool with Chunk.Release
	m, err := io.ReadFull(rd, b)
	r.B = b[:m]
	return 4 + int64(m), err
}

// Record batch layout (magic 2): the offsets of the header fields, from
// the batch's start.
const (
	batchBaseOffset  = 0  // int64
	batchLength      = 8  // int32: the bytes after this field
	batchPrefix      = 12 // the two fields above
	batchMagic       = 16 // int8
	batchCRC         = 17 // uint32, CRC-32C of everything after it
	batchAttributes  = 21 // int16
	batchLastDelta   = 23 // int32: the last offset of the batch - base, kept by compaction
	batchFirstTime   = 27 // int64
	batchMaxTime     = 35 // int64; the append time under LogAppendTime
	batchProducerID  = 43 // int64
	batchRecordCount = 57 // int32 (after producerEpoch int16, baseSequence int32)
	batchHeaderSize  = 61
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// attrLogAppendTime is the batch attribute of the timestamp type
// LogAppendTime.
const attrLogAppendTime = 1 << 3

// decodeRaw fills c from the record batches of b at offsets >= start, as
// decode does from kafka-go's decoding. It reports whether any batch was
// complete (kafka-go's RecordSet.Records != nil) and the bytes of keys and
// values returned.
func decodeRaw(c *Chunk, b []byte, aborted []fetchapi.ResponseTransaction, start int64, committed bool, hint sizeHint) (complete bool, used int, err error) {
	if b == nil {
		return false, 0, nil
	}
	// One format per fetch: a set that changes format (a log written
	// before and after a message format upgrade) is decoded up to the
	// change, and the next fetch starts there. kafka-go's decoder gets
	// only message sets of magic 0 and 1: it trusts a v2 batch's record
	// count for an allocation (FuzzDecodeRaw ran it out of memory).
	for rest := b; len(rest) > batchMagic; {
		n := batchPrefix + int(int32(binary.BigEndian.Uint32(rest[batchLength:])))
		if magic := rest[batchMagic]; magic != 2 {
			if at := len(b) - len(rest); at > 0 {
				b = b[:at]
				break
			}
			if magic < 2 {
				return decodeLegacy(c, b[:legacyEnd(b)], aborted, start, committed, hint)
			}
			return false, 0, fmt.Errorf("unsupported record batch magic %d", magic)
		}
		if n < batchHeaderSize || n > len(rest) {
			break
		}
		rest = rest[n:]
	}
	var txns abortedTxns
	if committed {
		txns = newAbortedTxns(aborted)
	}
	d := rawDecoder{c: c, start: start, hint: hint.records}
	size := len(b)
	for len(b) > batchMagic {
		n := batchPrefix + int(int32(binary.BigEndian.Uint32(b[batchLength:])))
		if n < batchHeaderSize || n > len(b) {
			break // cut short by the response's size limit
		}
		batch := b[:n]
		b = b[n:]
		// A batch that does not decode ends the chunk before it when
		// batches precede it and moved the position: their records are
		// handed over and the next fetch starts at the bad batch, which
		// fails it with its own offset. Otherwise the records before it
		// would never be read. (Had they not moved the position, the
		// next fetch would return the same: the error it is.)
		mark := *d.c
		used := d.used
		if err := d.batch(batch, txns); err != nil {
			if !complete || mark.Next <= start {
				return complete, d.used, err
			}
			mark.Records = d.c.Records[:len(mark.Records)]
			*d.c, d.used = mark, used
			break
		}
		complete = true
	}
	if !complete && size > 0 {
		// Brokers return the first batch whole (KIP-74), whatever the
		// size limit: this one would never get further.
		return false, 0, fmt.Errorf("%w (%d bytes)", errPartialOnly, size)
	}
	if c.Next > start {
		c.Gaps = int(c.Next-start) - len(c.Records) - c.Markers - c.Aborted
	}
	return complete, d.used, nil
}

// legacyEnd returns the length of the message sets of magic 0 and 1 at
// the start of b: up to the first entry of another magic, or all of b.
func legacyEnd(b []byte) int {
	for rest := b; len(rest) > batchMagic; {
		if rest[batchMagic] >= 2 {
			return len(b) - len(rest)
		}
		n := batchPrefix + int(int32(binary.BigEndian.Uint32(rest[batchLength:])))
		if n <= batchMagic || n > len(rest) {
			break // cut short: kafka-go's decoder handles the tail
		}
		rest = rest[n:]
	}
	return len(b)
}

// decodeLegacy decodes b with kafka-go's decoder and the fetcher's earlier
// path: message sets of magic 0 and 1 (old log segments) are rare enough
// that their copies do not matter. kafka-go's decoder panics on some
// malformed message sets (FuzzDecodeRaw found a negative slice bound in
// its magic 1 reader); that is an error here, not a crash.
func decodeLegacy(c *Chunk, b []byte, aborted []fetchapi.ResponseTransaction, start int64, committed bool, hint sizeHint) (complete bool, used int, err error) {
	before := *c
	defer func() {
		if p := recover(); p != nil {
			*c = before
			complete, used, err = false, 0, fmt.Errorf("malformed message set of magic 0 or 1 (kafka-go's decoder: %v)", p)
		}
	}()
	buf := make([]byte, 4, 4+len(b))
	binary.BigEndian.PutUint32(buf, uint32(len(b)))
	var rs protocol.RecordSet
	if _, err := rs.ReadFrom(bytes.NewBuffer(append(buf, b...))); err != nil {
		return false, 0, err
	}
	rp := &fetchapi.ResponsePartition{AbortedTransactions: aborted, RecordSet: rs}
	used, err = decode(c, rp, start, committed, hint)
	return rs.Records != nil, used, err
}

// rawDecoder decodes the batches of one fetch into its chunk.
type rawDecoder struct {
	c     *Chunk
	start int64
	hint  int
	used  int
}

func (d *rawDecoder) batch(b []byte, txns abortedTxns) error {
	base := int64(binary.BigEndian.Uint64(b[batchBaseOffset:]))
	if sum := crc32.Checksum(b[batchAttributes:], castagnoli); sum != binary.BigEndian.Uint32(b[batchCRC:]) {
		return fmt.Errorf("record batch at offset %d: CRC-32C mismatch (computed %#x, batch says %#x)",
			base, sum, binary.BigEndian.Uint32(b[batchCRC:]))
	}
	attrs := protocol.Attributes(binary.BigEndian.Uint16(b[batchAttributes:]))
	first := int64(binary.BigEndian.Uint64(b[batchFirstTime:]))
	// On a topic with message.timestamp.type=LogAppendTime the broker
	// leaves the records' timestamps as the producer sent them and sets
	// the batch's timestamp type and maximum timestamp (the append time),
	// which is every record's timestamp, as the Java consumer reports it.
	// (kafka-go's decoder read neither: bloomgate filed such records by
	// the producers' clocks before.)
	appendTime, logAppend := int64(binary.BigEndian.Uint64(b[batchMaxTime:])), attrs&attrLogAppendTime != 0
	pid := int64(binary.BigEndian.Uint64(b[batchProducerID:]))
	count := int(int32(binary.BigEndian.Uint32(b[batchRecordCount:])))
	recs := b[batchHeaderSize:]
	if codec := attrs.Compression(); codec != 0 {
		out, err := decompress(codec, recs)
		if err != nil {
			return fmt.Errorf("record batch at offset %d: decompressing (%s): %w", base, codec, err)
		}
		recs = out
		if d.c.own != nil {
			d.c.own.inflated = append(d.c.own.inflated, out)
		}
	}
	if !attrs.Control() && count > 0 {
		d.c.Codec = int8(attrs.Compression())
	}
	var skipped *int
	switch {
	case attrs.Control():
		if txns != nil {
			txns.marker(pid, base)
		}
		skipped = &d.c.Markers
	case txns != nil && attrs.Transactional() && txns.aborted(pid, base):
		skipped = &d.c.Aborted
	}
	for i := 0; i < count; i++ {
		r, rest, err := nextRecord(recs)
		if err != nil {
			return fmt.Errorf("record batch at offset %d, record %d of %d: %w", base, i, count, err)
		}
		recs = rest
		off := base + r.offsetDelta
		if off < d.start || off < d.c.Next {
			continue
		}
		d.c.Next = off + 1
		if skipped != nil {
			*skipped++
			continue
		}
		if d.c.Records == nil {
			d.c.Records = recordsPool.get(max(d.hint, minPooled))[:0]
		}
		ts := first + r.timeDelta
		if logAppend {
			ts = appendTime
		}
		d.used += len(r.key) + len(r.value)
		d.c.Records = append(d.c.Records, kafka.Message{
			Offset:        off,
			Time:          time.Unix(ts/1000, (ts%1000)*int64(time.Millisecond)), // as kafka-go
			Key:           r.key,
			Value:         r.value,
			Headers:       r.headers,
			HighWaterMark: d.c.HighWatermark,
		})
	}
	// Every offset up to the batch's last is examined, including those
	// compaction removed from its tail: the position moves past them at
	// once (kafka-go's decoder did not expose the last offset delta, and a
	// removed tail cost one fetch per offset).
	if end := base + int64(int32(binary.BigEndian.Uint32(b[batchLastDelta:]))) + 1; end > d.c.Next && end > d.start {
		d.c.Next = end
	}
	return nil
}

// rawRecord is one decoded record: key, value and header values are
// slices of the batch (nil for null, empty for empty).
type rawRecord struct {
	timeDelta, offsetDelta int64
	key, value             []byte
	headers                []kafka.Header
}

var errShortRecord = errors.New("record cut short or malformed")

// errPartialOnly: a record set without one complete batch.
var errPartialOnly = errors.New("the response holds only part of a record batch")

// nextRecord decodes the record at the start of b and returns it and what
// follows it.
func nextRecord(b []byte) (r rawRecord, rest []byte, err error) {
	length, n := binary.Varint(b)
	if n <= 0 || length < 0 || int64(len(b)-n) < length {
		return r, nil, errShortRecord
	}
	rest = b[n+int(length):]
	p := b[n : n+int(length) : n+int(length)]
	if len(p) < 1 {
		return r, nil, errShortRecord
	}
	p = p[1:] // attributes
	var ok bool
	if r.timeDelta, p, ok = varint(p); !ok {
		return r, nil, errShortRecord
	}
	if r.offsetDelta, p, ok = varint(p); !ok {
		return r, nil, errShortRecord
	}
	if r.key, p, ok = varBytes(p); !ok {
		return r, nil, errShortRecord
	}
	if r.value, p, ok = varBytes(p); !ok {
		return r, nil, errShortRecord
	}
	var nh int64
	if nh, p, ok = varint(p); !ok || nh < 0 || nh > int64(len(p)) {
		return r, nil, errShortRecord
	}
	if nh > 0 {
		r.headers = make([]kafka.Header, nh)
		for i := range r.headers {
			var k []byte
			if k, p, ok = varBytes(p); !ok {
				return r, nil, errShortRecord
			}
			r.headers[i].Key = string(k)
			if r.headers[i].Value, p, ok = varBytes(p); !ok {
				return r, nil, errShortRecord
			}
		}
	}
	return r, rest, nil
}

func varint(b []byte) (int64, []byte, bool) {
	v, n := binary.Varint(b)
	if n <= 0 {
		return 0, nil, false
	}
	return v, b[n:], true
}

// varBytes decodes a length-prefixed field: nil for length -1, a non-nil
// slice of b (capacity limited to it) otherwise.
func varBytes(b []byte) ([]byte, []byte, bool) {
	l, rest, ok := varint(b)
	if !ok || l < -1 || l > int64(len(rest)) {
		return nil, nil, false
	}
	if l < 0 {
		return nil, rest, true
	}
	return rest[:l:l], rest[l:], true
}
