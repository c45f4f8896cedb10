package worker

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/bloomgate/bloomgate/internal/kafkatest"
	"github.com/bloomgate/bloomgate/internal/keys"
)

// Poison records: records the output cannot take. The input takes records
// up to 8 MiB (as an input topic with a raised max.message.bytes does);
// the written topics keep Kafka's default (1 MiB + 12) unless a test says
// otherwise.

const poisonInputLimit = 8 << 20

// poisonCluster starts a broker with the four test topics, each created
// with cfgs[topic] (the input with max.message.bytes 8 MiB by default).
func poisonCluster(t *testing.T, partitions int32, cfgs map[string]map[string]string) ([]string, *kfake.Cluster) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.Ports(0), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatalf("starting kfake: %v", err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	adm := fidAdmin(t, brokers)
	for _, topic := range []string{tIn, tOut, tDup, tDLQ} {
		conf := map[string]*string{}
		for k, v := range cfgs[topic] {
			conf[k] = &v
		}
		if _, ok := conf["max.message.bytes"]; topic == tIn && !ok {
			v := strconv.Itoa(poisonInputLimit)
			conf["max.message.bytes"] = &v
		}
		if _, err := adm.CreateTopic(fidCtx(t), partitions, 1, conf, topic); err != nil {
			t.Fatalf("creating %s: %v", topic, err)
		}
	}
	return brokers, c
}

// poisonProduce writes recs to the input (each to its Partition), with a
// producer that takes records up to the input's limit.
func poisonProduce(t *testing.T, brokers []string, recs ...*kgo.Record) {
	t.Helper()
	cl := fidClient(t, brokers, kgo.ProducerBatchMaxBytes(poisonInputLimit), kgo.MaxBufferedBytes(64<<20))
	for _, r := range recs {
		r.Topic = tIn
	}
	if err := cl.ProduceSync(fidCtx(t), recs...).FirstErr(); err != nil {
		t.Fatalf("producing %d records: %v", len(recs), err)
	}
}

// small is a small record of partition p keyed k.
func small(p int32, k string) *kgo.Record {
	return &kgo.Record{Partition: p, Key: []byte(k), Value: []byte("v-" + k)}
}

// poisonInput is 112 small records, a record with a value of bigValue
// bytes (key p0-big) and 50 small records on partition 0, and 100 small
// records on partition 1. It returns the keys the output must hold per
// partition, in order, without the big record.
func poisonInput(t *testing.T, brokers []string, bigValue int) map[int32][]string {
	t.Helper()
	want := map[int32][]string{}
	var recs []*kgo.Record
	for i := range 163 {
		if i == 112 {
			recs = append(recs, &kgo.Record{Partition: 0, Key: []byte("p0-big"), Value: incompressible(bigValue)})
			continue
		}
		k := fmt.Sprintf("p0-%03d", i)
		recs = append(recs, small(0, k))
		want[0] = append(want[0], k)
	}
	for i := range 100 {
		k := fmt.Sprintf("p1-%03d", i)
		recs = append(recs, small(1, k))
		want[1] = append(want[1], k)
	}
	poisonProduce(t, brokers, recs...)
	return want
}

// outputKeys reads topic and returns its keys per partition, in order.
func outputKeys(t *testing.T, brokers []string, topic string) map[int32][]string {
	t.Helper()
	got := map[int32][]string{}
	for p, rs := range fidRead(t, brokers, topic) {
		for _, r := range rs {
			got[p] = append(got[p], string(r.Key))
		}
	}
	return got
}

// checkOutput compares keys per partition in order and fails on a key
// written twice.
func checkOutput(t *testing.T, what string, got, want map[int32][]string) {
	t.Helper()
	for p := range int32(2) {
		seen := map[string]int{}
		for _, k := range got[p] {
			seen[k]++
			if seen[k] == 2 {
				t.Errorf("%s partition %d: key %s written twice", what, p, k)
			}
		}
		if strings.Join(got[p], " ") != strings.Join(want[p], " ") {
			t.Errorf("%s partition %d: %d keys %v…, want %d keys %v…", what, p, len(got[p]), head(got[p]), len(want[p]), head(want[p]))
		}
	}
}

func head(ks []string) []string { return ks[:min(len(ks), 5)] }

// seriesValue is the value of the series of name whose labels include
// labels (summed over the others).
func seriesValue(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, want := range labels {
				if have[k] != want {
					continue next
				}
			}
			if c := m.GetCounter(); c != nil {
				v += c.GetValue()
			}
			if g := m.GetGauge(); g != nil {
				v += g.GetValue()
			}
		}
	}
	return v
}

