package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
)

// Unwritable records: records that the topic they are meant for cannot
// take, whatever the number of attempts. Two ways to find them:
//
//   - before writing: a record whose size (recordSize: a batch of it alone,
//     as built) is over its topic's bound (limits.go) is record_too_large;
//   - from the broker: a produce request refused for what it holds
//     (refusalReason) fails every record of its batch. The partition
//     remembers the batch's input offsets (isolate) and, after the usual
//     recovery (whose scan learns what landed), writes that range one
//     record per produce request: the records before and after the
//     offending one land, and the one refused again alone is unwritable.
//
// An unwritable record is placed by Config.OnUnwritable: as a dead letter
// (whole if the dead-letter topic takes it, else a reference record naming
// it), dropped and counted, or the partition stalls before it and retries
// it every UnwritableRetry (waitStalled). Nothing past an unwritable record
// waits for it except under stall, and nothing is written twice: a record
// written by a retry joins the skip set, as if the recovery scan had found
// it.

// Reasons an output refuses a record, in the bloomgate-error header of its
// dead letter and in the reason label of the records counters. (A key
// longer than --max-key-bytes is the key reason too_large; a record too
// large for its topic is record_too_large.)
const (
	ReasonRecordTooLarge   = "record_too_large"  // over the topic's bound, or MESSAGE_TOO_LARGE / RECORD_LIST_TOO_LARGE
	ReasonInvalidRecord    = "invalid_record"    // INVALID_RECORD, e.g. a null key on a compacted topic
	ReasonInvalidTimestamp = "invalid_timestamp" // INVALID_TIMESTAMP: outside the topic's accepted timestamp range
	ReasonCorruptRecord    = "corrupt_record"    // CORRUPT_MESSAGE
)

// UnwritableReasons is the fixed set of reasons a record is unwritable;
// metric series are created for each up front.
var UnwritableReasons = []string{ReasonRecordTooLarge, ReasonInvalidRecord, ReasonInvalidTimestamp, ReasonCorruptRecord}

// Headers of a reference record (docs/worker.md, "Unwritable records").
// Besides them it carries the src headers of the record it stands for and
// bloomgate-error with the reason that record is a dead letter.
const (
	HeaderRefTopic  = "bloomgate-ref-topic"  // the input topic (src partition and offset name the record)
	HeaderRefSize   = "bloomgate-ref-size"   // the size of the record that did not fit: of a batch holding it alone
	HeaderRefReason = "bloomgate-ref-reason" // why the dead-letter topic did not take the whole record
)

// refusalReason maps a write error to the reason the broker (or kafka-go)
// refused the record for what it is, or "" for any other failure.
func refusalReason(err error) string {
	var ke kafka.Error
	if !errors.As(err, &ke) {
		return ""
	}
	switch ke {
	case kafka.MessageSizeTooLarge, kafka.RecordListTooLarge:
		return ReasonRecordTooLarge
	case kafka.InvalidRecord:
		return ReasonInvalidRecord
	case kafka.InvalidTimestamp:
		return ReasonInvalidTimestamp
	case kafka.InvalidMessage:
		return ReasonCorruptRecord
	}
	return ""
}

// offsetRange is a closed range of input offsets.
type offsetRange struct{ lo, hi int64 }

func (r *offsetRange) has(off int64) bool { return r != nil && off >= r.lo && off <= r.hi }

// isolateOffset adds off to the range of input offsets written one record
// per request (after a refused batch).
func (wr *partitionWriter) isolateOffset(off int64) {
	if wr.isolate == nil {
		wr.isolate = &offsetRange{off, off}
		return
	}
	wr.isolate.lo, wr.isolate.hi = min(wr.isolate.lo, off), max(wr.isolate.hi, off)
}

// build adds the record of input m for topic to the batch and returns
// its size.
func (wr *partitionWriter) build(topic string, m *kafka.Message, reason string) int64 {
	wr.rb.add(topic, m, reason)
	return wr.rb.size(len(wr.rb.recs) - 1)
}

// pop removes the record added last.
func (b *recordBuilder) pop() {
	b.recs[len(b.recs)-1] = outRecord{}
	b.recs = b.recs[:len(b.recs)-1]
}

