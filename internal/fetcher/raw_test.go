package fetcher

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"
	"github.com/segmentio/kafka-go/protocol"
	fetchapi "github.com/segmentio/kafka-go/protocol/fetch"
)

// testRecord is a record of a test batch; nil fields are null.
type testRecord struct {
	offsetDelta, timeDelta int64
	key, value             []byte
	headers                []kafka.Header
}

// testBatch is a record batch (magic 2) to encode.
type testBatch struct {
	base, firstTime int64
	attrs           protocol.Attributes
	producerID      int64
	records         []testRecord
	tail            int64 // offsets compaction removed after the last record
	appendTime      int64 // with the LogAppendTime attribute: the broker's time
}

func appendVarBytes(b, v []byte) []byte {
	if v == nil {
		return binary.AppendVarint(b, -1)
	}
	return append(binary.AppendVarint(b, int64(len(v))), v...)
}

// encode writes the batch as a broker sends it: written here, not by the
// code under test, with the codec's writer from kafka-go.
func (tb testBatch) encode(t testing.TB) []byte {
	var recs []byte
	for _, r := range tb.records {
		var body []byte
		body = append(body, 0) // attributes
		body = binary.AppendVarint(body, r.timeDelta)
		body = binary.AppendVarint(body, r.offsetDelta)
		body = appendVarBytes(body, r.key)
		body = appendVarBytes(body, r.value)
		body = binary.AppendVarint(body, int64(len(r.headers)))
		for _, h := range r.headers {
			body = appendVarBytes(body, []byte(h.Key))
			body = appendVarBytes(body, h.Value)
		}
		recs = append(binary.AppendVarint(recs, int64(len(body))), body...)
	}
	if c := tb.attrs.Compression(); c != 0 {
		var out bytes.Buffer
		w := c.Codec().NewWriter(&out)
		if _, err := w.Write(recs); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		recs = out.Bytes()
	}
	b := make([]byte, batchHeaderSize, batchHeaderSize+len(recs))
	binary.BigEndian.PutUint64(b[0:], uint64(tb.base))
	binary.BigEndian.PutUint32(b[12:], 0) // partition leader epoch
	b[batchMagic] = 2
	binary.BigEndian.PutUint16(b[batchAttributes:], uint16(tb.attrs))
	last := tb.tail
	if n := len(tb.records); n > 0 {
		last += tb.records[n-1].offsetDelta
	}
	binary.BigEndian.PutUint32(b[23:], uint32(last))
	binary.BigEndian.PutUint64(b[batchFirstTime:], uint64(tb.firstTime))
	maxTime := tb.firstTime
	for _, r := range tb.records {
		maxTime = max(maxTime, tb.firstTime+r.timeDelta)
	}
	if tb.appendTime != 0 {
		maxTime = tb.appendTime
	}
	binary.BigEndian.PutUint64(b[batchMaxTime:], uint64(maxTime))
	binary.BigEndian.PutUint64(b[batchProducerID:], uint64(tb.producerID))
	binary.BigEndian.PutUint16(b[51:], 0)
	binary.BigEndian.PutUint32(b[53:], 0)
	binary.BigEndian.PutUint32(b[batchRecordCount:], uint32(len(tb.records)))
	b = append(b, recs...)
	binary.BigEndian.PutUint32(b[batchLength:], uint32(len(b)-batchPrefix))
	binary.BigEndian.PutUint32(b[batchCRC:], crc32.Checksum(b[batchAttributes:], castagnoli))
	return b
}

// decodeKafkaGo decodes record set b the way the fetcher did before it
// decoded batches itself: kafka-go's RecordSet, then decode.
func decodeKafkaGo(b []byte, aborted []fetchapi.ResponseTransaction, start int64, committed bool) (Chunk, bool, error) {
	buf := binary.BigEndian.AppendUint32(nil, uint32(len(b)))
	var rs protocol.RecordSet
	if _, err := rs.ReadFrom(bytes.NewBuffer(append(buf, b...))); err != nil {
		return Chunk{}, false, err
	}
	c := Chunk{Next: start, HighWatermark: 1 << 40}
	_, err := decode(&c, &fetchapi.ResponsePartition{AbortedTransactions: aborted, RecordSet: rs}, start, committed, sizeHint{})
	return c, rs.Records != nil, err
}

