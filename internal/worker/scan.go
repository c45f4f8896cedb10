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
	res := &scanResult{from: map[topicPartition]int64{}, to: map[topicPartition]int64{},
		legacyBefore: map[topicPartition]int64{}, foreign: map[foreignKey]int64{}, others: map[string][]string{}}
	byTopic := map[string][]int{}
	targets := w.scanTargets(p)
	for _, tp := range targets {
		byTopic[tp.topic] = append(byTopic[tp.topic], tp.partition)
	}
	for topic, parts := range byTopic {
		b, err := w.bounds(ctx, topic, parts)
		if err != nil {
			return nil, err
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
			res.from[tp], res.to[tp] = start, b[q].last
		}
	}
	// Where records without a provenance header may be this memory's.
	for _, tp := range targets {
		switch {
		case restored.LegacyProvenance:
			// Everything up to now may have been written by an older
			// build; what this one writes from here on carries provenance.
			res.legacyBefore[tp] = res.to[tp]
		default:
			if o, ok := restored.LegacyBefore[tp.topic][tp.partition]; ok {
				res.legacyBefore[tp] = o
			}
		}
	}
	// After the written topics' bounds: see above.
	ib, err := w.bounds(ctx, w.cfg.Input, []int{p})
	if err != nil {
		return nil, err
	}
	limit := ib[p].last
	res.skip = newSkipSet(resume, max(limit, resume))
	var beyond, maxBeyond, total, done int64
	for _, tp := range targets {
		total += res.to[tp] - res.from[tp]
	}
	for _, tp := range targets {
		kind := w.kindOf(tp.topic)
		var at func(int64)
		if progress != nil && total > 0 {
			base, start := done, res.from[tp]
			at = func(o int64) { progress(base+o-start, total) }
		}
		legacyTo, legacy := res.legacyBefore[tp]
		// apply counts a record found here as its verdict says; this
		// memory's go to the skip set.
		apply := func(verdict provenanceVerdict, sp int, so int64, reason func() string, who string) {
			switch verdict {
			case provOurs:
			case provOtherPartition, provHop:
				return
			case provOtherGroup:
				res.foreign[foreignKey{tp.topic, verdict}]++
				if others := res.others[tp.topic]; len(others) < maxOtherGroups && !slices.Contains(others, who) {
					res.others[tp.topic] = append(others, who)
				}
				return
			case provNoHeaders:
				res.foreign[foreignKey{tp.topic, verdict}]++
				return
			default:
				if sp == p || verdict != provNone {
					res.foreign[foreignKey{tp.topic, verdict}]++
				}
				return
			}
			if sp != p || so < resume {
				return
			}
			if so >= limit {
				beyond, maxBeyond = beyond+1, max(maxBeyond, so)
				return
			}
			e := skipEntry{kind: kind}
			if kind == toDeadLetter {
				e.reason = reason()
			}
			res.skip.add(so, e)
		}
		// Format 2 records wait here for the seal of their batch, the
		// last record of it; those no verified seal covers are not this
		// memory's (provenance.go).
		var pend []pendingRecord
		orphans := func(rs []pendingRecord) {
			for _, r := range rs {
				apply(provNone, r.sp, r.so, nil, "")
			}
		}
		n, err := w.scanRange(ctx, tp.topic, tp.partition, res.from[tp], res.to[tp], func(m *kafka.Message) {
			o := originOf(m.Headers)
			if o.format != 2 || !o.srcOK {
				orphans(pend)
				pend = pend[:0]
				verdict, who := provMalformed, ""
				if o.format != 2 {
					verdict, who = pv.judge(o, tp.topic)
				}
				if verdict == provNone && legacy && m.Offset < legacyTo {
					verdict = provOurs
				}
				if _, hop := lastHeader(m.Headers, HeaderOriginPartition); verdict == provNoHeaders && hop {
					verdict = provHop
				}
				apply(verdict, o.partition, o.offset, func() string { return headerValue(m.Headers, HeaderError) }, who)
				return
			}
			if len(pend) > 0 && (pend[len(pend)-1].at+1 != m.Offset || len(pend) >= maxSealed) {
				orphans(pend)
				pend = pend[:0]
			}
			r := pendingRecord{at: m.Offset, sp: o.partition, so: o.offset}
			if kind == toDeadLetter {
				r.reason = headerValue(m.Headers, HeaderError)
			}
			if !o.sealed {
				pend = append(pend, r)
				return
			}
			k := o.n - 1
			covered := k <= len(pend)
			var grp []pendingRecord
			if covered {
				grp = pend[len(pend)-k:]
				for i := range grp {
					covered = covered && grp[i].at == m.Offset-int64(k-i) && grp[i].sp == o.partition
				}
			}
			if !covered {
				grp = nil
			}
			orphans(pend[:len(pend)-len(grp)])
			verdict, who := pv.verifySeal(o, tp.topic, func(i int) int64 {
				if i < len(grp) {
					return grp[i].so
				}
				return o.offset
			})
			if !covered && verdict == provOurs {
				verdict = provInvalid // cannot happen: the mac covers n offsets
			}
			for _, g := range append(grp, r) {
				apply(verdict, g.sp, g.so, func() string { return g.reason }, who)
			}
			pend = pend[:0]
		}, at)
		orphans(pend)
		done += res.to[tp] - res.from[tp]
		res.scanned += n
		if err != nil {
			return nil, err
		}
	}
	if beyond > 0 {
		w.log.Warn("written records name input offsets beyond the input's high-water mark; ignored "+
			"(the input was truncated or recreated since they were written)",
			"partition", p, "records", beyond, "max_src_offset", maxBeyond, "high_water_mark", limit)
	}
	w.reportForeign(p, res)
	return res, nil
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