// route adds the record of input m for topic (with the bloomgate-error
// reason, "" for none) to the batch and counts it; one that the topic
// cannot take is placed by --on-unwritable instead (settle). A non-nil
// result means the partition stalls before m.
func (wr *partitionWriter) route(ctx context.Context, t *tally, topic string, m *kafka.Message, reason string) *stallError {
	w := wr.w
	size := wr.build(topic, m, reason)
	bound := w.limits.bound(topic)
	if size > bound {
		// The topic's max.message.bytes may have been raised since.
		w.refreshLimits(ctx, false)
		bound = w.limits.bound(topic)
	}
	if size <= bound {
		wr.planLast(m)
		t.routed(w.kindOf(topic), reason)
		return nil
	}
	wr.rb.pop()
	_, _, err := wr.settle(ctx, t, m, topic, reason, ReasonRecordTooLarge, nil, size, bound, false)
	var st *stallError
	if errors.As(err, &st) {
		return st
	}
	// Without writing, settle fails only by stalling.
	return nil
}

// planLast records how the record added last to the batch is written, m
// being the input record it stands for.
func (wr *partitionWriter) planLast(m *kafka.Message) {
	r := &wr.rb.recs[len(wr.rb.recs)-1]
	if r.in != m {
		r.orig = m
	}
	r.alone = wr.isolate.has(m.Offset)
}

// routed counts a record written where it belongs.
func (t *tally) routed(kind writtenKind, reason string) {
	switch kind {
	case toDuplicates:
		t.duplicates++
	case toDeadLetter:
		t.dead(reason)
	default:
		t.forwarded++
	}
}

// unrouted takes back what routed counted.
func (t *tally) unrouted(kind writtenKind, reason string) {
	switch kind {
	case toDuplicates:
		t.duplicates--
	case toDeadLetter:
		t.deadLettered[reason]--
	default:
		t.forwarded--
	}
}

// settle places input m, whose record for topic (with bloomgate-error
// reason) is unwritable for why, as --on-unwritable says: as a dead letter
// with why (whole, else a reference record), dropped, or a *stallError.
// cause is the broker's refusal (nil for a record over its topic's bound
// of bound bytes, size being its size). With write, each record tried is
// written at once, alone; else it is sized against its topic's bound and
// added to the batch. It counts the outcome in t and returns where the
// record landed and with which bloomgate-error ("" when dropped).
func (wr *partitionWriter) settle(ctx context.Context, t *tally, m *kafka.Message, topic, reason, why string,
	cause error, size, bound int64, write bool) (dest, header string, err error) {
	w := wr.w
	dlt := w.cfg.DeadLetter
	st := &stallError{offset: m.Offset, topic: topic, reason: reason, why: why, cause: cause,
		size: size, bound: bound, policy: w.cfg.OnUnwritable}
	if w.cfg.OnUnwritable == UnwritableDeadLetter && dlt != "" {
		// A dead letter keeps the reason it is one; anything else is a
		// dead letter because of why.
		header = why
		if topic == dlt {
			header = reason
		}
		refWhy, refSize := why, size
		if topic != dlt {
			ok, why2, cause2, size2, bound2, err := wr.place(ctx, m, dlt, header, nil, write)
			if err != nil {
				return "", "", err
			}
			if ok {
				t.dead(header)
				wr.noteUnwritable(m, topic, why, size, cause, "dead-lettered")
				return dlt, header, nil
			}
			refWhy, refSize = why2, size2
			st.topic, st.why, st.cause, st.size, st.bound = dlt, why2, cause2, size2, bound2
		}
		ref := wr.reference(m, refWhy, refSize)
		ok, why3, cause3, size3, bound3, err := wr.place(ctx, m, dlt, header, &ref, write)
		if err != nil {
			return "", "", err
		}
		if ok {
			t.dead(header)
			wr.noteUnwritable(m, topic, why, size, cause, "dead-lettered as a reference record")
			return dlt, header, nil
		}
		st.topic, st.why, st.cause, st.size, st.bound = dlt, why3, cause3, size3, bound3
	}
	if w.cfg.OnUnwritable == UnwritableDrop {
		t.drop(why)
		wr.noteUnwritable(m, topic, why, size, cause, "dropped")
		return "", "", nil
	}
	return "", "", st
}

