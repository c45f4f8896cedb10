package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/bloomgate/bloomgate/internal/producer"
)

// HeaderError names the header of dead letters that says why they are
// (besides the bloomgate header of every written record, provenance.go).
const HeaderError = "bloomgate-error"

// output writes the records of all partitions of a worker (internal/
// producer: batches encoded here, acks=all), and keeps the acknowledged
// positions of every written partition (the recovery scan starts there).
//
// A write of input partition p sends each written topic partition's
// records in input order, in batches bounded by the topic's limit
// (limits.go), one batch in flight per topic partition: the next is sent
// once the previous one is acknowledged, so the output keeps the input's
// order, retries included. Topic partitions of one write (the output and
// the duplicates topic) are written at the same time; different input
// partitions write at the same time, several batches in flight per broker.
type output struct {
	prod  *producer.Producer
	bal   *balancer
	parts map[string][]int // partition numbers per written topic
	// limit is the largest batch a topic takes (outputLimits.bound).
	limit func(topic string) int64

	mu    sync.Mutex
	acked map[topicPartition]int64 // offset after the last acknowledged record

	// pending counts, per input partition, records handed to write whose
	// produce requests have not all completed (acknowledged or failed).
	// Recovery must not scan the output before they completed, or they
	// could land after the scan and be forwarded twice.
	pmu     sync.Mutex
	pcond   *sync.Cond
	pending map[int]int

	batches sync.Pool // *producer.Batch
}

type topicPartition struct {
	topic     string
	partition int
}

func newOutput(cfg Config, prod *producer.Producer, partitions map[string]int, limit func(string) int64) *output {
	o := &output{prod: prod, bal: &balancer{mode: cfg.Partitioning}, parts: map[string][]int{}, limit: limit,
		acked: map[topicPartition]int64{}, pending: map[int]int{}}
	for t, n := range partitions {
		ps := make([]int, n)
		for i := range ps {
			ps[i] = i
		}
		o.parts[t] = ps
	}
	o.pcond = sync.NewCond(&o.pmu)
	o.batches.New = func() any { return new(producer.Batch) }
	return o
}

// target is the partition of topic that a record of input partition src
// with m's key goes to.
func (o *output) target(src int, topic string, m *kafka.Message) int {
	ps := o.parts[topic]
	if len(ps) == 0 {
		return 0
	}
	if o.bal.mode == PartitioningHash {
		return o.bal.hash.Balance(*m, ps...)
	}
	return targetPartition(src, len(ps))
}

// run is the records of one write for one topic partition, as indexes
// into the write's records, in order; nil idx: all n of them.
type run struct {
	tp  topicPartition
	idx []int
	n   int
}

func (r *run) len() int { return r.n }

func (r *run) at(k int) int {
	if r.idx == nil {
		return k
	}
	return r.idx[k]
}

