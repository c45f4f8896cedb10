package repartition

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bloomgate/bloomgate/internal/kafkatest"
	"github.com/bloomgate/bloomgate/internal/keys"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// metric sums the series of the counter name in reg whose labels include
// want (name=value pairs).
func metric(t *testing.T, reg *prometheus.Registry, name string, want ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(want); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == want[i] && l.GetValue() == want[i+1])
				}
				if !found {
					continue next
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// startHop runs a hop keyed by the JSON field "url" until the test ends.
func startHop(t *testing.T, cfg Config, reg *prometheus.Registry) *kafkatest.LogBuffer {
	t.Helper()
	ex, err := keys.NewExtractor("json:url", "url", 0)
	if err != nil {
		t.Fatal(err)
	}
	logs := new(kafkatest.LogBuffer)
	r, err := New(cfg, ex, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if t.Failed() {
			t.Logf("hop log:\n%s", logs.String())
		}
	})
	return logs
}

// readAll reads topic whole with franz-go (which follows leader moves by
// itself), up to its current end offsets.
func readAll(t *testing.T, brokers []string, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	ends.Each(func(o kadm.ListedOffset) { want += o.Offset })
	var out []*kgo.Record
	for int64(len(out)) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records of %s", len(out), want, topic)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

// origin is the input partition/offset a written record names.
func origin(r *kgo.Record) string {
	var p, o string
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderOriginPartition:
			p = string(h.Value)
		case HeaderOriginOffset:
			o = string(h.Value)
		}
	}
	return p + "/" + o
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// produceURLs writes n URL events, from index from, spread over
// partitions, with franz-go, and returns their input positions.
func produceURLs(t *testing.T, brokers []string, topic string, partitions, from, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for i := from; i < from+n; i++ {
		recs = append(recs, &kgo.Record{Partition: int32(i % partitions), Value: fmt.Appendf(nil, `{"url":"http://example.com/%d"}`, i)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("producing %d events: %v", n, err)
	}
}

// TestLeaderMoveDuringWrites: on a cluster of three brokers, the leaders
// of every repartition topic partition move while the hop writes (the
// Transport's periodic metadata refresh is off, so only the refresh after
// a refused write can find them). The refused writes go again to the new
// leaders: every input record is on the repartition topic once, none lost,
// none copied (a write retried only when nothing of it landed).
func TestLeaderMoveDuringWrites(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.Ports(0, 0, 0), kfake.NumBrokers(3), kfake.SeedTopics(4, "in", "g-repartition"),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	reg := prometheus.NewRegistry()
	startHop(t, Config{Brokers: brokers, Group: "g-repartition", Input: "in", Output: "g-repartition",
		Transport: &kafka.Transport{MetadataTTL: time.Hour}}, reg)
	const step = 3000
	produceURLs(t, brokers, "in", 4, 0, step)
	handled := func() float64 { return metric(t, reg, "bloomgate_repartition_records_total") }
	kafkatest.WaitFor(t, 60*time.Second, "the first records written", func() bool { return handled() >= step })
	for i := 1; i <= 2; i++ {
		for p := range int32(4) {
			if err := c.MoveTopicPartition("g-repartition", p, (c.LeaderFor("g-repartition", p)+1)%3); err != nil {
				t.Fatal(err)
			}
		}
		produceURLs(t, brokers, "in", 4, i*step, step)
		kafkatest.WaitFor(t, 60*time.Second, "every record written", func() bool { return handled() >= float64((i+1)*step) })
	}
	if n := metric(t, reg, "bloomgate_repartition_write_retries_total"); n == 0 {
		t.Error("no write retried after the repartition topic's leaders moved")
	}
	seen := map[string]int{}
	for _, r := range readAll(t, brokers, "g-repartition") {
		seen[origin(r)]++
	}
	lost, copies := 0, 0
	for p := range 4 {
		for o := range 3 * step / 4 {
			switch n := seen[fmt.Sprintf("%d/%d", p, o)]; {
			case n == 0:
				lost++
			case n > 1:
				copies += n - 1
			}
		}
	}
	if lost != 0 || copies != 0 || len(seen) != 3*step {
		t.Errorf("%d records lost, %d copies, %d origins; want 0, 0, %d", lost, copies, len(seen), 3*step)
	}
}

// TestRecordTooLarge: a record larger than the repartition topic takes
// (max.message.bytes 4096) among small ones is placed by --on-unwritable,
// counted under record_too_large, and every other record is written:
// dead-letter writes it whole to the dead-letter topic, or a reference
// record where that topic cannot hold it either; drop leaves it out;
// stall holds its partition before it (the other partitions flow) until
// the topic takes it. A limit lowered while the hop runs (the hop's bound
// is stale) is found from the broker's refusal.
func TestRecordTooLarge(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.Ports(0), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	admCl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admCl.Close)
	adm := kadm.NewClient(admCl)
	small := "4096"
	create := func(topic string, maxBytes *string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var cfg map[string]*string
		if maxBytes != nil {
			cfg = map[string]*string{"max.message.bytes": maxBytes}
		}
		if _, err := adm.CreateTopic(ctx, 2, 1, cfg, topic); err != nil {
			t.Fatalf("creating %s: %v", topic, err)
		}
	}
	// Incompressible: the broker compares the batch as sent (compressed
	// like the input's) with its limit.
	pad := make([]byte, 5000)
	for i := range pad {
		pad[i] = byte(rand.N(256))
	}
	big := `{"url":"http://example.com/big","pad":"` + hex.EncodeToString(pad) + `"}`
	const n = 200 // small records, then the big one in partition 0, then n more

	for _, tc := range []struct {
		name       string
		policy     worker.UnwritablePolicy
		dlt        *string // max.message.bytes of the dead-letter topic; nil: none
		lowerLater bool    // the repartition topic's limit is lowered once the hop runs
		outcome    string
	}{
		{"dead-letter", worker.UnwritableDeadLetter, new(string), false, outcomeDeadLettered},
		{"reference", worker.UnwritableDeadLetter, &small, false, outcomeReference},
		{"drop", worker.UnwritableDrop, nil, false, outcomeDropped},
		{"lowered", worker.UnwritableDeadLetter, new(string), true, outcomeDeadLettered},
		{"stall", worker.UnwritableStall, nil, false, outcomeStalled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in, out, dlt := "in-"+tc.name, "out-"+tc.name, ""
			create(in, nil)
			if tc.lowerLater {
				create(out, nil)
			} else {
				create(out, &small)
			}
			if tc.dlt != nil {
				dlt = "dlq-" + tc.name
				if *tc.dlt == "" {
					create(dlt, nil)
				} else {
					create(dlt, tc.dlt)
				}
			}
			reg := prometheus.NewRegistry()
			cfg := Config{Brokers: brokers, Group: "g-" + tc.name, Input: in, Output: out, DeadLetter: dlt, OnUnwritable: tc.policy}
			if tc.policy == worker.UnwritableStall {
				cfg.UnwritableRetry = 200 * time.Millisecond // the test waits for a retry to find the raised limit
			}
			logs := startHop(t, cfg, reg)
			handled := func() float64 { return metric(t, reg, "bloomgate_repartition_records_total") }
			if tc.lowerLater {
				produceURLs(t, brokers, in, 2, 0, 10)
				kafkatest.WaitFor(t, 30*time.Second, "the first records written", func() bool { return handled() == 10 })
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: &small}}, out)
				cancel()
				if err != nil {
					t.Fatal(err)
				}
			}
			before := int(handled())
			produceURLs(t, brokers, in, 2, 1000, n)
			pr, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				t.Fatal(err)
			}
			defer pr.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			bigAt, err := pr.ProduceSync(ctx, &kgo.Record{Topic: in, Partition: 0, Value: []byte(big)}).First()
			if err != nil {
				t.Fatal(err)
			}
			produceURLs(t, brokers, in, 2, 2000, n)
			total := before + 2*n + 1
			counted := func() float64 {
				return metric(t, reg, "bloomgate_repartition_unwritable_records_total", "reason", worker.ReasonRecordTooLarge, "outcome", tc.outcome)
			}

			if tc.policy == worker.UnwritableStall {
				// Partition 1 flows; partition 0 waits before the big record.
				stalled := before + n/2 + n // partition 0's records before it, all of partition 1's
				kafkatest.WaitFor(t, 30*time.Second, "the stall counted and partition 1 written", func() bool {
					return counted() == 1 && handled() == float64(stalled)
				})
				// Several retries: each logs the stall again.
				stalls := func() int { return strings.Count(logs.String(), "--on-unwritable=stall: the partition waits") }
				seen := stalls()
				kafkatest.WaitFor(t, 30*time.Second, "two more retries of the stalled record", func() bool { return stalls() >= seen+2 })
				if got := handled(); got != float64(stalled) || counted() != 1 {
					t.Fatalf("stalled: %v records handled, stall counted %v times; want %d and once", got, counted(), stalled)
				}
				big := "1048588"
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: &big}}, out)
				cancel()
				if err != nil {
					t.Fatal(err)
				}
			}
			kafkatest.WaitFor(t, 30*time.Second, "every record handled", func() bool { return handled() >= float64(total) })
			if tc.policy != worker.UnwritableStall {
				kafkatest.WaitFor(t, 10*time.Second, "the record counted", func() bool { return counted() == 1 })
			}
			if refused := strings.Contains(logs.String(), "repartition batch refused for its records"); refused != tc.lowerLater {
				t.Errorf("a batch refused by the broker: %v, want %v", refused, tc.lowerLater)
			}
			bigOrigin := "0/" + strconv.FormatInt(bigAt.Offset, 10)
			seen := map[string]int{}
			for _, r := range readAll(t, brokers, out) {
				seen[origin(r)]++
			}
			wantOut := total - 1
			if tc.policy == worker.UnwritableStall {
				wantOut = total // written once the topic took it
			}
			if len(seen) != wantOut {
				t.Errorf("%d input records on the repartition topic, want %d", len(seen), wantOut)
			}
			if (seen[bigOrigin] > 0) != (tc.policy == worker.UnwritableStall) {
				t.Errorf("the big record on the repartition topic %d times", seen[bigOrigin])
			}
			if dlt == "" {
				return
			}
			dls := readAll(t, brokers, dlt)
			if len(dls) != 1 {
				t.Fatalf("%d dead letters, want 1", len(dls))
			}
			dl := dls[0]
			if origin(dl) != bigOrigin || header(dl, HeaderError) != worker.ReasonRecordTooLarge {
				t.Errorf("dead letter from %s with %s %q; want from %s with %q", origin(dl), HeaderError, header(dl, HeaderError), bigOrigin, worker.ReasonRecordTooLarge)
			}
			if tc.outcome == outcomeReference {
				if want := fmt.Sprintf("%s/0/%d", in, bigAt.Offset); string(dl.Key) != want || header(dl, worker.HeaderRefTopic) != in ||
					!strings.Contains(string(dl.Value), `"reason":"record_too_large"`) {
					t.Errorf("reference record %q = %s (ref-topic %q); want key %q naming the input record", dl.Key, dl.Value, header(dl, worker.HeaderRefTopic), want)
				}
			} else if string(dl.Value) != big || len(dl.Key) != 32 {
				t.Errorf("dead letter with key %q and %d value bytes; want the hop's record whole", dl.Key, len(dl.Value))
			}
		})
	}
}