// place tries one record for input m: built for topic with bloomgate-error
// header, or, with ref, the reference record ref. It reports whether it is
// placed (written, with write; else added to the batch), and if not why,
// the broker's refusal (nil if over the bound), its size and its topic's
// bound. err is any other write failure.
func (wr *partitionWriter) place(ctx context.Context, m *kafka.Message, topic, header string, ref *kafka.Message, write bool) (
	ok bool, why string, cause error, size, bound int64, err error) {
	w := wr.w
	src := m
	if ref != nil {
		src = ref
	}
	rb := &wr.rb
	if write {
		rb = &wr.rbAlone
		wr.reset(rb)
	}
	rb.add(topic, src, header)
	last := len(rb.recs) - 1
	size, bound = rb.size(last), w.limits.bound(topic)
	if size > bound {
		rb.pop()
		return false, ReasonRecordTooLarge, nil, size, bound, nil
	}
	if !write {
		wr.planLast(m)
		return true, "", nil, size, bound, nil
	}
	rec := rb.message(last)
	rb.pop() // rbAlone would keep the input record, and its fetch, until the next one
	if werr := w.writeAlone(ctx, wr.p, &rec); werr != nil {
		if why := refusalReason(werr); why != "" {
			return false, why, werr, size, bound, nil
		}
		wr.pm.writeFailures.Inc()
		return false, "", nil, size, bound, fmt.Errorf("writing the record of offset %d alone: %w", m.Offset, werr)
	}
	return true, "", nil, size, bound, nil
}

// refValue is the value of a reference record.
type refValue struct {
	Topic      string `json:"topic"`
	Partition  int    `json:"partition"`
	Offset     int64  `json:"offset"`
	Size       int64  `json:"size"`
	KeyBytes   int    `json:"key_bytes"`   // -1: null
	ValueBytes int    `json:"value_bytes"` // -1: null
	Headers    int    `json:"headers"`
	Reason     string `json:"reason"`
	Timestamp  string `json:"timestamp"`
}

// reference is the record written to the dead-letter topic in place of
// input m when that topic cannot take m whole (ReferenceRecord).
func (wr *partitionWriter) reference(m *kafka.Message, why string, size int64) kafka.Message {
	return ReferenceRecord(wr.w.cfg.Input, wr.p, m, why, size)
}

// ReferenceRecord is the record written to a dead-letter topic in place
// of record m of input topic in, partition p, when that topic cannot take
// m whole (why; size is the size that did not fit); the dedup stage and
// the repartition hop write it alike. Its key names the input record (a
// compacted dead-letter topic takes it); its value is a small JSON
// document (refValue), never null, so that compaction does not take it
// for a tombstone; the bloomgate-ref-* headers say what it stands for.
func ReferenceRecord(in string, p int, m *kafka.Message, why string, size int64) kafka.Message {
	lenOrNull := func(b []byte) int {
		if b == nil {
			return -1
		}
		return len(b)
	}
	v, _ := json.Marshal(refValue{Topic: in, Partition: p, Offset: m.Offset, Size: size,
		KeyBytes: lenOrNull(m.Key), ValueBytes: lenOrNull(m.Value), Headers: len(m.Headers), Reason: why,
		Timestamp: m.Time.UTC().Format(time.RFC3339Nano)})
	return kafka.Message{
		Offset: m.Offset,
		Key:    fmt.Appendf(nil, "%s/%d/%d", in, p, m.Offset),
		Value:  v,
		Time:   m.Time,
		Headers: []kafka.Header{
			{Key: HeaderRefTopic, Value: []byte(in)},
			{Key: HeaderRefSize, Value: strconv.AppendInt(nil, size, 10)},
			{Key: HeaderRefReason, Value: []byte(why)},
		},
	}
}

