package fetcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

const topic = "t"

func newCluster(t *testing.T) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatalf("starting kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// producer is a kgo client (a client this project did not write) writing to
// partition 0 of topic.
func producer(t *testing.T, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	opts = append([]kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
	}, opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatalf("kgo client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func produce(t *testing.T, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("producing: %v", err)
	}
}

func rec(v string) *kgo.Record { return &kgo.Record{Key: []byte("k-" + v), Value: []byte(v)} }

// txn produces vals in one transaction of cl and ends it.
func txn(t *testing.T, cl *kgo.Client, commit bool, vals ...string) {
	t.Helper()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatalf("begin: %v", err)
	}
	for _, v := range vals {
		produce(t, cl, rec(v))
	}
	end(t, cl, commit)
}

func end(t *testing.T, cl *kgo.Client, commit bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatalf("end transaction: %v", err)
	}
}

// readAll fetches from offset until the position reaches want (or the
// deadline) and returns the records and the summed chunk counters.
func readAll(t *testing.T, brokers []string, iso Isolation, offset, want int64, maxBytes int) ([]kafka.Message, Chunk) {
	t.Helper()
	p, err := New(Config{Transport: &kafka.Transport{}, Brokers: brokers, Topic: topic, Isolation: iso,
		MaxBytes: maxBytes, MaxWait: 50 * time.Millisecond}, offset)
	if err != nil {
		t.Fatal(err)
	}
	var out []kafka.Message
	var sum Chunk
	deadline := time.Now().Add(20 * time.Second)
	for p.Offset() < want {
		if time.Now().After(deadline) {
			t.Fatalf("position %d after 20s, want %d", p.Offset(), want)
		}
		c, err := p.Fetch(context.Background())
		if err != nil {
			t.Fatalf("fetch at %d: %v", p.Offset(), err)
		}
		if c.Next < offset {
			t.Fatalf("Next %d below the start %d", c.Next, offset)
		}
		for _, m := range c.Records {
			if m.Offset < offset {
				t.Fatalf("record at %d below the start %d", m.Offset, offset)
			}
		}
		out = append(out, c.Records...)
		sum.Markers += c.Markers
		sum.Aborted += c.Aborted
		sum.Gaps += c.Gaps
		sum.HighWatermark, sum.LastStableOffset, sum.Next = c.HighWatermark, c.LastStableOffset, c.Next
	}
	return out, sum
}

func valuesOf(ms []kafka.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m.Value)
	}
	return out
}

func TestNullAndEmptyKeptApart(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t)
	cl := producer(t, brokers)
	type hv = []byte
	recs := []*kgo.Record{
		{Key: nil, Value: nil},
		{Key: []byte{}, Value: []byte{}},
		{Key: []byte("k"), Value: []byte("v"), Headers: []kgo.RecordHeader{{Key: "null", Value: nil}, {Key: "empty", Value: hv{}}, {Key: "x", Value: hv("1")}}},
		{Key: nil, Value: []byte{}, Headers: []kgo.RecordHeader{{Key: "empty", Value: hv{}}, {Key: "null", Value: nil}}},
		{Key: []byte{}, Value: nil},
	}
	produce(t, cl, recs...)
	got, _ := readAll(t, brokers, ReadCommitted, 0, int64(len(recs)), 0)
	if len(got) != len(recs) {
		t.Fatalf("got %d records, want %d", len(got), len(recs))
	}
	same := func(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }
	for i, want := range recs {
		g := got[i]
		if !same(g.Key, want.Key) || !same(g.Value, want.Value) {
			t.Errorf("record %d: key %#v value %#v, want key %#v value %#v", i, g.Key, g.Value, want.Key, want.Value)
		}
		if len(g.Headers) != len(want.Headers) {
			t.Errorf("record %d: %d headers, want %d", i, len(g.Headers), len(want.Headers))
			continue
		}
		for j, h := range want.Headers {
			if g.Headers[j].Key != h.Key || !same(g.Headers[j].Value, h.Value) {
				t.Errorf("record %d header %d: %q=%#v, want %q=%#v", i, j, g.Headers[j].Key, g.Headers[j].Value, h.Key, h.Value)
			}
		}
	}
}

