package worker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/bloomgate/bloomgate/internal/producer"
)

// What the written topics (output, duplicates, dead-letter) accept in one
// produce batch. A broker refuses a batch larger than the topic's
// max.message.bytes whole (MESSAGE_TOO_LARGE). So at start the worker
// reads every written topic's effective max.message.bytes
// (DescribeConfigs; a broker default counts) and bounds each topic's
// batches by it and by --max-batch-bytes. The worker encodes the batches
// itself (internal/producer), so the bound is exact: a batch's size is
// what the broker compares with max.message.bytes, framing included, and
// a record is larger than its topic takes when a batch of it alone
// (recordSize) is over the bound.

// limitsRefresh is the least time between two reads of the limits for a
// record over its topic's bound (the topic's max.message.bytes may have
// been raised since).
const limitsRefresh = time.Minute

// recordSize is the size of a batch holding m alone, as the broker
// counts it. Compute it on the record as built, with every header the
// worker adds.
func recordSize(m *kafka.Message) int64 { return producer.AloneSize(m) }

// outputLimits holds, per written topic, its max.message.bytes and the
// bound of one record written to it. Reads are lock-free (the hot path
// asks for every record); a refresh replaces the values whole.
type outputLimits struct {
	maxBatchBytes int64     // Config.MaxBatchBytes
	topics        [3]string // by writtenKind; "" for a topic not written
	cur           atomic.Pointer[[3]int64]

	mu     sync.Mutex // serializes refreshes
	readAt time.Time
}

func (l *outputLimits) kind(topic string) int {
	for k, t := range l.topics {
		if t == topic {
			return k
		}
	}
	return int(toOutput)
}

// bound is the largest batch topic takes (producer.Batch.Size, framing
// included): MaxBatchBytes, or the topic's max.message.bytes if that is
// lower.
func (l *outputLimits) bound(topic string) int64 {
	b := l.maxBatchBytes
	if m := l.cur.Load()[l.kind(topic)]; m > 0 {
		b = min(b, m)
	}
	return max(b, producer.BatchOverhead+1)
}

// limit is topic's max.message.bytes as last read, 0 if unknown.
func (l *outputLimits) limit(topic string) int64 { return l.cur.Load()[l.kind(topic)] }

// writtenTopics lists the topics the worker writes to.
func (w *Worker) writtenTopics() []string {
	topics := []string{w.cfg.Output}
	for _, t := range []string{w.cfg.Duplicates, w.cfg.DeadLetter} {
		if t != "" {
			topics = append(topics, t)
		}
	}
	return topics
}

// readLimits reads the written topics' max.message.bytes. A topic whose
// value cannot be read is left out of the map, with the reason in errs.
func (w *Worker) readLimits(ctx context.Context) (map[string]int64, map[string]error) {
	return w.maxMessageBytes(ctx, w.writtenTopics())
}

// maxMessageBytes reads the effective max.message.bytes of topics (a
// broker default counts), as readLimits (producer.MaxMessageBytes, within
// 30 s).
func (w *Worker) maxMessageBytes(ctx context.Context, topics []string) (map[string]int64, map[string]error) {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return producer.MaxMessageBytes(rctx, w.client, topics)
}

// startLimits reads the limits at start. It never fails the start: a
// topic whose limit cannot be read (DescribeConfigs refused by ACLs, or
// unsupported) is assumed to take --max-batch-bytes, with a warning; its
// broker still has the last word (a refused record is found and placed,
// see unwritable.go).
func (w *Worker) startLimits(ctx context.Context) *outputLimits {
	got, errs := w.readLimits(ctx)
	l := &outputLimits{maxBatchBytes: w.cfg.MaxBatchBytes, readAt: w.deps.Now()}
	var vals [3]int64
	for _, t := range w.writtenTopics() {
		k := w.kindOf(t)
		l.topics[k], vals[k] = t, got[t]
	}
	l.cur.Store(&vals)
	attrs := []any{"max_batch_bytes", l.maxBatchBytes}
	for _, t := range w.writtenTopics() {
		if err := errs[t]; err != nil {
			w.log.Warn("cannot read a written topic's max.message.bytes; assuming --max-batch-bytes fits "+
				"(grant DescribeConfigs on the topic, or keep --max-batch-bytes at most its max.message.bytes)",
				"topic", t, "assumed_bytes", l.maxBatchBytes, "err", err)
			continue
		}
		attrs = append(attrs, "max_message_bytes_"+kindName(w.kindOf(t)), l.limit(t), "batch_bound_bytes_"+kindName(w.kindOf(t)), l.bound(t))
	}
	w.log.Info("produce batches bounded by each written topic's max.message.bytes and --max-batch-bytes", attrs...)
	return l
}

// refreshLimits reads the limits again if the last read is older than
// limitsRefresh, or always with force; a topic whose value cannot be read
// keeps the old one. Batches follow the new bounds at once.
func (w *Worker) refreshLimits(ctx context.Context, force bool) {
	l := w.limits
	l.mu.Lock()
	defer l.mu.Unlock()
	if !force && w.deps.Now().Sub(l.readAt) < limitsRefresh {
		return
	}
	l.readAt = w.deps.Now()
	got, _ := w.readLimits(ctx)
	vals := *l.cur.Load()
	for t, v := range got {
		k := l.kind(t)
		if old := vals[k]; old > 0 && old != v {
			w.log.Info("a written topic's max.message.bytes changed", "topic", t, "was", old, "now", v)
		}
		vals[k] = v
	}
	l.cur.Store(&vals)
}

// kindName names a written topic's role in logs.
func kindName(k writtenKind) string {
	switch k {
	case toDuplicates:
		return "duplicates"
	case toDeadLetter:
		return "dead_letter"
	}
	return "output"
}