func header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// checkReference checks that r is the reference record of input partition
// p, offset off: key, headers and value.
func checkReference(t *testing.T, r *kgo.Record, p int, off int64, errReason, refReason string, minSize int64) {
	t.Helper()
	if want := fmt.Sprintf("%s/%d/%d", tIn, p, off); string(r.Key) != want {
		t.Errorf("reference key %q, want %q", r.Key, want)
	}
	var hs []kafka.Header
	for _, h := range r.Headers {
		hs = append(hs, kafka.Header{Key: h.Key, Value: h.Value})
	}
	if sp, so, ok := SourceOf(hs); !ok || sp != p || so != off {
		t.Errorf("reference record stands for %d/%d (%v), want %d/%d", sp, so, ok, p, off)
	}
	for k, want := range map[string]string{
		HeaderError: errReason, HeaderRefTopic: tIn, HeaderRefReason: refReason,
	} {
		if got, _ := header(r, k); got != want {
			t.Errorf("reference header %s = %q, want %q", k, got, want)
		}
	}
	size, _ := header(r, HeaderRefSize)
	if n, err := strconv.ParseInt(size, 10, 64); err != nil || n < minSize {
		t.Errorf("reference size %q, want at least %d", size, minSize)
	}
	var v refValue
	if err := json.Unmarshal(r.Value, &v); err != nil {
		t.Fatalf("reference value %q: %v", r.Value, err)
	}
	if v.Topic != tIn || v.Partition != p || v.Offset != off || v.Reason != refReason || v.Size < minSize {
		t.Errorf("reference value %+v", v)
	}
}

// TestPoisonDeadLetteredByReference: a 2 MiB record among small ones, with
// the default --max-batch-bytes and a dead-letter topic at Kafka's default
// limit: every small record before and after it is forwarded in order, the
// big one is dead-lettered as a reference record, nothing is retried, the
// process goes on; after a restart (a new worker) and more input, every key
// is on the output exactly once.
func TestPoisonDeadLetteredByReference(t *testing.T) {
	t.Parallel()
	brokers, _ := poisonCluster(t, 2, nil)
	want := poisonInput(t, brokers, 2<<20)
	store := newMemStore()
	cfg := testConfig(brokers)
	rw := startWorker(t, cfg, store, nil)
	waitFor(t, 60*time.Second, "263 records consumed", func() bool { return rw.consumed() == 263 })

	checkOutput(t, "output", outputKeys(t, brokers, tOut), want)
	dead := fidRead(t, brokers, tDLQ)
	if len(dead[0]) != 1 || len(dead[1]) != 0 {
		t.Fatalf("dead-letter topic: %d and %d records, want 1 and 0", len(dead[0]), len(dead[1]))
	}
	checkReference(t, dead[0][0], 0, 112, ReasonRecordTooLarge, ReasonRecordTooLarge, 2<<20)
	if got := seriesValue(t, rw.reg, "bloomgate_records_dead_lettered_total", map[string]string{"partition": "0", "reason": ReasonRecordTooLarge}); got != 1 {
		t.Errorf("dead_lettered{reason=record_too_large} = %v, want 1", got)
	}
	if f := rw.metricSum(t, "bloomgate_output_write_failures_total"); f != 0 {
		t.Errorf("%v write failures: the big record was sent", f)
	}
	if s := rw.metricSum(t, "bloomgate_partition_stalled"); s != 0 {
		t.Errorf("partition_stalled = %v", s)
	}
	rw.conservation(t)
	if err := rw.stop(t); err != nil {
		t.Fatalf("Run = %v", err)
	}

	// A new process: repeats of old keys, new keys.
	var more []*kgo.Record
	for i := range 20 {
		more = append(more, small(0, want[0][i*8]), small(0, fmt.Sprintf("p0-new-%02d", i)))
		want[0] = append(want[0], fmt.Sprintf("p0-new-%02d", i))
	}
	poisonProduce(t, brokers, more...)
	rw2 := startWorker(t, cfg, store, nil)
	waitFor(t, 60*time.Second, "the new records consumed", func() bool { return rw2.consumed() == 40 })
	checkOutput(t, "output after the restart", outputKeys(t, brokers, tOut), want)
	if dead := fidRead(t, brokers, tDLQ); len(dead[0]) != 1 {
		t.Errorf("dead-letter topic after the restart: %d records, want 1", len(dead[0]))
	}
	rw2.conservation(t)
}

