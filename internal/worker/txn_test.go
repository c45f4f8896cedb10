package worker

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Transactional upstreams and null vs empty, produced and read back with
// kgo (franz-go), a client this project did not write.

func kgoClient(t *testing.T, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(tIn),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0)}, opts...)...)
	if err != nil {
		t.Fatalf("kgo: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func kgoProduce(t *testing.T, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("producing: %v", err)
	}
}

func kgoEnd(t *testing.T, cl *kgo.Client, commit bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatalf("ending transaction: %v", err)
	}
}

// txnRec is a record whose key and value are its name.
func txnRec(name string) *kgo.Record {
	return &kgo.Record{Key: []byte(name), Value: []byte(name), Timestamp: base}
}

// txnLog writes, to partition 0 of the input, committed, aborted,
// aborted-then-retried and interleaved transactions of two producers among
// plain records, and returns the names a read-committed consumer sees, in
// order, and all data records' names.
func txnLog(t *testing.T, brokers []string) (committed, all []string) {
	t.Helper()
	a := kgoClient(t, brokers, kgo.TransactionalID("a"))
	b := kgoClient(t, brokers, kgo.TransactionalID("b"))
	plain := kgoClient(t, brokers)
	txn := func(cl *kgo.Client, commit bool, names ...string) {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			kgoProduce(t, cl, txnRec(n))
		}
		kgoEnd(t, cl, commit)
		all = append(all, names...)
		if commit {
			committed = append(committed, names...)
		}
	}
	txn(a, true, "a1", "a2")
	txn(a, false, "r1", "r2")                        // aborted attempt...
	txn(a, true, "r1", "r2")                         // ...retried with the same keys and committed
	kgoProduce(t, plain, txnRec("p1"), txnRec("a1")) // a1 again: a real duplicate
	all, committed = append(all, "p1", "a1"), append(committed, "p1", "a1")
	if err := a.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := b.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		x, y, z := fmt.Sprint("ia", i), fmt.Sprint("ib", i), fmt.Sprint("ip", i)
		kgoProduce(t, a, txnRec(x))
		kgoProduce(t, b, txnRec(y))
		kgoProduce(t, plain, txnRec(z))
		all = append(all, x, y, z)
		committed = append(committed, x, z)
	}
	kgoEnd(t, b, false)
	kgoEnd(t, a, true)
	txn(b, false, "b1")
	txn(b, true, "b1", "b2")
	return committed, all
}

// firstOccurrences returns the names in order without repeats.
func firstOccurrences(names []string) (first, repeats []string) {
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			repeats = append(repeats, n)
			continue
		}
		seen[n] = true
		first = append(first, n)
	}
	return first, repeats
}

func partitionEnd(t *testing.T, brokers []string, topic string, p int) int64 {
	t.Helper()
	cl := &kafka.Client{Addr: kafka.TCP(brokers...)}
	res, err := cl.ListOffsets(context.Background(), &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: {kafka.LastOffsetOf(p)}}})
	if err != nil {
		t.Fatal(err)
	}
	return res.Topics[topic][0].LastOffset
}

func names(msgs []kafka.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = string(m.Value)
	}
	return out
}

// TestTransactionalInput: read_committed forwards no record of an aborted
// transaction, loses no committed one (an aborted attempt does not make
// its committed retry a duplicate), handles no marker, and commits past
// all of them; read_uncommitted handles every data record but still no
// marker.
func TestTransactionalInput(t *testing.T) {
	t.Parallel()
	for _, iso := range []IsolationLevel{ReadCommitted, ReadUncommitted} {
		t.Run(string(iso), func(t *testing.T) {
			t.Parallel()
			brokers := newCluster(t, 1)
			committed, all := txnLog(t, brokers)
			seenByWorker := committed
			if iso == ReadUncommitted {
				seenByWorker = all
			}
			hwm := partitionEnd(t, brokers, tIn, 0)
			cfg := testConfig(brokers)
			cfg.IsolationLevel = iso
			rw := startWorker(t, cfg, newMemStore(), nil)
			caughtUp(t, rw, map[int]int64{0: hwm})
			rw.stop(t)

			wantOut, wantDup := firstOccurrences(seenByWorker)
			out := readTopic(t, brokers, tOut, 1)[0]
			dups := readTopic(t, brokers, tDup, 1)[0]
			if got := names(out); fmt.Sprint(got) != fmt.Sprint(wantOut) {
				t.Errorf("output\n got %v\nwant %v", got, wantOut)
			}
			if got := names(dups); fmt.Sprint(got) != fmt.Sprint(wantDup) {
				t.Errorf("duplicates\n got %v\nwant %v", got, wantDup)
			}
			consumed, _, _, _, _ := rw.conservation(t)
			markers := rw.metricSum(t, "bloomgate_records_skipped_total")
			t.Logf("%s: %d offsets, %v consumed, %v skipped (markers and aborted records)", iso, hwm, consumed, markers)
			if consumed != float64(len(seenByWorker)) {
				t.Errorf("consumed %v, want %d data records (markers are not events)", consumed, len(seenByWorker))
			}
			if consumed+markers != float64(hwm) {
				t.Errorf("consumed %v + skipped %v != %d offsets", consumed, markers, hwm)
			}
		})
	}
}

