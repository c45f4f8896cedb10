package memory

import (
	"context"
	"encoding/binary"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// benchKeys is how many keys the filter benchmarks add before they start
// timing (so that the filter's pages are in place); the timed records
// cycle through twice as many, half of them duplicates.
const benchKeys = 1 << 20

// processCPU is the CPU time of the process: on a shared machine,
// cpu-ns/op does not count the waits for a CPU that ns/op does.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// timed runs the timed part of a filter benchmark, reporting cpu-ns/op
// beside ns/op.
func timed(b *testing.B, run func()) {
	b.ReportAllocs()
	b.ResetTimer()
	c := processCPU()
	run()
	b.StopTimer()
	b.ReportMetric(float64((processCPU()-c).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// benchFilter is a partition's new memory of the given kind, in exact mode
// with exact set, as the worker gets it.
func benchFilter(b *testing.B, kind string, exact bool) worker.Filter {
	b.Helper()
	ctx := context.Background()
	cs, err := checkpoint.Open(ctx, "file://"+b.TempDir(), checkpoint.Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cs.Close() })
	st := New(cs, "g")
	st.Kind = kind
	if exact {
		st.Exact = ExactOptions{Dir: b.TempDir()}
		b.Cleanup(func() { st.Close() })
	}
	params := worker.FilterParams{Window: time.Hour, Generations: 2, Capacity: 4 * benchKeys, FPR: 0.01}
	h := st.Partition(tIn, 0)
	if _, err := h.Restore(ctx, params); !errors.Is(err, worker.ErrNoCheckpoint) {
		b.Fatalf("restore: %v", err)
	}
	f, err := h.(worker.PartitionFilterMaker).NewFilter(params)
	if err != nil {
		b.Fatal(err)
	}
	return f
}

var benchKinds = []struct {
	name  string
	kind  string
	exact bool
}{
	{"ring", KindRing, false},
	{"fingerprint", KindFingerprint, false},
	{"ring-exact", KindRing, true},
	{"fingerprint-exact", KindFingerprint, true},
}

// BenchmarkTestAndAdd is the hot path of each filter kind, one record at
// a time, in one generation (see benchKeys).
//
//	go test -run '^$' -bench 'TestAndAdd' -benchtime 2000000x -count 6 ./internal/memory/ | benchstat -
func BenchmarkTestAndAdd(b *testing.B) {
	for _, k := range benchKinds {
		b.Run(k.name, func(b *testing.B) {
			f := benchFilter(b, k.kind, k.exact)
			ts := base
			var key [8]byte
			for i := range benchKeys {
				binary.LittleEndian.PutUint64(key[:], uint64(i))
				f.TestAndAdd(key[:], ts)
			}
			timed(b, func() {
				for i := 0; i < b.N; i++ {
					binary.LittleEndian.PutUint64(key[:], uint64(i%(2*benchKeys)))
					f.TestAndAdd(key[:], ts)
				}
			})
		})
	}
}

// BenchmarkTestAndAddBatch is BenchmarkTestAndAdd in batches of 64
// records (ns/op per record).
func BenchmarkTestAndAddBatch(b *testing.B) {
	const batch = 64
	for _, k := range benchKinds {
		b.Run(k.name, func(b *testing.B) {
			f := benchFilter(b, k.kind, k.exact)
			keys := make([][]byte, batch)
			ts := make([]time.Time, batch)
			seen := make([]bool, batch)
			for i := range keys {
				keys[i] = make([]byte, 8)
				ts[i] = base
			}
			fill := func(from, n int, mod int) {
				for i := from; i < from+n; i += batch {
					m := min(batch, from+n-i)
					for j := 0; j < m; j++ {
						binary.LittleEndian.PutUint64(keys[j], uint64((i+j)%mod))
					}
					f.TestAndAddBatch(keys[:m], ts[:m], seen[:m])
				}
			}
			fill(0, benchKeys, benchKeys)
			timed(b, func() { fill(0, b.N, 2*benchKeys) })
		})
	}
}
