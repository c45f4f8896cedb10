package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/bloomgate/bloomgate/internal/fetcher"
)

// Recovery, in short (the argument is in docs/worker.md):
//
//	C  = checkpoint input offset (state covers input < C)
//	A  = group's committed offset (outputs of input < A are acknowledged)
//	R  = max(C, A): where forwarding may resume
//	replay input [C, R) into the filter without writing;
//	scan every written partition from the checkpoint's output offset O for
//	records naming this partition at src offset >= R: they were written but
//	not committed. They form the skip set: from R on, input is processed in
//	order as always, but a record in the skip set is only inserted, not
//	written again.
//
// Processing in input order (instead of inserting scanned keys first) keeps
// the filter a pure function of the input sequence, rotation included.

// writtenKind says where a scanned record was found.
type writtenKind uint8

const (
	toOutput writtenKind = iota
	toDuplicates
	toDeadLetter
)

type skipEntry struct {
	kind   writtenKind
	reason string // bloomgate-error of a dead-lettered record
}

type offsetBounds struct{ first, last int64 } // log start and high-water mark

// bounds lists log start and high-water mark of partitions of one topic.
func (w *Worker) bounds(ctx context.Context, topic string, partitions []int) (map[int]offsetBounds, error) {
	reqs := make([]kafka.OffsetRequest, 0, 2*len(partitions))
	for _, p := range partitions {
		reqs = append(reqs, kafka.FirstOffsetOf(p), kafka.LastOffsetOf(p))
	}
	res, err := w.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("listing offsets of %s: %w", topic, err)
	}
	out := map[int]offsetBounds{}
	for _, po := range res.Topics[topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("listing offsets of %s/%d: %w", topic, po.Partition, po.Error)
		}
		out[po.Partition] = offsetBounds{first: po.FirstOffset, last: po.LastOffset}
	}
	for _, p := range partitions {
		if _, ok := out[p]; !ok {
			return nil, fmt.Errorf("listing offsets of %s/%d: partition missing from the answer", topic, p)
		}
	}
	return out, nil
}

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
	progress := time.Now()
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
			if time.Since(progress) > scanIdle {
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
			if time.Since(progress) > scanIdle {
				return n, fmt.Errorf("scanning %s/%d: no record for %v at offset %d below the high-water mark %d",
					topic, partition, scanIdle, f.Offset(), to)
			}
			continue
		}
		progress = time.Now()
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

// scanWritten builds the skip set of input partition p: records at src
// offset >= resume already present in a written topic. It returns, per
// target, the offset the scan started at and the high-water mark it ran to.
//
// Records naming a src offset at or beyond the input's high-water mark,
// listed after the written topics' ones, are left out of the set (logged):
// every record the scan reads was written before its topic's high-water
// mark was listed, from input read before then, so below the input's
// high-water mark at that time. Such a record is not one of p's input
// records (a garbled or foreign header, or an input truncated or recreated
// since with fewer records than the offset names); keeping it would make
// the input record that later takes that offset count as written without
// being written. Leaving them out also bounds the set by the input's range
// [resume, high-water mark). An input recreated and refilled past such
// offsets cannot be told apart from the original here (see docs/worker.md).
//
// progress, if not nil, is called as the scan goes with the offsets
// scanned so far and the total to scan over all written partitions.
func (w *Worker) scanWritten(ctx context.Context, p int, resume int64, restored map[string]map[int]int64,
	progress func(done, total int64)) (
	skip *skipSet, from, to map[topicPartition]int64, scanned int, err error) {
	from, to = map[topicPartition]int64{}, map[topicPartition]int64{}
	byTopic := map[string][]int{}
	targets := w.scanTargets(p)
	for _, tp := range targets {
		byTopic[tp.topic] = append(byTopic[tp.topic], tp.partition)
	}
	for topic, parts := range byTopic {
		b, err := w.bounds(ctx, topic, parts)
		if err != nil {
			return nil, nil, nil, 0, err
		}
		for _, q := range parts {
			tp := topicPartition{topic, q}
			start := b[q].first
			if o, ok := restored[topic][q]; ok && o > start {
				start = o
			}
			if start > b[q].last {
				// The topic was recreated or truncated since the checkpoint.
				start = b[q].first
			}
			from[tp], to[tp] = start, b[q].last
		}
	}
	// After the written topics' bounds: see above.
	ib, err := w.bounds(ctx, w.cfg.Input, []int{p})
	if err != nil {
		return nil, nil, nil, 0, err
	}
	limit := ib[p].last
	skip = newSkipSet(resume, max(limit, resume))
	var beyond, maxBeyond, total, done int64
	for _, tp := range targets {
		total += to[tp] - from[tp]
	}
	for _, tp := range targets {
		kind := w.kindOf(tp.topic)
		var at func(int64)
		if progress != nil && total > 0 {
			base, start := done, from[tp]
			at = func(o int64) { progress(base+o-start, total) }
		}
		n, err := w.scanRange(ctx, tp.topic, tp.partition, from[tp], to[tp], func(m *kafka.Message) {
			sp, so, ok := srcOf(m.Headers)
			if !ok || sp != p || so < resume {
				return
			}
			if so >= limit {
				beyond, maxBeyond = beyond+1, max(maxBeyond, so)
				return
			}
			e := skipEntry{kind: kind}
			if kind == toDeadLetter {
				e.reason = headerValue(m.Headers, HeaderError)
			}
			skip.add(so, e)
		}, at)
		done += to[tp] - from[tp]
		scanned += n
		if err != nil {
			return nil, nil, nil, scanned, err
		}
	}
	if beyond > 0 {
		w.log.Warn("written records name input offsets beyond the input's high-water mark; ignored "+
			"(garbled headers, another producer, or the input was truncated or recreated)",
			"partition", p, "records", beyond, "max_src_offset", maxBeyond, "high_water_mark", limit)
	}
	return skip, from, to, scanned, nil
}

func headerValue(hs []kafka.Header, key string) string {
	for _, h := range hs {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
