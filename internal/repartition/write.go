package repartition

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/murmur3"

	"github.com/bloomgate/bloomgate/internal/fetcher"
	"github.com/bloomgate/bloomgate/internal/producer"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// How the hop writes (internal/producer, as the dedup stage's output): the
// records of one fetch are grouped by the topic partition they go to
// (murmur2 of the Kafka key, as Java's default partitioner), and each
// group is sent in input order, in batches bounded by the topic's limit
// and BatchSize records, the next once the previous one is acknowledged;
// groups are written at the same time. The fetch's offsets are offered
// for commit only once every batch of it is acknowledged. Any failure
// re-reads the fetch from its start: what had landed is written again,
// exact copies that the dedup stage removes.
//
// Unwritable records (worker.UnwritablePolicy, as the dedup stage's
// --on-unwritable): a record larger than the repartition topic takes (a
// batch of it alone over the topic's bound), or refused by the broker for
// what it is, is placed by OnUnwritable: written to the dead-letter topic
// (whole, else a reference record naming it), dropped, or the partition
// waits before it. A refused batch of several records makes the hop write
// that fetch again one record per produce request, so that the one refused
// is found and the others land.

// limitsRefresh is the least time between two reads of the written
// topics' max.message.bytes for a record over its topic's bound.
const limitsRefresh = time.Minute

// unwritableLogEvery bounds the WARN lines about dead-lettered records.
const unwritableLogEvery = 10 * time.Second

// Outcomes of an unwritable record (the outcome label of
// bloomgate_repartition_unwritable_records_total).
const (
	outcomeDeadLettered = "dead_lettered"
	outcomeReference    = "dead_lettered_reference"
	outcomeDropped      = "dropped"
	outcomeStalled      = "stalled"
)

var unwritableOutcomes = []string{outcomeDeadLettered, outcomeReference, outcomeDropped, outcomeStalled}

// refusal maps a write error to the reason the broker refused the records
// for what they are (worker.UnwritableReasons), or "" for any other
// failure.
func refusal(err error) string {
	var ke kafka.Error
	if !errors.As(err, &ke) {
		return ""
	}
	switch ke {
	case kafka.MessageSizeTooLarge, kafka.RecordListTooLarge:
		return worker.ReasonRecordTooLarge
	case kafka.InvalidRecord:
		return worker.ReasonInvalidRecord
	case kafka.InvalidTimestamp:
		return worker.ReasonInvalidTimestamp
	case kafka.InvalidMessage:
		return worker.ReasonCorruptRecord
	}
	return ""
}

// bound is the largest batch topic takes: MaxBatchBytes, or the topic's
// max.message.bytes if that is lower.
func (r *Repartitioner) bound(topic string) int64 {
	b := r.cfg.MaxBatchBytes
	if m := (*r.limits.Load())[topic]; m > 0 {
		b = min(b, m)
	}
	return max(b, producer.BatchOverhead+1)
}

// writtenTopics lists the topics the hop writes to.
func (r *Repartitioner) writtenTopics() []string {
	if r.cfg.DeadLetter != "" {
		return []string{r.cfg.Output, r.cfg.DeadLetter}
	}
	return []string{r.cfg.Output}
}

// readLimits reads the written topics' max.message.bytes: at start (log
// says what bounds the batches), then if the last read is older than
// limitsRefresh, or always with force. A topic whose value cannot be read
// keeps the last one (at start: MaxBatchBytes is assumed, with a warning;
// the broker has the last word).
func (r *Repartitioner) readLimits(ctx context.Context, start, force bool) {
	r.limitsMu.Lock()
	defer r.limitsMu.Unlock()
	if !start && !force && time.Since(r.limitsAt) < limitsRefresh {
		return
	}
	r.limitsAt = time.Now()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	got, errs := producer.MaxMessageBytes(rctx, r.client, r.writtenTopics())
	vals := map[string]int64{}
	for t, v := range *r.limits.Load() {
		vals[t] = v
	}
	for t, v := range got {
		if old := vals[t]; old > 0 && old != v {
			r.log.Info("a written topic's max.message.bytes changed", "topic", t, "was", old, "now", v)
		}
		vals[t] = v
	}
	r.limits.Store(&vals)
	if !start {
		return
	}
	attrs := []any{"max_batch_bytes", r.cfg.MaxBatchBytes}
	for _, t := range r.writtenTopics() {
		if err := errs[t]; err != nil {
			r.log.Warn("cannot read a written topic's max.message.bytes; assuming --max-batch-bytes fits "+
				"(grant DescribeConfigs on the topic, or keep --max-batch-bytes at most its max.message.bytes)",
				"topic", t, "assumed_bytes", r.cfg.MaxBatchBytes, "err", err)
			continue
		}
		attrs = append(attrs, "max_message_bytes_"+t, vals[t], "batch_bound_bytes_"+t, r.bound(t))
	}
	r.log.Info("repartition batches bounded by each written topic's max.message.bytes and --max-batch-bytes", attrs...)
}

