package worker

import (
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// lookahead holds a batch's keys, extracted and run through the filter in
// one TestAndAddBatch call before the routing loop, so that the filter can
// overlap the memory accesses of many keys. The filter sees exactly the
// calls, in exactly the order, that the routing loop would make record by
// record; the loop then reads the results.
type lookahead struct {
	n     int     // batch records covered: results exist for batch[:n]
	at    []int   // per covered record: index into keys/seen, -1 if none
	errs  []error // per covered record: the key extraction error, if any
	arena []byte  // the keys' bytes
	keys  [][]byte
	ts    []time.Time
	seen  []bool
}

// maxArenaRetained bounds the key bytes kept between batches.
const maxArenaRetained = 1 << 20

// lookaheads share the lookahead buffers between partitions: a partition
// holds one from filterAhead to the end of its routing loop (releaseAhead),
// not while its writes are acknowledged or while it waits for records, so
// about one per CPU is in use where one per assigned partition was kept
// (~100 bytes per record of the partition's largest batch; at 64
// partitions 12 MB; docs/benchmarks-journal.md, "Buffers per partition").
var lookaheads = sync.Pool{New: func() any { return new(lookahead) }}

// releaseAhead returns the partition's lookahead buffers to the pool;
// lookup then extracts and tests record by record.
func (pp *partitionProc) releaseAhead() {
	la := pp.ahead
	if la == nil {
		return
	}
	pp.ahead = nil
	la.n = 0
	clear(la.errs) // the errors may hold records' bytes
	if cap(la.arena) > maxArenaRetained {
		la.arena = nil
	}
	lookaheads.Put(la)
}

// filterAhead extracts the keys of the records handle will process and
// tests-and-adds them as one batch. It covers records up to the first one
// whose key fails to extract under on-missing-key=fail: handle may stop
// there, and nothing past a stop may reach the filter.
func (pp *partitionProc) filterAhead(batch []*kafka.Message) {
	if pp.ahead == nil {
		pp.ahead = lookaheads.Get().(*lookahead)
	}
	w, la := pp.w, pp.ahead
	la.n, la.at, la.errs = 0, la.at[:0], la.errs[:0]
	la.arena, la.keys, la.ts = la.arena[:0], la.keys[:0], la.ts[:0]
	next := pp.next
	for i, m := range batch {
		la.at = append(la.at, -1)
		la.errs = append(la.errs, nil)
		la.n = i + 1
		if m.Offset < next {
			continue
		}
		start := len(la.arena)
		out, err := w.deps.Extractor.Extract(la.arena, m.Key, m.Value, m.Headers)
		if err != nil {
			la.errs[i] = err
			if m.Offset >= pp.resume && w.failsOnMissingKey() {
				break
			}
			next = m.Offset + 1
			continue
		}
		la.arena = out
		la.at[i] = len(la.keys)
		la.keys = append(la.keys, out[start:len(out):len(out)])
		w.noteKey(out[start:], pp.p)
		la.ts = append(la.ts, m.Time)
		next = m.Offset + 1
	}
	la.seen = append(la.seen[:0], make([]bool, len(la.keys))...)
	pp.filter.TestAndAddBatch(la.keys, la.ts, la.seen)
	clear(la.keys) // drop references into an arena that may be replaced
}

// lookup returns the key extraction error of batch record i or, for a
// record with a key, whether the filter had seen it. Records filterAhead
// did not cover are extracted and tested here, one by one.
func (pp *partitionProc) lookup(i int, m *kafka.Message) (seen bool, err error) {
	if la := pp.ahead; la != nil && i < la.n {
		if err := la.errs[i]; err != nil {
			return false, err
		}
		return la.seen[la.at[i]], nil
	}
	key, err := pp.w.deps.Extractor.Extract(pp.keyBuf[:0], m.Key, m.Value, m.Headers)
	if err != nil {
		return false, err
	}
	pp.keyBuf = key
	pp.w.noteKey(key, pp.p)
	return pp.filter.TestAndAdd(key, m.Time), nil
}

// failsOnMissingKey reports whether a record without a key stops the
// partition (on-missing-key=fail).
func (w *Worker) failsOnMissingKey() bool {
	switch w.cfg.OnMissingKey {
	case MissingKeyDeadLetter, MissingKeyForward, MissingKeyDrop:
		return false
	}
	return true
}
