package chaos_test

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/bloomgate/bloomgate/internal/worker"
)

// Header names of written records besides the bloomgate header
// (worker.SourceOf reads that).
const (
	hdrError = "bloomgate-error"
	// The repartition hop's headers: where a record of its topic came
	// from in the input (the dedup stage copies them to what it writes).
	hdrOriginPartition = "bloomgate-origin-partition"
	hdrOriginOffset    = "bloomgate-origin-offset"
)

// inRec is one input record.
type inRec struct {
	Offset int64
	Key    string
	Bad    bool // malformed on purpose: belongs on the dead-letter topic
}

// outRec is one record of the output, duplicates or dead-letter topic.
type outRec struct {
	Topic     string
	Partition int
	Offset    int64
	Key       string
	SrcPart   int // -1 when the header is missing or unreadable
	SrcOffset int64
	Error     string
	// OriginPart and OriginOffset name the input record through the
	// repartition hop (-1: no origin headers).
	OriginPart   int
	OriginOffset int64
}

// topicNames of a run.
type topicNames struct{ Input, Output, Duplicates, DeadLetter string }

// ref names one input record.
type ref struct {
	Partition int
	Offset    int64
}

func (r ref) String() string { return fmt.Sprintf("%d@%d", r.Partition, r.Offset) }

// verdict is the outcome of checking what the workers wrote against the
// input. Every slice lists offending input records (or output records for
// Orphans); all must be empty, and FalsePositives within FPBound.
type verdict struct {
	Events, BadEvents, UniqueKeys, DuplicateEvents int64
	Forwarded, DuplicatesWritten, DeadLettered     int64 // records on each topic

	Lost            []ref // a first occurrence (or bad event) written nowhere
	Unprocessed     []ref // of Lost: at or beyond the group's committed offset
	WrittenTwice    []ref // an input record written more than once
	DoubleForwarded []ref // a repeated key forwarded again (on the output topic)
	FalsePositives  []ref // a first occurrence judged duplicate (on the duplicates topic)
	Misrouted       []ref // a bad event not on dead-letter, or a good one on it
	KeyMismatch     []ref // a written record whose key differs from its input record
	Orphans         []outRec
	KeysTwice       []string // unique keys on the output more than once
	FPBound         int64

	PerPartition []partitionCount
}

// partitionCount is the conservation law of one input partition, counted
// from the records themselves.
type partitionCount struct {
	Partition                                    int
	Consumed, Forwarded, Duplicates, DeadLetters int64
}

func (v *verdict) ok() bool {
	return len(v.Lost) == 0 && len(v.WrittenTwice) == 0 && len(v.DoubleForwarded) == 0 &&
		len(v.Misrouted) == 0 && len(v.KeyMismatch) == 0 && len(v.Orphans) == 0 &&
		len(v.KeysTwice) == 0 && int64(len(v.FalsePositives)) <= v.FPBound
}

// fpBound is a generous upper bound on false positives among n unique keys
// at rate p: the mean plus five standard deviations plus a small constant.
func fpBound(n int64, p float64) int64 {
	mean := float64(n) * p
	return int64(math.Ceil(mean + 5*math.Sqrt(mean*(1-p)) + 5))
}

