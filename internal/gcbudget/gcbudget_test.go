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
		live, headroom uint64
		want           int
	}{
		{0, 64 * mib, 100},
		{10 * mib, 64 * mib, 100},
		{64 * mib, 64 * mib, 100},
		{128 * mib, 64 * mib, 50},
		{192 * mib, 64 * mib, 33},
		{640 * mib, 64 * mib, 25},
		{2048 * mib, 64 * mib, 25},
	} {
		if got := Percent(tc.live, tc.headroom); got != tc.want {
			t.Errorf("Percent(%d MiB, %d MiB) = %d, want %d", tc.live/mib, tc.headroom/mib, got, tc.want)
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
