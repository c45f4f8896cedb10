// Package e2e runs the bloomgate binary end to end with kcat, a librdkafka
// client, as the producer and the consumer: `bloomgate broker` and
// `bloomgate run` are separate processes, as a user would run them.
//
// kcat is found via $BLOOMGATE_KCAT, else on $PATH. Without it the tests
// skip, unless BLOOMGATE_REQUIRE_TOOLS=1 (as in `make test`), where they fail.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/bloomgate/bloomgate/internal/kafkatest"
	"github.com/bloomgate/bloomgate/internal/proctest"
	"github.com/bloomgate/bloomgate/internal/worker"
)

var binary string

func TestMain(m *testing.M) {
	os.Exit(proctest.Main(m, &binary, proctest.BuildOptions{}))
}

var kcatTool = proctest.Tool{
	Env:   "BLOOMGATE_KCAT",
	Names: []string{"kcat"},
	Skip:  "kcat not found on PATH and BLOOMGATE_KCAT unset: the end-to-end tests need a librdkafka client",
	Fail:  "kcat not found (BLOOMGATE_REQUIRE_TOOLS=1): install it (apt-get install kcat) or set BLOOMGATE_KCAT",
}

// start runs the binary with args; see proctest.Start.
func start(t *testing.T, name string, args ...string) *proctest.Proc {
	t.Helper()
	return proctest.Start(t, proctest.Config{Name: name, Path: binary, Args: args})
}

// waitFor waits until the process output matches re and returns the first
// submatch.
func waitFor(t *testing.T, p *proctest.Proc, re *regexp.Regexp, limit time.Duration) string {
	t.Helper()
	m, err := p.WaitFor(re, limit)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// stop sends SIGTERM and waits for a clean exit.
func stop(t *testing.T, p *proctest.Proc, limit time.Duration) {
	t.Helper()
	if err := p.Stop(limit); err != nil {
		t.Fatal(err)
	}
}

// record is one Kafka record as kcat prints it, with its headers.
type record struct {
	partition int
	offset    int64
	key       string
	value     string
	headers   map[string]string
	// The input record a record the worker wrote stands for (its
	// bloomgate header; srcOK false: none).
	srcPartition int
	srcOffset    int64
	srcOK        bool
}

// kcatFormat leaves the headers out: kcat prints header values raw, and the
// worker's bloomgate header is binary. withHeaders reads them.
const kcatFormat = `%p\t%o\t%k\t%s\n`

// consume reads a whole topic with kcat (-e: exit at the end), and the
// records' headers with kafka-go (withHeaders).
func consume(t *testing.T, kcat, brokers, topic string) []record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcat, "-b", brokers, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", kcatFormat)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kcat -C %s: %v\n%s", topic, err, stderr.String())
	}
	var recs []record
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), "\t", 4)
		if len(f) != 4 {
			t.Fatalf("kcat line %q: want 4 tab-separated fields", sc.Text())
		}
		p, err1 := strconv.Atoi(f[0])
		o, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("kcat line %q: bad partition or offset", sc.Text())
		}
		recs = append(recs, record{partition: p, offset: o, key: f[2], value: f[3]})
	}
	withHeaders(t, brokers, topic, recs)
	sort.Slice(recs, func(i, j int) bool {
		if recs[i].partition != recs[j].partition {
			return recs[i].partition < recs[j].partition
		}
		return recs[i].offset < recs[j].offset
	})
	return recs
}

// withHeaders sets the headers of recs (records of topic) as kafka-go reads
// them, and what the worker's bloomgate header says.
func withHeaders(t *testing.T, brokers, topic string, recs []record) {
	t.Helper()
	parts := 0
	for _, r := range recs {
		parts = max(parts, r.partition+1)
	}
	if parts == 0 {
		return
	}
	type po struct {
		p int
		o int64
	}
	byPO := map[po]kafka.Message{}
	for p, msgs := range kafkatest.ReadTopic(t, strings.Split(brokers, ","), topic, parts) {
		for _, m := range msgs {
			byPO[po{p, m.Offset}] = m
		}
	}
	for i := range recs {
		r := &recs[i]
		m, ok := byPO[po{r.partition, r.offset}]
		if !ok {
			t.Fatalf("%s/%d offset %d: kcat read it, kafka-go did not", topic, r.partition, r.offset)
		}
		r.headers = map[string]string{}
		for _, h := range m.Headers {
			r.headers[h.Key] = string(h.Value)
		}
		r.srcPartition, r.srcOffset, r.srcOK = worker.SourceOf(m.Headers)
	}
}

