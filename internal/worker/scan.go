package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/bloomgate/bloomgate/internal/fetcher"
)

// scanIdle is how long the recovery scan waits for progress below the
// high-water mark before failing the recovery (which is then retried).
// Ending the scan early instead would miss written records and forward them
// again.
const scanIdle = 30 * time.Second

// replayIdle: a replay that gets no record for this long is reported
// running; offsets below resume are still only replayed when they arrive.
const replayIdle = 2 * time.Second

// scanRange calls fn for every record of topic/partition in [from, to),
// and at after each fetch with the offset reached (nil: not called).
func (w *Worker) scanRange(ctx context.Context, topic string, partition int, from, to int64, fn func(*kafka.Message), at func(int64)) (int, error) {
	if from >= to {
		return 0, nil
	}
	f, err := w.newFetcher(topic, partition, from)
	if err != nil {
		return 0, err
	}
	n := 0
	progress := w.deps.Now()
	for f.Offset() < to {
		pos := f.Offset()
		c, err := f.Fetch(ctx)
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		if err != nil {
			var oe *fetcher.OffsetError
			if errors.As(err, &oe) {
				return n, fmt.Errorf("scanning %s/%d: %w", topic, partition, err)
			}
			if w.deps.Now().Sub(progress) > scanIdle {
				return n, fmt.Errorf("scanning %s/%d: no progress for %v at offset %d below the high-water mark %d: %w",
					topic, partition, scanIdle, f.Offset(), to, err)
			}
			select {
			case <-ctx.Done():
				return n, ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		if len(c.Records) == 0 && c.Next == pos {
			if w.deps.Now().Sub(progress) > scanIdle {
				return n, fmt.Errorf("scanning %s/%d: no record for %v at offset %d below the high-water mark %d",
					topic, partition, scanIdle, f.Offset(), to)
			}
			continue
		}
		progress = w.deps.Now()
		for i := range c.Records {
			if c.Records[i].Offset >= to {
				return n, nil
			}
			n++
			fn(&c.Records[i])
		}
		if at != nil {
			at(min(f.Offset(), to))
		}
	}
	return n, nil
}

// scanTargets lists the partitions the worker may have written records of
// input partition p to.
func (w *Worker) scanTargets(p int) []topicPartition {
	var out []topicPartition
	for _, t := range []string{w.cfg.Output, w.cfg.Duplicates, w.cfg.DeadLetter} {
		if t == "" {
			continue
		}
		n := w.partitions[t]
		if w.cfg.Partitioning == PartitioningSame {
			out = append(out, topicPartition{t, targetPartition(p, n)})
			continue
		}
		for q := 0; q < n; q++ {
			out = append(out, topicPartition{t, q})
		}
	}
	return out
}

func (w *Worker) kindOf(topic string) writtenKind {
	switch topic {
	case w.cfg.Duplicates:
		return toDuplicates
	case w.cfg.DeadLetter:
		return toDeadLetter
	}
	return toOutput
}

// scanResult is what the recovery scan found.
type scanResult struct {
	skip     *skipSet
	from, to map[topicPartition]int64 // per written partition: where the scan began, and the high-water mark it ran to
	scanned  int
	// legacyBefore is, per written partition, the offset below which
	// records without a provenance header count as this memory's
	// (Checkpoint.LegacyBefore).
	legacyBefore map[topicPartition]int64
	// foreign counts the records of other writers met, by written topic
	// and verdict; others names the other groups (and their input
	// topics) whose records were met, a few per topic.
	foreign map[foreignKey]int64
	others  map[string][]string
}

type foreignKey struct {
	topic   string
	verdict provenanceVerdict
}

// maxOtherGroups bounds the other groups named per topic in a report.
const maxOtherGroups = 4

// scanWritten builds the skip set of input partition p: records at src
// offset >= resume already present in a written topic, written by this
// memory. It returns, per target, the offset the scan started at and the
// high-water mark it ran to.
//
// A record counts as written by this memory only if its provenance header
// (provenance.go) verifies under the memory's key pv, or, for records
// without one, if the restored checkpoint says a build from before
// provenance headers may have written them there (Restored.LegacyProvenance,
// LegacyBefore). Every other record met is another writer's: ignored,
// counted by reason in the result and reported by reportForeign. Records
// of this group's other input partitions (hash partitioning, or more input
// partitions than a written topic has) are neither.
//
// Records naming a src offset at or beyond the input's high-water mark,
// listed after the written topics' ones, are left out of the set (logged):
// every record the scan reads was written before its topic's high-water
// mark was listed, from input read before then, so below the input's
// high-water mark at that time. Such a record is not one of p's input
// records (the input was truncated or recreated since with fewer records
// than the offset names); keeping it would make the input record that
// later takes that offset count as written without being written. Leaving
// them out also bounds the set by the input's range [resume, high-water
// mark).
//
// progress, if not nil, is called as the scan goes with the offsets
// scanned so far and the total to scan over all written partitions.
//
// With fresh set (the input's log was re-created or cut short), what the
// written topics hold was written for records that are gone: the scan
// reads nothing, and the next one starts at the written topics' current
// ends.
func (w *Worker) scanWritten(ctx context.Context, p int, resume int64, restored *Restored, pv *provenance, fresh bool,
	progress func(done, total int64)) (*scanResult, error) {
	res := &scanResult{foreign: map[foreignKey]int64{}, others: map[string][]string{}}
	targets := w.scanTargets(p)
	var err error
	if res.from, res.to, err = w.scanBounds(ctx, targets, restored, fresh); err != nil {
		return nil, err
	}
	res.legacyBefore = legacyBounds(targets, restored, res.to)
	// After the written topics' bounds: see above.
	ib, err := w.bounds(ctx, w.cfg.Input, []int{p})
	if err != nil {
		return nil, err
	}
	s := &writtenScan{w: w, p: p, resume: resume, limit: ib[p].last, pv: pv, res: res}
	res.skip = newSkipSet(resume, max(s.limit, resume))
	if err := s.run(ctx, targets, progress); err != nil {
		return nil, err
	}
	if s.beyond > 0 {
		w.log.Warn("written records name input offsets beyond the input's high-water mark; ignored "+
			"(the input was truncated or recreated since they were written)",
			"partition", p, "records", s.beyond, "max_src_offset", s.maxBeyond, "high_water_mark", s.limit)
	}
	w.reportForeign(p, res)
	return res, nil
}

// scanBounds lists, per written partition of targets, where the recovery
// scan starts (the restored checkpoint's output offset, else the log
// start; with fresh, the high-water mark) and the high-water mark it runs
// to.
func (w *Worker) scanBounds(ctx context.Context, targets []topicPartition, restored *Restored, fresh bool) (from, to map[topicPartition]int64, err error) {
	from, to = map[topicPartition]int64{}, map[topicPartition]int64{}
	byTopic := map[string][]int{}
	for _, tp := range targets {
		byTopic[tp.topic] = append(byTopic[tp.topic], tp.partition)
	}
	for topic, parts := range byTopic {
		b, err := w.bounds(ctx, topic, parts)
		if err != nil {
			return nil, nil, err
		}
		for _, q := range parts {
			tp := topicPartition{topic, q}
			start := b[q].first
			if o, ok := restored.OutputOffsets[topic][q]; ok && o > start {
				start = o
			}
			if start > b[q].last {
				// The topic was recreated or truncated since the checkpoint.
				start = b[q].first
			}
			if fresh {
				start = b[q].last
			}
			from[tp], to[tp] = start, b[q].last
		}
	}
	return from, to, nil
}

// legacyBounds is, per written partition of targets, where records without
// a provenance header may be this memory's (scanResult.legacyBefore); to is
// where the scan of each ends.
func legacyBounds(targets []topicPartition, restored *Restored, to map[topicPartition]int64) map[topicPartition]int64 {
	legacy := map[topicPartition]int64{}
	for _, tp := range targets {
		switch {
		case restored.LegacyProvenance:
			// Everything up to now may have been written by an older
			// build; what this one writes from here on carries provenance.
			legacy[tp] = to[tp]
		default:
			if o, ok := restored.LegacyBefore[tp.topic][tp.partition]; ok {
				legacy[tp] = o
			}
		}
	}
	return legacy
}

// writtenScan is one recovery scan of the written partitions for input
// partition p (scanWritten): it judges every record read and adds this
// memory's at src offsets in [resume, limit) to res.skip.
type writtenScan struct {
	w             *Worker
	p             int
	resume, limit int64 // limit: the input's high-water mark, listed after the written topics'
	pv            *provenance
	res           *scanResult
	// beyond counts the records of p naming src offsets at or beyond
	// limit (ignored), maxBeyond the largest.
	beyond, maxBeyond int64
}

// run scans each of targets in turn from res.from to res.to, reporting
// progress (if not nil) over all of them.
func (s *writtenScan) run(ctx context.Context, targets []topicPartition, progress func(done, total int64)) error {
	res := s.res
	var total, done int64
	for _, tp := range targets {
		total += res.to[tp] - res.from[tp]
	}
	for _, tp := range targets {
		var at func(int64)
		if progress != nil && total > 0 {
			base, start := done, res.from[tp]
			at = func(o int64) { progress(base+o-start, total) }
		}
		t := &targetScan{writtenScan: s, tp: tp, kind: s.w.kindOf(tp.topic)}
		t.legacyTo, t.legacy = res.legacyBefore[tp]
		n, err := s.w.scanRange(ctx, tp.topic, tp.partition, res.from[tp], res.to[tp], t.record, at)
		t.orphans(t.pend)
		done += res.to[tp] - res.from[tp]
		res.scanned += n
		if err != nil {
			return err
		}
	}
	return nil
}

// targetScan is the scan of one written partition tp.
type targetScan struct {
	*writtenScan
	tp   topicPartition
	kind writtenKind
	// legacy: records without provenance below legacyTo count as this
	// memory's.
	legacy   bool
	legacyTo int64
	// pend holds format 2 records waiting for the seal of their batch,
	// the last record of it; those no verified seal covers are not this
	// memory's (provenance.go).
	pend []pendingRecord
}

// record judges the record m read from t.tp.
func (t *targetScan) record(m *kafka.Message) {
	o := originOf(m.Headers)
	if o.format != 2 || !o.srcOK {
		t.orphans(t.pend)
		t.pend = t.pend[:0]
		t.single(m, o)
		return
	}
	if len(t.pend) > 0 && (t.pend[len(t.pend)-1].at+1 != m.Offset || len(t.pend) >= maxSealed) {
		t.orphans(t.pend)
		t.pend = t.pend[:0]
	}
	r := pendingRecord{at: m.Offset, sp: o.partition, so: o.offset}
	if t.kind == toDeadLetter {
		r.reason = headerValue(m.Headers, HeaderError)
	}
	if !o.sealed {
		t.pend = append(t.pend, r)
		return
	}
	t.seal(o, r)
}

// single judges a record that belongs to no sealed batch: one of an older
// format, or one whose provenance does not parse.
func (t *targetScan) single(m *kafka.Message, o origin) {
	verdict, who := provMalformed, ""
	if o.format != 2 {
		verdict, who = t.pv.judge(o, t.tp.topic)
	}
	if verdict == provNone && t.legacy && m.Offset < t.legacyTo {
		verdict = provOurs
	}
	if _, hop := lastHeader(m.Headers, HeaderOriginPartition); verdict == provNoHeaders && hop {
		verdict = provHop
	}
	t.count(verdict, o.partition, o.offset, func() string { return headerValue(m.Headers, HeaderError) }, who)
}

// seal judges the batch that the seal r (with origin o) closes: the
// records pending right before it, if they are the batch's, and r itself.
// Pending records the seal does not cover are orphans.
func (t *targetScan) seal(o origin, r pendingRecord) {
	k := o.n - 1
	covered := k <= len(t.pend)
	var grp []pendingRecord
	if covered {
		grp = t.pend[len(t.pend)-k:]
		for i := range grp {
			covered = covered && grp[i].at == r.at-int64(k-i) && grp[i].sp == o.partition
		}
	}
	if !covered {
		grp = nil
	}
	t.orphans(t.pend[:len(t.pend)-len(grp)])
	verdict, who := t.pv.verifySeal(o, t.tp.topic, func(i int) int64 {
		if i < len(grp) {
			return grp[i].so
		}
		return o.offset
	})
	if !covered && verdict == provOurs {
		verdict = provInvalid // cannot happen: the mac covers n offsets
	}
	for _, g := range append(grp, r) {
		t.count(verdict, g.sp, g.so, func() string { return g.reason }, who)
	}
	t.pend = t.pend[:0]
}

// orphans counts format 2 records no verified seal covers: not this
// memory's.
func (t *targetScan) orphans(rs []pendingRecord) {
	for _, r := range rs {
		t.count(provNone, r.sp, r.so, nil, "")
	}
}

// count records one record found in t.tp, naming input partition sp and
// offset so, as its verdict says: this memory's go to the skip set (with
// reason, for the dead letter topic, called only then), other writers'
// are counted as foreign (who: the other group), records of this group's
// other input partitions and of a repartition hop are neither.
func (t *targetScan) count(verdict provenanceVerdict, sp int, so int64, reason func() string, who string) {
	res := t.res
	switch verdict {
	case provOurs:
	case provOtherPartition, provHop:
		return
	case provOtherGroup:
		res.foreign[foreignKey{t.tp.topic, verdict}]++
		if others := res.others[t.tp.topic]; len(others) < maxOtherGroups && !slices.Contains(others, who) {
			res.others[t.tp.topic] = append(others, who)
		}
		return
	case provNoHeaders:
		res.foreign[foreignKey{t.tp.topic, verdict}]++
		return
	default:
		if sp == t.p || verdict != provNone {
			res.foreign[foreignKey{t.tp.topic, verdict}]++
		}
		return
	}
	if sp != t.p || so < t.resume {
		return
	}
	if so >= t.limit {
		t.beyond, t.maxBeyond = t.beyond+1, max(t.maxBeyond, so)
		return
	}
	e := skipEntry{kind: t.kind}
	if t.kind == toDeadLetter {
		e.reason = reason()
	}
	res.skip.add(so, e)
}

// pendingRecord is a format 2 record the recovery scan read, waiting for
// the seal of its batch: at its offset where it is, sp and so the input
// partition and offset it names, reason its bloomgate-error.
type pendingRecord struct {
	at     int64
	sp     int
	so     int64
	reason string
}

// headerValue is the value of the last header named key ("" if none):
// the worker's own, after any the input record carried.
func headerValue(hs []kafka.Header, key string) string {
	v, _ := lastHeader(hs, key)
	return string(v)
}

// foreignText says what records of each verdict are, for the report.
var foreignText = [provenanceVerdicts]string{
	provNoHeaders: "without bloomgate headers (another producer writes to this topic)",
	provNone: "naming an input record without a provenance that covers it (another producer copying or forging " +
		"bloomgate headers, or a build from before provenance headers whose checkpoint this memory no longer restores)",
	provOtherGroup: "written by another consumer group or from another input topic (two pipelines write to this topic)",
	provOtherMemory: "written for this group, input and partition by another memory: its checkpoints were lost or replaced " +
		"(or a checkpoint directory was copied); they cannot be proven this memory's, so their input records are processed again",
	provInvalid:   "carrying this memory's id with a provenance that does not verify (forged or corrupted)",
	provMalformed: "with a provenance header that does not parse",
}

// reportForeign counts the foreign records of one scan and logs, once per
// process for each written topic and reason (and other group), what they
// are.
func (w *Worker) reportForeign(p int, res *scanResult) {
	for k, n := range res.foreign {
		w.m.foreign.WithLabelValues(k.topic, foreignReasons[k.verdict]).Add(float64(n))
		key := k.topic + "\x00" + foreignReasons[k.verdict]
		if k.verdict == provOtherGroup {
			key += "\x00" + strings.Join(res.others[k.topic], ", ")
		}
		if _, seen := w.reported.LoadOrStore(key, true); seen {
			continue
		}
		msg := fmt.Sprintf("topic %q holds records this memory did not write, %s; ignored: they do not count as written "+
			"(counted in bloomgate_foreign_records_total; reported once per process)", k.topic, foreignText[k.verdict])
		attrs := []any{"partition", p, "written_topic", k.topic, "reason", foreignReasons[k.verdict], "records", n}
		if k.verdict == provOtherGroup {
			attrs = append(attrs, "writers", strings.Join(res.others[k.topic], ", "))
		}
		w.log.Warn(msg, attrs...)
	}
}
