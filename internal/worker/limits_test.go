package worker

import (
	"bytes"
	"context"
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

// fitValue sets m's value so that recordSize(m) is size, if some length
// does (varint lengths can skip a size); it reports whether one does.
func fitValue(m *kafka.Message, size int64) bool {
	m.Value = []byte{}
	n := size - recordSize(m)
	for d := int64(0); d < 8 && n-d >= 0; d++ { // the varints of lengths grow by up to 3 bytes each
		m.Value = make([]byte, n-d)
		if recordSize(m) == size {
			return true
		}
	}
	return false
}

// fitBuilt sets m's value so that the record rb builds of it for tOut is
// size bytes alone, and adds that record to rb; false if none is.
func fitBuilt(rb *recordBuilder, m *kafka.Message, size int64) bool {
	m.Value = []byte{}
	rb.add(tOut, m, "")
	n := size - rb.size(len(rb.recs)-1)
	rb.pop()
	for d := int64(0); d < 8 && n-d >= 0; d++ { // the varints of lengths grow by up to 3 bytes each
		m.Value = make([]byte, n-d)
		rb.add(tOut, m, "")
		if rb.size(len(rb.recs)-1) == size {
			return true
		}
		rb.pop()
	}
	return false
}

// TestRecordSizeIsTheBrokers: recordSize is the size the broker compares
// with max.message.bytes: a record whose batch is exactly the limit is
// taken, one byte more is refused (MESSAGE_TOO_LARGE) — for records of
// many shapes, their timestamps included.
func TestRecordSizeIsTheBrokers(t *testing.T) {
	t.Parallel()
	const limit = 65536
	brokers, _ := poisonCluster(t, 1, map[string]map[string]string{tOut: {"max.message.bytes": strconv.Itoa(limit)}})
	o := testOutput(t, brokers)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tried := 0
	for i, m := range sizedMessages() {
		if len(m.Key) > 8000 || i%3 != 0 {
			continue // keep the test short: a third of the shapes
		}
		m.Time = []time.Time{{}, time.Unix(0, 0), time.UnixMilli(-1), time.Date(2400, 1, 1, 0, 0, 0, 0, time.UTC)}[i%4]
		for _, extra := range []int64{0, 1} {
			if !fitValue(&m, limit+extra) {
				continue
			}
			tried++
			err := o.writeOne(ctx, 0, &m)
			if refused := refusalReason(err) == ReasonRecordTooLarge; refused != (extra == 1) {
				t.Fatalf("record %d (key %d, value %d bytes, %d headers) of size %d, max.message.bytes %d: %v",
					i, len(m.Key), len(m.Value), len(m.Headers), recordSize(&m), limit, err)
			}
		}
	}
	if tried < 20 {
		t.Fatalf("only %d records tried", tried)
	}
}

// TestBoundFitsTheBroker: batches bounded by bound() are taken by a
// broker enforcing max.message.bytes — one record of exactly the bound,
// and many small records whose timestamps lie far apart — for Kafka's
// default limit and small ones.
func TestBoundFitsTheBroker(t *testing.T) {
	t.Parallel()
	for _, limit := range []int64{4096, 65536, 1048588} {
		t.Run(strconv.FormatInt(limit, 10), func(t *testing.T) {
			t.Parallel()
			brokers, _ := poisonCluster(t, 1, map[string]map[string]string{tOut: {"max.message.bytes": strconv.FormatInt(limit, 10)}})
			l := &outputLimits{maxBatchBytes: DefaultMaxBatchBytes, topics: [3]string{tOut}}
			l.cur.Store(&[3]int64{limit})
			bound := l.bound(tOut)
			o := testOutput(t, brokers)
			o.limit = l.bound
			// Records as the worker writes them: the src headers added.
			one := kafka.Message{Offset: 123456789, Key: []byte("k"), Time: time.Now()}
			var rb recordBuilder
			rb.reset(0, testProvenance(0), false)
			if !fitBuilt(&rb, &one, bound) {
				t.Fatalf("no record of %d bytes", bound)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := o.writeAll(ctx, 0, &rb); err != nil {
				t.Fatalf("one record of the bound (%d) for max.message.bytes %d: %v", bound, limit, err)
			}
			n := min(4*limit/50, 25_000)
			many := make([]kafka.Message, n)
			rb.reset(0, testProvenance(0), false)
			for i := range many {
				ts := time.Unix(0, 0)
				if i%2 == 1 {
					ts = time.Date(2400, 1, 1, 0, 0, 0, 0, time.UTC)
				}
				many[i] = kafka.Message{Offset: int64(123456789 + i), Key: []byte(fmt.Sprint(i)), Value: []byte("v"), Time: ts}
				rb.add(tOut, &many[i], "")
			}
			if err := o.writeAll(ctx, 0, &rb); err != nil {
				t.Fatalf("%d small records in batches of at most %d bytes for max.message.bytes %d: %v", len(many), bound, limit, err)
			}
			if got, want := o.ackedOffset(tOut, 0), int64(1+len(many)); got != want {
				t.Fatalf("acked offset %d, want %d", got, want)
			}
		})
	}
}
