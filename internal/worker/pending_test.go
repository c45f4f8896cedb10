package worker

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/bloomgate/bloomgate/internal/producer"
)

func srcMsgs(p, n int) *recordBuilder {
	rb := new(recordBuilder)
	rb.reset(p, nil)
	for i := range n {
		rb.add(tOut, &kafka.Message{Offset: int64(i), Value: []byte("v")}, "")
	}
	return rb
}

// writeAll writes the records of rb.
func (o *output) writeAll(ctx context.Context, p int, rb *recordBuilder) error {
	return o.write(ctx, p, rb.recs, rb.arena)
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
	kafkaWait(t, func() bool {
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

func kafkaWait(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}