// TestPoisonDeadLetteredWhole: a dead-letter topic whose max.message.bytes
// takes the record holds it whole, with its reason; the record is larger
// than the shared Writer's bound and written in a produce request of its
// own.
func TestPoisonDeadLetteredWhole(t *testing.T) {
	t.Parallel()
	brokers, _ := poisonCluster(t, 2, map[string]map[string]string{tDLQ: {"max.message.bytes": strconv.Itoa(4 << 20)}})
	want := poisonInput(t, brokers, 2<<20)
	cfg := testConfig(brokers)
	cfg.MaxBatchBytes = 4 << 20
	rw := startWorker(t, cfg, newMemStore(), nil)
	waitFor(t, 60*time.Second, "263 records consumed", func() bool { return rw.consumed() == 263 })
	checkOutput(t, "output", outputKeys(t, brokers, tOut), want)
	dead := fidRead(t, brokers, tDLQ)
	if len(dead[0]) != 1 {
		t.Fatalf("dead-letter topic: %d records, want 1", len(dead[0]))
	}
	r := dead[0][0]
	if string(r.Key) != "p0-big" || len(r.Value) != 2<<20 {
		t.Errorf("dead letter: key %q, %d value bytes; want p0-big and the whole value", r.Key, len(r.Value))
	}
	if got, _ := header(r, HeaderError); got != ReasonRecordTooLarge {
		t.Errorf("dead letter's bloomgate-error %q", got)
	}
	if _, ok := header(r, HeaderRefTopic); ok {
		t.Error("a whole dead letter carries reference headers")
	}
	rw.conservation(t)
}

// TestPoisonHugeKey: a 2 MB key is too long to extract (key reason
// too_large) and too large for the dead-letter topic too: it is
// dead-lettered as a reference record that keeps the key reason.
func TestPoisonHugeKey(t *testing.T) {
	t.Parallel()
	brokers, _ := poisonCluster(t, 1, nil)
	ex, err := keys.NewExtractor("key", "none", 0)
	if err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	var want []string
	for i := range 30 {
		if i == 10 {
			recs = append(recs, &kgo.Record{Key: bytes.Repeat([]byte("k"), 2_000_000), Value: []byte("v")})
			continue
		}
		recs = append(recs, small(0, fmt.Sprintf("k%02d", i)))
		want = append(want, fmt.Sprintf("k%02d", i))
	}
	poisonProduce(t, brokers, recs...)
	rw := startWorkerWith(t, testConfig(brokers), newMemStore(), ex, nil)
	waitFor(t, 60*time.Second, "30 records consumed", func() bool { return rw.consumed() == 30 })
	checkOutput(t, "output", outputKeys(t, brokers, tOut), map[int32][]string{0: want})
	dead := fidRead(t, brokers, tDLQ)
	if len(dead[0]) != 1 {
		t.Fatalf("dead-letter topic: %d records, want 1", len(dead[0]))
	}
	checkReference(t, dead[0][0], 0, 10, keys.ReasonTooLarge, ReasonRecordTooLarge, 2_000_000)
	if got := seriesValue(t, rw.reg, "bloomgate_records_dead_lettered_total", map[string]string{"reason": keys.ReasonTooLarge}); got != 1 {
		t.Errorf("dead_lettered{reason=too_large} = %v, want 1", got)
	}
	rw.conservation(t)
}

