package worker

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

func srcMsgs(p, n int) []kafka.Message {
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		msgs[i] = kafka.Message{Topic: tOut, Value: []byte("v"), Headers: []kafka.Header{
			{Key: HeaderSrcPartition, Value: []byte(strconv.Itoa(p))},
			{Key: HeaderSrcOffset, Value: []byte(strconv.Itoa(i))},
		}}
	}
	return msgs
}

// TestOutputPendingAcknowledged: records of a completed write are not pending.
func TestOutputPendingAcknowledged(t *testing.T) {
	t.Parallel()
	brokers := newClusterWith(t, kfake.SeedTopics(2, tOut))
	cfg := testConfig(brokers)
	cfg = cfg.WithDefaults()
	o := newOutput(cfg)
	defer o.w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := o.write(ctx, 1, srcMsgs(1, 50)); err != nil {
		t.Fatalf("write: %v", err)
	}
	if !o.waitIdle(1, 10*time.Millisecond) {
		t.Fatalf("after an acknowledged write, %d records of partition 1 are still pending", o.pending[1])
	}
}

// TestOutputPendingNotQueued: a write that fails before kafka-go queued
// anything (no broker to ask for metadata) leaves nothing pending, so the
// recovery that follows does not wait for records that cannot land.
func TestOutputPendingNotQueued(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there any more
	cfg := testConfig([]string{addr})
	cfg = cfg.WithDefaults()
	o := newOutput(cfg)
	defer o.w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := o.write(ctx, 0, srcMsgs(0, 10)); err == nil {
		t.Fatal("write to a closed port succeeded")
	}
	if !o.waitIdle(0, 10*time.Millisecond) {
		t.Fatalf("records never queued are counted as pending: %d", o.pending[0])
	}
}

// TestOutputPendingInFlight: queued records stay pending until their
// completion arrives, and waitIdle reports a timeout if it does not.
func TestOutputPendingInFlight(t *testing.T) {
	t.Parallel()
	cfg := testConfig([]string{"127.0.0.1:1"})
	cfg = cfg.WithDefaults()
	o := newOutput(cfg)
	msgs := srcMsgs(3, 20)
	// What kafka-go does inside WriteMessages: balance every record, queue.
	for i := range msgs {
		o.bal.Balance(msgs[i], 0, 1, 2, 3)
	}
	o.pmu.Lock()
	o.pending[3] += len(msgs)
	o.pmu.Unlock()
	if o.waitIdle(3, 50*time.Millisecond) {
		t.Fatal("waitIdle returned true with 20 records in flight")
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		o.completed(msgs[:10], nil)
		o.completed(msgs[10:], context.DeadlineExceeded) // failed requests complete too
	}()
	if !o.waitIdle(3, 5*time.Second) {
		t.Fatalf("waitIdle timed out after every record completed: %d pending", o.pending[3])
	}
	if !o.waitIdle(2, time.Millisecond) {
		t.Fatal("another partition is blocked by partition 3's records")
	}
}