func TestCompressionCodecs(t *testing.T) {
	t.Parallel()
	for _, codec := range []kgo.CompressionCodec{kgo.NoCompression(), kgo.GzipCompression(), kgo.SnappyCompression(), kgo.Lz4Compression(), kgo.ZstdCompression()} {
		brokers := newCluster(t)
		cl := producer(t, brokers, kgo.ProducerBatchCompression(codec))
		ts := time.UnixMilli(1_700_000_000_123)
		var recs []*kgo.Record
		for i := range 200 {
			recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "key-%d", i), Value: bytes.Repeat([]byte{byte('a' + i%26)}, i),
				Timestamp: ts.Add(time.Duration(i) * time.Millisecond), Headers: []kgo.RecordHeader{{Key: "h", Value: fmt.Appendf(nil, "%d", i)}}})
		}
		produce(t, cl, recs...)
		got, _ := readAll(t, brokers, ReadCommitted, 0, int64(len(recs)), 0)
		if len(got) != len(recs) {
			t.Fatalf("codec %v: got %d records, want %d", codec, len(got), len(recs))
		}
		for i, g := range got {
			w := recs[i]
			if g.Offset != int64(i) || string(g.Key) != string(w.Key) || !bytes.Equal(g.Value, w.Value) ||
				!g.Time.Equal(w.Timestamp) || len(g.Headers) != 1 || string(g.Headers[0].Value) != string(w.Headers[0].Value) {
				t.Fatalf("codec %v record %d: got offset %d key %q value len %d time %v headers %v", codec, i, g.Offset, g.Key, len(g.Value), g.Time, g.Headers)
			}
			if i == 0 && g.Value == nil {
				t.Fatalf("codec %v: empty value read as null", codec)
			}
		}
	}
}

// TestReadCommitted: two transactional producers interleaved on one
// partition with a plain producer, committed, aborted and
// aborted-then-retried transactions. From every start offset, read
// committed returns exactly the committed and plain records at or after it
// (what recovery replay relies on), never a marker; read uncommitted returns
// every data record.
func TestReadCommitted(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t)
	a := producer(t, brokers, kgo.TransactionalID("a"))
	b := producer(t, brokers, kgo.TransactionalID("b"))
	plain := producer(t, brokers)

	var committed, all []string
	commit := func(cl *kgo.Client, ok bool, vals ...string) {
		txn(t, cl, ok, vals...)
		all = append(all, vals...)
		if ok {
			committed = append(committed, vals...)
		}
	}
	commit(a, true, "a1", "a2")
	commit(a, false, "a3", "a4")
	commit(a, true, "a3", "a4") // the retry of the aborted attempt, same keys
	produce(t, plain, rec("p1"))
	all, committed = append(all, "p1"), append(committed, "p1")

	// Interleaved: a and b both open, records alternating; b aborts.
	if err := a.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := b.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		va, vb := fmt.Sprintf("ia%d", i), fmt.Sprintf("ib%d", i)
		produce(t, a, rec(va))
		produce(t, b, rec(vb))
		produce(t, plain, rec("ip"+fmt.Sprint(i)))
		all = append(all, va, vb, "ip"+fmt.Sprint(i))
	}
	end(t, b, false)
	end(t, a, true)
	// committed order is offset order: a's and the plain records interleaved.
	for i := range 3 {
		committed = append(committed, fmt.Sprintf("ia%d", i), "ip"+fmt.Sprint(i))
	}
	commit(b, false, "b9")
	commit(b, true, "b10")

	hwm := listEnd(t, brokers)
	got, sum := readAll(t, brokers, ReadCommitted, 0, hwm, 0)
	if g := valuesOf(got); fmt.Sprint(g) != fmt.Sprint(committed) {
		t.Fatalf("read committed:\n got %v\nwant %v", g, committed)
	}
	const markers = 7 // one per ended transaction
	if sum.Markers != markers {
		t.Errorf("markers passed over = %d, want %d", sum.Markers, markers)
	}
	if n := int64(len(committed)) + int64(sum.Markers) + int64(sum.Aborted); n != hwm {
		t.Errorf("records %d + markers %d + aborted %d = %d offsets, want the high-water mark %d", len(committed), sum.Markers, sum.Aborted, n, hwm)
	}

	gotU, sumU := readAll(t, brokers, ReadUncommitted, 0, hwm, 0)
	if g := valuesOf(gotU); fmt.Sprint(g) != fmt.Sprint(all) {
		t.Fatalf("read uncommitted:\n got %v\nwant %v", g, all)
	}
	if sumU.Markers != markers || sumU.Aborted != 0 {
		t.Errorf("read uncommitted passed over %d markers and %d aborted, want %d and 0", sumU.Markers, sumU.Aborted, markers)
	}

	// From every offset, and in fetches of one batch at a time.
	for start := int64(0); start < hwm; start++ {
		var want []string
		for _, m := range got {
			if m.Offset >= start {
				want = append(want, string(m.Value))
			}
		}
		g, _ := readAll(t, brokers, ReadCommitted, start, hwm, 1)
		if fmt.Sprint(valuesOf(g)) != fmt.Sprint(want) {
			t.Fatalf("read committed from %d:\n got %v\nwant %v", start, valuesOf(g), want)
		}
	}
}

