// Package gcbudget keeps the garbage the Go runtime lets accumulate between
// collections small and independent of the filters, instead of a share of
// the live heap.
//
// The runtime's default (GOGC=100) starts a collection when the heap has
// grown by as much as was live after the last one. A worker's live heap is
// mostly its filters (bloom generations are plain Go memory), which never
// become garbage: with GOGC=100 a worker holding 2 GiB of filters lets 2 GiB
// of short-lived fetch and write buffers pile up before collecting, and its
// resident memory approaches twice the filters. A Pacer sets the GC
// percentage so that the allowance is the larger of Headroom and half the
// heap the collector has to scan, whatever the live heap.
//
// Cost: a collection's work is the scannable heap (objects with pointers:
// the decoded records, maps, the written records' builders), not the
// filters, which are pointer-free and only marked. An allowance of half
// the scannable heap bounds the marking work to about two bytes per byte
// allocated (GOGC=100 gives an ordinary program one); Headroom bounds how
// often the fixed cost of a cycle is paid. The worker reuses its fetch
// buffers (internal/fetcher, Chunk.Release), so it allocates little per
// event and a small allowance costs little.
package gcbudget

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Defaults of a Pacer.
const (
	// DefaultHeadroom: at 4 M keys over 8 partitions (filters 12 MB, fetch
	// and write buffers ~25 MB live), with the fetch buffers reused, an
	// allowance of max(4 MiB, half the scannable heap) peaked at 76 MiB of
	// RSS against 86-88 MiB with the earlier 16 MiB (and a 25 % floor), at
	// the same CPU per event; at 64 partitions 224-233 against 235-239
	// MiB for ~6 % more CPU. A fixed 4 MiB with a 5 % floor cost 80 %
	// more CPU at 64 partitions, whose scannable heap (~50 MB of decoded
	// records) was then marked every ~9 MB allocated (docs/benchmarks-journal.md,
	// "Fetched buffers reused, and the allowance").
	DefaultHeadroom = 4 << 20
	// Interval is how often the live heap is read (a few microseconds):
	// often enough that the allowance shrinks while the fetch buffers
	// fill, in the first second, not after the first 5 s at 100 %.
	Interval = 250 * time.Millisecond
)

// Percent is the GC percentage that lets max(headroom, scan/2) bytes of
// garbage accumulate over live bytes, of which scan are scannable (the
// runtime's /gc/scan/total:bytes): within 1 and 100.
func Percent(live, scan, headroom uint64) int {
	allow := max(headroom, scan/2)
	if live == 0 || live <= allow {
		return 100
	}
	return max(1, int(100*allow/live))
}

// Pacer adjusts the GC percentage to the live heap.
type Pacer struct {
	// Headroom is the garbage allowed between collections (default
	// DefaultHeadroom).
	Headroom uint64
	// OnChange, if set, is called when the percentage changes.
	OnChange func(live uint64, percent int)
}

// Run sets the GC percentage every Interval until ctx ends, then restores
// the percentage it found. An explicit GOGC (a percentage other than 100,
// or off) is left alone.
func (p *Pacer) Run(ctx context.Context) error {
	headroom := p.Headroom
	if headroom == 0 {
		headroom = DefaultHeadroom
	}
	orig := debug.SetGCPercent(100)
	debug.SetGCPercent(orig)
	if orig != 100 {
		<-ctx.Done()
		return nil
	}
	defer debug.SetGCPercent(orig)
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/total:bytes"}}
	cur := orig
	t := time.NewTicker(Interval)
	defer t.Stop()
	for {
		metrics.Read(sample)
		if sample[0].Value.Kind() == metrics.KindUint64 && sample[1].Value.Kind() == metrics.KindUint64 {
			live := sample[0].Value.Uint64()
			if pct := Percent(live, sample[1].Value.Uint64(), headroom); pct != cur {
				debug.SetGCPercent(pct)
				cur = pct
				if p.OnChange != nil {
					p.OnChange(live, pct)
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
