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
// 220-byte values, no headers, about 1 MiB) decoded as one Fetch does
// after the response arrived: "kafka-go" as the fetcher did before it
// decoded batches itself (kafka-go's RecordSet, then keys and values
// copied into arenas), "own" as it does now (the record set's bytes read
// into one buffer, as kafka-go's decoder hands them to RawRecords, and
// decoded in place).
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
	var size [4]byte
	binary.BigEndian.PutUint32(size[:], uint32(len(raw)))
	sized := append(size[:], raw...)
	// each decodes the record set once into c, with the hint's sizes.
	run := func(b *testing.B, each func(c *Chunk, hint sizeHint) (int, error)) {
		b.ReportAllocs()
		b.SetBytes(int64(len(raw)))
		var hint sizeHint
		for b.Loop() {
			c := Chunk{}
			copied, err := each(&c, hint.margin())
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
	b.Run("kafka-go", func(b *testing.B) {
		run(b, func(c *Chunk, hint sizeHint) (int, error) {
			var rs protocol.RecordSet
			if _, err := rs.ReadFrom(bytes.NewReader(sized)); err != nil {
				return 0, err
			}
			return decode(c, &fetchapi.ResponsePartition{RecordSet: rs}, 0, true, hint)
		})
	})
	b.Run("own", func(b *testing.B) {
		run(b, func(c *Chunk, hint sizeHint) (int, error) {
			var rr RawRecords
			if _, err := rr.ReadFrom(bytes.NewReader(sized)); err != nil {
				return 0, err
			}
			_, copied, err := decodeRaw(c, rr.B, nil, 0, true, hint)
			return copied, err
		})
	})
}
