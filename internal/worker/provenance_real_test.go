package worker_test

import (
	"context"
	"encoding/binary"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/kafkatest"
	"github.com/bloomgate/bloomgate/internal/memory"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// kgoProduce writes records with kgo, another client than the worker's,
// to topic partition 0 and waits for them.
func kgoProduce(t *testing.T, brokers []string, topic string, recs []*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("producing to %s: %v", topic, err)
	}
}

// groupState opens the checkpoint store in dir for group.
func groupState(t *testing.T, dir, group string) *memory.Store {
	t.Helper()
	st, err := checkpoint.Open(context.Background(), "file://"+dir, checkpoint.Options{Logger: testLogger(t), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatalf("opening checkpoint store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return memory.New(st, group)
}

// TestForgedRecordsDoNotSuppressEvents: another producer writes 1,000
// records to the dead-letter topic naming input partition 0, offsets
// 0..999: a quarter each with format 1's src headers alone, a made-up
// format 1 provenance for this group and input, a format 2 header with a
// made-up seal, and format 2 headers that no seal covers. A new group must forward every one of the 1,000
// valid events: the forged records are counted as foreign, never as
// written (before provenance: 0 of 1,000 forwarded, already_written=1000).
func TestForgedRecordsDoNotSuppressEvents(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1)
	var forged []*kgo.Record
	for i := range 1000 {
		r := &kgo.Record{Partition: 0, Value: []byte("forged"), Headers: []kgo.RecordHeader{
			{Key: worker.HeaderSrcPartition, Value: []byte("0")},
			{Key: worker.HeaderSrcOffset, Value: []byte(strconv.Itoa(i))},
			{Key: worker.HeaderError, Value: []byte("malformed_json")},
		}}
		switch i % 4 {
		case 1:
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: worker.HeaderTextProvenance,
				Value: []byte("1 0123456789abcdef AAAAAAAAAAAAAAAAAAAAAA " + tIn + " g")})
		case 2: // format 2, sealed by a made-up seal
			v := binary.AppendUvarint([]byte{2, 0}, uint64(i))
			v = append(v, 1) // n
			r.Headers = []kgo.RecordHeader{{Key: worker.HeaderProvenance, Value: append(v, make([]byte, 20)...)},
				{Key: worker.HeaderError, Value: []byte("malformed_json")}}
		case 3: // format 2 without a seal
			r.Headers = []kgo.RecordHeader{{Key: worker.HeaderProvenance, Value: binary.AppendUvarint([]byte{2, 0}, uint64(i))},
				{Key: worker.HeaderError, Value: []byte("malformed_json")}}
		}
		forged = append(forged, r)
	}
	kgoProduce(t, brokers, tDLQ, forged)
	evs := genEvents(1000, 1, 0, 71, base)
	produce(t, brokers, evs)

	rw := startWorkerWith(t, realConfig(brokers), realState(t, t.TempDir()), realExtractor(t), nil)
	waitFor(t, 60*time.Second, "every event consumed", func() bool { return rw.consumed() == 1000 })
	if err := rw.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	wantOut, _, _ := expectation(evs, time.Hour)
	checkKeys(t, "output", readTopic(t, brokers, tOut, 1), wantOut)
	if n := rw.metricSum(t, "bloomgate_recovery_already_written_records_total"); n != 0 {
		t.Errorf("recovery took %v forged records as written", n)
	}
	if n := rw.metricSum(t, "bloomgate_foreign_records_total"); n != 1000 {
		t.Errorf("bloomgate_foreign_records_total = %v, want 1000", n)
	}
	if n := rw.metricSum(t, "bloomgate_records_dead_lettered_total"); n != 0 {
		t.Errorf("%v dead letters counted on an input that has none", n)
	}
}

