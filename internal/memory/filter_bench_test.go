package memory

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// benchKeys is how many distinct keys the filter benchmarks cycle through:
// after the first pass every key is a duplicate.
const benchKeys = 1 << 20

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
// a time, over benchKeys distinct keys in one generation.
//
//	go test -run '^$' -bench 'TestAndAdd' -count 6 ./internal/memory/ | benchstat -
func BenchmarkTestAndAdd(b *testing.B) {
	for _, k := range benchKinds {
		b.Run(k.name, func(b *testing.B) {
			f := benchFilter(b, k.kind, k.exact)
			ts := base
			var key [8]byte
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				binary.LittleEndian.PutUint64(key[:], uint64(i%benchKeys))
				f.TestAndAdd(key[:], ts)
			}
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
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += batch {
				n := min(batch, b.N-i)
				for j := 0; j < n; j++ {
					binary.LittleEndian.PutUint64(keys[j], uint64((i+j)%benchKeys))
				}
				f.TestAndAddBatch(keys[:n], ts[:n], seen[:n])
			}
		})
	}
}
