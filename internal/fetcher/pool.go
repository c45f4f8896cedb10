package fetcher

import (
	"math/bits"
	"sync"

	"github.com/segmentio/kafka-go"
)

// Fetched record sets and the records slices decoded from them are the
// bulk of what a worker allocates: 86 % of the bytes over a run at 8
// partitions (docs/benchmarks-journal.md, "Fetched buffers reused"). Every byte of
// it became garbage once its batch was written, so the collector ran once
// per allowance's worth of fetches. A consumer that is done with a chunk
// calls Chunk.Release, and the next fetch of any partition reuses its
// buffers: the collector then runs about seven times less often for the
// same allowance. Release is optional; a chunk that is not released is
// collected as before.
//
// Buffers are pooled in size classes a quarter of a power of two apart
// (at most 25 % unused), from minPooled to maxPooled elements; other sizes
// are made and left to the collector.

const (
	minPooled = 64
	maxPooled = 16 << 20
)

// sizeClass returns the index and size of the smallest class holding n
// elements (n <= maxPooled); class i holds (4 + i%4) << (i/4).
func sizeClass(n int) (int, int) {
	n = max(n, minPooled)
	s := bits.Len(uint(n-1)) - 3 // 2^(s+2) < n <= 2^(s+3)
	m := (n + 1<<s - 1) >> s     // 5..8
	if m == 8 {
		s, m = s+1, 4
	}
	return 4*s + m - 4, m << s
}

const numClasses = 4*(24-2) + 4 // sizeClass(maxPooled) < numClasses

// slicePool pools slices of T by capacity class.
type slicePool[T any] struct{ classes [numClasses]sync.Pool }

// get returns a slice of length n whose capacity is n's class (contents
// unspecified).
func (p *slicePool[T]) get(n int) []T {
	if n > maxPooled {
		return make([]T, n)
	}
	i, size := sizeClass(n)
	if s, ok := p.classes[i].Get().(*[]T); ok {
		return (*s)[:n]
	}
	return make([]T, n, size)
}

// put keeps s for reuse if its capacity is a class size.
func (p *slicePool[T]) put(s []T) {
	c := cap(s)
	if c < minPooled || c > maxPooled {
		return
	}
	if i, size := sizeClass(c); size == c {
		s = s[:c]
		p.classes[i].Put(&s)
	}
}

var (
	setPool     slicePool[byte]
	recordsPool slicePool[kafka.Message]
)

// owned is what a chunk's records point into: the record set as fetched
// and the records slice, both from the pools.
type owned struct {
	mu      sync.Mutex
	set     []byte
	records []kafka.Message
	// inflated are the decompressed batches.
	inflated [][]byte
}

// Release hands the chunk's fetched bytes and records slice back for
// reuse by later fetches. Afterwards neither the records nor any slice of
// them (keys, values, header values) may be used: their memory is
// overwritten by the next fetch. Copies of a Chunk share what Release
// hands back; releasing any of them releases it once.
func (c *Chunk) Release() {
	o := c.own
	if o == nil {
		return
	}
	o.mu.Lock()
	set, recs, inflated := o.set, o.records, o.inflated
	o.set, o.records, o.inflated = nil, nil, nil
	o.mu.Unlock()
	if recs != nil {
		// The records point into the set and into decompressed
		// batches: keeping them would keep those alive.
		clear(recs[:cap(recs)])
		recordsPool.put(recs)
	}
	for _, b := range append(inflated, set) {
		if cap(b) == 0 {
			continue
		}
		if poisonReleased {
			all := b[:cap(b)]
			all[0] = 0xA5
			for i := 1; i < len(all); i *= 2 {
				copy(all[i:], all[:i])
			}
		}
		setPool.put(b)
	}
}