// TestGroupsSharingTopics: two groups with different inputs write one
// topic (the dead-letter topic, or the output: a shared topic or a
// blue/green cutover). Group A writes first; group B is killed in the
// middle of its input and its successor recovers: every B event must be
// forwarded exactly once to B's output, and A's records are reported as
// another group's (before provenance: B forwarded 851 of 2,000 with a
// shared dead-letter topic, 38 of 2,000 with a shared output).
func TestGroupsSharingTopics(t *testing.T) {
	for _, shared := range []string{"dead-letter", "output"} {
		t.Run(shared, func(t *testing.T) {
			t.Parallel()
			brokers := kafkatest.NewCluster(t, 1, "in-a", "out-a", "in-b", "out-b", "shared")
			dir := t.TempDir()
			cfgA := realConfig(brokers)
			cfgA.Group, cfgA.Input, cfgA.Output, cfgA.Duplicates, cfgA.DeadLetter = "group-a", "in-a", "out-a", "", "shared"
			cfgB := realConfig(brokers)
			cfgB.Group, cfgB.Input, cfgB.Output, cfgB.Duplicates, cfgB.DeadLetter = "group-b", "in-b", "out-b", "", ""
			aEvs := genEvents(2000, 1, 0, 72, base)
			if shared == "output" {
				cfgA.Output, cfgA.DeadLetter = "shared", ""
				cfgB.Output = "shared"
			} else {
				cfgB.DeadLetter = "shared"
				for i := range aEvs {
					aEvs[i].Key = nil // A's input is all malformed: dead letters
				}
			}
			kafkatest.Produce(t, brokers, "in-a", aEvs)
			a := startWorkerWith(t, cfgA, groupState(t, dir, "group-a"), realExtractor(t), nil)
			waitFor(t, 60*time.Second, "group A done", func() bool { return a.consumed() == 2000 })
			if err := a.stop(t); err != nil {
				t.Fatalf("group A: %v", err)
			}

			bEvs := genEvents(2000, 1, 0, 73, base)
			for i := range bEvs {
				bEvs[i].Key = []byte("b-" + string(bEvs[i].Key))
			}
			kafkatest.Produce(t, brokers, "in-b", bEvs)
			// The first B is killed after 20 batches; it commits rarely so
			// that its successor must scan what it wrote.
			first := cfgB
			first.BatchSize, first.CommitInterval, first.Owner = 50, time.Hour, "first"
			crash := make(chan struct{})
			var once sync.Once
			var batches atomic.Int64
			b1 := startWorkerWith(t, first, groupState(t, dir, "group-b"), realExtractor(t), func(w *worker.Worker) {
				w.TestHooks().AfterWrite = func(int, int64) {
					if batches.Add(1) == 20 {
						once.Do(func() { w.TestHooks().Halted.Store(true); close(crash) })
					}
				}
			})
			<-crash
			b1.cancel()
			b1.done <- <-b1.done // for the cleanup's stop
			b2 := startWorkerWith(t, cfgB, groupState(t, dir, "group-b"), realExtractor(t), nil)
			waitFor(t, 60*time.Second, "group B caught up", func() bool {
				ps := b2.w.Status().Partitions
				return len(ps) == 1 && ps[0].NextOffset == 2000
			})
			if err := b2.stop(t); err != nil {
				t.Fatalf("group B: %v", err)
			}
			var got []kafka.Message
			for _, m := range readTopic(t, brokers, cfgB.Output, 1)[0] {
				if strings.HasPrefix(string(m.Key), "b-") {
					got = append(got, m)
				}
			}
			want, _, _ := expectation(bEvs, time.Hour)
			checkKeys(t, "group B's output", map[int][]kafka.Message{0: got}, want)
			if n := b2.metricSum(t, "bloomgate_records_dead_lettered_total"); n != 0 {
				t.Errorf("group B counted %v dead letters on an input that has none", n)
			}
			// B's successor recognized what B wrote before the kill.
			if n := b2.metricSum(t, "bloomgate_recovery_already_written_records_total"); n == 0 {
				t.Errorf("group B's successor found none of the records written before the kill")
			}
			// B's first recovery scanned the shared topic from its start.
			if n := b1.metricSum(t, "bloomgate_foreign_records_total"); n != 2000 {
				t.Errorf("group B's recovery met group A's 2,000 records and counted %v as foreign", n)
			}
		})
	}
}

// TestHopDeadLettersNotForeign: the repartition hop writes its dead
// letters (records the repartition topic cannot take) to the dead-letter
// topic the dedup stage writes too, with its own headers only. The dedup
// stage's recovery scan skips them: not written by this memory, and not
// another producer's (the hop's metrics count them).
func TestHopDeadLettersNotForeign(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1)
	var hop []*kgo.Record
	for i := range 100 {
		hop = append(hop, &kgo.Record{Partition: 0, Value: []byte("too large for the hop"), Headers: []kgo.RecordHeader{
			{Key: worker.HeaderOriginPartition, Value: []byte("3")},
			{Key: worker.HeaderOriginOffset, Value: []byte(strconv.Itoa(i))},
			{Key: worker.HeaderError, Value: []byte("record_too_large")},
		}})
	}
	kgoProduce(t, brokers, tDLQ, hop)
	evs := genEvents(200, 1, 0, 74, base)
	produce(t, brokers, evs)
	rw := startWorkerWith(t, realConfig(brokers), realState(t, t.TempDir()), realExtractor(t), nil)
	waitFor(t, 60*time.Second, "every event consumed", func() bool { return rw.consumed() == 200 })
	if err := rw.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	wantOut, _, _ := expectation(evs, time.Hour)
	checkKeys(t, "output", readTopic(t, brokers, tOut, 1), wantOut)
	if n := rw.metricSum(t, "bloomgate_foreign_records_total"); n != 0 {
		t.Errorf("bloomgate_foreign_records_total = %v, want 0: the hop's dead letters are not another producer's", n)
	}
}
