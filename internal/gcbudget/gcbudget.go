// Package gcbudget keeps the garbage the Go runtime lets accumulate between
// collections at a fixed allowance, instead of a share of the live heap.
//
// The runtime's default (GOGC=100) starts a collection when the heap has
// grown by as much as was live after the last one. A worker's live heap is
// mostly its filters (bloom generations are plain Go memory), which never
// become garbage: with GOGC=100 a worker holding 2 GiB of filters lets 2 GiB
// of short-lived fetch and write buffers pile up before collecting, and its
// resident memory approaches twice the filters. A Pacer sets the GC
// percentage so that the allowance is Headroom bytes whatever the live heap
// — 100 % (the default) while the live heap is at most Headroom, less as
// the filters grow, never below MinPercent.
//
// Cost: a collection every Headroom bytes allocated once the live heap is
// larger than Headroom. The filters are pointer-free and are not scanned,
// so a collection costs about what it costs without them.
package gcbudget

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Defaults of a Pacer.
const (
	// DefaultHeadroom is small against a worker's other memory: at 4 M
	// keys over 8 partitions (filters 11 MB, fetch and write buffers
	// ~40 MB live) the peak RSS was 181 MiB with 64 MiB (read every 5 s),
	// 131 MiB with 16 MiB; with 512 KiB fetches 116 MiB at 32 MiB and
	// 103 MiB at 16 MiB, which spent ~15 % more CPU per event than 32 MiB
	// (docs/benchmarks.md, "Peak RSS at 4 M keys").
	DefaultHeadroom = 16 << 20
	// MinPercent bounds how often the runtime collects: at most every
	// 25 % of the live heap allocated. A worker with many partitions has a
	// large live heap of buffers besides its filters: at 64 partitions
	// (2 M events, ~250 MB live) 10 % cost 3.9 CPU s per 1 M events at 285
	// MiB of RSS, 25 % 2.6 s at 327 MiB (docs/benchmarks.md, "64
	// partitions after the memory work"). With large filters it lets more
	// garbage accumulate (512 MiB of filters: 128 MiB instead of 51).
	MinPercent = 25
	// Interval is how often the live heap is read (a few microseconds):
	// often enough that the allowance shrinks while the fetch buffers
	// fill, in the first second, not after the first 5 s at 100 %.
	Interval = 250 * time.Millisecond
)

// Percent is the GC percentage that lets headroom bytes of garbage
// accumulate over live bytes: 100 × headroom / live, within MinPercent and
// 100.
func Percent(live, headroom uint64) int {
	if live == 0 || live <= headroom {
		return 100
	}
	return max(MinPercent, int(100*headroom/live))
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
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	cur := orig
	t := time.NewTicker(Interval)
	defer t.Stop()
	for {
		metrics.Read(sample)
		if sample[0].Value.Kind() == metrics.KindUint64 {
			live := sample[0].Value.Uint64()
			if pct := Percent(live, headroom); pct != cur {
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
