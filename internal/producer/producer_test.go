package producer

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// records covers null and empty keys, values and header values, several
// headers, timestamps out of order and before the epoch.
func records() []kafka.Message {
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 123456789, time.UTC)
	return []kafka.Message{
		{Key: []byte("k1"), Value: []byte(`{"order_id":"1"}`), Time: t0,
			Headers: []kafka.Header{{Key: "a", Value: []byte("x")}, {Key: "null", Value: nil}, {Key: "empty", Value: []byte{}}}},
		{Key: nil, Value: []byte{}, Time: t0.Add(-3 * time.Second)},
		{Key: []byte{}, Value: nil, Time: t0.Add(time.Hour)},
		{Key: bytes.Repeat([]byte("k"), 300), Value: bytes.Repeat([]byte("v"), 70000), Time: time.UnixMilli(-1)},
	}
}

// TestBatchMatchesKafkaGo: a batch encodes records byte for byte as
// kafka-go's Writer does (its RecordSet encoder, magic 2, no compression).
func TestBatchMatchesKafkaGo(t *testing.T) {
	msgs := records()
	for n := 1; n <= len(msgs); n++ {
		var b Batch
		var recs []protocol.Record
		for _, m := range msgs[:n] {
			if want, got := b.SizeWith(&m), func() int64 { c := b; c.buf = append([]byte{}, b.buf...); c.Append(&m); return c.Size() }(); want != got {
				t.Fatalf("SizeWith %d, size after Append %d", want, got)
			}
			b.Append(&m)
			recs = append(recs, protocol.Record{Time: m.Time, Key: protocol.NewBytes(m.Key), Value: protocol.NewBytes(m.Value), Headers: m.Headers})
		}
		var want bytes.Buffer
		rs := protocol.RecordSet{Version: 2, Records: protocol.NewRecordReader(recs...)}
		if _, err := rs.WriteTo(&want); err != nil {
			t.Fatal(err)
		}
		if got := b.encoded(); !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("%d records: batch differs from kafka-go's encoding\n got %x\nwant %x", n, got[:min(len(got), 120)], want.Bytes()[:min(want.Len(), 120)])
		}
		if int(b.Size()) != want.Len()-4 {
			t.Fatalf("Size %d, encoded batch %d bytes", b.Size(), want.Len()-4)
		}
		if n == 1 && AloneSize(&msgs[0]) != b.Size() {
			t.Fatalf("AloneSize %d, batch of it alone %d", AloneSize(&msgs[0]), b.Size())
		}
	}
}

// TestAppendExtraHeaders: a record appended with extra headers is encoded,
// sized and bounded exactly as the record whose headers are its own
// followed by the extra ones (null and empty extra values included).
func TestAppendExtraHeaders(t *testing.T) {
	extra := []kafka.Header{{Key: "src", Value: []byte("7")}, {Key: "null", Value: nil}, {Key: "empty", Value: []byte{}}}
	var split, merged Batch
	for i, m := range records() {
		for n := 0; n <= len(extra); n++ {
			whole := m
			whole.Headers = append(append([]kafka.Header{}, m.Headers...), extra[:n]...)
			if got, want := split.SizeWith(&m, extra[:n]...), merged.SizeWith(&whole); got != want {
				t.Fatalf("record %d, %d extra: SizeWith %d, want %d", i, n, got, want)
			}
			if got, want := AloneSize(&m, extra[:n]...), AloneSize(&whole); got != want {
				t.Fatalf("record %d, %d extra: AloneSize %d, want %d", i, n, got, want)
			}
			if got, want := MaxRecordSize(&m, extra[:n]...), MaxRecordSize(&whole); got != want {
				t.Fatalf("record %d, %d extra: MaxRecordSize %d, want %d", i, n, got, want)
			}
			split.Append(&m, extra[:n]...)
			merged.Append(&whole)
		}
	}
	if got, want := split.encoded(), merged.encoded(); !bytes.Equal(got, want) {
		t.Fatalf("batches differ\n got %x\nwant %x", got[:min(len(got), 120)], want[:min(len(want), 120)])
	}
}

// TestPopLast: a batch whose last record was removed and appended again
// with other headers encodes exactly as one built with those headers from
// the start (timestamps of the removed record included), and removes once.
func TestPopLast(t *testing.T) {
	msgs := records()
	extra := []kafka.Header{{Key: "seal", Value: []byte("abc")}}
	for n := 1; n <= len(msgs); n++ {
		var popped, direct Batch
		for i := range msgs[:n] {
			popped.Append(&msgs[i])
			if i < n-1 {
				direct.Append(&msgs[i])
			}
		}
		direct.Append(&msgs[n-1], extra...)
		if !popped.PopLast() || popped.PopLast() {
			t.Fatalf("%d records: PopLast should remove once", n)
		}
		popped.Append(&msgs[n-1], extra...)
		if got, want := popped.encoded(), direct.encoded(); !bytes.Equal(got, want) || popped.Len() != n {
			t.Fatalf("%d records: batch differs after PopLast\n got %x\nwant %x", n, got[:min(len(got), 120)], want[:min(len(want), 120)])
		}
	}
	var empty Batch
	if empty.PopLast() {
		t.Error("PopLast on an empty batch")
	}
}

// TestBatchReuseDoesNotAllocate: once grown, a reset batch takes the same
// records without allocating.
func TestBatchReuseDoesNotAllocate(t *testing.T) {
	msgs := records()[:3]
	var b Batch
	fill := func() {
		b.Reset()
		for i := range msgs {
			b.Append(&msgs[i])
		}
		b.encoded()
	}
	fill()
	if n := testing.AllocsPerRun(100, fill); n != 0 {
		t.Fatalf("%v allocations per batch", n)
	}
}