func decodeOwn(b []byte, aborted []fetchapi.ResponseTransaction, start int64, committed bool) (Chunk, bool, error) {
	c := Chunk{Next: start, HighWatermark: 1 << 40}
	complete, _, err := decodeRaw(&c, b, aborted, start, committed, sizeHint{})
	return c, complete, err
}

var testCodecs = []compress.Compression{0, compress.Gzip, compress.Snappy, compress.Lz4, compress.Zstd}

// randomSet builds a record set of a few batches: data, transactional
// (some aborted), control, compressed with every codec, with gaps between
// and inside batches and after their last records, null and empty keys,
// values and header values. ends are the complete batches' last offsets
// + 1.
func randomSet(t testing.TB, rng *rand.Rand) (set []byte, aborted []fetchapi.ResponseTransaction, start int64, ends []int64) {
	var sizes []int
	off := rng.Int64N(1000)
	first := off
	bytesOf := func() []byte {
		switch rng.IntN(4) {
		case 0:
			return nil
		case 1:
			return []byte{}
		default:
			return []byte(strings.Repeat("x", rng.IntN(40)) + fmt.Sprint(rng.IntN(1e6)))
		}
	}
	for range 1 + rng.IntN(6) {
		tb := testBatch{base: off, firstTime: 1_700_000_000_000 + rng.Int64N(1e6), producerID: -1,
			attrs: protocol.Attributes(testCodecs[rng.IntN(len(testCodecs))])}
		switch rng.IntN(5) {
		case 0:
			tb.attrs |= protocol.Transactional
			tb.producerID = rng.Int64N(3)
			if rng.IntN(2) == 0 {
				aborted = append(aborted, fetchapi.ResponseTransaction{ProducerID: tb.producerID, FirstOffset: off})
			}
		case 1:
			tb.attrs = protocol.Transactional | protocol.Control
			tb.producerID = rng.Int64N(3)
		}
		delta := int64(0)
		for range 1 + rng.IntN(12) {
			r := testRecord{offsetDelta: delta, timeDelta: rng.Int64N(5000), key: bytesOf(), value: bytesOf()}
			for range rng.IntN(3) {
				r.headers = append(r.headers, kafka.Header{Key: fmt.Sprint("h", rng.IntN(9)), Value: bytesOf()})
			}
			tb.records = append(tb.records, r)
			delta += 1 + int64(rng.IntN(3)/2) // a gap now and then (compaction)
		}
		if rng.IntN(3) == 0 {
			tb.tail = 1 + rng.Int64N(3)
		}
		set = append(set, tb.encode(t)...)
		sizes = append(sizes, len(set))
		end := off + tb.records[len(tb.records)-1].offsetDelta + tb.tail + 1
		ends = append(ends, end)
		off = end + int64(rng.IntN(2))
	}
	start = first + rng.Int64N(max(off-first, 1))
	if rng.IntN(3) == 0 { // the response's limit cut the last batch
		set = set[:len(set)-1-rng.IntN(min(len(set)-1, 80))]
		if len(set) < sizes[len(sizes)-1] {
			ends = ends[:len(ends)-1]
		}
	}
	return set, aborted, start, ends
}

