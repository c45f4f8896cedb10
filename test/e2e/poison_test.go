package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bloomgate/bloomgate/internal/proctest"
)

// kcatTo writes key<TAB>value lines to one partition of topic with kcat.
func kcatTo(t *testing.T, kcat, brokers, topic string, partition int, lines []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcat, "-b", brokers, "-P", "-t", topic, "-p", strconv.Itoa(partition), "-K", "\t",
		"-H", "origin=e2e", "-X", "acks=all")
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, out)
	}
}

// kcatFile writes the content of file as one record keyed key to one
// partition of topic with kcat (librdkafka's own size limit raised).
func kcatFile(t *testing.T, kcat, brokers, topic string, partition int, key, file string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcat, "-b", brokers, "-P", "-t", topic, "-p", strconv.Itoa(partition), "-k", key,
		"-X", "acks=all", "-X", "message.max.bytes=8000000", file)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P %s: %v\n%s", file, err, out)
	}
}

// raiseLimit sets topic's max.message.bytes (the embedded broker's topics
// start at Kafka's default, 1 MiB + 12).
func raiseLimit(t *testing.T, brokers, topic string, limit int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	v := strconv.Itoa(limit)
	res, err := kadm.NewClient(cl).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &v}}, topic)
	if err == nil {
		_, err = res.On(topic, nil)
	}
	if err != nil {
		t.Fatalf("setting max.message.bytes of %s: %v", topic, err)
	}
}