// write writes the records of input partition p and returns once every
// produce request it sent completed. On failure the error is a
// kafka.WriteErrors aligned with recs: nil for the records acknowledged,
// the broker's refusal (a *producer.Error) for those of a refused batch,
// and errNotSent for those of the batches after a failed one (not sent,
// to keep the order). prov seals the batches (nil: records of older
// formats, in tests that play older builds).
func (o *output) write(ctx context.Context, p int, codec producer.Codec, prov *provenance, recs []outRecord, arena []byte) error {
	if len(recs) == 0 {
		return nil
	}
	o.pmu.Lock()
	o.pending[p] += len(recs)
	o.pmu.Unlock()
	defer func() {
		o.pmu.Lock()
		o.pending[p] -= len(recs)
		o.pcond.Broadcast()
		o.pmu.Unlock()
	}()

	w := runWriter{p: p, codec: codec, prov: prov, recs: recs, arena: arena}
	runs := o.split(p, recs)
	var errs kafka.WriteErrors
	if len(runs) == 1 {
		errs = o.writeRun(ctx, &w, runs[0], errs)
	} else {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, r := range runs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var own kafka.WriteErrors
				if own = o.writeRun(ctx, &w, r, nil); own != nil {
					mu.Lock()
					if errs == nil {
						errs = make(kafka.WriteErrors, len(recs))
					}
					for k := range r.len() {
						errs[r.at(k)] = own[r.at(k)]
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	if errs != nil {
		return errs
	}
	return nil
}

// split groups recs by the topic partition they go to, keeping their order.
func (o *output) split(p int, recs []outRecord) []run {
	first := topicPartition{recs[0].topic, o.target(p, recs[0].topic, recs[0].in)}
	same := true
	for i := 1; i < len(recs) && same; i++ {
		same = recs[i].topic == first.topic && (o.bal.mode != PartitioningHash || o.target(p, recs[i].topic, recs[i].in) == first.partition)
	}
	if same {
		return []run{{tp: first, n: len(recs)}}
	}
	var runs []run
	at := map[topicPartition]int{}
	for i := range recs {
		tp := topicPartition{recs[i].topic, o.target(p, recs[i].topic, recs[i].in)}
		j, ok := at[tp]
		if !ok {
			j = len(runs)
			at[tp] = j
			runs = append(runs, run{tp: tp})
		}
		runs[j].idx = append(runs[j].idx, i)
		runs[j].n++
	}
	return runs
}

// errNotSent marks the records a write did not send because a batch
// before them failed.
var errNotSent = errors.New("not sent: an earlier batch of the partition failed")

// writeBatchBytes is the size at which writeRun cuts a batch when the
// topic's bound (--max-batch-bytes, max.message.bytes) is larger; a record
// above it, within the bound, goes in a batch of its own. A partition's
// write holds its batch until it is acknowledged, so the batches in
// flight cost this much per written partition, and kafka-go's copy of
// the request as much again while it is sent. At 4 M keys over 8
// partitions, batches cut at 256 KiB instead of the 1 MiB bound lowered
// the peak RSS by ~6 MiB at the same throughput and CPU per event; 128
// KiB saved 2 MiB more for ~5 % of the throughput (docs/benchmarks-journal.md,
// "Output batches of 256 KiB").
const writeBatchBytes = 256 << 10

// runWriter is what the runs of one write share.
type runWriter struct {
	p     int // the input partition
	codec producer.Codec
	prov  *provenance
	recs  []outRecord
	arena []byte
}

// sealSlack is what sealing the last record of a batch may add to it: the
// seal, and a byte more in the record's length.
const sealSlack = sealMaxLen + 1

// writeRun sends r's records in batches bounded by the topic's limit and
// cut at writeBatchBytes (sizes uncompressed: a bound of the compressed
// ones), compressed with w.codec, each after the previous one is
// acknowledged; the last record of each batch carries the batch's seal
// (provenance.go). It returns nil, or errs (made if nil) with the failed
// records' errors set.
func (o *output) writeRun(ctx context.Context, w *runWriter, r run, errs kafka.WriteErrors) kafka.WriteErrors {
	recs, arena := w.recs, w.arena
	b := o.batches.Get().(*producer.Batch)
	defer o.batches.Put(b)
	b.SetCodec(w.codec)
	limit := min(o.limit(r.tp.topic), writeBatchBytes)
	seal := w.prov != nil && !recs[r.at(0)].legacy
	slack := int64(0)
	if seal {
		slack = sealSlack
	}
	// scratch holds the header values of the record being appended;
	// flush, called between sizing it and appending it, has its own.
	var scratch, sealScratch [originMaxLen]byte
	start := 0 // first index into the run of the batch being built
	flush := func(end int) error {
		if seal {
			// The last record again, with the seal over the batch's.
			last := &recs[r.at(end-1)]
			b.PopLast()
			sv := w.prov.appendSeal(make([]byte, 0, sealMaxLen), r.tp.topic, end-start, func(i int) int64 {
				return recs[r.at(start+i)].in.Offset
			})
			hs, n := last.headers(arena, w.p, &sealScratch, sv)
			b.Append(last.in, hs[:n]...)
		}
		base, err := o.prod.Produce(ctx, r.tp.topic, r.tp.partition, b)
		if err != nil {
			return err
		}
		o.ackedAt(r.tp.topic, r.tp.partition, base+int64(b.Len()))
		b.Reset()
		start = end
		return nil
	}
	fail := func(err error) kafka.WriteErrors {
		if errs == nil {
			errs = make(kafka.WriteErrors, len(recs))
		}
		for k := start; k < r.len(); k++ {
			if k-start < b.Len() {
				errs[r.at(k)] = err
			} else {
				errs[r.at(k)] = errNotSent
			}
		}
		return errs
	}
	b.Reset()
	// One allocation for the run's batches, if the pooled buffer is short.
	// The size is a bound, not an estimate: one that fell short by the
	// varints (~5 %) made append regrow every run's buffer by a quarter
	// ("Peak RSS at 4 M keys" in docs/benchmarks-journal.md).
	est := slack
	for k := 0; k < r.len() && est < limit; k++ {
		rec := &recs[r.at(k)]
		hs, n := rec.headers(arena, w.p, &scratch, nil)
		est += int64(producer.MaxRecordSize(rec.in, hs[:n]...))
	}
	b.Grow(int(min(est, limit)))
	for k := range r.len() {
		rec := &recs[r.at(k)]
		hs, n := rec.headers(arena, w.p, &scratch, nil)
		extra := hs[:n]
		if b.Len() > 0 && (b.SizeWith(rec.in, extra...)+slack > limit || (seal && b.Len() >= maxSealed)) {
			if err := flush(k); err != nil {
				return fail(err)
			}
		}
		b.Append(rec.in, extra...)
	}
	if err := flush(r.len()); err != nil {
		return fail(err)
	}
	return nil
}

// writeOne writes m alone, in a produce request of its own, to the
// partition write would choose for input partition p.
func (o *output) writeOne(ctx context.Context, p int, m *kafka.Message) error {
	tp := topicPartition{m.Topic, o.target(p, m.Topic, m)}
	b := o.batches.Get().(*producer.Batch)
	defer o.batches.Put(b)
	b.Reset()
	b.Append(m)
	o.pmu.Lock()
	o.pending[p]++
	o.pmu.Unlock()
	base, err := o.prod.Produce(ctx, tp.topic, tp.partition, b)
	o.pmu.Lock()
	o.pending[p]--
	o.pcond.Broadcast()
	o.pmu.Unlock()
	if err != nil {
		return fmt.Errorf("writing one record to %s/%d: %w", tp.topic, tp.partition, err)
	}
	o.ackedAt(tp.topic, tp.partition, base+1)
	return nil
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

// ackedAt records an acknowledged position.
func (o *output) ackedAt(topic string, partition int, next int64) {
	tp := topicPartition{topic, partition}
	o.mu.Lock()
	if next > o.acked[tp] {
		o.acked[tp] = next
	}
	o.mu.Unlock()
}

// balancer chooses output partitions: in same mode by the input partition
// (targetPartition), in hash mode by the murmur2 hash of the Kafka key (as
// Kafka's Java client).
type balancer struct {
	mode Partitioning
	hash kafka.Murmur2Balancer
}

// targetPartition is where a record from input partition src lands in a
// topic of n partitions in same mode.
func targetPartition(src, n int) int { return src % n }

// recordBuilder builds written records for one batch: each an outRecord
// pointing at its input record, the values of the headers the worker adds
// kept in one arena. The producer encodes input and headers straight into
// the batch (producer.Batch.Append): no message with a header array is
// built per written record, which held ~310 bytes per record of a batch
// being written (~5 MiB at 8 partitions; docs/benchmarks-journal.md, "Fewer
// copies").
type recordBuilder struct {
	// prov writes the provenance header (nil: only the src headers of a
	// build from before provenance, in tests that play one).
	prov *provenance
	// text: format 1's headers, as builds before format 2 wrote them
	// (tests that play one).
	text      bool
	partition int
	arena     []byte
	recs      []outRecord
}

// outRecord is a record the worker writes to topic: the key, value, time
// and headers of input record in, then the worker's headers (bloomgate,
// then bloomgate-error if set). in and the builder's arena are valid
// while the batch is handled. It also says how the record is written: 56
// bytes per written record, where the record, its planned write and the
// slices of its header values took 128 (docs/benchmarks-journal.md, "Buffers per
// partition").
type outRecord struct {
	in *kafka.Message
	// orig is the input record the written one stands for where that is
	// not in (a reference record); nil: in.
	orig  *kafka.Message
	topic string
	// The provenance header's and the bloomgate-error header's values in
	// the builder's arena; an empty span: no such header.
	prov, errValue span
	// alone: written by itself, one record per produce request.
	alone bool
	// legacy: the src headers, and prov is format 1's (recordBuilder.text).
	legacy bool
}

// span is a range of a recordBuilder's arena.
type span struct{ off, n uint32 }

func (s span) of(arena []byte) []byte { return arena[s.off : s.off+s.n : s.off+s.n] }

// input is the input record r stands for.
func (r *outRecord) input() *kafka.Message {
	if r.orig != nil {
		return r.orig
	}
	return r.in
}

// headers returns r's added headers (n of hs), arena being its
// builder's, p the input partition and scratch where values are built;
// seal, if set, is appended to the bloomgate header (the last record of a
// batch, or one written alone). (Returned by value and with scratch apart,
// the headers stay on the caller's stack: in a struct holding both, the
// values' slices of it made it escape, one allocation and write barriers
// per record.)
func (r *outRecord) headers(arena []byte, p int, scratch *[originMaxLen]byte, seal []byte) (hs [4]kafka.Header, n int) {
	if !r.legacy {
		v := append(appendOrigin(scratch[:0], p, r.in.Offset), seal...)
		hs[0] = kafka.Header{Key: HeaderProvenance, Value: v}
		n = 1
	} else {
		ps := strconv.AppendInt(scratch[:0], int64(p), 10)
		os := strconv.AppendInt(scratch[len(ps):len(ps)], r.in.Offset, 10)
		hs[0] = kafka.Header{Key: HeaderSrcPartition, Value: ps}
		hs[1] = kafka.Header{Key: HeaderSrcOffset, Value: os}
		n = 2
		if r.prov.n > 0 {
			hs[n] = kafka.Header{Key: HeaderTextProvenance, Value: r.prov.of(arena)}
			n++
		}
	}
	if r.errValue.n > 0 {
		hs[n] = kafka.Header{Key: HeaderError, Value: r.errValue.of(arena)}
		n++
	}
	return hs, n
}

// aloneSeal is a seal of the length of one over a record alone, for sizes.
var aloneSeal [sealLen]byte

// size is the size of a batch holding r alone (recordSize), sealed.
func (r *outRecord) size(arena []byte, p int) int64 {
	var scratch [originMaxLen]byte
	var seal []byte
	if !r.legacy {
		seal = aloneSeal[:]
	}
	hs, n := r.headers(arena, p, &scratch, seal)
	return producer.AloneSize(r.in, hs[:n]...)
}

// message builds r as a message of its own (its topic, key, value, time and
// all headers, their values copied), sealed by prov alone, for the paths
// that write one record at a time.
func (r *outRecord) message(arena []byte, p int, prov *provenance) kafka.Message {
	var scratch [originMaxLen]byte
	var seal []byte
	if !r.legacy && prov != nil {
		seal = prov.appendSeal(nil, r.topic, 1, func(int) int64 { return r.in.Offset })
	}
	extra, n := r.headers(arena, p, &scratch, seal)
	hs := make([]kafka.Header, 0, len(r.in.Headers)+n)
	hs = append(hs, r.in.Headers...)
	for _, h := range extra[:n] {
		hs = append(hs, kafka.Header{Key: h.Key, Value: append([]byte(nil), h.Value...)})
	}
	ts := r.in.Time
	if ts.IsZero() {
		ts = time.Unix(0, 0)
	}
	return kafka.Message{Topic: r.topic, Key: r.in.Key, Value: r.in.Value, Headers: hs, Time: ts}
}

func (b *recordBuilder) reset(partition int, prov *provenance, text bool) {
	b.prov, b.text, b.partition = prov, text, partition
	// Earlier batches' records are written (a write returns once its
	// batches are encoded and sent), so the arena can be reused.
	b.arena = b.arena[:0]
	clear(b.recs)
	b.recs = b.recs[:0]
}

// add appends the record of input in addressed to topic, with the
// bloomgate header and, if reason is set, a bloomgate-error header.
func (b *recordBuilder) add(topic string, in *kafka.Message, reason string) {
	r := outRecord{in: in, topic: topic, legacy: b.prov == nil || b.text}
	if b.prov != nil && b.text {
		start := len(b.arena)
		b.arena = b.prov.appendTextValue(b.arena, in.Offset, topic)
		r.prov = span{uint32(start), uint32(len(b.arena) - start)}
	}
	if reason != "" {
		start := len(b.arena)
		b.arena = append(b.arena, reason...)
		r.errValue = span{uint32(start), uint32(len(b.arena) - start)}
	}
	b.recs = append(b.recs, r)
}

// size is the size of record i alone (recordSize).
func (b *recordBuilder) size(i int) int64 { return b.recs[i].size(b.arena, b.partition) }

// message builds record i as a message of its own.
func (b *recordBuilder) message(i int) kafka.Message {
	return b.recs[i].message(b.arena, b.partition, b.prov)
}

// writeRetryReasons label bloomgate_output_write_retries_total.
var writeRetryReasons = []string{"not_leader", "unknown_partition", "leader_epoch", "no_leader"}

// retryReason names why a write that provably did not land is sent again.
func retryReason(err error) string {
	var ke kafka.Error
	if errors.As(err, &ke) {
		switch ke {
		case kafka.NotLeaderForPartition:
			return "not_leader"
		case kafka.UnknownTopicOrPartition:
			return "unknown_partition"
		case kafka.FencedLeaderEpoch, kafka.UnknownLeaderEpoch:
			return "leader_epoch"
		}
	}
	return "no_leader"
}

// writeRetried counts and logs a write sent again after an answer that
// proved nothing landed (producer.Config.OnRetry).
func (w *Worker) writeRetried(topic string, partition int, err error) {
	reason := retryReason(err)
	w.m.writeRetries.WithLabelValues(topic, reason).Inc()
	w.log.Info("output write refused before anything landed; metadata refreshed, sending it again (no recovery)",
		"topic", topic, "partition", partition, "reason", reason, "err", err)
}
