//go:build unix

package keys

import (
	"syscall"
	"testing"
	"time"
)

// reportCPUPerOp starts measuring the CPU time of the process and returns
// the function that reports it per operation as "cpu-ns/op". On a shared
// machine other processes stretch ns/op (wall time) but hardly the CPU
// time a benchmark itself uses, which makes before/after comparisons
// possible there.
func reportCPUPerOp(b *testing.B) func(ops int) {
	start := processCPU()
	return func(ops int) {
		if ops > 0 {
			b.ReportMetric(float64(processCPU()-start)/float64(ops), "cpu-ns/op")
		}
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