// TestDecodeRawAsKafkaGo: the fetcher's own batch decoding returns exactly
// what kafka-go's decoding followed by the earlier copy did — records
// (offsets, times, keys, values, headers with null and empty apart) and
// counts — for random record sets of every codec, with transactions,
// markers, gaps and a cut last batch, at both isolation levels; its
// position moves on to the end of the last complete batch, past offsets
// compaction removed from the batch's tail (kafka-go's stops after the
// last record), and the offsets passed over without a record are counted
// as gaps.
//
// Under the race detector it decodes the first 300 sets: each lz4 batch
// allocates a 4 MiB block there (pierrec/lz4's pool), whose shadow memory
// made the 3000 take ~195 s; make test runs all 3000 without it too.
func TestDecodeRawAsKafkaGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tails := 0
	sets := 3000
	if raceOn {
		sets = 300
	}
	for i := range sets {
		set, aborted, start, ends := randomSet(t, rng)
		committed := i%2 == 0
		want, wantAny, werr := decodeKafkaGo(set, aborted, start, committed)
		got, gotAny, gerr := decodeOwn(set, aborted, start, committed)
		if errors.Is(gerr, errPartialOnly) && !wantAny && len(want.Records) == 0 {
			continue // kafka-go: nothing (at 17 bytes or more) or an error
		}
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("set %d: errors differ: kafka-go %v, own %v", i, werr, gerr)
		}
		if werr != nil {
			continue
		}
		if gotAny != wantAny {
			t.Fatalf("set %d: complete batch %v, kafka-go %v", i, gotAny, wantAny)
		}
		next := want.Next
		if n := len(ends); n > 0 && ends[n-1] > next {
			next = ends[n-1]
			tails++
		}
		if got.Next != next || got.Markers != want.Markers || got.Aborted != want.Aborted {
			t.Fatalf("set %d (start %d, committed %v): next %d markers %d aborted %d; want %d (kafka-go %d) %d %d",
				i, start, committed, got.Next, got.Markers, got.Aborted, next, want.Next, want.Markers, want.Aborted)
		}
		if gaps := int(got.Next-start) - len(got.Records) - got.Markers - got.Aborted; got.Next > start && got.Gaps != gaps {
			t.Fatalf("set %d: %d gaps counted, %d offsets passed without a record", i, got.Gaps, gaps)
		}
		if !reflect.DeepEqual(got.Records, want.Records) {
			if len(got.Records) != len(want.Records) {
				t.Fatalf("set %d: %d records, kafka-go %d", i, len(got.Records), len(want.Records))
			}
			for j := range got.Records {
				if !reflect.DeepEqual(got.Records[j], want.Records[j]) {
					t.Fatalf("set %d record %d:\n own      %+v\n kafka-go %+v", i, j, got.Records[j], want.Records[j])
				}
			}
		}
	}
	if tails < sets/30 {
		t.Fatalf("only %d of %d sets moved past a batch's removed tail", tails, sets)
	}
}

// TestDecodeRawCorrupt: a batch whose bytes do not match its CRC-32C is an
// error naming the batch, not records.
func TestDecodeRawCorrupt(t *testing.T) {
	b := testBatch{base: 7, firstTime: 1, producerID: -1, records: []testRecord{{key: []byte("k"), value: []byte("value")}}}.encode(t)
	b[len(b)-2] ^= 0x40
	c := Chunk{Next: 7}
	_, _, err := decodeRaw(&c, b, nil, 7, false, sizeHint{})
	if err == nil || !strings.Contains(err.Error(), "CRC-32C mismatch") || !strings.Contains(err.Error(), "offset 7") {
		t.Fatalf("corrupt batch: err %v, records %d", err, len(c.Records))
	}
	if len(c.Records) != 0 {
		t.Fatalf("corrupt batch returned %d records", len(c.Records))
	}
}

// TestDecodeRawLegacy: message sets of magic 1 (old log segments) are
// decoded by kafka-go, keys and values intact.
func TestDecodeRawLegacy(t *testing.T) {
	rs := protocol.RecordSet{Version: 1, Records: protocol.NewRecordReader(
		protocol.Record{Offset: 0, Key: protocol.NewBytes([]byte("a")), Value: protocol.NewBytes([]byte("1"))},
		protocol.Record{Offset: 1, Key: nil, Value: protocol.NewBytes([]byte("2"))},
	)}
	var buf bytes.Buffer
	if _, err := rs.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	c := Chunk{}
	complete, _, err := decodeRaw(&c, buf.Bytes()[4:], nil, 0, true, sizeHint{})
	if err != nil || !complete {
		t.Fatalf("magic 1: complete %v, err %v", complete, err)
	}
	if len(c.Records) != 2 || string(c.Records[0].Key) != "a" || string(c.Records[1].Value) != "2" || c.Records[1].Key != nil || c.Next != 2 {
		t.Fatalf("magic 1: records %+v, next %d", c.Records, c.Next)
	}
}

