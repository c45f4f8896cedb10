package fetcher

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go/protocol"
	fetchapi "github.com/segmentio/kafka-go/protocol/fetch"
)

// BenchmarkDecode: a fetched record set of 4000 records (16-byte keys,
// 220-byte values, no headers, about 1 MiB) decoded by kafka-go and then
// by the fetcher, as one Fetch does after the response arrived.
func BenchmarkDecode(b *testing.B) {
	recs := make([]protocol.Record, 4000)
	t0 := time.Now()
	for i := range recs {
		recs[i] = protocol.Record{Time: t0, Key: protocol.NewBytes([]byte("order-" + strconv.Itoa(1e9+i))),
			Value: protocol.NewBytes(bytes.Repeat([]byte("v"), 220))}
	}
	var enc bytes.Buffer
	// kafka-go cuts batches at the Writer's BatchSize; take 1000 a batch.
	for i := 0; i < len(recs); i += 1000 {
		rs := protocol.RecordSet{Version: 2, Records: protocol.NewRecordReader(recs[i : i+1000]...)}
		var one bytes.Buffer
		if _, err := rs.WriteTo(&one); err != nil {
			b.Fatal(err)
		}
		batch := one.Bytes()[4:]                     // without the record set's size
		binary.BigEndian.PutUint64(batch, uint64(i)) // the batch's base offset
		enc.Write(batch)
	}
	raw := enc.Bytes()
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	var hint sizeHint
	for b.Loop() {
		var size [4]byte
		size[0], size[1], size[2], size[3] = byte(len(raw)>>24), byte(len(raw)>>16), byte(len(raw)>>8), byte(len(raw))
		var rs protocol.RecordSet
		if _, err := rs.ReadFrom(bytes.NewReader(append(size[:], raw...))); err != nil {
			b.Fatal(err)
		}
		c := Chunk{}
		copied, err := decode(&c, &fetchapi.ResponsePartition{RecordSet: rs}, 0, true, hint.margin())
		if err != nil {
			b.Fatal(err)
		}
		if len(c.Records) != len(recs) {
			b.Fatalf("%d records, want %d", len(c.Records), len(recs))
		}
		hint.observe(len(c.Records), copied)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
}
