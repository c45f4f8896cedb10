package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
)

// What the written topics (output, duplicates, dead-letter) accept in one
// produce batch. A broker refuses a batch larger than the topic's
// max.message.bytes whole (MESSAGE_TOO_LARGE), and kafka-go's Writer
// refuses a whole WriteMessages call, before sending anything, if one
// record is larger than Writer.BatchBytes. So at start the worker reads
// every written topic's effective max.message.bytes (DescribeConfigs; a
// broker default counts), bounds each topic's records by it, and gives
// the shared Writer the smallest bound as its BatchBytes. Records are
// sized the way kafka-go's Writer sizes them (writerSize), so the Writer
// never meets a record it refuses; a record larger than the shared bound
// but within its own topic's bound is written alone, one record per
// produce request (unwritable.go).

const (
	// recordBatchOverhead is the framing of a record batch (magic 2)
	// that counts against max.message.bytes: the log overhead (offset and
	// length, 12 bytes) and the batch header (49 bytes).
	recordBatchOverhead = 61
	// batchSlack covers the bytes by which kafka-go's size of a record
	// (writerSize) may fall short of its encoding in the batch. For
	// fields below 1 MiB and timestamps within thousands of years of each
	// other the encoding is smaller than writerSize; a batch of records
	// crafted to exceed it is refused by the broker and then written one
	// record per request.
	batchSlack = 64
	// batchMargin is what a topic's bound keeps below its max.message.bytes.
	batchMargin = recordBatchOverhead + batchSlack
	// limitsRefresh is the least time between two reads of the limits
	// for a record over its topic's bound (the topic's max.message.bytes
	// may have been raised since).
	limitsRefresh = time.Minute
)

// writerSize is the size kafka-go's Writer gives m (Message.totalSize,
// which it compares with BatchBytes): the fields of a magic-0 message
// plus the headers in their record encoding. Compute it on the record as
// built, with every header the worker adds.
func writerSize(m *kafka.Message) int64 {
	h := varintLen(int64(len(m.Headers)))
	for i := range m.Headers {
		hd := &m.Headers[i]
		h += varintLen(int64(len(hd.Key))) + len(hd.Key) + varintLen(int64(len(hd.Value))) + len(hd.Value)
	}
	// crc, magic, attributes, key and value with int32 lengths, timestamp.
	return int64(h) + 4 + 1 + 1 + 4 + int64(len(m.Key)) + 4 + int64(len(m.Value)) + 8
}

// varintLen is the length of i as a zig-zag varint.
func varintLen(i int64) int {
	u := uint64((i << 1) ^ (i >> 63))
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}

// outputLimits holds, per written topic, its max.message.bytes and the
// bound of one record written to it. Reads are lock-free (the hot path
// asks for every record); a refresh replaces the values whole.
type outputLimits struct {
	maxBatchBytes int64 // Config.MaxBatchBytes
	// writerBytes is the shared Writer's BatchBytes, fixed at start.
	writerBytes int64
	topics      [3]string // by writtenKind; "" for a topic not written
	cur         atomic.Pointer[[3]int64]

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

// bound is the largest record (writerSize) topic takes in one batch:
// MaxBatchBytes, or the topic's max.message.bytes less the framing if
// that is lower.
func (l *outputLimits) bound(topic string) int64 {
	b := l.maxBatchBytes
	if m := l.cur.Load()[l.kind(topic)]; m > 0 {
		b = min(b, m-batchMargin)
	}
	return max(b, 1)
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
// broker default counts), as readLimits.
func (w *Worker) maxMessageBytes(ctx context.Context, topics []string) (map[string]int64, map[string]error) {
	errs := map[string]error{}
	req := &kafka.DescribeConfigsRequest{}
	for _, t := range topics {
		req.Resources = append(req.Resources, kafka.DescribeConfigRequestResource{
			ResourceType: kafka.ResourceTypeTopic, ResourceName: t, ConfigNames: []string{"max.message.bytes"}})
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := w.client.DescribeConfigs(rctx, req)
	if err != nil {
		for _, t := range topics {
			errs[t] = err
		}
		return nil, errs
	}
	out := map[string]int64{}
	for _, r := range res.Resources {
		if r.Error != nil {
			errs[r.ResourceName] = r.Error
			continue
		}
		for _, e := range r.ConfigEntries {
			if e.ConfigName != "max.message.bytes" {
				continue
			}
			v, err := strconv.ParseInt(e.ConfigValue, 10, 64)
			if err != nil || v <= 0 {
				errs[r.ResourceName] = fmt.Errorf("max.message.bytes %q is not a positive number", e.ConfigValue)
				break
			}
			out[r.ResourceName] = v
		}
	}
	for _, t := range topics {
		if _, ok := out[t]; !ok && errs[t] == nil {
			errs[t] = errors.New("max.message.bytes missing from the answer")
		}
	}
	return out, errs
}

// startLimits reads the limits at start and fixes the shared Writer's
// bound. It never fails the start: a topic whose limit cannot be read
// (DescribeConfigs refused by ACLs, or unsupported) is assumed to take
// --max-batch-bytes, with a warning; its broker still has the last word
// (a refused record is found and placed, see unwritable.go).
func (w *Worker) startLimits(ctx context.Context) *outputLimits {
	got, errs := w.readLimits(ctx)
	l := &outputLimits{maxBatchBytes: w.cfg.MaxBatchBytes, readAt: w.deps.Now()}
	var vals [3]int64
	for _, t := range w.writtenTopics() {
		k := w.kindOf(t)
		l.topics[k], vals[k] = t, got[t]
	}
	l.cur.Store(&vals)
	l.writerBytes = l.maxBatchBytes
	lowest := ""
	for _, t := range w.writtenTopics() {
		if err := errs[t]; err != nil {
			w.log.Warn("cannot read a written topic's max.message.bytes; assuming --max-batch-bytes fits "+
				"(grant DescribeConfigs on the topic, or keep --max-batch-bytes at most its max.message.bytes less 125 bytes)",
				"topic", t, "assumed_bytes", l.maxBatchBytes, "err", err)
			continue
		}
		if b := l.bound(t); b < l.writerBytes {
			l.writerBytes, lowest = b, t
		}
	}
	attrs := []any{"max_batch_bytes", l.maxBatchBytes, "batch_bound_bytes", l.writerBytes}
	for _, t := range w.writtenTopics() {
		if v := l.limit(t); v > 0 {
			attrs = append(attrs, "max_message_bytes_"+kindName(w.kindOf(t)), v)
		}
	}
	if lowest != "" {
		w.log.Info(fmt.Sprintf("produce batches bounded by the max.message.bytes of %q (%d) less %d bytes of batch framing, below --max-batch-bytes",
			lowest, l.limit(lowest), batchMargin), attrs...)
	} else {
		w.log.Info("produce batches bounded by --max-batch-bytes", attrs...)
	}
	return l
}

// refreshLimits reads the limits again if the last read is older than
// limitsRefresh, or always with force; a topic whose value cannot be read
// keeps the old one. The shared Writer keeps its bound: a record between it
// and its topic's new bound is written alone.
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
			if v-batchMargin < l.writerBytes {
				w.log.Warn("max.message.bytes lowered below the produce batch bound fixed at start; batches over it "+
					"are refused and then written one record per request until a restart resizes them",
					"topic", t, "max_message_bytes", v, "batch_bound_bytes", l.writerBytes)
			}
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
