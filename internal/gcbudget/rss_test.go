package gcbudget

import (
	"context"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

var filters []uint64

// TestPeakRSS measures, when BLOOMGATE_GC_RSS is "default" or "pacer", the
// peak resident memory of a process holding 512 MiB of filter-like memory
// (pointer-free, live for good) and churning 1 MiB buffers of which 16 are
// live at a time, for 8 s — with the runtime's default pacing or a Pacer.
// Run each in a process of its own (VmHWM is per process):
//
//	BLOOMGATE_GC_RSS=default go test -count=1 -run TestPeakRSS -v ./internal/gcbudget/
//	BLOOMGATE_GC_RSS=pacer   go test -count=1 -run TestPeakRSS -v ./internal/gcbudget/
func TestPeakRSS(t *testing.T) {
	mode := os.Getenv("BLOOMGATE_GC_RSS")
	if mode != "default" && mode != "pacer" {
		t.Skip("set BLOOMGATE_GC_RSS=default or pacer")
	}
	filters = make([]uint64, 512<<20/8)
	for i := range filters {
		filters[i] = uint64(i)
	}
	defer func() { filters = nil }()
	if mode == "pacer" {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go (&Pacer{}).Run(ctx)
	}
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	cpu0 := processCPU()
	buffers := make([][]byte, 16)
	start := time.Now()
	for i := 0; time.Since(start) < 8*time.Second; i++ {
		buffers[i%16] = make([]byte, 1<<20)
		if i%100 == 0 {
			time.Sleep(time.Millisecond) // ~1 GB/s of garbage at most
		}
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("%s: VmHWM %s, %d collections, %.2f s of process CPU in 8 s", mode, status("VmHWM"), after.NumGC-before.NumGC, processCPU()-cpu0)
}

func status(field string) string {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func processCPU() float64 {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	var ut, st float64
	for _, c := range f[11] {
		ut = ut*10 + float64(c-'0')
	}
	for _, c := range f[12] {
		st = st*10 + float64(c-'0')
	}
	return (ut + st) / 100
}