// produce writes key<TAB>value lines with kcat -P (librdkafka's default
// partitioner: the same key always goes to the same partition).
func produce(t *testing.T, kcat, brokers, topic string, lines []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcat, "-b", brokers, "-P", "-t", topic, "-K", "\t", "-H", "origin=e2e",
		"-X", "acks=all")
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, out)
	}
}

func orderLine(id string, n int) string {
	return fmt.Sprintf(`%s	{"order_id":"%s","n":%d,"amount_cents":%d,"currency":"EUR"}`, id, id, n, 100+n)
}

// expectedOutput computes, from the input as stored, what bloomgate must
// forward: per partition, in offset order, the first occurrence of each
// key among the valid records, skipping keys in seen (recognised from
// before). It adds every forwarded key to seen.
func expectedOutput(in []record, seen map[string]bool) (fwd []record, bad []record) {
	for _, r := range in {
		if strings.HasPrefix(r.key, "bad-") { // malformed JSON value
			bad = append(bad, r)
			continue
		}
		if seen[r.key] {
			continue
		}
		seen[r.key] = true
		fwd = append(fwd, r)
	}
	return fwd, bad
}

func metricSum(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	sum := 0.0
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// waitConsumed waits until the worker's consumed counter reaches n.
func waitConsumed(t *testing.T, worker *proctest.Proc, addr string, n int) {
	t.Helper()
	what := fmt.Sprintf("consumption of %d records", n)
	if err := worker.WaitUntil(what, 60*time.Second, 100*time.Millisecond, func() bool {
		return metricSum(t, addr, "bloomgate_records_consumed_total") >= float64(n)
	}); err != nil {
		t.Fatalf("%v: consumed %.0f", err, metricSum(t, addr, "bloomgate_records_consumed_total"))
	}
}

var reMetrics = regexp.MustCompile(`msg="serving [^"]*/metrics[^"]*" addr=(\S+)`)

func startWorker(t *testing.T, brokers, cpDir string) (*proctest.Proc, string) {
	t.Helper()
	w := start(t, "worker", "run",
		"--brokers", brokers, "--group", "e2e",
		"--input", "orders", "--output", "orders-unique", "--dead-letter", "orders-dead",
		"--key", "json:order_id", "--capacity", "100000",
		"--checkpoint-url", "file://"+cpDir, "--checkpoint-interval", "2s",
		"--metrics-addr", "127.0.0.1:0", "--shutdown-timeout", "20s",
	)
	return w, waitFor(t, w, reMetrics, 30*time.Second)
}

func checkForwarded(t *testing.T, got, want []record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("output holds %d records, want %d", len(got), len(want))
	}
	// Per partition, in order: the output partition equals the input
	// partition (default partitioning "same").
	for i := range want {
		g, w := got[i], want[i]
		if g.partition != w.partition || g.key != w.key || g.value != w.value {
			t.Fatalf("output record %d: partition %d key %q value %q; want partition %d key %q value %q",
				i, g.partition, g.key, g.value, w.partition, w.key, w.value)
		}
		if !g.srcOK || g.srcPartition != w.partition || g.srcOffset != w.offset {
			t.Fatalf("output record %d (%s) stands for %d/%d (%v), want input record %d/%d",
				i, g.key, g.srcPartition, g.srcOffset, g.srcOK, w.partition, w.offset)
		}
		// As read, with one header added (README, "Guarantees").
		if g.headers["origin"] != "e2e" || len(g.headers) != len(w.headers)+1 {
			t.Fatalf("output record %d: headers %q, want the input's %q and bloomgate", i, g.headers, w.headers)
		}
	}
}

