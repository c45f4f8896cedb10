// Package kafkatest holds what tests against an in-process Kafka broker
// (kfake, on 127.0.0.1) share: a cluster with the test topics, synthetic
// keyed events with a known share of duplicates, producing them, reading a
// topic back, and the output an exact deduplication must produce. It is
// used by the tests of internal/worker and internal/memory; nothing in the
// product imports it.
package kafkatest

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// NewCluster starts a broker on 127.0.0.1 with topics of the given
// partition count; it stops with the test.
func NewCluster(t testing.TB, partitions int32, topics ...string) []string {
	t.Helper()
	c, err := kfake.NewCluster(
		kfake.Ports(0),
		kfake.SeedTopics(partitions, topics...),
		kfake.GroupMinSessionTimeout(100*time.Millisecond),
	)
	if err != nil {
		t.Fatalf("starting kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// WaitFor polls cond every 20 ms until it holds, failing t after timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Event is one input record: its partition, Kafka key, value and
// timestamp.
type Event struct {
	Partition int
	Key       []byte
	Value     string
	TS        time.Time
}

// PartitionBalancer sends each message to the partition named in its
// "p" header.
type PartitionBalancer struct{}

// Balance implements kafka.Balancer.
func (PartitionBalancer) Balance(m kafka.Message, partitions ...int) int {
	for _, h := range m.Headers {
		if h.Key == "p" {
			p, _ := strconv.Atoi(string(h.Value))
			return p
		}
	}
	return 0
}

// newTransport is a Transport of its own for one call, closed with the
// test: kafka-go's DefaultTransport keeps metadata per broker address for
// seconds, and a cluster started on the port of one a parallel test just
// closed would be seen through the old cluster's metadata (a produce then
// fails with "topic partition not found").
func newTransport(t testing.TB) *kafka.Transport {
	tr := &kafka.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// Produce writes evs to topic, each to its partition (acks=all).
func Produce(t testing.TB, brokers []string, topic string, evs []Event) {
	t.Helper()
	tr := newTransport(t)
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Balancer: PartitionBalancer{},
		RequiredAcks: kafka.RequireAll, BatchSize: 1000, BatchTimeout: time.Millisecond, Transport: tr}
	defer w.Close()
	msgs := make([]kafka.Message, len(evs))
	for i, e := range evs {
		msgs[i] = kafka.Message{Key: e.Key, Value: []byte(e.Value), Time: e.TS,
			Headers: []kafka.Header{{Key: "p", Value: []byte(strconv.Itoa(e.Partition))}}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("producing %d events: %v", len(evs), err)
	}
}

// ReadTopic reads every record of every partition of topic up to the
// current high-water marks.
func ReadTopic(t testing.TB, brokers []string, topic string, partitions int) map[int][]kafka.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: newTransport(t)}
	reqs := []kafka.OffsetRequest{}
	for p := 0; p < partitions; p++ {
		reqs = append(reqs, kafka.LastOffsetOf(p))
	}
	res, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		t.Fatalf("listing offsets of %s: %v", topic, err)
	}
	out := map[int][]kafka.Message{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, po := range res.Topics[topic] {
		if po.LastOffset == 0 {
			continue
		}
		wg.Add(1)
		go func(p int, end int64) {
			defer wg.Done()
			r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: p, MaxWait: 2 * time.Second})
			defer r.Close()
			var msgs []kafka.Message
			for {
				m, err := r.FetchMessage(ctx)
				if err != nil {
					t.Errorf("reading %s/%d: %v", topic, p, err)
					return
				}
				msgs = append(msgs, m)
				if m.Offset+1 >= end {
					break
				}
			}
			mu.Lock()
			out[p] = msgs
			mu.Unlock()
		}(po.Partition, po.LastOffset)
	}
	wg.Wait()
	return out
}

// Expectation computes, per partition, the keys expected on the output (in
// order) and on the duplicates topic, with the exact window semantics.
func Expectation(evs []Event, window time.Duration) (out, dups map[int][]string, bad int) {
	out, dups = map[int][]string{}, map[int][]string{}
	last := map[string]time.Time{}
	for _, e := range evs {
		if len(e.Key) == 0 || e.Value == "malformed" {
			bad++
			continue
		}
		k := fmt.Sprintf("%d/%s", e.Partition, e.Key)
		prev, ok := last[k]
		if ok && e.TS.Sub(prev) < window {
			dups[e.Partition] = append(dups[e.Partition], string(e.Key))
		} else {
			out[e.Partition] = append(out[e.Partition], string(e.Key))
		}
		if !ok || e.TS.After(prev) {
			last[k] = e.TS
		}
	}
	return out, dups, bad
}

// CheckKeys compares a topic's records with the expected keys per partition.
func CheckKeys(t testing.TB, what string, got map[int][]kafka.Message, want map[int][]string) {
	t.Helper()
	for p := range max(len(got), len(want)) + 8 {
		g, w := got[p], want[p]
		if len(g) != len(w) {
			t.Errorf("%s partition %d: %d records, want %d", what, p, len(g), len(w))
		}
		for i := range min(len(g), len(w)) {
			if string(g[i].Key) != w[i] {
				t.Errorf("%s partition %d record %d: key %q, want %q", what, p, i, g[i].Key, w[i])
				break
			}
		}
	}
}

// GenEvents makes n events over partitions with about dupRatio duplicates,
// some adjacent, some far apart; keys are unique per partition.
func GenEvents(n, partitions int, dupRatio float64, seed int64, base time.Time) []Event {
	evs := make([]Event, 0, n)
	var keys [][]byte
	x := uint64(seed)*2654435761 + 1
	rnd := func() uint64 { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x }
	for i := 0; i < n; i++ {
		p := int(rnd() % uint64(partitions))
		var k []byte
		if len(keys) > 0 && float64(rnd()%1000) < dupRatio*1000 {
			if rnd()%2 == 0 {
				k = keys[len(keys)-1]
			} else {
				k = keys[rnd()%uint64(len(keys))]
			}
			p = int(k[1] - '0') // duplicates stay in their key's partition
		} else {
			k = []byte(fmt.Sprintf("p%d-key-%06d", p, i))
			keys = append(keys, k)
		}
		evs = append(evs, Event{Partition: p, Key: k, Value: "v" + strconv.Itoa(i), TS: base.Add(time.Duration(i) * time.Millisecond)})
	}
	return evs
}

// Values joins the records' values with spaces, for short expectations.
func Values(msgs []kafka.Message) string {
	vs := make([]string, 0, len(msgs))
	for _, m := range msgs {
		vs = append(vs, string(m.Value))
	}
	return strings.Join(vs, " ")
}

// LogBuffer collects a worker's log lines from any goroutine, for tests
// that check what was logged.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