// noteUnwritable logs a placed unwritable record: at ERROR when dropped,
// else at WARN; at most one line per unwritableLogEvery per partition,
// saying how many were not logged.
func (wr *partitionWriter) noteUnwritable(m *kafka.Message, topic, why string, size int64, cause error, outcome string) {
	lvl := slog.LevelWarn
	if outcome == "dropped" {
		lvl = slog.LevelError
	}
	now := wr.w.deps.Now()
	if !wr.unwritableLogAt.IsZero() && now.Sub(wr.unwritableLogAt) < unwritableLogEvery && lvl < slog.LevelError {
		wr.unwritableQuiet++
		return
	}
	attrs := []any{"offset", m.Offset, "topic", topic, "reason", why, "size", size, "policy", wr.w.cfg.OnUnwritable}
	if cause != nil {
		attrs = append(attrs, "err", cause)
	} else {
		attrs = append(attrs, "bound", wr.w.limits.bound(topic), "max_message_bytes", wr.w.limits.limit(topic))
	}
	if wr.unwritableQuiet > 0 {
		attrs = append(attrs, "not_logged_since_last", wr.unwritableQuiet)
	}
	wr.unwritableLogAt, wr.unwritableQuiet = now, 0
	wr.log.Log(context.Background(), lvl, "record unwritable to its topic; "+outcome, attrs...)
}

// unwritableLogEvery bounds the WARN lines about placed unwritable records.
const unwritableLogEvery = 10 * time.Second

// stallError stops a partition before an unwritable record
// (--on-unwritable=stall, or dead-letter when even a reference record is
// refused).
type stallError struct {
	offset        int64
	topic, reason string // the record as routed: its topic and bloomgate-error
	why           string
	cause         error // the broker's refusal; nil: over the bound
	size, bound   int64 // of the last record tried, for its topic
	policy        UnwritablePolicy
}

func (e *stallError) Error() string {
	s := fmt.Sprintf("offset %d: the record for topic %q is unwritable (%s", e.offset, e.topic, e.why)
	if e.cause != nil {
		s += ": " + e.cause.Error()
	} else {
		s += fmt.Sprintf(": %d bytes as written, over the topic's bound of %d bytes", e.size, e.bound)
	}
	s += fmt.Sprintf("); --on-unwritable=%s: the partition waits before it and retries every %v", e.policy, UnwritableRetry)
	if e.why == ReasonRecordTooLarge {
		return s + "; raise the topic's max.message.bytes (and --max-batch-bytes), or set --dead-letter"
	}
	return s + "; fix what the broker refuses (e.g. the topic's cleanup.policy for a null key), or set --dead-letter"
}

// stall is a partition's wait before an unwritable record.
type stall struct {
	*stallError
	since time.Time
	// msg is the input record, kept once the session reached it.
	msg *kafka.Message
}

// cutAtStall ends the batch before the stalled record and keeps a copy of
// it; it reports whether the batch reached it. A stalled record that is no
// longer in the input (retention, compaction) ends the stall.
func (wr *partitionWriter) cutAtStall(b *batch) bool {
	st := wr.stall
	if st == nil || st.msg != nil {
		return false
	}
	for j, m := range b.msgs {
		if m.Offset < st.offset {
			continue
		}
		if m.Offset > st.offset {
			wr.log.Warn("the record the partition stalled before is gone from the input; going on", "offset", st.offset)
			wr.stall = nil
			return false
		}
		st.msg = copyMessage(m)
		b.msgs = b.msgs[:j]
		b.next = st.offset
		b.markers, b.aborted = 0, 0
		return true
	}
	return false
}

func copyMessage(m *kafka.Message) *kafka.Message {
	c := *m
	clone := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		return append([]byte{}, b...)
	}
	c.Key, c.Value = clone(m.Key), clone(m.Value)
	c.Headers = make([]kafka.Header, len(m.Headers))
	for i, h := range m.Headers {
		c.Headers[i] = kafka.Header{Key: h.Key, Value: clone(h.Value)}
	}
	return &c
}