// deadLetterPartitions returns the dead-letter topic's partitions, read
// once.
func (r *Repartitioner) deadLetterPartitions(ctx context.Context) ([]int, error) {
	r.dltMu.Lock()
	defer r.dltMu.Unlock()
	if r.dltParts != nil {
		return r.dltParts, nil
	}
	md, err := r.check.Topics(ctx, []string{r.cfg.DeadLetter})
	if err != nil {
		return nil, fmt.Errorf("reading the dead-letter topic's partitions: %w", err)
	}
	for _, t := range md {
		if t.Name == r.cfg.DeadLetter && t.Err == nil && t.Partitions > 0 {
			r.dltParts = partitionList(t.Partitions)
			return r.dltParts, nil
		}
		if t.Err != nil {
			return nil, fmt.Errorf("reading the dead-letter topic %q: %w", r.cfg.DeadLetter, t.Err)
		}
	}
	return nil, fmt.Errorf("the dead-letter topic %q does not exist", r.cfg.DeadLetter)
}

func partitionList(n int) []int {
	ps := make([]int, n)
	for i := range ps {
		ps[i] = i
	}
	return ps
}

// span is a range of a partWriter's arena.
type span struct{ off, n uint32 }

func (s span) of(arena []byte) []byte { return arena[s.off : s.off+s.n : s.off+s.n] }

// hopRec is a record of a fetch as the hop writes it: input record in
// with the key (null if nullKey) and added headers whose values are in
// the partWriter's arena, to topic/partition; or, with ref, the reference
// record ref in its place.
type hopRec struct {
	in         *kafka.Message
	ref        *kafka.Message
	topic      string
	partition  int
	key, off   span
	errv       span // the bloomgate-error value; empty: none
	nullKey    bool
	alone      bool   // written in a produce request of its own
	drop       bool   // not written (OnUnwritable drop)
	unwritable string // why the repartition topic does not take it ("": it does)
	size       int64  // of a batch holding the record for the repartition topic alone
}

// refusedLevel is how far the placing of an input record got refused:
// by the repartition topic, then the dead-letter topic whole, then its
// reference record.
type refusedLevel struct {
	level int // 1, 2, 3
	why   string
}

// partWriter writes the fetches of one input partition; its buffers are
// reused from fetch to fetch.
type partWriter struct {
	r   *Repartitioner
	p   int
	pv  []byte // the bloomgate-origin-partition value
	log *slog.Logger

	kb    []byte
	arena []byte
	recs  []hopRec
	refs  []kafka.Message

	// aloneUntil: records at input offsets below it are written one per
	// produce request (a batch of them was refused).
	aloneUntil int64
	// refused holds the input offsets of records a topic refused alone.
	refused map[int64]refusedLevel
	// stalledAt is the offset the partition waits before (-1: none).
	stalledAt int64

	warnAt    time.Time
	warnQuiet int
}

func (r *Repartitioner) newPartWriter(p int, log *slog.Logger) *partWriter {
	return &partWriter{r: r, p: p, pv: []byte(strconv.Itoa(p)), log: log, refused: map[int64]refusedLevel{}, stalledAt: -1}
}