func TestKcatEndToEnd(t *testing.T) {
	kcat := kcatTool.Path(t)
	cpDir := t.TempDir()

	b := start(t, "broker", "broker", "--listen", "127.0.0.1:0",
		"--topic", "orders:4", "--topic", "orders-unique:4", "--topic", "orders-dead:4")
	brokers := waitFor(t, b, proctest.BrokerListening, 30*time.Second)

	// Phase 1: 300 keys, 100 repeats (some right after, some far back), 5
	// malformed JSON values.
	var lines []string
	for i := 0; i < 300; i++ {
		id := fmt.Sprintf("o-%04d", i)
		lines = append(lines, orderLine(id, len(lines)))
		if i%3 == 0 {
			lines = append(lines, orderLine(id, len(lines))) // producer retry
		}
		if i%60 == 59 {
			lines = append(lines, fmt.Sprintf(`bad-%d	{"order_id": "bad-%d", `, i, i)) // malformed
		}
	}
	for i := 0; i < 300 && len(lines) < 450; i += 7 {
		lines = append(lines, orderLine(fmt.Sprintf("o-%04d", i), len(lines))) // replay
	}
	produce(t, kcat, brokers, "orders", lines)
	in1 := consume(t, kcat, brokers, "orders")
	if len(in1) != len(lines) {
		t.Fatalf("input holds %d records, produced %d", len(in1), len(lines))
	}

	w, maddr := startWorker(t, brokers, cpDir)
	waitConsumed(t, w, maddr, len(in1))
	seen := map[string]bool{}
	want1, bad1 := expectedOutput(in1, seen)
	if len(want1) != 300 || len(bad1) != 5 {
		t.Fatalf("test data: %d unique, %d malformed; want 300 and 5", len(want1), len(bad1))
	}
	checkForwarded(t, consume(t, kcat, brokers, "orders-unique"), want1)
	dead := consume(t, kcat, brokers, "orders-dead")
	if len(dead) != len(bad1) {
		t.Fatalf("dead-letter topic holds %d records, want %d", len(dead), len(bad1))
	}
	for i, d := range dead {
		if d.headers["bloomgate-error"] == "" || !strings.HasPrefix(d.key, "bad-") {
			t.Errorf("dead letter %d: key %q headers %v: want a bad- key and a bloomgate-error header", i, d.key, d.headers)
		}
	}
	if got := metricSum(t, maddr, "bloomgate_records_duplicates_total"); got != float64(len(in1)-len(want1)-len(bad1)) {
		t.Errorf("duplicates counter %.0f, want %d", got, len(in1)-len(want1)-len(bad1))
	}

	// Phase 2: stop the worker (SIGTERM: flush, commit, final checkpoint),
	// start a new process, and produce repeats of old keys plus new ones.
	stop(t, w, 40*time.Second)
	insp := exec.Command(binary, "inspect", "file://"+cpDir)
	if out, err := insp.CombinedOutput(); err != nil || !strings.Contains(string(out), "e2e / orders / 3") {
		t.Fatalf("inspect after shutdown: %v\n%s", err, out)
	}

	w2, maddr2 := startWorker(t, brokers, cpDir)
	var more []string
	for i := 0; i < 300; i += 3 {
		more = append(more, orderLine(fmt.Sprintf("o-%04d", i), len(lines)+len(more))) // old key
		id := fmt.Sprintf("n-%04d", i)
		more = append(more, orderLine(id, len(lines)+len(more))) // new key
		if i%2 == 0 {
			more = append(more, orderLine(id, len(lines)+len(more))) // new key again
		}
	}
	produce(t, kcat, brokers, "orders", more)
	inAll := consume(t, kcat, brokers, "orders")
	if len(inAll) != len(lines)+len(more) {
		t.Fatalf("input holds %d records, produced %d", len(inAll), len(lines)+len(more))
	}
	var in2 []record
	inPhase1 := map[[2]int64]bool{}
	for _, r := range in1 {
		inPhase1[[2]int64{int64(r.partition), r.offset}] = true
	}
	for _, r := range inAll {
		if !inPhase1[[2]int64{int64(r.partition), r.offset}] {
			in2 = append(in2, r)
		}
	}
	waitConsumed(t, w2, maddr2, len(in2))
	want2, _ := expectedOutput(in2, seen)
	if len(want2) != 100 {
		t.Fatalf("test data: %d new keys, want 100", len(want2))
	}
	wantAll := append(append([]record(nil), want1...), want2...)
	sort.SliceStable(wantAll, func(i, j int) bool {
		if wantAll[i].partition != wantAll[j].partition {
			return wantAll[i].partition < wantAll[j].partition
		}
		return wantAll[i].offset < wantAll[j].offset
	})
	// Old keys were recognised after the restart: the output holds exactly
	// phase 1's forwards plus the first occurrence of each new key.
	checkForwarded(t, consume(t, kcat, brokers, "orders-unique"), wantAll)
	if got := metricSum(t, maddr2, "bloomgate_records_forwarded_total"); got != float64(len(want2)) {
		t.Errorf("restarted worker forwarded %.0f, want %d (it replayed or forgot old keys)", got, len(want2))
	}
	stop(t, w2, 40*time.Second)
	stop(t, b, 20*time.Second)
}