// TestOpenTransactionHolds: while an upstream transaction is open, nothing
// at or after its first record is forwarded (also records other producers
// wrote after it), the LSO lag shows it, and everything follows once it
// commits.
func TestOpenTransactionHolds(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1)
	a := kgoClient(t, brokers, kgo.TransactionalID("a"))
	plain := kgoClient(t, brokers)
	kgoProduce(t, plain, txnRec("before"))
	if err := a.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	kgoProduce(t, a, txnRec("open"))
	kgoProduce(t, plain, txnRec("after"))

	rw := startWorker(t, testConfig(brokers), newMemStore(), nil)
	caughtUp(t, rw, map[int]int64{0: 1})
	waitFor(t, 30*time.Second, "LSO lag shown", func() bool {
		return rw.metricSum(t, "bloomgate_partition_lso_lag") == 2
	})
	time.Sleep(500 * time.Millisecond) // several more fetches: still held
	if got := names(readTopic(t, brokers, tOut, 1)[0]); fmt.Sprint(got) != "[before]" {
		t.Fatalf("output while the transaction is open: %v, want [before]", got)
	}
	kgoEnd(t, a, true)
	caughtUp(t, rw, map[int]int64{0: partitionEnd(t, brokers, tIn, 0)})
	rw.stop(t)
	if got := names(readTopic(t, brokers, tOut, 1)[0]); fmt.Sprint(got) != "[before open after]" {
		t.Errorf("output after the commit: %v, want [before open after]", got)
	}
	if lag := rw.metricSum(t, "bloomgate_partition_lso_lag"); lag != 0 {
		t.Errorf("LSO lag after the commit: %v, want 0", lag)
	}
}

