package worker

import (
	"fmt"
	"hash/maphash"
	"sync/atomic"
	"time"
)

// Deduplication is per partition: a key is caught again only in the
// partition that saw it first. An input whose producers key records by
// something else (a customer, a null key: round robin) spreads one dedup
// key over several partitions, and its repeats pass as new, silently.
// crossPartition notices that: it samples 1 key in 2^xpSampleBits by a
// hash of the key, the same keys in every partition, and remembers the
// last partition of each sampled key in a direct-mapped table of
// xpSlots entries; a sampled key met again in another partition is a
// cross-partition repeat. Counted (bloomgate_cross_partition_repeats_total),
// shown on the status page, an ERROR naming the fix (at most every
// xpReportEvery), and the alert BloomgateInputNotKeyedByDedupKey.
//
// It sees the partitions of this process only, and remembers a sampled
// key until its slot is taken by another one: about xpSlots *
// 2^xpSampleBits keys of input (4 M), seconds at 500 k events/s and
// minutes at 20 k/s, so repeats that come long after are not seen; a
// correctly keyed input is never reported (the tags are 44 bits of the
// hash: two keys share one with a probability of 2^-44).
//
// Cost: one maphash of the key (a few ns) per record, 512 KiB.
type crossPartition struct {
	seed  maphash.Seed
	slots []atomic.Uint64 // tag (high 44 bits of the hash) << 20 | partition+1

	repeats atomic.Uint64
	// last is the last repeat seen: unix nanoseconds, and the two
	// partitions (first << 32 | then).
	lastAt, lastPair atomic.Int64
	reportedAt       atomic.Int64 // unix nanoseconds of the last ERROR
}

const (
	xpSampleBits  = 6
	xpSlots       = 1 << 16
	xpPartMask    = 1<<20 - 1
	xpReportEvery = 10 * time.Minute
)

func newCrossPartition() *crossPartition {
	return &crossPartition{seed: maphash.MakeSeed(), slots: make([]atomic.Uint64, xpSlots)}
}

// observe notes key in partition p and reports whether it is a sampled
// key last seen in another partition (prev).
func (x *crossPartition) observe(key []byte, p int) (prev int, repeat bool) {
	h := maphash.Bytes(x.seed, key)
	if h&(1<<xpSampleBits-1) != 0 || p < 0 || p >= xpPartMask {
		return 0, false
	}
	slot := &x.slots[(h>>xpSampleBits)&(xpSlots-1)]
	tag := h >> 20
	v := slot.Load()
	now := uint64(p + 1)
	if v>>20 == tag && v&xpPartMask != 0 && v&xpPartMask != now {
		prev, repeat = int(v&xpPartMask)-1, true
	}
	if v != tag<<20|now {
		slot.Store(tag<<20 | now)
	}
	return prev, repeat
}

// crossPartitionStatus is what the status page shows of the input's
// keying.
type crossPartitionStatus struct {
	// Repeats counts sampled keys met in two partitions since start.
	Repeats uint64 `json:"repeats"`
	// Last is when the last one was met, in which partitions.
	Last       time.Time `json:"last,omitzero"`
	Partitions [2]int    `json:"partitions"`
}

// noteKey runs the cross-partition check of a key of partition p.
func (w *Worker) noteKey(key []byte, p int) {
	if w.xpart == nil { // a Worker built without New (tests of one piece)
		return
	}
	prev, repeat := w.xpart.observe(key, p)
	if !repeat {
		return
	}
	x := w.xpart
	x.repeats.Add(1)
	now := w.deps.Now()
	x.lastAt.Store(now.UnixNano())
	x.lastPair.Store(int64(prev)<<32 | int64(p))
	w.m.crossRepeats.WithLabelValues(w.cfg.Input).Inc()
	last := x.reportedAt.Load()
	if last != 0 && now.Sub(time.Unix(0, last)) < xpReportEvery || !x.reportedAt.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	w.log.Error(fmt.Sprintf("input %s is not keyed by the dedup key: a key seen in partition %d came again in partition %d "+
		"(%d such repeats sampled so far). Deduplication is per partition, so repeats in other partitions are forwarded as new. "+
		"Fix: run with --repartition (a first hop re-keys the input by the dedup key), or make the producers key their records "+
		"by the dedup key", w.cfg.Input, prev, p, x.repeats.Load()),
		"partitions", []int{prev, p}, "repeats", x.repeats.Load())
}

// crossPartitionStatus returns the status page's view (nil: no repeat).
func (w *Worker) crossPartitionStatus() *crossPartitionStatus {
	x := w.xpart
	if x == nil {
		return nil
	}
	n := x.repeats.Load()
	if n == 0 {
		return nil
	}
	pair := x.lastPair.Load()
	return &crossPartitionStatus{Repeats: n, Last: time.Unix(0, x.lastAt.Load()).UTC(), Partitions: [2]int{int(pair >> 32), int(int32(pair))}}
}