// extra returns rec's added headers (n of hs).
func (w *partWriter) extra(rec *hopRec) (hs [3]kafka.Header, n int) {
	hs[0] = kafka.Header{Key: HeaderOriginPartition, Value: w.pv}
	hs[1] = kafka.Header{Key: HeaderOriginOffset, Value: rec.off.of(w.arena)}
	n = 2
	if rec.errv.n > 0 {
		hs[2] = kafka.Header{Key: HeaderError, Value: rec.errv.of(w.arena)}
		n = 3
	}
	return hs, n
}

// message is rec as written, without its added headers.
func (w *partWriter) message(rec *hopRec) kafka.Message {
	if rec.ref != nil {
		return *rec.ref
	}
	m := *rec.in
	m.Key = nil
	if !rec.nullKey {
		m.Key = rec.key.of(w.arena)
	}
	return m
}

func (w *partWriter) appendArena(b []byte) span {
	start := len(w.arena)
	w.arena = append(w.arena, b...)
	return span{uint32(start), uint32(len(w.arena) - start)}
}

// stallAt is where a fetch's records stop: the offset of the record the
// partition waits before, and why.
type stallAt struct {
	offset int64
	why    string
	size   int64
}

// build turns c's records into w.recs, placing unwritable records by
// OnUnwritable. A record the partition stalls before ends the records
// built (st is set). err is a failure to learn where a dead letter goes.
func (w *partWriter) build(ctx context.Context, c *fetcher.Chunk) (st *stallAt, err error) {
	r := w.r
	w.arena = w.arena[:0]
	clear(w.recs)
	w.recs = w.recs[:0]
	clear(w.refs)
	w.refs = w.refs[:0]
	if cap(w.refs) < len(c.Records) {
		// Records point at their reference records: no regrowth while
		// building.
		w.refs = make([]kafka.Message, 0, len(c.Records))
	}
	for i := range c.Records {
		m := &c.Records[i]
		rec := hopRec{in: m, topic: r.cfg.Output, alone: m.Offset < w.aloneUntil}
		var kerr error
		w.kb, kerr = r.ex.Extract(w.kb[:0], m.Key, m.Value, m.Headers)
		if kerr != nil {
			reason := reasonOf(kerr)
			r.badKeys.WithLabelValues(reason).Inc()
			rec.nullKey = true
			rec.errv = w.appendArena([]byte(reason))
		} else {
			h1, h2 := murmur3.Sum128(w.kb)
			var b [16]byte
			binary.BigEndian.PutUint64(b[:8], h1)
			binary.BigEndian.PutUint64(b[8:], h2)
			start := len(w.arena)
			w.arena = hex.AppendEncode(w.arena, b[:])
			rec.key = span{uint32(start), 32}
		}
		start := len(w.arena)
		w.arena = strconv.AppendInt(w.arena, m.Offset, 10)
		rec.off = span{uint32(start), uint32(len(w.arena) - start)}
		msg := w.message(&rec)
		rec.partition = r.balancer.Balance(msg, r.outParts...)
		hs, n := w.extra(&rec)
		rec.size = producer.AloneSize(&msg, hs[:n]...)
		why := ""
		if ref, ok := w.refused[m.Offset]; ok {
			why = ref.why
		} else if rec.size > r.bound(r.cfg.Output) {
			r.readLimits(ctx, false, false) // the topic's max.message.bytes may have been raised since
			if rec.size > r.bound(r.cfg.Output) {
				why = worker.ReasonRecordTooLarge
			}
		}
		if why != "" {
			rec.unwritable = why
			if stall, err := w.place(ctx, &rec, why); err != nil || stall {
				if err != nil {
					return nil, err
				}
				return &stallAt{offset: m.Offset, why: why, size: rec.size}, nil
			}
		}
		w.recs = append(w.recs, rec)
	}
	return nil, nil
}

