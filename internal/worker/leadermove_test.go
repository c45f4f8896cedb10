package worker

import (
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// recoveries is the number of recoveries the worker ran (assignments and
// failures alike).
func (rw *runningWorker) recoveries(t *testing.T) uint64 {
	t.Helper()
	mfs, err := rw.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() == "bloomgate_recovery_duration_seconds" {
			for _, m := range mf.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n
}

// kgoProduce writes evs to the input with franz-go, which follows leader
// moves by itself (kafka-go's Writer would wait for its periodic metadata
// refresh).
func kgoProduce(t *testing.T, brokers []string, evs []event) {
	t.Helper()
	cl := fidClient(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var rs []*kgo.Record
	for _, e := range evs {
		rs = append(rs, &kgo.Record{Topic: tIn, Partition: int32(e.Partition), Key: e.Key, Value: []byte(e.Value), Timestamp: e.TS})
	}
	if err := cl.ProduceSync(fidCtx(t), rs...).FirstErr(); err != nil {
		t.Fatalf("producing %d events: %v", len(evs), err)
	}
}

// kgoReadKeys reads topic whole with franz-go, as checkKeys takes it.
func kgoReadKeys(t *testing.T, brokers []string, topic string) map[int][]kafka.Message {
	t.Helper()
	out := map[int][]kafka.Message{}
	for p, rs := range fidRead(t, brokers, topic) {
		for _, r := range rs {
			out[int(p)] = append(out[int(p)], kafka.Message{Key: r.Key, Value: r.Value, Offset: r.Offset})
		}
	}
	return out
}

// TestLeaderMoveWithoutRecovery: on a cluster of three brokers, partition
// leaders move while events flow: first those of every input and output
// partition, then those of the output partitions only. The fetches and
// writes that the old leaders refuse go to the new ones after a metadata
// refresh (the Transport's periodic refresh is off here, so only that
// refresh can find them), with no write failure and no partition
// recovery, and the output is exact.
func TestLeaderMoveWithoutRecovery(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.Ports(0, 0, 0), kfake.NumBrokers(3),
		kfake.SeedTopics(4, tIn, tOut, tDup, tDLQ), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	evs := genEvents(9000, 4, 0.3, 31, base)
	kgoProduce(t, brokers, evs[:3000])
	cfg := testConfig(brokers)
	cfg.Transport = &kafka.Transport{MetadataTTL: time.Hour}
	rw := startWorker(t, cfg, newMemStore(), nil)
	waitFor(t, 60*time.Second, "the first events consumed", func() bool { return rw.consumed() == 3000 })
	recovered := rw.recoveries(t)

	move := func(topics ...string) {
		for _, topic := range topics {
			for p := range int32(4) {
				if err := c.MoveTopicPartition(topic, p, (c.LeaderFor(topic, p)+1)%3); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for i, topics := range [][]string{{tIn, tOut, tDup}, {tOut, tDup}} {
		move(topics...)
		moved := time.Now()
		kgoProduce(t, brokers, evs[3000*(i+1):3000*(i+2)])
		produced := time.Since(moved)
		waitFor(t, 60*time.Second, "every event consumed", func() bool { return rw.consumed() == uint64(3000*(i+2)) })
		t.Logf("leaders of %v moved: output in step %v later (producing the events took %v of it)", topics,
			time.Since(moved).Round(time.Millisecond), produced.Round(time.Millisecond))
	}

	if f := rw.metricSum(t, "bloomgate_output_write_failures_total"); f != 0 {
		t.Errorf("%v write failures, want 0: the refused writes provably did not land", f)
	}
	if r := rw.metricSum(t, "bloomgate_output_write_retries_total"); r == 0 {
		t.Error("no write retried after the output's leaders moved")
	}
	if n := rw.recoveries(t); n != recovered {
		t.Errorf("%d recoveries after the leaders moved, want none", n-recovered)
	}
	rw.stop(t)
	wantOut, wantDup, _ := expectation(evs, time.Hour)
	checkKeys(t, "output", kgoReadKeys(t, brokers, tOut), wantOut)
	checkKeys(t, "duplicates", kgoReadKeys(t, brokers, tDup), wantDup)
}