// TestPoisonStalls: without a dead-letter topic (default --on-unwritable
// stall) the partition forwards every record before the big one and stops
// there, visibly: state, offset and error in the status and /status.json,
// partition_stalled 1, a growing lag; the other partition keeps flowing,
// the worker stays ready. A new worker stalls at the same record and
// forwards nothing twice.
func TestPoisonStalls(t *testing.T) {
	t.Parallel()
	brokers, _ := poisonCluster(t, 2, nil)
	want := poisonInput(t, brokers, 2<<20)
	cfg := testConfig(brokers)
	cfg.DeadLetter = ""
	store := newMemStore()
	tweak := func(w *Worker) { w.stallWatchEvery, w.unwritableRetry = 100*time.Millisecond, 300*time.Millisecond }
	rw := startWorker(t, cfg, store, tweak)
	var p0 PartitionStatus
	waitFor(t, 60*time.Second, "partition 0 stalled at offset 112, partition 1 caught up", func() bool {
		s := rw.w.Status()
		if len(s.Partitions) != 2 || s.Partitions[1].NextOffset != 100 {
			return false
		}
		p0 = s.Partitions[0]
		return p0.Stalled && p0.State == "stalled" && p0.NextOffset == 112 && p0.Lag > 0
	})
	if u := p0.Unwritable; u == nil || u.Offset != 112 || u.Reason != ReasonRecordTooLarge || u.Topic != tOut || u.Size < 2<<20 {
		t.Errorf("unwritable: %+v", u)
	}
	if !strings.Contains(p0.LastError, "offset 112") || !strings.Contains(p0.LastError, ReasonRecordTooLarge) {
		t.Errorf("last error %q: want the offset and the reason", p0.LastError)
	}
	// The other partition keeps flowing.
	var more []*kgo.Record
	for i := range 50 {
		k := fmt.Sprintf("p1-late-%02d", i)
		more = append(more, small(1, k))
		want[1] = append(want[1], k)
	}
	poisonProduce(t, brokers, more...)
	waitFor(t, 30*time.Second, "partition 1 forwards after the stall", func() bool {
		return rw.w.Status().Partitions[1].NextOffset == 150
	})
	// Retried, still stalled; nothing dropped or written. Each retry
	// that stalls again shows its next one.
	retries, next := 0, p0.Unwritable.NextRetry
	waitFor(t, 30*time.Second, "two more retries of partition 0", func() bool {
		if u := rw.w.Status().Partitions[0].Unwritable; u != nil && !u.NextRetry.Equal(next) {
			retries, next = retries+1, u.NextRetry
		}
		return retries >= 2
	})
	want0 := map[int32][]string{0: want[0][:112], 1: want[1]}
	checkOutput(t, "output while stalled", outputKeys(t, brokers, tOut), want0)
	if got, _ := fidMetric(t, rw, "bloomgate_partition_stalled", 0); got != 1 {
		t.Errorf("partition_stalled{0} = %v, want 1", got)
	}
	if got, _ := fidMetric(t, rw, "bloomgate_consumer_lag", 0); got != 51 {
		t.Errorf("consumer_lag{0} = %v while stalled, want 51 (the record and the 50 after it)", got)
	}
	if got, _ := fidMetric(t, rw, "bloomgate_partition_stalled", 1); got != 0 {
		t.Errorf("partition_stalled{1} = %v, want 0", got)
	}
	if d := rw.metricSum(t, "bloomgate_records_dropped_total") + rw.metricSum(t, "bloomgate_records_dead_lettered_total"); d != 0 {
		t.Errorf("%v records dropped or dead-lettered", d)
	}
	srv := httptest.NewServer(rw.w.Handler(rw.reg))
	defer srv.Close()
	for path, want := range map[string]int{"/readyz": http.StatusOK, "/healthz": http.StatusOK} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s = %d while a partition stalls, want %d", path, resp.StatusCode, want)
		}
	}
	resp, err := http.Get(srv.URL + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var st struct {
		Partitions []struct {
			Partition  int    `json:"partition"`
			State      string `json:"state"`
			Stalled    bool   `json:"stalled"`
			NextOffset int64  `json:"next_offset"`
			LastError  string `json:"last_error"`
			Unwritable *struct {
				Offset int64  `json:"offset"`
				Reason string `json:"reason"`
			} `json:"unwritable"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("/status.json: %v\n%s", err, body)
	}
	if p := st.Partitions[0]; !p.Stalled || p.State != "stalled" || p.NextOffset != 112 || p.LastError == "" ||
		p.Unwritable == nil || p.Unwritable.Offset != 112 || p.Unwritable.Reason != ReasonRecordTooLarge {
		t.Errorf("/status.json partition 0: %+v", p)
	}
	if err := rw.stop(t); err != nil {
		t.Fatalf("Run = %v, want nil: a stall does not stop the worker", err)
	}

	// A new worker recovers to the record and stalls there again.
	rw2 := startWorker(t, cfg, store, tweak)
	waitFor(t, 60*time.Second, "the new worker stalls at offset 112", func() bool {
		s := rw2.w.Status()
		return len(s.Partitions) == 2 && s.Partitions[0].Stalled && s.Partitions[0].NextOffset == 112
	})
	checkOutput(t, "output after the restart", outputKeys(t, brokers, tOut), want0)
}

// TestPoisonStallEndsWhenTheTopicTakesIt: a record over the output's
// max.message.bytes (512 KiB) stalls its partition; once the topic's limit
// is raised the retry (which reads the limits again) writes it, in order,
// and the partition goes on without a restart.
func TestPoisonStallEndsWhenTheTopicTakesIt(t *testing.T) {
	t.Parallel()
	brokers, _ := poisonCluster(t, 2, map[string]map[string]string{tOut: {"max.message.bytes": strconv.Itoa(512 << 10)}})
	want := poisonInput(t, brokers, 600<<10)
	cfg := testConfig(brokers)
	cfg.DeadLetter = ""
	rw := startWorker(t, cfg, newMemStore(), func(w *Worker) {
		w.stallWatchEvery, w.unwritableRetry = 100*time.Millisecond, 300*time.Millisecond
	})
	waitFor(t, 60*time.Second, "partition 0 stalled at offset 112", func() bool {
		s := rw.w.Status()
		return len(s.Partitions) == 2 && s.Partitions[0].Stalled && s.Partitions[0].NextOffset == 112
	})
	limit := strconv.Itoa(1 << 20)
	res, err := fidAdmin(t, brokers).AlterTopicConfigs(fidCtx(t), []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &limit}}, tOut)
	if err != nil || res[0].Err != nil {
		t.Fatalf("raising max.message.bytes: %v %v", err, res)
	}
	want[0] = append(append(append([]string{}, want[0][:112]...), "p0-big"), want[0][112:]...)
	waitFor(t, 60*time.Second, "partition 0 caught up", func() bool {
		s := rw.w.Status()
		return s.Partitions[0].NextOffset == 163 && !s.Partitions[0].Stalled
	})
	checkOutput(t, "output", outputKeys(t, brokers, tOut), want)
	if got, _ := fidMetric(t, rw, "bloomgate_partition_stalled", 0); got != 0 {
		t.Errorf("partition_stalled{0} = %v after the stall ended", got)
	}
	rw.conservation(t)
}

// TestPoisonDropped: --on-unwritable drop counts the record under its
// reason and forwards everything else.
func TestPoisonDropped(t *testing.T) {
	t.Parallel()
	brokers, _ := poisonCluster(t, 2, nil)
	want := poisonInput(t, brokers, 2<<20)
	cfg := testConfig(brokers)
	cfg.DeadLetter, cfg.OnUnwritable = "", UnwritableDrop
	rw := startWorker(t, cfg, newMemStore(), nil)
	waitFor(t, 60*time.Second, "263 records consumed", func() bool { return rw.consumed() == 263 })
	checkOutput(t, "output", outputKeys(t, brokers, tOut), want)
	if got := seriesValue(t, rw.reg, "bloomgate_records_dropped_total", map[string]string{"partition": "0", "reason": ReasonRecordTooLarge}); got != 1 {
		t.Errorf("dropped{reason=record_too_large} = %v, want 1", got)
	}
	rw.conservation(t)
}

// TestPoisonSmallOutputLimit: an output topic with max.message.bytes 4 KiB,
// read at start: records over it are dead-lettered whole (the dead-letter
// topic takes them), the others are forwarded in batches bounded by it;
// no write is refused, so nothing is retried.
func TestPoisonSmallOutputLimit(t *testing.T) {
	t.Parallel()
	brokers, _ := poisonCluster(t, 1, map[string]map[string]string{tOut: {"max.message.bytes": "4096"}})
	var recs []*kgo.Record
	var want, wantDead []string
	for i := range 200 {
		k := fmt.Sprintf("k%03d", i)
		size := 500
		if i%40 == 7 {
			size = 5000
			wantDead = append(wantDead, k)
		} else {
			want = append(want, k)
		}
		recs = append(recs, &kgo.Record{Key: []byte(k), Value: bytes.Repeat([]byte("v"), size)})
	}
	poisonProduce(t, brokers, recs...)
	rw := startWorker(t, testConfig(brokers), newMemStore(), nil)
	waitFor(t, 60*time.Second, "200 records consumed", func() bool { return rw.consumed() == 200 })
	checkOutput(t, "output", outputKeys(t, brokers, tOut), map[int32][]string{0: want})
	checkOutput(t, "dead letters", outputKeys(t, brokers, tDLQ), map[int32][]string{0: wantDead})
	if f := rw.metricSum(t, "bloomgate_output_write_failures_total"); f != 0 {
		t.Errorf("%v write failures, want 0: batches are bounded by the topic's limit", f)
	}
	if b := rw.w.limits.bound(tOut); b != 4096 {
		t.Errorf("batch bound %d, want 4096", b)
	}
	rw.conservation(t)
}

// denyDescribeConfigs makes the broker refuse every DescribeConfigs (as
// missing ACLs do).
func denyDescribeConfigs(c *kfake.Cluster) {
	c.ControlKey(int16(kmsg.DescribeConfigs), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.DescribeConfigsRequest)
		resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
		resp.Version = req.Version
		for _, r := range req.Resources {
			rr := kmsg.NewDescribeConfigsResponseResource()
			rr.ResourceType, rr.ResourceName, rr.ErrorCode = r.ResourceType, r.ResourceName, kerr.TopicAuthorizationFailed.Code
			resp.Resources = append(resp.Resources, rr)
		}
		return resp, nil, true
	})
}

// TestPoisonRefusedByTheBroker: the limits cannot be read (DescribeConfigs
// refused: a warning, --max-batch-bytes assumed), and the output takes 16
// KiB: the batch holding a 20 KiB record is refused whole. The next
// session writes that batch's range one record per request: every small
// record lands once, in order, the big one is dead-lettered, and the
// failure is not repeated.
func TestPoisonRefusedByTheBroker(t *testing.T) {
	t.Parallel()
	brokers, c := poisonCluster(t, 1, map[string]map[string]string{tOut: {"max.message.bytes": strconv.Itoa(16 << 10)}})
	denyDescribeConfigs(c)
	var recs []*kgo.Record
	var want []string
	for i := range 81 {
		k := fmt.Sprintf("k%03d", i)
		if i == 40 {
			recs = append(recs, &kgo.Record{Key: []byte(k), Value: incompressible(20 << 10)})
			continue
		}
		recs = append(recs, &kgo.Record{Key: []byte(k), Value: []byte("v")})
		want = append(want, k)
	}
	poisonProduce(t, brokers, recs...)
	var logs kafkatest.LogBuffer
	cfg := testConfig(brokers)
	rw := startWorkerLogged(t, cfg, &logs)
	waitFor(t, 60*time.Second, "81 records consumed", func() bool { return rw.consumed() == 81 })
	checkOutput(t, "output", outputKeys(t, brokers, tOut), map[int32][]string{0: want})
	dead := fidRead(t, brokers, tDLQ)
	if len(dead[0]) != 1 || string(dead[0][0].Key) != "k040" || len(dead[0][0].Value) != 20<<10 {
		t.Fatalf("dead letters: %d, want the 20 KiB record whole", len(dead[0]))
	}
	if got, _ := header(dead[0][0], HeaderError); got != ReasonRecordTooLarge {
		t.Errorf("bloomgate-error %q, want %s", got, ReasonRecordTooLarge)
	}
	if f := rw.metricSum(t, "bloomgate_output_write_failures_total"); f < 1 || f > 2 {
		t.Errorf("%v write failures, want 1 (the refused batch) or 2", f)
	}
	if !strings.Contains(logs.String(), "cannot read a written topic's max.message.bytes") {
		t.Errorf("no warning about the unreadable limits:\n%s", logs.String())
	}
	rw.conservation(t)
}

// nullKeyRefused makes the broker refuse a produce request to tOut holding
// a record with a null key, with INVALID_RECORD: what Apache Kafka answers
// for a compacted topic ("Compacted topic cannot accept message without
// key"). kfake accepts such records on a compacted topic, so the test
// states the rule itself. kafka-go sends one topic-partition per produce
// request.
func nullKeyRefused(c *kfake.Cluster) {
	c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.ProduceRequest)
		refuse := false
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				if rt.Topic == tOut && hasNullKey(rp.Records) {
					refuse = true
				}
			}
		}
		if !refuse {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		resp.Version = req.Version
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.InvalidRecord.Code
				msg := "Compacted topic cannot accept message without key"
				sp.ErrorMessage = &msg
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}

// incompressible returns n bytes that no codec shrinks: a record too
// large for a topic stays too large written with the input's codec (the
// broker counts compressed batches against max.message.bytes).
func incompressible(n int) []byte {
	b := make([]byte, n)
	x := uint64(0x9e3779b97f4a7c15)
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}

// hasNullKey reports whether a record batch holds a record with a null
// key (the batch decompressed, as a broker reads it).
func hasNullKey(raw []byte) bool {
	var b kmsg.RecordBatch
	if err := b.ReadFrom(raw); err != nil {
		return false
	}
	rs := b.Records
	if codec := b.Attributes & 7; codec != 0 {
		cd := compress.Compression(codec).Codec()
		if cd == nil {
			return false
		}
		r := cd.NewReader(bytes.NewReader(rs))
		out, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			return false
		}
		rs = out
	}
	for range b.NumRecords {
		var r kmsg.Record
		if err := r.ReadFrom(rs); err != nil {
			return false
		}
		if r.Key == nil {
			return true
		}
		rs = rs[len(binary.AppendVarint(nil, int64(r.Length)))+int(r.Length):]
	}
	return false
}

// TestPoisonNullKeyOnCompactedOutput: keys come from a header, and one
// record has a null Kafka key; the compacted output refuses it
// (INVALID_RECORD, see nullKeyRefused): it is dead-lettered with reason
// invalid_record, every other record is forwarded once, in order.
func TestPoisonNullKeyOnCompactedOutput(t *testing.T) {
	t.Parallel()
	brokers, c := poisonCluster(t, 1, map[string]map[string]string{tOut: {"cleanup.policy": "compact"}})
	nullKeyRefused(c)
	ex, err := keys.NewExtractor("header:id", "none", 0)
	if err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	var want []string
	for i := range 41 {
		id := fmt.Sprintf("id%02d", i)
		r := &kgo.Record{Key: []byte("k-" + id), Value: []byte("v"), Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(id)}}}
		if i == 20 {
			r.Key = nil
		} else {
			want = append(want, "k-"+id)
		}
		recs = append(recs, r)
	}
	poisonProduce(t, brokers, recs...)
	rw := startWorkerWith(t, testConfig(brokers), newMemStore(), ex, nil)
	waitFor(t, 60*time.Second, "41 records consumed", func() bool { return rw.consumed() == 41 })
	checkOutput(t, "output", outputKeys(t, brokers, tOut), map[int32][]string{0: want})
	dead := fidRead(t, brokers, tDLQ)
	if len(dead[0]) != 1 || dead[0][0].Key != nil {
		t.Fatalf("dead letters: %v, want the record with the null key", dead[0])
	}
	if got, _ := header(dead[0][0], HeaderError); got != ReasonInvalidRecord {
		t.Errorf("bloomgate-error %q, want %s", got, ReasonInvalidRecord)
	}
	if got := seriesValue(t, rw.reg, "bloomgate_records_dead_lettered_total", map[string]string{"reason": ReasonInvalidRecord}); got != 1 {
		t.Errorf("dead_lettered{reason=invalid_record} = %v, want 1", got)
	}
	rw.conservation(t)
}

// TestStuckPartitionVisible: writes to the output fail for a while (the
// broker answers NOT_ENOUGH_REPLICAS): the partition retries through
// recovery; after the stall threshold it shows as stalled with its offset
// and error, partition_stalled is 1, the lag grows with the input, and one
// ERROR line names it; once writes succeed again it catches up and the
// stall ends.
func TestStuckPartitionVisible(t *testing.T) {
	t.Parallel()
	brokers, c := poisonCluster(t, 1, nil)
	var refuse atomic.Bool
	refuse.Store(true)
	c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.ProduceRequest)
		if !refuse.Load() || len(req.Topics) == 0 || req.Topics[0].Topic != tOut {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		resp.Version = req.Version
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.NotEnoughReplicas.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	var recs []*kgo.Record
	var want []string
	for i := range 50 {
		k := fmt.Sprintf("k%02d", i)
		recs = append(recs, small(0, k))
		want = append(want, k)
	}
	poisonProduce(t, brokers, recs...)
	var logs kafkatest.LogBuffer
	rw := startWorkerLogged(t, testConfig(brokers), &logs, func(w *Worker) {
		w.stallAfter, w.stallWatchEvery = 2*time.Second, 100*time.Millisecond
	})
	waitFor(t, 60*time.Second, "the partition shows as stalled", func() bool {
		s := rw.w.Status()
		return len(s.Partitions) == 1 && s.Partitions[0].Stalled
	})
	p := rw.w.Status().Partitions[0]
	if p.NextOffset != 0 || p.Lag != 50 || !strings.Contains(p.LastError, "Not Enough Replicas") || p.StalledSeconds < 2 {
		t.Errorf("stalled partition: next %d, lag %d, stalled %.1fs, last error %q", p.NextOffset, p.Lag, p.StalledSeconds, p.LastError)
	}
	if got, _ := fidMetric(t, rw, "bloomgate_partition_stalled", 0); got != 1 {
		t.Errorf("partition_stalled = %v, want 1", got)
	}
	poisonProduce(t, brokers, small(0, "k50"))
	want = append(want, "k50")
	waitFor(t, 10*time.Second, "the lag follows the input while stalled", func() bool {
		v, _ := fidMetric(t, rw, "bloomgate_consumer_lag", 0)
		return v == 51
	})
	if !strings.Contains(logs.String(), "partition stalled") || !strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("no ERROR line about the stall:\n%s", logs.String())
	}
	if n := strings.Count(logs.String(), "partition failed; re-running exact recovery"); n > 2 {
		t.Errorf("%d WARN lines about the same failure, want them rate-limited", n)
	}
	refuse.Store(false)
	waitFor(t, 60*time.Second, "caught up and no longer stalled", func() bool {
		s := rw.w.Status()
		return s.Partitions[0].NextOffset == 51 && !s.Partitions[0].Stalled
	})
	checkOutput(t, "output", outputKeys(t, brokers, tOut), map[int32][]string{0: want})
	if got, _ := fidMetric(t, rw, "bloomgate_partition_stalled", 0); got != 0 {
		t.Errorf("partition_stalled = %v after recovering", got)
	}
}

// startWorkerLogged is startWorker with the log in logs (and the test log).
func startWorkerLogged(t *testing.T, cfg Config, logs *kafkatest.LogBuffer, tweaks ...func(*Worker)) *runningWorker {
	t.Helper()
	reg := prometheus.NewRegistry()
	h := slog.NewTextHandler(io.MultiWriter(logs, testWriter{t}), &slog.HandlerOptions{Level: slog.LevelInfo})
	w, err := New(cfg, Deps{Logger: slog.New(h), Registerer: reg, State: newMemStore(), Extractor: keyExtractor{}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	for _, f := range tweaks {
		f(w)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rw := &runningWorker{w: w, reg: reg, cancel: cancel, done: make(chan error, 1)}
	go func() { rw.done <- w.Run(ctx) }()
	t.Cleanup(func() { rw.stop(t) })
	return rw
}

// TestPoisonCrashAfterPlacing: kill -9 right after the write that placed
// an unwritable record (a reference record from the size check, and a dead
// letter found by writing a refused batch's range one record per
// request), with nothing committed or checkpointed since: the successor's
// recovery scan finds everything written, so the output and the
// dead-letter topic hold every record exactly once.
func TestPoisonCrashAfterPlacing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		limits map[string]map[string]string
		big    int
		refuse bool // DescribeConfigs refused: the broker finds the record
	}{
		{"reference record", nil, 2 << 20, false},
		{"refused by the broker", map[string]map[string]string{tOut: {"max.message.bytes": strconv.Itoa(16 << 10)}}, 20 << 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			brokers, c := poisonCluster(t, 2, tc.limits)
			if tc.refuse {
				denyDescribeConfigs(c)
			}
			want := poisonInput(t, brokers, tc.big)
			store := newMemStore()
			cfg := testConfig(brokers)
			cfg.BatchSize = 40
			cfg.CommitInterval, cfg.CheckpointInterval, cfg.MaxCheckpointStaleness = time.Hour, time.Hour, 2*time.Hour
			cfg.Owner = "crashing"
			crash := make(chan struct{})
			a := startWorker(t, cfg, store, func(w *Worker) {
				w.hooks.AfterWrite = func(p int, next int64) {
					if p == 0 && next > 112 && !w.hooks.Halted.Load() {
						// kill -9 right after the write, before its commit.
						w.hooks.Halted.Store(true)
						close(crash)
					}
				}
			})
			go func() { <-crash; a.cancel() }()
			select {
			case <-a.done:
			case <-time.After(60 * time.Second):
				t.Fatal("crashing worker did not stop")
			}
			a.done <- nil
			if d := fidRead(t, brokers, tDLQ); len(d[0]) != 1 {
				t.Fatalf("the crashing worker wrote %d dead letters, want 1 before the crash", len(d[0]))
			}

			cfg = testConfig(brokers)
			cfg.Owner = "successor"
			b := startWorker(t, cfg, store, nil)
			waitFor(t, 60*time.Second, "successor caught up", func() bool {
				s := b.w.Status()
				return len(s.Partitions) == 2 && s.Partitions[0].NextOffset == 163 && s.Partitions[1].NextOffset == 100
			})
			checkOutput(t, "output", outputKeys(t, brokers, tOut), want)
			if d := fidRead(t, brokers, tDLQ); len(d[0]) != 1 || len(d[1]) != 0 {
				t.Errorf("dead letters after the crash: %d and %d, want 1 and 0", len(d[0]), len(d[1]))
			}
			if got := seriesValue(t, b.reg, "bloomgate_records_dead_lettered_total", map[string]string{"partition": "0", "reason": ReasonRecordTooLarge}); got != 1 {
				t.Errorf("successor counted %v dead letters of reason record_too_large, want 1 (found written by the scan)", got)
			}
			b.conservation(t)
		})
	}
}
