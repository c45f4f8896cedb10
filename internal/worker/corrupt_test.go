package worker

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/bloomgate/bloomgate/internal/kafkatest"
)

// bombBatch is a record batch (magic 2, zstd) of one record whose records
// section decompresses to 64 MiB of zeros, from a few KB: what a hostile
// or broken producer can write (brokers store compressed batches as
// sent).
func bombBatch(t *testing.T) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	payload := enc.EncodeAll(make([]byte, 64<<20), nil)
	now := time.Now().UnixMilli()
	b := make([]byte, 61, 61+len(payload))
	binary.BigEndian.PutUint32(b[8:], uint32(61-12+len(payload))) // batch length
	binary.BigEndian.PutUint32(b[12:], 0)                         // partition leader epoch
	b[16] = 2                                                     // magic
	binary.BigEndian.PutUint16(b[21:], 4)                         // attributes: zstd
	binary.BigEndian.PutUint32(b[23:], 0)                         // last offset delta
	binary.BigEndian.PutUint64(b[27:], uint64(now))               // first timestamp
	binary.BigEndian.PutUint64(b[35:], uint64(now))               // max timestamp
	binary.BigEndian.PutUint64(b[43:], ^uint64(0))                // producer ID -1
	binary.BigEndian.PutUint16(b[51:], ^uint16(0))                // producer epoch -1
	binary.BigEndian.PutUint32(b[53:], ^uint32(0))                // base sequence -1
	binary.BigEndian.PutUint32(b[57:], 1)                         // record count
	b = append(b, payload...)
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// TestCorruptInputBatchVisible: a compressed batch on the input that
// decompresses beyond the bound (another writer's, produced as raw bytes)
// stops its partition at the batch's offset, visibly and at once: the
// status page shows the partition failing with the offset and the
// reason; the records before it are forwarded, nothing after it on that
// partition, and the other partition goes on.
func TestCorruptInputBatchVisible(t *testing.T) {
	t.Parallel()
	brokers, _ := poisonCluster(t, 2, nil)
	var before []*kgo.Record
	for i := range 20 {
		before = append(before, small(0, fmt.Sprintf("a%02d", i)), small(1, fmt.Sprintf("b%02d", i)))
	}
	poisonProduce(t, brokers, before...)

	cl := fidClient(t, brokers, kgo.MaxVersions(kversion.V3_7_0())) // produce by topic name (v13 names topics by ID)
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 10000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = tIn
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = 1, bombBatch(t)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(fidCtx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("producing the batch: error code %d", code)
	}

	var after []*kgo.Record
	for i := 20; i < 30; i++ {
		after = append(after, small(0, fmt.Sprintf("a%02d", i)), small(1, fmt.Sprintf("b%02d", i)))
	}
	poisonProduce(t, brokers, after...)

	var logs kafkatest.LogBuffer
	// The stall watchdog's threshold shortened (default 2 min): the
	// shipped alert's metric must turn on for this partition too.
	rw := startWorkerLogged(t, testConfig(brokers), &logs, func(w *Worker) {
		w.stallAfter, w.stallWatchEvery = 2*time.Second, 100*time.Millisecond
	})
	waitFor(t, 30*time.Second, "partition 1 shows the batch it cannot decode", func() bool {
		for _, p := range rw.w.Status().Partitions {
			if p.Partition == 1 && p.State == "failing" && strings.Contains(p.LastError, "offset 20") &&
				strings.Contains(p.LastError, "decompresses beyond the bound") {
				return true
			}
		}
		return false
	})
	waitFor(t, 30*time.Second, "partition 0 forwarded in full", func() bool {
		return len(outputKeys(t, brokers, tOut)[0]) == 30
	})
	got := outputKeys(t, brokers, tOut)
	if n := len(got[1]); n != 20 || got[1][19] != "b19" {
		t.Fatalf("partition 1 forwarded %d records (%v), want the 20 before the batch", n, got[1])
	}
	waitFor(t, 30*time.Second, "partition 1 reported stalled (the alert's metric)", func() bool {
		v, _ := fidMetric(t, rw, "bloomgate_partition_stalled", 1)
		return v == 1
	})
	if v, _ := fidMetric(t, rw, "bloomgate_partition_stalled", 0); v != 0 {
		t.Errorf("partition 0 reported stalled")
	}
	if !strings.Contains(logs.String(), "decompresses beyond the bound") {
		t.Error("the failure is not in the log")
	}
	if err := rw.stop(t); err != nil {
		t.Fatal(err)
	}
}
