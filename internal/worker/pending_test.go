package worker

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/bloomgate/bloomgate/internal/producer"
)

func srcMsgs(p, n int) *recordBuilder {
	rb := new(recordBuilder)
	rb.reset(p, testProvenance(p), false)
	for i := range n {
		rb.add(tOut, &kafka.Message{Offset: int64(i), Value: []byte("v")}, "")
	}
	return rb
}

// writeAll writes the records of rb.
func (o *output) writeAll(ctx context.Context, p int, rb *recordBuilder) error {
	return o.write(ctx, p, producer.None, testProvenance(p), rb.recs, rb.arena)
}

// testOutput is the output of a worker writing to tOut (4 partitions) on
// brokers.
func testOutput(t *testing.T, brokers []string) *output {
	t.Helper()
	cfg := testConfig(brokers).WithDefaults()
	prod, err := producer.New(producer.Config{Transport: cfg.Transport, Brokers: brokers, Timeout: cfg.WriteTimeout})
	if err != nil {
		t.Fatal(err)
	}
	return newOutput(cfg, prod, map[string]int{tOut: 4}, func(string) int64 { return DefaultMaxBatchBytes })
}

// TestOutputPendingAcknowledged: records of a completed write are not
// pending, and the write's positions are acknowledged.
func TestOutputPendingAcknowledged(t *testing.T) {
	t.Parallel()
	brokers := newClusterWith(t, kfake.SeedTopics(4, tOut))
	o := testOutput(t, brokers)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := o.writeAll(ctx, 1, srcMsgs(1, 50)); err != nil {
		t.Fatalf("write: %v", err)
	}
	if !o.waitIdle(1, 10*time.Millisecond) {
		t.Fatalf("after an acknowledged write, %d records of partition 1 are still pending", o.pending[1])
	}
	if got := o.ackedOffset(tOut, 1); got != 50 {
		t.Fatalf("acked offset of %s/1: %d, want 50", tOut, got)
	}
}

// TestOutputPendingFailed: a write that failed (no broker) leaves nothing
// pending, so the recovery that follows does not wait for records that
// cannot land.
func TestOutputPendingFailed(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there any more
	o := testOutput(t, []string{addr})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := o.writeAll(ctx, 0, srcMsgs(0, 10)); err == nil {
		t.Fatal("write to a closed port succeeded")
	}
	if !o.waitIdle(0, 10*time.Millisecond) {
		t.Fatalf("records of a failed write are counted as pending: %d", o.pending[0])
	}
}

// TestOutputPendingInFlight: records stay pending while their write waits
// for a broker that does not answer, and waitIdle reports a timeout; once
// the write gave up, nothing is pending and other partitions were never
// blocked.
func TestOutputPendingInFlight(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // read nothing, answer nothing
		}
	}()
	o := testOutput(t, []string{ln.Addr().String()})
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		done <- o.writeAll(ctx, 3, srcMsgs(3, 20))
	}()
	waitFor(t, 5*time.Second, "20 records in flight", func() bool {
		o.pmu.Lock()
		defer o.pmu.Unlock()
		return o.pending[3] == 20
	})
	if o.waitIdle(3, 50*time.Millisecond) {
		t.Fatal("waitIdle returned true with 20 records in flight")
	}
	if !o.waitIdle(2, time.Millisecond) {
		t.Fatal("another partition is blocked by partition 3's records")
	}
	if err := <-done; err == nil {
		t.Fatal("a write to a broker that never answers succeeded")
	}
	if !o.waitIdle(3, time.Second) {
		t.Fatalf("waitIdle timed out after the write returned: %d pending", o.pending[3])
	}
}

// TestOutputCutsBatches: a write larger than writeBatchBytes goes out in
// several produce requests, each batch cut at writeBatchBytes, in input
// order, one in flight at a time; a record above writeBatchBytes and within
// the topic's bound goes in a batch of its own instead of being refused.
func TestOutputCutsBatches(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(4, tOut))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	type sent struct {
		size, records int
		first         byte // the first record's value's first byte
	}
	var mu sync.Mutex
	var reqs []sent
	c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, rt := range kr.(*kmsg.ProduceRequest).Topics {
			for _, rp := range rt.Partitions {
				var b kmsg.RecordBatch
				if err := b.ReadFrom(rp.Records); err != nil {
					t.Errorf("produce request: %v", err)
					continue
				}
				var r kmsg.Record
				if err := r.ReadFrom(b.Records); err != nil {
					t.Errorf("first record: %v", err)
					continue
				}
				mu.Lock()
				reqs = append(reqs, sent{size: len(rp.Records), records: int(b.NumRecords), first: r.Value[0]})
				mu.Unlock()
			}
		}
		return nil, nil, false
	})
	o := testOutput(t, c.ListenAddrs())

	// 30 records of 40 KiB (~1.2 MB) with one of 300 KiB as the 11th; the
	// value's first byte is the record's number.
	rb := new(recordBuilder)
	rb.reset(1, testProvenance(1), false)
	for i := range 30 {
		n := 40 << 10
		if i == 10 {
			n = 300 << 10
		}
		v := bytes.Repeat([]byte{byte(i)}, n)
		rb.add(tOut, &kafka.Message{Offset: int64(i), Value: v}, "")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := o.writeAll(ctx, 1, rb); err != nil {
		t.Fatalf("write: %v", err)
	}
	if got := o.ackedOffset(tOut, 1); got != 30 {
		t.Fatalf("acked offset of %s/1: %d, want 30", tOut, got)
	}
	mu.Lock()
	defer mu.Unlock()
	// Record i of the write is the i-th record sent; the 300 KiB one alone.
	next := 0
	for k, r := range reqs {
		if int(r.first) != next {
			t.Errorf("request %d starts with record %d, want %d (input order)", k, r.first, next)
		}
		if r.first == 10 && r.records != 1 {
			t.Errorf("request %d: the 300 KiB record shares its batch with %d others", k, r.records-1)
		}
		if r.records > 1 && r.size > writeBatchBytes {
			t.Errorf("request %d: a batch of %d records is %d bytes, over writeBatchBytes (%d)", k, r.records, r.size, writeBatchBytes)
		}
		next += r.records
	}
	if next != 30 {
		t.Errorf("%d records sent in %d requests, want 30", next, len(reqs))
	}
	// 29 × 40 KiB in batches of at most 6 (6 × ~40 KiB < 256 KiB < 7 ×),
	// cut before and after the large one: 10 = 6+4, 19 = 6+6+6+1.
	if len(reqs) != 7 {
		t.Errorf("%d produce requests, want 7: %+v", len(reqs), reqs)
	}
}