// TestKcatOversizedRecord: kcat produces a 2 MiB order among small ones
// to an input topic that takes it; the binary runs with its defaults
// (--max-batch-bytes 1MiB, output topics at Kafka's default limit).
// With a dead-letter topic every small order before and after it is
// forwarded, the big one is dead-lettered as a reference record and the
// worker keeps running (before: exit 1 at start and on every restart, with
// nothing of the partition forwarded). Without one the partition stalls
// at the record, visibly in /status.json and the metrics, while the other
// partition keeps flowing.
func TestKcatOversizedRecord(t *testing.T) {
	kcat := kcatTool.Path(t)
	b := start(t, "broker", "broker", "--listen", "127.0.0.1:0",
		"--topic", "orders:2", "--topic", "orders-unique:2", "--topic", "orders-dead:2", "--topic", "orders-stalled:2")
	brokers := waitFor(t, b, proctest.BrokerListening, 30*time.Second)
	raiseLimit(t, brokers, "orders", 8<<20)

	var before, after, other []string
	for i := range 112 {
		before = append(before, orderLine(fmt.Sprintf("a-%03d", i), i))
	}
	for i := range 50 {
		after = append(after, orderLine(fmt.Sprintf("b-%03d", i), 113+i))
	}
	for i := range 100 {
		other = append(other, orderLine(fmt.Sprintf("c-%03d", i), i))
	}
	big := filepath.Join(t.TempDir(), "big.json")
	pad := strings.Repeat("x", 2<<20)
	if err := os.WriteFile(big, []byte(`{"order_id":"big-1","pad":"`+pad+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	kcatTo(t, kcat, brokers, "orders", 0, before)
	kcatFile(t, kcat, brokers, "orders", 0, "big-1", big)
	kcatTo(t, kcat, brokers, "orders", 0, after)
	kcatTo(t, kcat, brokers, "orders", 1, other)

	// Default settings, with a dead-letter topic.
	w, maddr := startWorker(t, brokers, t.TempDir())
	waitConsumed(t, w, maddr, 263)
	out := consume(t, kcat, brokers, "orders-unique")
	byPartition := map[int][]string{}
	for _, r := range out {
		byPartition[r.partition] = append(byPartition[r.partition], r.key)
	}
	var want0 []string
	for i := range 112 {
		want0 = append(want0, fmt.Sprintf("a-%03d", i))
	}
	for i := range 50 {
		want0 = append(want0, fmt.Sprintf("b-%03d", i))
	}
	if got := strings.Join(byPartition[0], " "); got != strings.Join(want0, " ") {
		t.Errorf("output partition 0: %d records, want the 162 small orders in order", len(byPartition[0]))
	}
	if len(byPartition[1]) != 100 {
		t.Errorf("output partition 1: %d records, want 100", len(byPartition[1]))
	}
	dead := consume(t, kcat, brokers, "orders-dead")
	if len(dead) != 1 {
		t.Fatalf("dead-letter topic holds %d records, want the reference record", len(dead))
	}
	d := dead[0]
	size, _ := strconv.Atoi(d.headers["bloomgate-ref-size"])
	if d.key != "orders/0/112" || d.headers["bloomgate-error"] != "record_too_large" || d.headers["bloomgate-ref-topic"] != "orders" ||
		d.srcOffset != 112 || size < 2<<20 {
		t.Errorf("reference record: key %q headers %v", d.key, d.headers)
	}
	var ref struct {
		Offset     int64  `json:"offset"`
		ValueBytes int    `json:"value_bytes"`
		Reason     string `json:"reason"`
	}
	if err := json.Unmarshal([]byte(d.value), &ref); err != nil || ref.Offset != 112 || ref.ValueBytes < 2<<20 || ref.Reason != "record_too_large" {
		t.Errorf("reference value %q: %+v %v", d.value, ref, err)
	}
	if f := metricSum(t, maddr, "bloomgate_output_write_failures_total"); f != 0 {
		t.Errorf("%v write failures", f)
	}
	if !w.Running() {
		t.Fatalf("the worker exited: %v\n%s", w.Err(), w.Tail(20))
	}
	stop(t, w, 40*time.Second)

	// Default settings without a dead-letter topic: the partition stalls.
	s := start(t, "worker-stall", "run",
		"--brokers", brokers, "--group", "e2e-stall",
		"--input", "orders", "--output", "orders-stalled",
		"--key", "json:order_id", "--capacity", "100000",
		"--checkpoint-url", "file://"+t.TempDir(), "--checkpoint-interval", "2s",
		"--metrics-addr", "127.0.0.1:0", "--shutdown-timeout", "20s",
	)
	saddr := waitFor(t, s, reMetrics, 30*time.Second)
	type partition struct {
		Partition  int    `json:"partition"`
		State      string `json:"state"`
		Stalled    bool   `json:"stalled"`
		NextOffset int64  `json:"next_offset"`
		Lag        int64  `json:"lag"`
		LastError  string `json:"last_error"`
	}
	var st struct {
		Ready      bool        `json:"ready"`
		Partitions []partition `json:"partitions"`
	}
	if err := s.WaitUntil("partition 0 stalled at offset 112, partition 1 caught up", 60*time.Second, 200*time.Millisecond, func() bool {
		resp, err := http.Get("http://" + saddr + "/status.json")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		if json.NewDecoder(resp.Body).Decode(&st) != nil || len(st.Partitions) != 2 {
			return false
		}
		p0, p1 := st.Partitions[0], st.Partitions[1]
		return p0.Stalled && p0.State == "stalled" && p0.NextOffset == 112 && p1.NextOffset == 100
	}); err != nil {
		t.Fatalf("%v: %+v", err, st)
	}
	if p0 := st.Partitions[0]; !strings.Contains(p0.LastError, "record_too_large") || p0.Lag != 51 || !st.Ready {
		t.Errorf("stalled partition: %+v, ready %v; want the reason, a lag of 51, ready", p0, st.Ready)
	}
	if v := metricSum(t, saddr, "bloomgate_partition_stalled"); v != 1 {
		t.Errorf("bloomgate_partition_stalled sums to %v, want 1", v)
	}
	if got := len(consume(t, kcat, brokers, "orders-stalled")); got != 212 {
		t.Errorf("output holds %d records while stalled, want 112 + 100", got)
	}
	stop(t, s, 40*time.Second)
	stop(t, b, 20*time.Second)
}