// place places rec, which the repartition topic does not take (why), by
// OnUnwritable; it reports whether the partition stalls before it.
func (w *partWriter) place(ctx context.Context, rec *hopRec, why string) (stall bool, err error) {
	r := w.r
	switch r.cfg.OnUnwritable {
	case worker.UnwritableDrop:
		rec.drop = true
		return false, nil
	case worker.UnwritableStall:
		return true, nil
	}
	// Dead letter: whole if the dead-letter topic takes it, else a
	// reference record; if even that is refused, stall.
	level := w.refused[rec.in.Offset].level
	dlt := r.cfg.DeadLetter
	parts, err := r.deadLetterPartitions(ctx)
	if err != nil {
		return false, err
	}
	rec.topic, rec.alone = dlt, true
	rec.errv = w.appendArena([]byte(why))
	msg := w.message(rec)
	hs, n := w.extra(rec)
	if level < 2 && producer.AloneSize(&msg, hs[:n]...) <= r.bound(dlt) {
		rec.partition = r.balancer.Balance(msg, parts...)
		return false, nil
	}
	w.refs = append(w.refs, w.reference(rec.in, why, rec.size))
	rec.ref = &w.refs[len(w.refs)-1]
	msg = *rec.ref
	if level < 3 && producer.AloneSize(&msg, hs[:n]...) <= r.bound(dlt) {
		rec.partition = r.balancer.Balance(msg, parts...)
		return false, nil
	}
	return true, nil
}

// reference is the record written to the dead-letter topic in place of
// input m when that topic cannot take it whole: the dedup stage's
// reference record (worker.ReferenceRecord).
func (w *partWriter) reference(m *kafka.Message, why string, size int64) kafka.Message {
	return worker.ReferenceRecord(w.r.cfg.Input, w.p, m, why, size)
}

// writeFailure is why a write of the built records failed: err, and the
// record whose batch was refused alone (-1: none, or several records).
type writeFailure struct {
	err   error
	alone int
	batch int // records in the failed batch
}

// hopRun is the built records (indexes, in order) for one topic
// partition.
type hopRun struct {
	topic     string
	partition int
	idx       []int
}