// TestDecodeRawMixedFormats: a record set that changes format (a log
// written before and after a message format upgrade) is decoded up to the
// change, in either order, and the position stops at the first entry of
// the other format, which the next fetch starts with. kafka-go's decoder
// never sees a v2 batch (it allocates by a batch's record count).
func TestDecodeRawMixedFormats(t *testing.T) {
	rs := protocol.RecordSet{Version: 1, Records: protocol.NewRecordReader(
		protocol.Record{Offset: 0, Value: protocol.NewBytes([]byte("old0"))},
		protocol.Record{Offset: 1, Value: protocol.NewBytes([]byte("old1"))},
	)}
	var buf bytes.Buffer
	if _, err := rs.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	legacy := buf.Bytes()[4:]
	v2 := testBatch{base: 2, firstTime: 1, producerID: -1, records: []testRecord{{value: []byte("new2")}, {offsetDelta: 1, value: []byte("new3")}}}.encode(t)
	// A v2 batch claiming 2^31-1 records after the legacy set: decoding it
	// with kafka-go would allocate ~150 GB.
	huge := slices.Clone(v2)
	binary.BigEndian.PutUint32(huge[batchRecordCount:], math.MaxInt32)
	binary.BigEndian.PutUint32(huge[batchCRC:], crc32.Checksum(huge[batchAttributes:], castagnoli))
	for _, tc := range []struct {
		name string
		set  []byte
		want []string
		next int64
	}{
		{"legacy then v2", slices.Concat(legacy, v2), []string{"old0", "old1"}, 2},
		{"legacy then a v2 batch with a huge count", slices.Concat(legacy, huge), []string{"old0", "old1"}, 2},
		{"v2 then legacy", slices.Concat(v2, legacy), []string{"new2", "new3"}, 4},
	} {
		c := Chunk{}
		complete, _, err := decodeRaw(&c, tc.set, nil, 0, true, sizeHint{})
		if err != nil || !complete {
			t.Fatalf("%s: complete %v, err %v", tc.name, complete, err)
		}
		var got []string
		for _, r := range c.Records {
			got = append(got, string(r.Value))
		}
		if !slices.Equal(got, tc.want) || c.Next != tc.next {
			t.Fatalf("%s: records %q, next %d; want %q, next %d", tc.name, got, c.Next, tc.want, tc.next)
		}
	}
}

// TestDecodeRawStopsBeforeBadBatch: a batch that does not decode (here a
// CRC mismatch) after good ones ends the chunk before it, without an
// error: the good batches' records are handed over and the position is
// the bad batch's offset, where the next fetch fails with it.
func TestDecodeRawStopsBeforeBadBatch(t *testing.T) {
	good := testBatch{base: 0, firstTime: 1, producerID: -1, records: []testRecord{{value: []byte("a")}, {offsetDelta: 1, value: []byte("b")}}}.encode(t)
	bad := testBatch{base: 2, firstTime: 1, producerID: -1, records: []testRecord{{value: []byte("c")}, {offsetDelta: 1, value: []byte("d")}}}.encode(t)
	bad[len(bad)-1] ^= 0xff // the CRC no longer matches
	set := slices.Concat(good, bad)
	c := Chunk{}
	complete, _, err := decodeRaw(&c, set, nil, 0, true, sizeHint{})
	if err != nil || !complete || len(c.Records) != 2 || string(c.Records[1].Value) != "b" || c.Next != 2 {
		t.Fatalf("good then bad: complete %v, err %v, %d records, next %d; want the good batch's 2 records, next 2", complete, err, len(c.Records), c.Next)
	}
	c = Chunk{Next: 2}
	if _, _, err := decodeRaw(&c, bad, nil, 2, true, sizeHint{}); err == nil || !strings.Contains(err.Error(), "offset 2") {
		t.Fatalf("the bad batch alone: err %v, want its CRC mismatch at offset 2", err)
	}
}

