package worker

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/kafkatest"
)

// TestCrossPartitionDetector: on an input keyed by the dedup key (every
// key always in one partition, repeated), 1 M keys make no report; where
// 1 % of the keys come again in another partition soon after, repeats
// are reported, about 1 in 64 of them (the sample).
func TestCrossPartitionDetector(t *testing.T) {
	x := newCrossPartition()
	key := func(i int) []byte { return fmt.Appendf(nil, "order-%08d", i) }
	for i := range 1_000_000 {
		k := key(i % 400_000) // each key up to three times, always in one partition
		if _, rep := x.observe(k, (i%400_000)%8); rep {
			t.Fatalf("key %s reported in a correctly keyed input", k)
		}
	}
	x = newCrossPartition()
	repeats, cross := 0, 0
	for i := range 1_000_000 {
		k := key(i)
		x.observe(k, i%8)
		if i%100 == 0 { // 1 %: the same key again, in the next partition
			cross++
			if prev, rep := x.observe(k, (i+1)%8); rep {
				repeats++
				if prev != i%8 {
					t.Fatalf("reported partition %d, the key was in %d", prev, i%8)
				}
			}
		}
	}
	if want := cross >> xpSampleBits; repeats < want/2 || repeats > 2*want {
		t.Errorf("%d of %d cross-partition repeats reported, want about %d (1 in %d)", repeats, cross, want, 1<<xpSampleBits)
	}
}

func BenchmarkCrossPartitionObserve(b *testing.B) {
	x := newCrossPartition()
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "order-%08d", i)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		x.observe(keys[i&1023], i&7)
	}
}

// TestCrossPartitionRepeatsReported: a worker whose input carries keys in
// two partitions (producers keyed by something else) says so: the
// counter, the status, an ERROR naming --repartition; one whose input is
// keyed by the dedup key says nothing.
func TestCrossPartitionRepeatsReported(t *testing.T) {
	t.Parallel()
	for _, spread := range []bool{false, true} {
		t.Run(fmt.Sprintf("spread=%v", spread), func(t *testing.T) {
			t.Parallel()
			brokers := newCluster(t, 4)
			var evs []kafkatest.Event
			for i := range 4000 {
				k := fmt.Appendf(nil, "order-%05d", i)
				p := i % 4
				evs = append(evs, kafkatest.Event{Partition: p, Key: k, Value: "v", TS: base})
				q := p
				if spread {
					q = (p + 1) % 4
				}
				evs = append(evs, kafkatest.Event{Partition: q, Key: k, Value: "v", TS: base})
			}
			produce(t, brokers, evs)
			var logs kafkatest.LogBuffer
			rw := startWorker(t, testConfig(brokers), newMemStore(), func(w *Worker) {
				w.log = slog.New(slog.NewTextHandler(io.MultiWriter(&logs, testWriter{t}), nil))
			})
			waitFor(t, 60*time.Second, "every event consumed", func() bool { return rw.consumed() == uint64(len(evs)) })
			n := rw.metricSum(t, "bloomgate_cross_partition_repeats_total")
			st := rw.w.Status().CrossPartition
			reported := strings.Contains(logs.String(), "is not keyed by the dedup key") && strings.Contains(logs.String(), "--repartition")
			if spread && (n == 0 || st == nil || st.Repeats != uint64(n) || !reported) {
				t.Errorf("4000 keys in two partitions each: counter %v, status %+v, ERROR logged %v", n, st, reported)
			}
			if !spread && (n != 0 || st != nil || reported) {
				t.Errorf("an input keyed by the dedup key reported: counter %v, status %+v, ERROR logged %v", n, st, reported)
			}
		})
	}
}
