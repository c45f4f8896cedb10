package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/proctest"
)

// TestKcatBrokerRestarted is the README's step-by-step path with its broker
// restarted: the in-memory broker comes back with empty topics, the
// checkpoints and the group's memory of offsets are gone with it, and kcat
// produces new events. `bloomgate run` with the same checkpoint directory
// must read the whole new log (before: it jumped to the end and consumed
// none of it), remembering the keys of the first run.
func TestKcatBrokerRestarted(t *testing.T) {
	kcat := kcatTool.Path(t)
	cpDir := t.TempDir()
	topics := []string{"--topic", "orders:2", "--topic", "orders-unique:2", "--topic", "orders-dead:2"}
	runWorker := func(brokers string) (*proctest.Proc, string) {
		w := start(t, "worker", "run", "--brokers", brokers, "--input", "orders", "--output", "orders-unique",
			"--dead-letter", "orders-dead", "--key", "json:order_id", "--checkpoint-url", "file://"+cpDir,
			"--metrics-addr", "127.0.0.1:0")
		return w, waitFor(t, w, reMetrics, 30*time.Second)
	}

	b1 := start(t, "broker", append([]string{"broker", "--listen", "127.0.0.1:0"}, topics...)...)
	brokers := waitFor(t, b1, proctest.BrokerListening, 30*time.Second)
	var first []string
	for i := range 600 {
		first = append(first, orderLine(fmt.Sprintf("o-%04d", i), i))
	}
	produce(t, kcat, brokers, "orders", first)
	in1 := consume(t, kcat, brokers, "orders")
	w1, m1 := runWorker(brokers)
	waitConsumed(t, w1, m1, len(in1))
	stop(t, w1, 40*time.Second)
	stop(t, b1, 20*time.Second)

	// A new broker: the same topics, empty. 300 records: every third
	// repeats an order of the first run, the others are new.
	b2 := start(t, "broker", append([]string{"broker", "--listen", "127.0.0.1:0"}, topics...)...)
	brokers = waitFor(t, b2, proctest.BrokerListening, 30*time.Second)
	var second []string
	for i := range 300 {
		id := fmt.Sprintf("n-%04d", i)
		if i%3 == 0 {
			id = fmt.Sprintf("o-%04d", i)
		}
		second = append(second, orderLine(id, 1000+i))
	}
	produce(t, kcat, brokers, "orders", second)
	in2 := consume(t, kcat, brokers, "orders")
	w2, m2 := runWorker(brokers)
	waitConsumed(t, w2, m2, len(in2))
	seen := map[string]bool{}
	expectedOutput(in1, seen)
	want, _ := expectedOutput(in2, seen)
	if len(want) != 200 {
		t.Fatalf("test data: %d new keys, want 200", len(want))
	}
	checkForwarded(t, consume(t, kcat, brokers, "orders-unique"), want)
	if got := metricSum(t, m2, "bloomgate_records_duplicates_total"); got != 100 {
		t.Errorf("%.0f repeats of the first run's orders judged duplicates, want 100", got)
	}
	if got := metricSum(t, m2, "bloomgate_input_resets_total"); got != 2 {
		t.Errorf("bloomgate_input_resets_total = %.0f, want 2 (one per partition)", got)
	}
	stop(t, w2, 40*time.Second)
	stop(t, b2, 20*time.Second)
}