// TestDecodeRawPartialOnly: a response holding only the start of a batch
// is an error (brokers return the first batch whole, so fetching again
// would return the same), not an empty chunk that leaves the partition
// silently where it is.
func TestDecodeRawPartialOnly(t *testing.T) {
	b := testBatch{base: 3, firstTime: 1, producerID: -1, records: []testRecord{{key: []byte("k"), value: []byte("value")}}}.encode(t)
	for _, cut := range []int{5, batchMagic + 1, len(b) - 1} {
		c := Chunk{Next: 3}
		_, _, err := decodeRaw(&c, b[:cut], nil, 3, false, sizeHint{})
		if !errors.Is(err, errPartialOnly) || c.Next != 3 || len(c.Records) != 0 {
			t.Fatalf("%d of %d bytes: err %v, next %d, %d records", cut, len(b), err, c.Next, len(c.Records))
		}
	}
}

// FuzzDecodeRaw: any bytes a broker (or a producer that wrote them)
// could send decode to an error or to records in ascending offset order
// at or after the start, below the position, with no negative gap count;
// never a panic. The batches' CRCs are recomputed first, so that the
// fuzzer reaches the records instead of stopping at the checksum.
func FuzzDecodeRaw(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 16 {
		set, _, _, _ := randomSet(f, rng)
		f.Add(set, uint16(rng.IntN(200)), true)
	}
	f.Fuzz(func(t *testing.T, set []byte, start16 uint16, committed bool) {
		for rest := set; len(rest) > batchHeaderSize; {
			n := batchPrefix + int(int32(binary.BigEndian.Uint32(rest[batchLength:])))
			if n < batchHeaderSize || n > len(rest) {
				break
			}
			binary.BigEndian.PutUint32(rest[batchCRC:], crc32.Checksum(rest[batchAttributes:n], castagnoli))
			rest = rest[n:]
		}
		start := int64(start16)
		aborted := []fetchapi.ResponseTransaction{{ProducerID: 1, FirstOffset: 0}}
		c := Chunk{Next: start}
		_, _, err := decodeRaw(&c, set, aborted, start, committed, sizeHint{})
		if err != nil {
			return
		}
		prev := start - 1
		for _, r := range c.Records {
			if r.Offset <= prev {
				t.Fatalf("record at offset %d after %d (start %d)", r.Offset, prev, start)
			}
			prev = r.Offset
		}
		if prev >= c.Next || c.Next < start || c.Gaps < 0 {
			t.Fatalf("position %d, last record %d, start %d, gaps %d", c.Next, prev, start, c.Gaps)
		}
	})
}

// TestDecodeRawLogAppendTime: a batch of a topic with
// message.timestamp.type=LogAppendTime gives every record the broker's
// append time (the batch's maximum timestamp), not the producer's; other
// batches keep the records' own.
func TestDecodeRawLogAppendTime(t *testing.T) {
	recs := []testRecord{{offsetDelta: 0, timeDelta: 0, value: []byte("a")}, {offsetDelta: 1, timeDelta: 250, value: []byte("b")}}
	const producerTime, appendTime = 1_700_000_000_000, 1_700_000_090_123
	set := testBatch{base: 0, firstTime: producerTime, producerID: -1, records: recs,
		attrs: attrLogAppendTime, appendTime: appendTime}.encode(t)
	set = append(set, testBatch{base: 2, firstTime: producerTime, producerID: -1, records: recs[:1]}.encode(t)...)
	c := Chunk{}
	if _, _, err := decodeRaw(&c, set, nil, 0, true, sizeHint{}); err != nil {
		t.Fatal(err)
	}
	if len(c.Records) != 3 {
		t.Fatalf("%d records, want 3", len(c.Records))
	}
	for i, want := range []int64{appendTime, appendTime, producerTime} {
		if got := c.Records[i].Time.UnixMilli(); got != want {
			t.Fatalf("record %d: time %d, want %d", i, got, want)
		}
	}
}