// check compares the written records with the input. input is indexed by
// partition, each in offset order; committed is the group's committed
// offset per partition (to tell unprocessed records from lost ones).
//
// With repartition, written records name the repartition topic in their
// src headers and the input record in their origin headers; the hop is
// at-least-once, so an input record may reach the dedup stage more than
// once: its copies after the first are duplicates (or dead letters again).
// So an input record counts as written twice only if it is on the output
// more than once, a first occurrence must be on the output once, a repeat
// never; keys are compared as the hop wrote them (the hash of the
// canonical key), so a key mismatch is not checked.
func check(names topicNames, input [][]inRec, written []outRec, committed []int64, fpr float64, repartition bool) *verdict {
	v := &verdict{}
	// Per input record, compactly (soak runs hold millions): whether it is
	// the first occurrence of its key, how often and where it was written.
	type state struct {
		first    bool
		n        uint8 // times written (saturating)
		topic    uint8 // topic of the first write: 1 output, 2 duplicates, 3 dead-letter
		mismatch bool
		// repartition: writes per topic (saturating).
		out, dup, dlq uint8
	}
	states := make([][]state, len(input))
	for p, recs := range input {
		firsts := make(map[string]struct{}, len(recs))
		states[p] = make([]state, len(recs))
		for i, r := range recs {
			v.Events++
			switch _, seen := firsts[r.Key]; {
			case r.Bad:
				v.BadEvents++
			case !seen:
				firsts[r.Key] = struct{}{}
				states[p][i].first = true
				v.UniqueKeys++
			default:
				v.DuplicateEvents++
			}
		}
	}
	v.FPBound = fpBound(v.UniqueKeys, fpr)
	topicCode := map[string]uint8{names.Output: 1, names.Duplicates: 2, names.DeadLetter: 3}
	counts := make([]partitionCount, len(input))
	for p := range counts {
		counts[p].Partition = p
		counts[p].Consumed = int64(len(input[p]))
	}

	outKeys := map[string]uint8{}
	for _, o := range written {
		code := topicCode[o.Topic]
		switch code {
		case 1:
			v.Forwarded++
			if outKeys[o.Key] < 255 {
				outKeys[o.Key]++
			}
		case 2:
			v.DuplicatesWritten++
		case 3:
			v.DeadLettered++
		}
		p, off := o.SrcPart, o.SrcOffset
		if repartition {
			p, off = o.OriginPart, o.OriginOffset
		}
		if p < 0 || p >= len(input) {
			v.Orphans = append(v.Orphans, o)
			continue
		}
		recs := input[p]
		i := sort.Search(len(recs), func(i int) bool { return recs[i].Offset >= off })
		if i == len(recs) || recs[i].Offset != off {
			v.Orphans = append(v.Orphans, o)
			continue
		}
		st := &states[p][i]
		if st.n == 0 {
			st.topic = code
		}
		if st.n < 255 {
			st.n++
		}
		if repartition {
			for c, n := range map[uint8]*uint8{1: &st.out, 2: &st.dup, 3: &st.dlq} {
				if c == code && *n < 255 {
					*n++
				}
			}
		} else if o.Key != recs[i].Key {
			st.mismatch = true
		}
		switch code {
		case 1:
			counts[p].Forwarded++
		case 2:
			counts[p].Duplicates++
		case 3:
			counts[p].DeadLetters++
		}
	}

	for p, recs := range input {
		for i, r := range recs {
			rf, st := ref{p, r.Offset}, states[p][i]
			if st.n == 0 {
				v.Lost = append(v.Lost, rf)
				if p < len(committed) && r.Offset >= committed[p] {
					v.Unprocessed = append(v.Unprocessed, rf)
				}
				continue
			}
			if repartition {
				switch {
				case st.out > 1:
					v.WrittenTwice = append(v.WrittenTwice, rf)
				case r.Bad != (st.dlq > 0) || r.Bad && st.out+st.dup > 0:
					v.Misrouted = append(v.Misrouted, rf)
				case st.first && st.out == 0:
					v.FalsePositives = append(v.FalsePositives, rf)
				case !st.first && !r.Bad && st.out > 0:
					v.DoubleForwarded = append(v.DoubleForwarded, rf)
				}
				continue
			}
			if st.n > 1 {
				v.WrittenTwice = append(v.WrittenTwice, rf)
			}
			if st.mismatch {
				v.KeyMismatch = append(v.KeyMismatch, rf)
			}
			switch {
			case r.Bad != (st.topic == 3):
				v.Misrouted = append(v.Misrouted, rf)
			case st.first && st.topic == 2:
				v.FalsePositives = append(v.FalsePositives, rf)
			case !st.first && !r.Bad && st.topic == 1:
				v.DoubleForwarded = append(v.DoubleForwarded, rf)
			}
		}
	}
	v.PerPartition = counts
	for k, n := range outKeys {
		if n > 1 {
			v.KeysTwice = append(v.KeysTwice, k)
		}
	}
	sort.Strings(v.KeysTwice)
	return v
}