// waitStalled holds the partition before its unwritable record, keeping
// checkpoints, commits and its status current, and tries the record again
// every UnwritableRetry (with the limits read again). It returns nil once
// the record is written (it is then in the skip set: processing goes on
// from it), done when ctx ended (the session then finishes), or a write
// failure that needs a recovery.
func (pp *partitionProc) waitStalled(ctx context.Context) (done bool, err error) {
	w, st := pp.w, pp.wr.stall
	pp.showStall(w.deps.Now().Add(w.unwritableRetry))
	retry := time.NewTimer(w.unwritableRetry)
	defer retry.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case <-tick.C:
			pp.housekeeping(ctx)
			continue
		case <-retry.C:
		}
		dest, header, err := pp.wr.retryStall(ctx, pp.writtenProvenance())
		var again *stallError
		switch {
		case errors.As(err, &again):
			pp.showStall(w.deps.Now().Add(w.unwritableRetry))
			retry.Reset(w.unwritableRetry)
			continue
		case err != nil:
			return false, err
		}
		if dest != "" && !pp.skip.add(st.offset, skipEntry{kind: w.kindOf(dest), reason: header}) {
			// Outside the skip set's range (not expected: the record was
			// read before this session's scan): let a recovery's scan find
			// it rather than write it twice.
			pp.wr.stall = nil
			return false, fmt.Errorf("the record at offset %d the partition stalled before is written to %s; recovering to find it", st.offset, dest)
		}
		pp.log.Info("the record the partition stalled before is placed; going on",
			"offset", st.offset, "topic", dest, "stalled_for", w.deps.Now().Sub(st.since).Round(time.Second))
		pp.wr.stall = nil
		pp.w.updatePartition(pp.p, func(ps *PartitionStatus) { ps.Unwritable = nil })
		pp.setState("running")
		return false, nil
	}
}

// retryStall tries the record the partition stalls before again, with
// the limits read again, as records to be written with prov. It returns
// where the record landed and with which bloomgate-error (dest "" when
// dropped), a *stallError when it is still unwritable (the stall then
// names the last refusal), or a failure that needs a recovery.
func (wr *partitionWriter) retryStall(ctx context.Context, prov *provenance) (dest, header string, err error) {
	st := wr.stall
	if wr.com.PausedTooLong() {
		// A zombie: the group has moved this partition on.
		wr.com.Fence(errPaused)
		return "", "", fmt.Errorf("not writing: %w", errPaused)
	}
	wr.prov = prov
	wr.w.refreshLimits(ctx, true)
	var t tally // counted when processing reaches the record in the skip set
	ok, why, cause, size, bound, err := wr.place(ctx, st.msg, st.topic, st.reason, nil, true)
	dest, header = st.topic, st.reason
	if err == nil && !ok {
		dest, header, err = wr.settle(ctx, &t, st.msg, st.topic, st.reason, why, cause, size, bound, true)
	}
	var again *stallError
	if errors.As(err, &again) {
		st.stallError = again
	}
	return dest, header, err
}

// showStall puts the stall on the status page.
func (pp *partitionProc) showStall(next time.Time) {
	st := pp.wr.stall
	u := &Unwritable{Offset: st.offset, Topic: st.topic, Reason: st.why, Size: st.size, Since: st.since, NextRetry: next}
	msg := st.Error()
	pp.w.updatePartition(pp.p, func(ps *PartitionStatus) {
		ps.Topic, ps.Partition, ps.Generation, ps.State = pp.w.cfg.Input, pp.p, pp.gen, "stalled"
		ps.Unwritable = u
		ps.LastError, ps.LastErrorAt = msg, pp.w.deps.Now()
	})
}

// Unwritable describes the record a stalled partition waits before.
type Unwritable struct {
	Offset    int64     `json:"offset"`
	Topic     string    `json:"topic"`  // the topic that does not take it
	Reason    string    `json:"reason"` // record_too_large, invalid_record, …
	Size      int64     `json:"size"`   // of a batch holding the built record alone
	Since     time.Time `json:"since"`
	NextRetry time.Time `json:"next_retry"`
}

// writeAlone writes m, built by input partition p, by itself, in one
// produce request of its own, to the partition a batch would take it to,
// and records its acknowledged offset. It is not cancelled by a revoke;
// WriteTimeout bounds it.
func (w *Worker) writeAlone(ctx context.Context, p int, m *kafka.Message) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.WriteTimeout)
	defer cancel()
	return w.out.writeOne(wctx, p, m)
}
