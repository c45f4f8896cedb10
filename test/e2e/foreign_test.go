package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/proctest"
)

// produceWithHeaders writes key<TAB>value lines with kcat -P, every record
// with the given headers (name=value).
func produceWithHeaders(t *testing.T, kcat, brokers, topic string, headers []string, lines []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := []string{"-b", brokers, "-P", "-t", topic, "-p", "0", "-K", "\t", "-X", "acks=all"}
	for _, h := range headers {
		args = append(args, "-H", h)
	}
	cmd := exec.CommandContext(ctx, kcat, args...)
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, out)
	}
}

// TestKcatForgedDeadLetters: kcat, as another producer, writes records
// into the dead-letter topic carrying forged src headers (and a made-up
// provenance header) that name the first input offsets. `bloomgate run`
// with its default settings must forward every valid event of the input
// and count the forged records as foreign; before provenance it took them
// as its own dead letters and forwarded none of those events.
func TestKcatForgedDeadLetters(t *testing.T) {
	kcat := kcatTool.Path(t)
	b := start(t, "broker", "broker", "--listen", "127.0.0.1:0",
		"--topic", "orders:1", "--topic", "orders-unique:1", "--topic", "orders-dead:1")
	brokers := waitFor(t, b, proctest.BrokerListening, 30*time.Second)

	const n = 20
	for i := range n {
		h := []string{"bloomgate-src-partition=0", fmt.Sprintf("bloomgate-src-offset=%d", i), "bloomgate-error=malformed_json"}
		if i%2 == 1 {
			h = append(h, "bloomgate-provenance=1 0123456789abcdef AAAAAAAAAAAAAAAAAAAAAA orders e2e")
		}
		produceWithHeaders(t, kcat, brokers, "orders-dead", h, []string{fmt.Sprintf("forged-%d\t{}", i)})
	}
	var lines []string
	for i := range n {
		lines = append(lines, orderLine(fmt.Sprintf("o-%04d", i), i))
	}
	produce(t, kcat, brokers, "orders", lines)
	in := consume(t, kcat, brokers, "orders")

	w := start(t, "worker", "run", "--brokers", brokers, "--group", "e2e",
		"--input", "orders", "--output", "orders-unique", "--dead-letter", "orders-dead",
		"--key", "json:order_id", "--checkpoint-url", "file://"+t.TempDir(), "--metrics-addr", "127.0.0.1:0")
	maddr := waitFor(t, w, reMetrics, 30*time.Second)
	waitConsumed(t, w, maddr, n)
	want, _ := expectedOutput(in, map[string]bool{})
	checkForwarded(t, consume(t, kcat, brokers, "orders-unique"), want)
	if got := metricSum(t, maddr, "bloomgate_foreign_records_total"); got != n {
		t.Errorf("bloomgate_foreign_records_total = %.0f, want %d", got, n)
	}
	if got := metricSum(t, maddr, "bloomgate_recovery_already_written_records_total"); got != 0 {
		t.Errorf("recovery took %.0f forged records as written", got)
	}
	waitFor(t, w, regexp.MustCompile(`holds records this memory did not write`), 10*time.Second)
	stop(t, w, 40*time.Second)
	stop(t, b, 20*time.Second)
}