// TestGrowByMaxRecordSize: the sum of MaxRecordSize bounds the bytes the
// records add to a batch, with timestamps far apart and many records
// before them (large deltas), so that Grow by it allocates once.
func TestGrowByMaxRecordSize(t *testing.T) {
	msgs := records()
	msgs = append(msgs, kafka.Message{Key: []byte("late"), Value: []byte("v"), Time: time.Unix(1<<40, 0)})
	var b Batch
	for range 100000 { // offset deltas of 3 bytes
		b.Append(&kafka.Message{Value: []byte{}})
	}
	need := 0
	for i := range msgs {
		need += MaxRecordSize(&msgs[i])
	}
	start := len(b.buf)
	for i := range msgs {
		b.Append(&msgs[i])
	}
	if added := len(b.buf) - start; added > need {
		t.Fatalf("appending added %d bytes, the sum of MaxRecordSize is %d", added, need)
	}
	for i := range msgs {
		if got, exact := MaxRecordSize(&msgs[i]), AloneSize(&msgs[i])-BatchOverhead; int64(got) < exact || int64(got) > exact+13 {
			t.Errorf("record %d: MaxRecordSize %d, encoded alone %d", i, got, exact)
		}
	}
}

func cluster(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.Ports(0, 0, 0), kfake.NumBrokers(3), kfake.SeedTopics(2, "out")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func readAll(t *testing.T, brokers []string, topic string, partition int32, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d of %d records: %v", len(out), n, err)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

// TestProduceRoundTrip: what a batch writes is what a reader gets back,
// null and empty apart, in order, at the offsets Produce returned.
func TestProduceRoundTrip(t *testing.T) {
	c := cluster(t)
	p, err := New(Config{Transport: &kafka.Transport{}, Brokers: c.ListenAddrs()})
	if err != nil {
		t.Fatal(err)
	}
	msgs := records()
	ctx := context.Background()
	var b Batch
	var bases []int64
	for _, part := range [][]kafka.Message{msgs[:2], msgs[2:]} {
		b.Reset()
		for i := range part {
			b.Append(&part[i])
		}
		base, err := p.Produce(ctx, "out", 1, &b)
		if err != nil {
			t.Fatal(err)
		}
		bases = append(bases, base)
	}
	if bases[0] != 0 || bases[1] != 2 {
		t.Fatalf("base offsets %v, want [0 2]", bases)
	}
	got := readAll(t, c.ListenAddrs(), "out", 1, len(msgs))
	for i, r := range got {
		m := msgs[i]
		if r.Offset != int64(i) || !sameBytes(r.Key, m.Key) || !sameBytes(r.Value, m.Value) || r.Timestamp.UnixMilli() != m.Time.UnixMilli() {
			t.Fatalf("record %d: key %q value %d bytes ts %v; want key %q value %d bytes ts %v", i, r.Key, len(r.Value), r.Timestamp, m.Key, len(m.Value), m.Time)
		}
		if len(r.Headers) != len(m.Headers) {
			t.Fatalf("record %d: %d headers, want %d", i, len(r.Headers), len(m.Headers))
		}
		for j, h := range r.Headers {
			if h.Key != m.Headers[j].Key || !sameBytes(h.Value, m.Headers[j].Value) {
				t.Fatalf("record %d header %d: %q=%q, want %q=%q", i, j, h.Key, h.Value, m.Headers[j].Key, m.Headers[j].Value)
			}
		}
	}
}

// sameBytes compares null and empty apart.
func sameBytes(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

// TestProduceRefused: a refusal of the records is returned as an *Error
// carrying the broker's code, and not retried.
func TestProduceRefused(t *testing.T) {
	c := cluster(t)
	p, err := New(Config{Transport: &kafka.Transport{}, Brokers: c.ListenAddrs(),
		OnRetry: func(string, int, error) { t.Error("a refused batch was retried") }})
	if err != nil {
		t.Fatal(err)
	}
	var b Batch
	m := kafka.Message{Value: bytes.Repeat([]byte("v"), 2<<20), Time: time.Now()}
	b.Append(&m)
	_, err = p.Produce(context.Background(), "out", 0, &b)
	var pe *Error
	if !errors.As(err, &pe) || !errors.Is(err, kafka.MessageSizeTooLarge) {
		t.Fatalf("err %v (%T), want an *Error with MESSAGE_TOO_LARGE", err, err)
	}
}

// TestProduceFollowsLeaderMove: after the partition's leader moved, the
// write that the old leader refuses is sent again to the new one after a
// metadata refresh, well before kafka-go's periodic refresh would have
// found it, and lands once.
func TestProduceFollowsLeaderMove(t *testing.T) {
	c := cluster(t)
	tr := &kafka.Transport{MetadataTTL: time.Hour} // no periodic refresh in this test
	var retries atomic.Int32
	p, err := New(Config{Transport: tr, Brokers: c.ListenAddrs(),
		OnRetry: func(topic string, partition int, err error) { retries.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msgs := records()[:3]
	var b Batch
	for i := range msgs {
		b.Append(&msgs[i])
	}
	if _, err := p.Produce(ctx, "out", 0, &b); err != nil {
		t.Fatal(err)
	}
	leader := c.LeaderFor("out", 0)
	if err := c.MoveTopicPartition("out", 0, (leader+1)%3); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	base, err := p.Produce(ctx, "out", 0, &b)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("write after the leader move took %v", took)
	}
	if base != 3 || retries.Load() == 0 {
		t.Fatalf("base %d after the move (want 3), %d retries (want some: the old leader refuses)", base, retries.Load())
	}
	if got := readAll(t, c.ListenAddrs(), "out", 0, 6); len(got) != 6 {
		t.Fatalf("%d records, want 6", len(got))
	}
}