// summary describes the failures of v, at most a few examples each.
func (v *verdict) summary() string {
	var b strings.Builder
	list := func(name string, rs []ref) {
		if len(rs) == 0 {
			return
		}
		ex := rs
		if len(ex) > 10 {
			ex = ex[:10]
		}
		fmt.Fprintf(&b, "%s: %d (partition@offset, first ones: %v)\n", name, len(rs), ex)
	}
	list("lost (written nowhere)", v.Lost)
	list("  of which at or beyond the committed offset (never processed)", v.Unprocessed)
	list("written more than once", v.WrittenTwice)
	list("duplicate forwarded (a repeated key on the output)", v.DoubleForwarded)
	list("misrouted (bad event not on dead-letter, or good one on it)", v.Misrouted)
	list("key differs from the input record", v.KeyMismatch)
	if n := int64(len(v.FalsePositives)); n > v.FPBound {
		fmt.Fprintf(&b, "false positives: %d above the bound %d\n", n, v.FPBound)
	}
	if len(v.Orphans) > 0 {
		ex := v.Orphans
		if len(ex) > 5 {
			ex = ex[:5]
		}
		fmt.Fprintf(&b, "written records naming no input record: %d, e.g. %+v\n", len(v.Orphans), ex)
	}
	if len(v.KeysTwice) > 0 {
		ex := v.KeysTwice
		if len(ex) > 10 {
			ex = ex[:10]
		}
		fmt.Fprintf(&b, "keys on the output more than once: %d, e.g. %v\n", len(v.KeysTwice), ex)
	}
	return b.String()
}

// readPartition reads every record of topic/partition from the start to
// the high-water mark at the time of the call.
func readPartition(ctx context.Context, addr, topic string, partition int) ([]kafka.Message, error) {
	conn, err := kafka.DialLeader(ctx, "tcp", addr, topic, partition)
	if err != nil {
		return nil, fmt.Errorf("dialing leader of %s/%d: %w", topic, partition, err)
	}
	defer conn.Close()
	first, last, err := conn.ReadOffsets()
	if err != nil {
		return nil, fmt.Errorf("reading offsets of %s/%d: %w", topic, partition, err)
	}
	var msgs []kafka.Message
	if _, err := conn.Seek(first, kafka.SeekAbsolute); err != nil {
		return nil, fmt.Errorf("seeking %s/%d: %w", topic, partition, err)
	}
	next := first
	for empty := 0; next < last; {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("reading %s/%d at %d of %d: %w", topic, partition, next, last, ctx.Err())
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		batch := conn.ReadBatch(1, 8<<20)
		n := 0
		for {
			m, err := batch.ReadMessage()
			if err != nil {
				break
			}
			if m.Offset < next {
				continue
			}
			msgs = append(msgs, m)
			next = m.Offset + 1
			n++
		}
		if err := batch.Close(); err != nil && n == 0 {
			return nil, fmt.Errorf("reading %s/%d at %d: %w", topic, partition, next, err)
		}
		if n == 0 {
			if empty++; empty > 50 {
				return nil, fmt.Errorf("reading %s/%d: no progress at %d of %d", topic, partition, next, last)
			}
			if _, err := conn.Seek(next, kafka.SeekAbsolute); err != nil {
				return nil, err
			}
		} else {
			empty = 0
		}
	}
	return msgs, nil
}

// readTopics reads the input and the three written topics whole.
func readTopics(ctx context.Context, addr string, names topicNames, partitions int) ([][]inRec, []outRec, error) {
	input := make([][]inRec, partitions)
	for p := 0; p < partitions; p++ {
		msgs, err := readPartition(ctx, addr, names.Input, p)
		if err != nil {
			return nil, nil, err
		}
		recs := make([]inRec, len(msgs))
		for i, m := range msgs {
			recs[i] = inRec{Offset: m.Offset, Key: string(m.Key), Bad: strings.HasPrefix(string(m.Key), "BAD-")}
		}
		input[p] = recs
	}
	var written []outRec
	for _, topic := range []string{names.Output, names.Duplicates, names.DeadLetter} {
		for p := 0; p < partitions; p++ {
			msgs, err := readPartition(ctx, addr, topic, p)
			if err != nil {
				return nil, nil, err
			}
			for _, m := range msgs {
				o := outRec{Topic: topic, Partition: p, Offset: m.Offset, Key: string(m.Key), SrcPart: -1, SrcOffset: -1,
					OriginPart: -1, OriginOffset: -1}
				for _, h := range m.Headers {
					switch h.Key {
					case hdrOriginPartition:
						if n, err := strconv.Atoi(string(h.Value)); err == nil {
							o.OriginPart = n
						}
					case hdrOriginOffset:
						if n, err := strconv.ParseInt(string(h.Value), 10, 64); err == nil {
							o.OriginOffset = n
						}
					case hdrError:
						o.Error = string(h.Value)
					}
				}
				if p, off, ok := worker.SourceOf(m.Headers); ok {
					o.SrcPart, o.SrcOffset = p, off
				}
				written = append(written, o)
			}
		}
	}
	return input, written, nil
}