// TestTransactionalCrash: a worker killed (kill -9) in the middle of a
// transactional input, with checkpoints and commits landing inside aborted
// transactions; the successor's replay and output scan drop exactly what
// the first pass dropped: nothing aborted forwarded, nothing forwarded
// twice, nothing lost.
func TestTransactionalCrash(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1)
	var committed []string
	a := kgoClient(t, brokers, kgo.TransactionalID("a"))
	plain := kgoClient(t, brokers)
	for i := range 40 {
		if err := a.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		for j := range 10 {
			recs = append(recs, txnRec(fmt.Sprintf("t%d-%d", i, j)))
		}
		kgoProduce(t, a, recs...)
		kgoProduce(t, plain, txnRec(fmt.Sprint("p", i)), txnRec(fmt.Sprint("t", i/2, "-0"))) // a plain record, a repeat
		commit := i%3 != 1
		kgoEnd(t, a, commit)
		if commit {
			for _, r := range recs {
				committed = append(committed, string(r.Value))
			}
		}
		committed = append(committed, fmt.Sprint("p", i), fmt.Sprint("t", i/2, "-0"))
	}
	// The plain repeat of an aborted transaction's first key is a first
	// occurrence; its order relative to the transaction's records is the
	// log's order, which readTopic gives below.
	hwm := partitionEnd(t, brokers, tIn, 0)
	store := newMemStore()
	cfg := testConfig(brokers)
	cfg.BatchSize = 7
	cfg.CommitInterval, cfg.CheckpointInterval = 20*time.Millisecond, 35*time.Millisecond
	cfg.Owner = "crashing"
	var batches atomic.Int64
	crash := make(chan struct{})
	c := startWorker(t, cfg, store, func(w *Worker) {
		w.afterWrite = func(int, int64) {
			if batches.Add(1) == 25 {
				w.halted.Store(true)
				close(crash)
			}
		}
	})
	go func() { <-crash; c.cancel() }()
	<-c.done
	c.done <- nil

	cfg = testConfig(brokers)
	cfg.Owner = "successor"
	s := startWorker(t, cfg, store, nil)
	caughtUp(t, s, map[int]int64{0: hwm})
	s.stop(t)

	// What a read-committed consumer sees, in log order.
	in := readCommittedNames(t, brokers, len(committed))
	wantOut, wantDup := firstOccurrences(in)
	if got := names(readTopic(t, brokers, tOut, 1)[0]); fmt.Sprint(got) != fmt.Sprint(wantOut) {
		t.Errorf("output after the crash\n got %v\nwant %v", got, wantOut)
	}
	if got := names(readTopic(t, brokers, tDup, 1)[0]); fmt.Sprint(got) != fmt.Sprint(wantDup) {
		t.Errorf("duplicates after the crash\n got %v\nwant %v", got, wantDup)
	}
	for _, n := range names(readTopic(t, brokers, tOut, 1)[0]) {
		if strings.HasPrefix(n, "t") && !contains(in, n) {
			t.Errorf("forwarded %s of an aborted transaction", n)
		}
	}
	t.Logf("crashed after 25 batches; successor replayed %v, found %v already written",
		s.metricSum(t, "bloomgate_recovery_replayed_records_total"), s.metricSum(t, "bloomgate_recovery_already_written_records_total"))
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// readCommittedNames reads the first n records of partition 0 of the input
// with kgo at read_committed.
func readCommittedNames(t *testing.T, brokers []string, n int) []string {
	t.Helper()
	cl := kgoClient(t, brokers, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{tIn: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []string
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading the input: %d of %d records: %v", len(out), n, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, string(r.Value)) })
	}
	return out
}

// TestNullAndEmptyRoundTrip: a null and an empty value, key and header value
// come out exactly as they went in, on the output, the duplicates and the
// dead-letter topic: a null value stays a tombstone and an empty value stays
// empty.
func TestNullAndEmptyRoundTrip(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1)
	cl := kgoClient(t, brokers)
	id := func(v string) kgo.RecordHeader { return kgo.RecordHeader{Key: "id", Value: []byte(v)} }
	recs := []*kgo.Record{
		{Key: nil, Value: nil, Headers: []kgo.RecordHeader{id("1")}},
		{Key: []byte{}, Value: []byte{}, Headers: []kgo.RecordHeader{id("2"), {Key: "empty", Value: []byte{}}, {Key: "null", Value: nil}}},
		{Key: []byte("k"), Value: []byte{}, Headers: []kgo.RecordHeader{id("1")}},                    // duplicate of 1
		{Key: []byte{}, Value: nil, Headers: []kgo.RecordHeader{id("2"), {Key: "null", Value: nil}}}, // duplicate of 2
		{Key: nil, Value: []byte{}, Headers: []kgo.RecordHeader{{Key: "empty", Value: []byte{}}}},    // no id: dead letter
		{Key: []byte{}, Value: nil, Headers: []kgo.RecordHeader{{Key: "id", Value: []byte{}}}},       // empty id: dead letter
	}
	for i := range recs {
		recs[i].Timestamp = base.Add(time.Duration(i) * time.Second)
	}
	kgoProduce(t, cl, recs...)
	ex := headerExtractor{}
	rw := startWorkerWith(t, testConfig(brokers), newMemStore(), ex, nil)
	caughtUp(t, rw, map[int]int64{0: int64(len(recs))})
	rw.stop(t)

	read := func(topic string) []*kgo.Record {
		c := kgoClient(t, brokers, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		end := partitionEnd(t, brokers, topic, 0)
		var out []*kgo.Record
		for int64(len(out)) < end {
			fs := c.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("reading %s: %v", topic, ctx.Err())
			}
			out = append(out, fs.Records()...)
		}
		return out
	}
	same := func(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }
	check := func(topic string, got []*kgo.Record, want ...int) {
		if len(got) != len(want) {
			t.Errorf("%s: %d records, want %d", topic, len(got), len(want))
			return
		}
		for i, w := range want {
			g, in := got[i], recs[w]
			if !same(g.Key, in.Key) || !same(g.Value, in.Value) || !g.Timestamp.Equal(in.Timestamp) {
				t.Errorf("%s record %d (input %d): key %#v value %#v time %v; want key %#v value %#v time %v",
					topic, i, w, g.Key, g.Value, g.Timestamp, in.Key, in.Value, in.Timestamp)
			}
			if len(g.Headers) < len(in.Headers) {
				t.Errorf("%s record %d: %d headers, want at least %d", topic, i, len(g.Headers), len(in.Headers))
				continue
			}
			for j, h := range in.Headers {
				if g.Headers[j].Key != h.Key || !same(g.Headers[j].Value, h.Value) {
					t.Errorf("%s record %d header %d: %s=%#v, want %s=%#v", topic, i, j, g.Headers[j].Key, g.Headers[j].Value, h.Key, h.Value)
				}
			}
		}
	}
	check(tOut, read(tOut), 0, 1)
	check(tDup, read(tDup), 2, 3)
	check(tDLQ, read(tDLQ), 4, 5)
}

// headerExtractor keys records by their "id" header.
type headerExtractor struct{}

func (headerExtractor) Extract(dst []byte, _, _ []byte, hs []kafka.Header) ([]byte, error) {
	for _, h := range hs {
		if h.Key == "id" {
			if len(h.Value) == 0 {
				return dst, &KeyError{Reason: "empty"}
			}
			return append(dst, h.Value...), nil
		}
	}
	return dst, &KeyError{Reason: "missing"}
}
