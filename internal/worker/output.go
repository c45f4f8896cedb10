package worker

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// Header names added to every record the worker writes.
const (
	HeaderSrcPartition = "bloomgate-src-partition"
	HeaderSrcOffset    = "bloomgate-src-offset"
	HeaderError        = "bloomgate-error"
)

// output is the one kafka.Writer shared by all partitions of a worker, plus
// the acknowledged positions of every written partition (the recovery scan
// starts there).
type output struct {
	w *kafka.Writer

	mu    sync.Mutex
	acked map[topicPartition]int64 // offset after the last acknowledged record

	// pending counts, per input partition, records handed to the writer
	// whose produce request has not completed (acknowledged or failed).
	// A WriteMessages call that returns on its context deadline leaves its
	// records queued or in flight; recovery must not scan the output before
	// they completed, or they could land after the scan and be forwarded
	// twice.
	pmu     sync.Mutex
	pcond   *sync.Cond
	pending map[int]int
	bal     *balancer
}

type topicPartition struct {
	topic     string
	partition int
}

func newOutput(cfg Config) *output {
	o := &output{acked: map[topicPartition]int64{}, pending: map[int]int{},
		bal: &balancer{mode: cfg.Partitioning, balanced: map[int]int64{}}}
	o.pcond = sync.NewCond(&o.pmu)
	o.w = &kafka.Writer{
		Addr:         kafka.TCP(cfg.Brokers...),
		Balancer:     o.bal,
		RequiredAcks: kafka.RequireAll,
		// One attempt: a retry of a write that did land would duplicate
		// records. On failure the partition re-runs exact recovery, which
		// scans the output to learn what landed.
		MaxAttempts: 1,
		BatchSize:   cfg.BatchSize,
		// Must not exceed the brokers' message.max.bytes: a larger produce
		// batch is refused whole (MESSAGE_TOO_LARGE).
		BatchBytes:   cfg.MaxBatchBytes,
		BatchTimeout: cfg.BatchTimeout,
		WriteTimeout: cfg.WriteTimeout,
		ReadTimeout:  cfg.WriteTimeout,
		Transport:    cfg.Transport,
		Completion:   nil,
	}
	o.w.Completion = o.completed
	return o
}

// completed runs for every produce request before WriteMessages returns.
func (o *output) completed(msgs []kafka.Message, err error) {
	o.pmu.Lock()
	for i := range msgs {
		if src, ok := srcPartitionOf(&msgs[i]); ok {
			o.pending[src]--
		}
	}
	o.pcond.Broadcast()
	o.pmu.Unlock()
	if err != nil || len(msgs) == 0 {
		return
	}
	last := msgs[len(msgs)-1]
	tp := topicPartition{last.Topic, last.Partition}
	o.mu.Lock()
	if last.Offset+1 > o.acked[tp] {
		o.acked[tp] = last.Offset + 1
	}
	o.mu.Unlock()
}

// write hands the records of input partition p to the writer and keeps the
// count of those queued or in flight. kafka-go queues all records of a
// call or none: it balances every record first and returns before queueing
// if a metadata lookup fails, so "all were balanced" means "all were queued".
func (o *output) write(ctx context.Context, p int, msgs []kafka.Message) error {
	before := o.bal.count(p)
	err := o.w.WriteMessages(ctx, msgs...)
	if o.bal.count(p)-before >= int64(len(msgs)) {
		// Queued: completions (some may have run already) subtract them.
		o.pmu.Lock()
		o.pending[p] += len(msgs)
		o.pcond.Broadcast()
		o.pmu.Unlock()
	}
	return err
}

// waitIdle waits until no record of input partition p is queued or in
// flight, at most timeout. It reports whether that happened.
func (o *output) waitIdle(p int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	t := time.AfterFunc(timeout, func() {
		o.pmu.Lock()
		o.pcond.Broadcast()
		o.pmu.Unlock()
	})
	defer t.Stop()
	o.pmu.Lock()
	defer o.pmu.Unlock()
	for o.pending[p] > 0 {
		if !time.Now().Before(deadline) {
			return false
		}
		o.pcond.Wait()
	}
	return true
}

