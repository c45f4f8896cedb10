package worker

import (
	"bytes"
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
}

type topicPartition struct {
	topic     string
	partition int
}

func newOutput(cfg Config) *output {
	o := &output{acked: map[topicPartition]int64{}}
	o.w = &kafka.Writer{
		Addr:         kafka.TCP(cfg.Brokers...),
		Balancer:     &balancer{mode: cfg.Partitioning},
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
// bloomgate-src-partition header that every written record carries.
type balancer struct {
	mode Partitioning
	hash kafka.Murmur2Balancer
}

func (b *balancer) Balance(msg kafka.Message, partitions ...int) int {
	if b.mode == PartitioningHash {
		return b.hash.Balance(msg, partitions...)
	}
	for i := len(msg.Headers) - 1; i >= 0; i-- {
		if msg.Headers[i].Key == HeaderSrcPartition {
			if p, err := strconv.Atoi(string(msg.Headers[i].Value)); err == nil && p >= 0 {
				return partitions[p%len(partitions)]
			}
		}
	}
	return partitions[0]
}

// targetPartition is where a record from input partition src lands in a
// topic of n partitions in same mode.
func targetPartition(src, n int) int { return src % n }

// recordBuilder builds written records for one batch, keeping the header
// values of the batch in one arena.
type recordBuilder struct {
	partitionValue []byte
	arena          []byte
	headers        []kafka.Header
	msgs           []kafka.Message
}

func (b *recordBuilder) reset(partition int) {
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
	n := len(in.Headers) + 3
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

// srcOf reads the src headers of a written record.
func srcOf(hs []kafka.Header) (partition int, offset int64, ok bool) {
	var gotP, gotO bool
	for _, h := range hs {
		switch h.Key {
		case HeaderSrcPartition:
			v, err := strconv.Atoi(string(bytes.TrimSpace(h.Value)))
			if err != nil {
				return 0, 0, false
			}
			partition, gotP = v, true
		case HeaderSrcOffset:
			v, err := strconv.ParseInt(string(bytes.TrimSpace(h.Value)), 10, 64)
			if err != nil {
				return 0, 0, false
			}
			offset, gotO = v, true
		}
	}
	return partition, offset, gotP && gotO
}
