package producer

import (
	"bytes"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
)

// benchRecords are 2000 records as the worker writes them: a 16-byte key,
// a 220-byte JSON value and the header it adds (26 bytes, binary).
func benchRecords() []kafka.Message {
	msgs := make([]kafka.Message, 2000)
	t0 := time.Now()
	for i := range msgs {
		msgs[i] = kafka.Message{Key: []byte("order-" + strconv.Itoa(1e9+i)), Value: bytes.Repeat([]byte("v"), 220),
			Time:    t0.Add(time.Duration(i) * time.Millisecond),
			Headers: []kafka.Header{{Key: "bloomgate", Value: bytes.Repeat([]byte{byte(i)}, 26)}}}
	}
	return msgs
}

// BenchmarkBatch: encoding a batch of 2000 records into a reused Batch.
func BenchmarkBatch(b *testing.B) {
	msgs := benchRecords()
	var batch Batch
	b.ReportAllocs()
	for b.Loop() {
		batch.Reset()
		for i := range msgs {
			batch.Append(&msgs[i])
		}
		batch.encoded()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(msgs)), "ns/record")
}

// BenchmarkKafkaGoRecordSet: the same batch through kafka-go's encoder, as
// its Writer encoded it.
func BenchmarkKafkaGoRecordSet(b *testing.B) {
	msgs := benchRecords()
	var buf bytes.Buffer
	b.ReportAllocs()
	for b.Loop() {
		recs := make([]protocol.Record, len(msgs))
		for i, m := range msgs {
			recs[i] = protocol.Record{Time: m.Time, Key: protocol.NewBytes(m.Key), Value: protocol.NewBytes(m.Value), Headers: m.Headers}
		}
		buf.Reset()
		rs := protocol.RecordSet{Version: 2, Records: protocol.NewRecordReader(recs...)}
		if _, err := rs.WriteTo(&buf); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(msgs)), "ns/record")
}
