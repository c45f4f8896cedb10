package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

const (
	tIn  = "in"
	tOut = "out"
	tDup = "dups"
	tDLQ = "dlq"
)

// newCluster starts an in-process broker on 127.0.0.1 with the test topics.
func newCluster(t *testing.T, partitions int32) []string {
	t.Helper()
	c, err := kfake.NewCluster(
		kfake.Ports(0),
		kfake.SeedTopics(partitions, tIn, tOut, tDup, tDLQ),
		kfake.GroupMinSessionTimeout(100*time.Millisecond),
	)
	if err != nil {
		t.Fatalf("starting kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("BLOOMGATE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}

func testConfig(brokers []string) Config {
	return Config{
		Brokers:    brokers,
		Group:      "g",
		Input:      tIn,
		Output:     tOut,
		Duplicates: tDup,
		DeadLetter: tDLQ,
		Filter:     FilterParams{Window: time.Hour, Generations: 4, Capacity: 100_000, FPR: 0.01},

		CheckpointInterval: 200 * time.Millisecond,
		BatchSize:          200,
		BatchTimeout:       2 * time.Millisecond,
		CommitInterval:     100 * time.Millisecond,
		ShutdownTimeout:    5 * time.Second,
		WriteTimeout:       5 * time.Second,
		SessionTimeout:     2 * time.Second,
		RebalanceTimeout:   6 * time.Second,
		HeartbeatInterval:  200 * time.Millisecond,
		JoinGroupBackoff:   200 * time.Millisecond,
		Owner:              "test",
	}
}

// defaultGroupTimings sets the group timings a user runs with (session
// 10 s, heartbeat 1 s, the rebalance timeout's default). Tests about the
// group use them: a test that passes only with tuned timings reports a bug.
// testConfig keeps tuned ones for tests whose subject is elsewhere and that
// kill workers (each kill then costs a session timeout).
func defaultGroupTimings(cfg *Config) {
	cfg.SessionTimeout, cfg.HeartbeatInterval, cfg.RebalanceTimeout, cfg.JoinGroupBackoff = 10*time.Second, time.Second, 0, time.Second
}

// runningWorker is a worker started in the background.
type runningWorker struct {
	w      *Worker
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
}

func startWorker(t *testing.T, cfg Config, store StateStore, tweak func(*Worker)) *runningWorker {
	t.Helper()
	return startWorkerWith(t, cfg, store, keyExtractor{}, tweak)
}

func startWorkerWith(t *testing.T, cfg Config, store StateStore, ex Extractor, tweak func(*Worker)) *runningWorker {
	t.Helper()
	reg := prometheus.NewRegistry()
	w, err := New(cfg, Deps{Logger: testLogger(t).With("owner", cfg.Owner), Registerer: reg, State: store, Extractor: ex})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if tweak != nil {
		tweak(w)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rw := &runningWorker{w: w, reg: reg, cancel: cancel, done: make(chan error, 1)}
	go func() { rw.done <- w.Run(ctx) }()
	t.Cleanup(func() { rw.stop(t) })
	return rw
}

// stop cancels the worker and waits for Run; it returns Run's error.
func (rw *runningWorker) stop(t *testing.T) error {
	rw.cancel()
	select {
	case err, ok := <-rw.done:
		if ok {
			close(rw.done)
		}
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("worker did not stop within 30s")
		return nil
	}
}

// totals sums the partition counters of the worker's status.
func (rw *runningWorker) consumed() uint64 {
	var n uint64
	for _, p := range rw.w.Status().Partitions {
		n += p.Consumed
	}
	return n
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// event is one input record.
type event struct {
	partition int
	key       []byte
	value     string
	ts        time.Time
}

// partitionBalancer sends each message to the partition named in its
// "p" header.
type partitionBalancer struct{}

func (partitionBalancer) Balance(m kafka.Message, partitions ...int) int {
	for _, h := range m.Headers {
		if h.Key == "p" {
			p, _ := strconv.Atoi(string(h.Value))
			return p
		}
	}
	return 0
}

func produce(t *testing.T, brokers []string, evs []event) {
	t.Helper()
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: tIn, Balancer: partitionBalancer{},
		RequiredAcks: kafka.RequireAll, BatchSize: 1000, BatchTimeout: time.Millisecond}
	defer w.Close()
	msgs := make([]kafka.Message, len(evs))
	for i, e := range evs {
		msgs[i] = kafka.Message{Key: e.key, Value: []byte(e.value), Time: e.ts,
			Headers: []kafka.Header{{Key: "p", Value: []byte(strconv.Itoa(e.partition))}}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("producing %d events: %v", len(evs), err)
	}
}

// readTopic reads every record of every partition of topic up to the
// current high-water marks.
func readTopic(t *testing.T, brokers []string, topic string, partitions int) map[int][]kafka.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := &kafka.Client{Addr: kafka.TCP(brokers...)}
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

// expectation computes, per partition, the keys expected on the output (in
// order) and on the duplicates topic, with the exact window semantics.
func expectation(evs []event, window time.Duration) (out, dups map[int][]string, bad int) {
	out, dups = map[int][]string{}, map[int][]string{}
	last := map[string]time.Time{}
	for _, e := range evs {
		if len(e.key) == 0 || e.value == "malformed" {
			bad++
			continue
		}
		k := fmt.Sprintf("%d/%s", e.partition, e.key)
		prev, ok := last[k]
		if ok && e.ts.Sub(prev) < window {
			dups[e.partition] = append(dups[e.partition], string(e.key))
		} else {
			out[e.partition] = append(out[e.partition], string(e.key))
		}
		if !ok || e.ts.After(prev) {
			last[k] = e.ts
		}
	}
	return out, dups, bad
}

// checkOutput compares a topic's records with the expected keys per partition.
func checkKeys(t *testing.T, what string, got map[int][]kafka.Message, want map[int][]string) {
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

// genEvents makes n events over partitions with about dupRatio duplicates,
// some adjacent, some far apart; keys are unique per partition.
func genEvents(n, partitions int, dupRatio float64, seed int64, base time.Time) []event {
	evs := make([]event, 0, n)
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
		evs = append(evs, event{partition: p, key: k, value: "v" + strconv.Itoa(i), ts: base.Add(time.Duration(i) * time.Millisecond)})
	}
	return evs
}

func sumStatus(s Status) (consumed, forwarded, dups, dead, dropped uint64) {
	for _, p := range s.Partitions {
		consumed += p.Consumed
		forwarded += p.Forwarded
		dups += p.Duplicates
		dead += p.DeadLettered
		dropped += p.Dropped
	}
	return
}

var errTest = errors.New("test")

// metricSum sums every series of a counter or gauge in the worker's registry.
func (rw *runningWorker) metricSum(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := rw.reg.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	var s float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if c := m.GetCounter(); c != nil {
				s += c.GetValue()
			}
			if g := m.GetGauge(); g != nil {
				s += g.GetValue()
			}
		}
	}
	return s
}

// conservation checks consumed = forwarded + duplicates + dead-lettered +
// dropped from the metrics and returns the counts.
func (rw *runningWorker) conservation(t *testing.T) (consumed, forwarded, dups, dead, dropped float64) {
	t.Helper()
	consumed = rw.metricSum(t, "bloomgate_records_consumed_total")
	forwarded = rw.metricSum(t, "bloomgate_records_forwarded_total")
	dups = rw.metricSum(t, "bloomgate_records_duplicates_total")
	dead = rw.metricSum(t, "bloomgate_records_dead_lettered_total")
	dropped = rw.metricSum(t, "bloomgate_records_dropped_total")
	if consumed != forwarded+dups+dead+dropped {
		t.Errorf("conservation: consumed %v != forwarded %v + duplicates %v + dead-lettered %v + dropped %v",
			consumed, forwarded, dups, dead, dropped)
	}
	return
}
