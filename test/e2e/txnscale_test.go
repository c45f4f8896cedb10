package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bloomgate/bloomgate/internal/proctest"
)

// TestKcatTransactionsAsReported reproduces, through the binary with its
// default settings (read_committed, key = the Kafka key), the input of the
// read-fidelity report: two transactional producers writing 35 committed
// and 25 aborted transactions of 60 records each (2,100 and 1,500
// records), two at a time and interleaved on a 2-partition input; 200
// orders of aborted transactions retried in committed ones; every 7th
// value empty and every 11th null. kcat (librdkafka) reads the output with
// value sizes, so that a null value (-1) and an empty one (0) are told
// apart. Expected: the first visible occurrence of every key, value byte
// for byte, null and empty as written; no record of an aborted
// transaction, no marker, no committed record lost, nothing dead-lettered.
func TestKcatTransactionsAsReported(t *testing.T) {
	kcat := kcatTool.Path(t)
	b := start(t, "broker", "broker", "--listen", "127.0.0.1:0",
		"--topic", "orders:2", "--topic", "orders-unique:2", "--topic", "orders-dead:2")
	brokers := waitFor(t, b, proctest.BrokerListening, 30*time.Second)

	clients := make([]*kgo.Client, 2)
	for i := range clients {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.DefaultProduceTopic("orders"),
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionalID(fmt.Sprintf("report-%d", i)),
			kgo.TransactionTimeout(60*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		clients[i] = cl
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	var in []*reported
	n := 0
	build := func(p int32, keys []string) ([]*kgo.Record, []*reported) {
		rs, es := make([]*kgo.Record, len(keys)), make([]*reported, len(keys))
		for i, key := range keys {
			n++
			rs[i] = &kgo.Record{Partition: p, Key: []byte(key), Headers: []kgo.RecordHeader{{Key: "origin", Value: []byte("e2e")}}}
			es[i] = &reported{key: key, p: p}
			switch {
			case n%11 == 0:
				es[i].null = true // Value stays nil: a tombstone
			case n%7 == 0:
				rs[i].Value = []byte{} // empty, not null
			default:
				es[i].value = fmt.Sprintf(`{"order_id":%q,"n":%d}`, key, n)
				rs[i].Value = []byte(es[i].value)
			}
		}
		return rs, es
	}
	// pair runs one transaction of each producer on partition p at once,
	// their records interleaved in slices of 10, and ends them.
	committedTxns, abortedTxns := 0, 0
	pair := func(p int32, keys [2][]string, commit [2]bool) {
		t.Helper()
		var rs [2][]*kgo.Record
		var es [2][]*reported
		for i, cl := range clients {
			if err := cl.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			rs[i], es[i] = build(p, keys[i])
		}
		for k := 0; k < 60; k += 10 {
			for i, cl := range clients {
				if err := cl.ProduceSync(ctx, rs[i][k:k+10]...).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
		}
		for i, cl := range clients {
			if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit[i])); err != nil {
				t.Fatal(err)
			}
			if commit[i] {
				committedTxns++
			} else {
				abortedTxns++
			}
			for j, e := range es[i] {
				e.visible, e.offset = commit[i], rs[i][j].Offset
				in = append(in, e)
			}
		}
	}
	keys := func(prefix string, from, count int) []string {
		out := make([]string, count)
		for i := range out {
			out[i] = fmt.Sprintf("%s-%02d", prefix, from+i)
		}
		return out
	}
	// 25 pairs: producer 0 commits, producer 1 aborts.
	for i := range 25 {
		pair(int32(i%2), [2][]string{keys(fmt.Sprintf("c%d", i), 0, 60), keys(fmt.Sprintf("a%d", i), 0, 60)}, [2]bool{true, false})
	}
	// 5 pairs, both commit; the first two pairs retry 50 orders of each
	// of four aborted transactions (200 orders) on their partitions.
	for i := range 5 {
		p := int32(i % 2)
		k := [2][]string{keys(fmt.Sprintf("d%d", i), 0, 60), keys(fmt.Sprintf("e%d", i), 0, 60)}
		if i < 2 {
			for j := range 2 {
				orig := i + 2*j // a0, a2 on partition 0; a1, a3 on partition 1
				k[j] = append(keys(fmt.Sprintf("a%d", orig), 0, 50), keys(fmt.Sprintf("r%d", orig), 0, 10)...)
			}
		}
		pair(p, k, [2]bool{true, true})
	}

	w, _ := startDefaultWorker(t, brokers, t.TempDir())
	ends := txnWaitCommitted(t, w, brokers)
	stop(t, w, 40*time.Second)

	// The first visible occurrence of each key, per partition.
	want := map[string]*reported{}
	abortedKey := map[string]bool{}
	var visible, abortedIn int
	for _, e := range in {
		k := fmt.Sprint(e.p, "/", e.key)
		if !e.visible {
			abortedKey[k] = true
			abortedIn++
			continue
		}
		visible++
		if w, ok := want[k]; !ok || e.offset < w.offset {
			want[k] = e
		}
	}
	retried, nulls, empties := 0, 0, 0
	for k, e := range want {
		if abortedKey[k] {
			retried++
		}
		switch {
		case e.null:
			nulls++
		case e.value == "":
			empties++
		}
	}
	got := consumeSized(t, kcat, brokers, "orders-unique")
	var aborted, junk, changed, twice, lost int
	seen := map[string]bool{}
	for _, g := range got {
		k := fmt.Sprint(g.partition, "/", g.key)
		if seen[k] {
			twice++
		}
		seen[k] = true
		e, ok := want[k]
		switch {
		case !ok:
			junk++ // a transaction marker or a record of no visible key
		case g.srcOffset != strconv.FormatInt(e.offset, 10):
			aborted++ // not the first visible occurrence: an aborted one came first
		case e.null != (g.valueSize < 0), !e.null && g.value != e.value:
			changed++
		}
	}
	for k := range want {
		if !seen[k] {
			lost++
		}
	}
	dead := consume(t, kcat, brokers, "orders-dead")
	t.Logf("input: %d committed records in %d transactions, %d aborted in %d, high-water marks %v; "+
		"want %d records on the output (%d retries of aborted orders, %d empty and %d null values); "+
		"output %d records: aborted forwarded %d, markers or junk %d, committed lost %d, value changed %d, twice %d; dead letters %d",
		visible, committedTxns, abortedIn, abortedTxns, ends, len(want), retried, empties, nulls,
		len(got), aborted, junk, lost, changed, twice, len(dead))
	if retried != 200 || empties == 0 || nulls == 0 || committedTxns != 35 || abortedTxns != 25 {
		t.Fatalf("test data: %d retries (want 200), %d empty and %d null values, %d/%d transactions (want 35/25)",
			retried, empties, nulls, committedTxns, abortedTxns)
	}
	if aborted+junk+lost+changed+twice+len(dead) != 0 || len(got) != len(want) {
		t.Errorf("want exactly the %d first visible occurrences, unchanged, and nothing dead-lettered", len(want))
	}
}

// reported is one record of the report's input.
type reported struct {
	key, value string
	null       bool // value written as null
	visible    bool // committed
	p          int32
	offset     int64
}

// sized is an output record as kcat prints it with its value size.
type sized struct {
	partition  int
	key, value string
	valueSize  int // -1: null
	srcOffset  string
}

// consumeSized reads a topic with kcat, the value's size included.
func consumeSized(t *testing.T, kcat, brokers, topic string) []sized {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcat, "-b", brokers, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
		"-f", `%p\t%o\t%S\t%k\t%s\n`)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kcat -C %s: %v\n%s", topic, err, stderr.String())
	}
	var recs []sized
	var at []record
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), "\t", 5)
		if len(f) != 5 {
			t.Fatalf("kcat line %q: want 5 tab-separated fields", sc.Text())
		}
		p, err1 := strconv.Atoi(f[0])
		o, err2 := strconv.ParseInt(f[1], 10, 64)
		size, err3 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil || err3 != nil {
			t.Fatalf("kcat line %q: bad partition, offset or size", sc.Text())
		}
		recs = append(recs, sized{partition: p, valueSize: size, key: f[3], value: f[4]})
		at = append(at, record{partition: p, offset: o})
	}
	withHeaders(t, brokers, topic, at)
	for i, r := range at {
		if r.srcOK {
			recs[i].srcOffset = strconv.FormatInt(r.srcOffset, 10)
		}
	}
	return recs
}

// startDefaultWorker runs the binary with the default settings but for the
// topics, the checkpoint directory and an ephemeral metrics port.
func startDefaultWorker(t *testing.T, brokers, cpDir string) (*proctest.Proc, string) {
	t.Helper()
	w := start(t, "worker", "run",
		"--brokers", brokers, "--group", "e2e",
		"--input", "orders", "--output", "orders-unique", "--dead-letter", "orders-dead",
		"--checkpoint-url", "file://"+cpDir, "--metrics-addr", "127.0.0.1:0",
	)
	return w, waitFor(t, w, reMetrics, 30*time.Second)
}