// write sends w.recs (built records) and returns nil once every batch is
// acknowledged, else the first failure.
func (w *partWriter) write(ctx context.Context, codec producer.Codec) *writeFailure {
	runs := w.split()
	if len(runs) == 1 {
		return w.writeRun(ctx, codec, runs[0])
	}
	var mu sync.Mutex
	var first *writeFailure
	var wg sync.WaitGroup
	for _, run := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if f := w.writeRun(ctx, codec, run); f != nil {
				mu.Lock()
				if first == nil || (f.alone >= 0 && first.alone < 0) {
					first = f
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

// split groups w.recs by the topic partition they go to, keeping their
// order; dropped records go nowhere.
func (w *partWriter) split() []hopRun {
	type topicPartition struct {
		topic     string
		partition int
	}
	var runs []hopRun
	at := map[topicPartition]int{}
	for i := range w.recs {
		rec := &w.recs[i]
		if rec.drop {
			continue
		}
		k := topicPartition{rec.topic, rec.partition}
		j, ok := at[k]
		if !ok {
			j = len(runs)
			at[k] = j
			runs = append(runs, hopRun{topic: rec.topic, partition: rec.partition})
		}
		runs[j].idx = append(runs[j].idx, i)
	}
	return runs
}

// writeRun sends run's records in batches bounded by the topic's limit
// and BatchSize, a record marked alone in a batch of its own, each after
// the previous one is acknowledged.
func (w *partWriter) writeRun(ctx context.Context, codec producer.Codec, run hopRun) *writeFailure {
	r := w.r
	b := r.batches.Get().(*producer.Batch)
	defer r.batches.Put(b)
	b.Reset()
	b.SetCodec(codec)
	limit := r.bound(run.topic)
	last := -1 // the record appended last
	flush := func() *writeFailure {
		if b.Len() == 0 {
			return nil
		}
		if _, err := r.prod.Produce(ctx, run.topic, run.partition, b); err != nil {
			f := &writeFailure{err: err, alone: -1, batch: b.Len()}
			if b.Len() == 1 {
				f.alone = last
			}
			return f
		}
		r.written.Inc()
		b.Reset()
		return nil
	}
	for _, i := range run.idx {
		rec := &w.recs[i]
		msg := w.message(rec)
		hs, n := w.extra(rec)
		if b.Len() > 0 && (rec.alone || b.Len() >= r.cfg.BatchSize || b.SizeWith(&msg, hs[:n]...) > limit ||
			w.recs[last].alone) {
			if f := flush(); f != nil {
				return f
			}
		}
		b.Append(&msg, hs[:n]...)
		last = i
	}
	return flush()
}

// failed takes in a write failure: a batch refused for what it holds
// makes the fetch's records written alone, and a record refused alone is
// remembered with why. It reports whether the failure was such a
// refusal.
func (w *partWriter) failed(f *writeFailure, next int64) bool {
	why := refusal(f.err)
	if why == "" {
		return false
	}
	if f.alone < 0 {
		w.aloneUntil = max(w.aloneUntil, next)
		return true
	}
	rec := &w.recs[f.alone]
	lvl := refusedLevel{level: 1, why: why}
	if rec.unwritable != "" {
		// The dead-letter topic refused it too: a dead letter keeps the
		// reason the repartition topic refused it for.
		lvl = refusedLevel{level: 2, why: rec.unwritable}
		if rec.ref != nil {
			lvl.level = 3
		}
	}
	w.refused[rec.in.Offset] = lvl
	return true
}

// acked counts and logs the unwritable records of the acknowledged
// fetch, and forgets what was refused below next.
func (w *partWriter) acked(next int64) {
	r := w.r
	for i := range w.recs {
		rec := &w.recs[i]
		if rec.unwritable == "" {
			continue
		}
		outcome := outcomeDeadLettered
		switch {
		case rec.drop:
			outcome = outcomeDropped
		case rec.ref != nil:
			outcome = outcomeReference
		}
		r.unwritable.WithLabelValues(rec.unwritable, outcome).Inc()
		w.note(rec, outcome)
		if rec.in.Offset == w.stalledAt {
			w.log.Info("the record the partition stalled before is placed; going on", "offset", rec.in.Offset, "outcome", outcome)
			w.stalledAt = -1
		}
	}
	for off := range w.refused {
		if off < next {
			delete(w.refused, off)
		}
	}
	if w.stalledAt >= 0 && w.stalledAt < next {
		w.log.Info("the record the partition stalled before is written; going on", "offset", w.stalledAt)
		w.stalledAt = -1
	}
}

// note logs a placed unwritable record: at ERROR when dropped, else at
// WARN, at most one line per unwritableLogEvery.
func (w *partWriter) note(rec *hopRec, outcome string) {
	attrs := []any{"offset", rec.in.Offset, "topic", w.r.cfg.Output, "reason", rec.unwritable, "size", rec.size,
		"bound", w.r.bound(w.r.cfg.Output), "policy", w.r.cfg.OnUnwritable}
	if outcome == outcomeDropped {
		w.log.Error("record unwritable to the repartition topic; dropped", attrs...)
		return
	}
	now := time.Now()
	if now.Sub(w.warnAt) < unwritableLogEvery {
		w.warnQuiet++
		return
	}
	w.warnAt = now
	if w.warnQuiet > 0 {
		attrs = append(attrs, "not_logged_since_last", w.warnQuiet)
		w.warnQuiet = 0
	}
	w.log.Warn("record unwritable to the repartition topic; written to the dead-letter topic "+rec.topic, append(attrs, "outcome", outcome)...)
}

// stall notes that the partition waits before st's record (counted once
// per record; logged at ERROR on every attempt).
func (w *partWriter) stall(st *stallAt) {
	r := w.r
	if w.stalledAt != st.offset {
		w.stalledAt = st.offset
		r.unwritable.WithLabelValues(st.why, outcomeStalled).Inc()
	}
	w.log.Error(fmt.Sprintf("record unwritable to the repartition topic; --on-unwritable=%s: the partition waits before it and retries every %v; "+
		"raise the topic's max.message.bytes (and --max-batch-bytes), or set --dead-letter", r.cfg.OnUnwritable, r.cfg.UnwritableRetry),
		"offset", st.offset, "topic", r.cfg.Output, "reason", st.why, "size", st.size, "bound", r.bound(r.cfg.Output))
}