// srcPartitionOf reads the bloomgate-src-partition header of a written record.
func srcPartitionOf(m *kafka.Message) (int, bool) {
	for i := len(m.Headers) - 1; i >= 0; i-- {
		if m.Headers[i].Key == HeaderSrcPartition {
			p, err := strconv.Atoi(string(m.Headers[i].Value))
			return p, err == nil && p >= 0
		}
	}
	return 0, false
}

// ackedOffset returns the offset after the last record acknowledged in tp by
// any writer of this process, or -1 if none. Every record written later lies
// after it.
func (o *output) ackedOffset(topic string, partition int) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	if v, ok := o.acked[topicPartition{topic, partition}]; ok {
		return v
	}
	return -1
}

// balancer chooses output partitions. In same mode it reads the
// bloomgate-src-partition header that every written record carries. It
// also counts, per input partition, the records it balanced (see write).
type balancer struct {
	mode Partitioning
	hash kafka.Murmur2Balancer

	mu       sync.Mutex
	balanced map[int]int64
}

func (b *balancer) Balance(msg kafka.Message, partitions ...int) int {
	src, ok := srcPartitionOf(&msg)
	if ok && b.balanced != nil {
		b.mu.Lock()
		b.balanced[src]++
		b.mu.Unlock()
	}
	if b.mode == PartitioningHash {
		return b.hash.Balance(msg, partitions...)
	}
	if ok {
		return partitions[src%len(partitions)]
	}
	return partitions[0]
}

func (b *balancer) count(p int) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.balanced[p]
}

// targetPartition is where a record from input partition src lands in a
// topic of n partitions in same mode.
func targetPartition(src, n int) int { return src % n }

// recordBuilder builds written records for one batch, keeping the header
// values of the batch in one arena.
type recordBuilder struct {
	// prov writes the provenance header (nil: none, in unit tests of the
	// builder alone).
	prov           *provenance
	partitionValue []byte
	arena          []byte
	headers        []kafka.Header
	msgs           []kafka.Message
}

func (b *recordBuilder) reset(partition int, prov *provenance) {
	b.prov = prov
	b.partitionValue = strconv.AppendInt(b.partitionValue[:0], int64(partition), 10)
	b.arena = b.arena[:0]
	// Earlier batches' records are done with their headers (a failed write
	// drops the whole builder), so the arrays can be reused.
	clear(b.headers)
	b.headers = b.headers[:0]
	for i := range b.msgs {
		b.msgs[i] = kafka.Message{}
	}
	b.msgs = b.msgs[:0]
}

// add appends a copy of in addressed to topic, with the src headers and, if
// reason is set, a bloomgate-error header.
func (b *recordBuilder) add(topic string, in *kafka.Message, reason string) {
	n := len(in.Headers) + 4
	if cap(b.headers)-len(b.headers) < n {
		// A new array; records built so far keep the old one.
		b.headers = make([]kafka.Header, 0, max(4096, 2*n))
	}
	hs := b.headers[len(b.headers) : len(b.headers) : len(b.headers)+n]
	hs = append(hs, in.Headers...)
	start := len(b.arena)
	b.arena = strconv.AppendInt(b.arena, in.Offset, 10)
	// The arena may grow; headers keep their own slices of the old array,
	// which stays alive and unchanged, so that is safe.
	off := b.arena[start:len(b.arena):len(b.arena)]
	hs = append(hs,
		kafka.Header{Key: HeaderSrcPartition, Value: b.partitionValue},
		kafka.Header{Key: HeaderSrcOffset, Value: off})
	if b.prov != nil {
		start = len(b.arena)
		b.arena = b.prov.appendValue(b.arena, in.Offset, topic)
		hs = append(hs, kafka.Header{Key: HeaderProvenance, Value: b.arena[start:len(b.arena):len(b.arena)]})
	}
	if reason != "" {
		hs = append(hs, kafka.Header{Key: HeaderError, Value: []byte(reason)})
	}
	ts := in.Time
	if ts.IsZero() {
		ts = time.Unix(0, 0)
	}
	b.headers = b.headers[:len(b.headers)+len(hs)]
	b.msgs = append(b.msgs, kafka.Message{Topic: topic, Key: in.Key, Value: in.Value, Headers: hs, Time: ts})
}
