package gcbudget

import (
	"context"
	"runtime/debug"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		live, scan, headroom uint64
		want                 int
	}{
		{0, 0, 4 * mib, 100},
		{4 * mib, 1 * mib, 4 * mib, 100},
		{8 * mib, 1 * mib, 4 * mib, 50},
		{40 * mib, 2 * mib, 4 * mib, 10},    // the headroom decides
		{40 * mib, 16 * mib, 4 * mib, 20},   // half the scannable heap decides
		{180 * mib, 60 * mib, 4 * mib, 16},  // many partitions: records to scan
		{2048 * mib, 2 * mib, 4 * mib, 1},   // filters alone: never below 1 (0 = always collecting)
		{64 * mib, 200 * mib, 4 * mib, 100}, // never above the default
	} {
		if got := Percent(tc.live, tc.scan, tc.headroom); got != tc.want {
			t.Errorf("Percent(%d MiB live, %d MiB scannable, %d MiB) = %d, want %d",
				tc.live/mib, tc.scan/mib, tc.headroom/mib, got, tc.want)
		}
	}
}

var keep []uint64

// TestPacerLowersAndRestores: with a live heap well above the headroom the
// pacer lowers the GC percentage, and restores the default when it stops.
func TestPacerLowersAndRestores(t *testing.T) {
	keep = make([]uint64, 16<<20) // 128 MiB live
	defer func() { keep = nil }()
	changed := make(chan int, 1)
	p := &Pacer{Headroom: 16 << 20, OnChange: func(_ uint64, pct int) {
		select {
		case changed <- pct:
		default:
		}
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	// The live heap is known after a collection.
	debug.FreeOSMemory()
	select {
	case pct := <-changed:
		if pct >= 100 {
			t.Fatalf("percentage %d with 128 MiB live and 16 MiB headroom", pct)
		}
	case <-time.After(3 * Interval):
		t.Fatal("the pacer did not change the percentage")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("percentage %d after Run returned, want 100", got)
	}
}