// TestOpenTransactionHoldsAtLSO: read committed stops at an open
// transaction, also for records written after it by others, and goes on
// once it ends.
func TestOpenTransactionHoldsAtLSO(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		brokers := newCluster(t)
		a := producer(t, brokers, kgo.TransactionalID("a"))
		plain := producer(t, brokers)
		produce(t, plain, rec("before"))
		if err := a.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		produce(t, a, rec("open"))
		produce(t, plain, rec("after"))

		p, err := New(Config{Transport: &kafka.Transport{}, Brokers: brokers, Topic: topic, Isolation: ReadCommitted, MaxWait: 50 * time.Millisecond}, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		var last Chunk
		for range 5 {
			c, err := p.Fetch(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, valuesOf(c.Records)...)
			last = c
		}
		if fmt.Sprint(got) != "[before]" || p.Offset() != 1 {
			t.Fatalf("while open: read %v up to %d, want [before] up to 1", got, p.Offset())
		}
		if last.LastStableOffset != 1 || last.HighWatermark != 3 {
			t.Errorf("while open: LSO %d HWM %d, want 1 and 3", last.LastStableOffset, last.HighWatermark)
		}
		end(t, a, commit)
		rest, sum := readAll(t, brokers, ReadCommitted, 1, 4, 0)
		want := "[after]"
		if commit {
			want = "[open after]"
		}
		if fmt.Sprint(valuesOf(rest)) != want || sum.LastStableOffset != sum.HighWatermark {
			t.Errorf("after the end (commit=%v): %v, LSO %d HWM %d; want %s and LSO = HWM", commit, valuesOf(rest), sum.LastStableOffset, sum.HighWatermark, want)
		}
	}
}

func TestOffsetOutOfRange(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t)
	produce(t, producer(t, brokers), rec("x"))
	p, err := New(Config{Transport: &kafka.Transport{}, Brokers: brokers, Topic: topic, MaxWait: 50 * time.Millisecond}, 5)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Fetch(context.Background())
	var oe *OffsetError
	if !errorsAs(err, &oe) || oe.Offset != 5 {
		t.Fatalf("fetch beyond the end: %v, want an *OffsetError at 5", err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if _, err := New(Config{}, 0); err == nil {
		t.Error("empty config accepted")
	}
	if _, err := New(Config{Transport: &kafka.Transport{}, Brokers: []string{"127.0.0.1:1"}, Topic: "t"}, -2); err == nil {
		t.Error("negative start offset accepted")
	}
}

func listEnd(t *testing.T, brokers []string) int64 {
	t.Helper()
	cl := &kafka.Client{Addr: kafka.TCP(brokers...)}
	res, err := cl.ListOffsets(context.Background(), &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: {kafka.LastOffsetOf(0)}}})
	if err != nil {
		t.Fatal(err)
	}
	return res.Topics[topic][0].LastOffset
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }
