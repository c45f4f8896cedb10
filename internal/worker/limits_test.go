package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// sizedMessages are records of many shapes: null and empty keys and
// values, headers with null, empty and long values, lengths around the
// varint boundaries.
func sizedMessages() []kafka.Message {
	var out []kafka.Message
	for _, kl := range []int{-1, 0, 1, 63, 64, 8191, 8192} {
		for _, vl := range []int{-1, 0, 100, 1 << 14, 1<<20 + 3} {
			for _, nh := range []int{0, 1, 3, 64} {
				m := kafka.Message{Topic: tOut, Time: time.Unix(1_700_000_000, 0)}
				if kl >= 0 {
					m.Key = bytes.Repeat([]byte("k"), kl)
				}
				if vl >= 0 {
					m.Value = bytes.Repeat([]byte("v"), vl)
				}
				for h := range nh {
					var v []byte
					if h%3 != 0 {
						v = bytes.Repeat([]byte("h"), h*7)
					}
					m.Headers = append(m.Headers, kafka.Header{Key: "h" + strconv.Itoa(h), Value: v})
				}
				out = append(out, m)
			}
		}
	}
	return out
}

// TestWriterSizeIsKafkaGos: writerSize is the size kafka-go's Writer
// compares with BatchBytes: a record of exactly BatchBytes passes its
// check, one byte more is refused before anything is sent.
func TestWriterSizeIsKafkaGos(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1)
	for i, m := range sizedMessages() {
		size := writerSize(&m)
		for _, tc := range []struct {
			batchBytes int64
			refused    bool
		}{{size, false}, {size - 1, true}} {
			w := &kafka.Writer{Addr: kafka.TCP(brokers...), BatchBytes: tc.batchBytes, BatchTimeout: time.Millisecond,
				RequiredAcks: kafka.RequireAll, MaxAttempts: 1}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := w.WriteMessages(ctx, m)
			cancel()
			w.Close()
			var tooLarge kafka.MessageTooLargeError
			if got := errors.As(err, &tooLarge); got != tc.refused {
				t.Fatalf("record %d (key %d, value %d bytes, %d headers), size %d, BatchBytes %d: refused %v (%v), want %v",
					i, len(m.Key), len(m.Value), len(m.Headers), size, tc.batchBytes, got, err, tc.refused)
			}
		}
	}
}

// TestBoundFitsTheBroker: a batch bounded by bound() is taken by a broker
// enforcing max.message.bytes — one record of exactly the bound, and many
// small records whose timestamps lie far apart — for Kafka's default
// limit and small ones.
func TestBoundFitsTheBroker(t *testing.T) {
	t.Parallel()
	for _, limit := range []int64{4096, 65536, 1048588} {
		t.Run(strconv.FormatInt(limit, 10), func(t *testing.T) {
			t.Parallel()
			brokers, _ := poisonCluster(t, 1, map[string]map[string]string{tOut: {"max.message.bytes": strconv.FormatInt(limit, 10)}})
			l := &outputLimits{maxBatchBytes: DefaultMaxBatchBytes, topics: [3]string{tOut}}
			l.cur.Store(&[3]int64{limit})
			bound := l.bound(tOut)
			w := &kafka.Writer{Addr: kafka.TCP(brokers...), BatchBytes: bound, BatchTimeout: 50 * time.Millisecond,
				RequiredAcks: kafka.RequireAll, MaxAttempts: 1, BatchSize: 100_000}
			defer w.Close()
			hs := []kafka.Header{{Key: HeaderSrcPartition, Value: []byte("0")}, {Key: HeaderSrcOffset, Value: []byte("123456789")}}
			one := kafka.Message{Topic: tOut, Key: []byte("k"), Headers: hs, Time: time.Now()}
			one.Value = make([]byte, bound-writerSize(&one))
			if writerSize(&one) != bound {
				t.Fatalf("record of %d bytes, want %d", writerSize(&one), bound)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := w.WriteMessages(ctx, one); err != nil {
				t.Fatalf("one record of the bound (%d) for max.message.bytes %d: %v", bound, limit, err)
			}
			var many []kafka.Message
			for i := range min(4*limit/50, 25_000) {
				ts := time.Unix(0, 0)
				if i%2 == 1 {
					ts = time.Date(2400, 1, 1, 0, 0, 0, 0, time.UTC)
				}
				many = append(many, kafka.Message{Topic: tOut, Key: []byte(fmt.Sprint(i)), Value: []byte("v"), Headers: hs, Time: ts})
			}
			if err := w.WriteMessages(ctx, many...); err != nil {
				t.Fatalf("%d small records in batches of at most %d bytes for max.message.bytes %d: %v", len(many), bound, limit, err)
			}
		})
	}
}
