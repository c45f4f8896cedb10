package e2e

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bloomgate/bloomgate/internal/proctest"
)

// txnInput is one data record of the input as produced, and whether a
// read_committed consumer sees it.
type txnInput struct {
	rec     record
	visible bool
}

// txnProducer writes the input with franz-go's kgo: transactional
// (transactional.id set) or not, each record to the partition it names.
type txnProducer struct {
	t     *testing.T
	cl    *kgo.Client
	inTxn bool
	n     int
	open  []*kgo.Record
	log   *[]txnInput
}

func newTxnProducer(t *testing.T, brokers, txnID string, log *[]txnInput) *txnProducer {
	t.Helper()
	opts := []kgo.Opt{kgo.SeedBrokers(brokers), kgo.DefaultProduceTopic("orders"),
		kgo.RecordPartitioner(kgo.ManualPartitioner())}
	if txnID != "" {
		opts = append(opts, kgo.TransactionalID(txnID), kgo.TransactionTimeout(60*time.Second))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatalf("kgo client: %v", err)
	}
	t.Cleanup(cl.Close)
	return &txnProducer{t: t, cl: cl, inTxn: txnID != "", log: log}
}

func txnCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// produce writes orders with the given ids to partition p; a
// transactional producer's records are remembered until end says whether
// their transaction committed.
func (tp *txnProducer) produce(p int32, ids ...string) {
	tp.t.Helper()
	var recs []*kgo.Record
	for _, id := range ids {
		tp.n++
		value := fmt.Sprintf(`{"order_id":"%s","n":%d,"amount_cents":%d,"currency":"EUR"}`, id, tp.n, 100+tp.n)
		recs = append(recs, &kgo.Record{Partition: p, Key: []byte(id), Value: []byte(value),
			Headers: []kgo.RecordHeader{{Key: "origin", Value: []byte("e2e")}}})
	}
	if err := tp.cl.ProduceSync(txnCtx(tp.t), recs...).FirstErr(); err != nil {
		tp.t.Fatalf("producing: %v", err)
	}
	if !tp.inTxn {
		tp.remember(recs, true)
		return
	}
	tp.open = append(tp.open, recs...)
}

func (tp *txnProducer) remember(recs []*kgo.Record, visible bool) {
	for _, r := range recs {
		*tp.log = append(*tp.log, txnInput{visible: visible, rec: record{partition: int(r.Partition), offset: r.Offset,
			key: string(r.Key), value: string(r.Value), headers: map[string]string{"origin": "e2e"}}})
	}
}

func (tp *txnProducer) begin() {
	tp.t.Helper()
	if err := tp.cl.BeginTransaction(); err != nil {
		tp.t.Fatalf("beginning a transaction: %v", err)
	}
}

func (tp *txnProducer) end(commit bool) {
	tp.t.Helper()
	if err := tp.cl.EndTransaction(txnCtx(tp.t), kgo.TransactionEndTry(commit)); err != nil {
		tp.t.Fatalf("ending a transaction (commit %v): %v", commit, err)
	}
	tp.remember(tp.open, commit)
	tp.open = nil
}

// txn writes one transaction of ids on partition p and commits or aborts it.
func (tp *txnProducer) txn(commit bool, p int32, ids ...string) {
	tp.t.Helper()
	tp.begin()
	tp.produce(p, ids...)
	tp.end(commit)
}

func txnIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return ids
}

// TestKcatTransactionalCrash: the bloomgate binary with default settings
// reads the input of transactional producers (kgo) at read_committed: it
// is killed (SIGKILL) in the middle, with a transaction open, and
// restarted; the output, read with kcat (librdkafka), holds exactly the
// first occurrence of each order among the committed and non-transactional
// records: no record of an aborted transaction, no aborted-then-retried
// order lost, nothing twice, and the dead-letter topic holds no
// transaction marker.
func TestKcatTransactionalCrash(t *testing.T) {
	kcat := kcatTool.Path(t)
	cpDir := t.TempDir()
	b := start(t, "broker", "broker", "--listen", "127.0.0.1:0",
		"--topic", "orders:2", "--topic", "orders-unique:2", "--topic", "orders-dead:2")
	brokers := waitFor(t, b, proctest.BrokerListening, 30*time.Second)

	var in []txnInput
	a := newTxnProducer(t, brokers, "e2e-a", &in)
	c := newTxnProducer(t, brokers, "e2e-c", &in)
	plain := newTxnProducer(t, brokers, "", &in)

	// Phase 1, per partition: committed, aborted, the aborted orders
	// retried and committed, a producer retry of committed orders.
	for p := range int32(2) {
		a.txn(true, p, txnIDs(fmt.Sprintf("c%d", p), 40)...)
		a.txn(false, p, txnIDs(fmt.Sprintf("r%d", p), 40)...)
		a.txn(true, p, txnIDs(fmt.Sprintf("r%d", p), 40)...)
		plain.produce(p, txnIDs(fmt.Sprintf("c%d", p), 10)...)
		c.txn(false, p, txnIDs(fmt.Sprintf("x%d", p), 20)...)
	}
	// A transaction left open across the crash, and an aborted one.
	c.begin()
	c.produce(0, txnIDs("open0", 20)...)
	a.begin()
	a.produce(1, txnIDs("abort1", 20)...)
	plain.produce(0, txnIDs("p0", 20)...)
	plain.produce(1, txnIDs("p1", 20)...)

	w, maddr := startWorker(t, brokers, cpDir)
	waitConsumed(t, w, maddr, 100)
	t.Logf("SIGKILL after %.0f consumed records", metricSum(t, maddr, "bloomgate_records_consumed_total"))
	w.Kill()
	if !w.Wait(10 * time.Second) {
		t.Fatal("worker did not exit after SIGKILL")
	}

	// Phase 2: the open transaction goes on and commits, the other aborts
	// and is retried; more of everything.
	c.produce(0, txnIDs("open0-more", 10)...)
	c.end(true)
	a.end(false)
	a.txn(true, 1, txnIDs("abort1", 20)...)
	for p := range int32(2) {
		plain.produce(p, txnIDs(fmt.Sprintf("x%d", p), 5)...) // first occurrences: their transaction aborted
		a.txn(false, p, txnIDs(fmt.Sprintf("late%d", p), 15)...)
		a.txn(true, p, txnIDs(fmt.Sprintf("late%d", p), 15)...)
		a.txn(true, p, txnIDs(fmt.Sprintf("c%d", p), 5)...) // repeats
	}

	w2, _ := startWorker(t, brokers, cpDir)
	ends := txnWaitCommitted(t, w2, brokers)
	stop(t, w2, 40*time.Second)

	// What a read_committed consumer sees, per partition in offset order;
	// the first occurrence of each order is forwarded.
	sort.Slice(in, func(i, j int) bool {
		if in[i].rec.partition != in[j].rec.partition {
			return in[i].rec.partition < in[j].rec.partition
		}
		return in[i].rec.offset < in[j].rec.offset
	})
	byOffset := map[[2]int64]txnInput{}
	var visible []record
	for _, r := range in {
		byOffset[[2]int64{int64(r.rec.partition), r.rec.offset}] = r
		if r.visible {
			visible = append(visible, r.rec)
		}
	}
	want, bad := expectedOutput(visible, map[string]bool{})
	if len(bad) != 0 {
		t.Fatalf("test data: %d malformed records", len(bad))
	}
	got := consume(t, kcat, brokers, "orders-unique")
	var aborted, markers, twice int
	seen := map[[2]int64]bool{}
	for _, g := range got {
		src := [2]int64{int64(g.partition), -1}
		if g.srcOK {
			src[1] = g.srcOffset
		}
		if seen[src] {
			twice++
		}
		seen[src] = true
		r, ok := byOffset[src]
		switch {
		case !ok:
			markers++
		case !r.visible:
			aborted++
		}
	}
	lost := 0
	for _, r := range want {
		if !seen[[2]int64{int64(r.partition), r.offset}] {
			lost++
		}
	}
	dead := consume(t, kcat, brokers, "orders-dead")
	t.Logf("input: %d data records (%d visible at read_committed), high-water marks %v; output: %d records, want %d; "+
		"aborted forwarded %d, markers forwarded %d, committed lost %d, forwarded twice %d; dead letters %d",
		len(in), len(visible), ends, len(got), len(want), aborted, markers, lost, twice, len(dead))
	if aborted != 0 || markers != 0 || lost != 0 || twice != 0 {
		t.Errorf("output: %d records of aborted transactions, %d transaction markers, %d committed orders missing, %d forwarded twice; want 0 of each",
			aborted, markers, lost, twice)
	}
	if len(dead) != 0 {
		t.Errorf("dead-letter topic holds %d records, want 0 (transaction markers handled as events?); first: key %q headers %v",
			len(dead), dead[0].key, dead[0].headers)
	}
	checkForwarded(t, got, want)
}

// txnWaitCommitted waits until the group has committed the high-water
// mark of every input partition (past the last transaction marker) and
// returns the high-water marks.
func txnWaitCommitted(t *testing.T, worker *proctest.Proc, brokers string) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		t.Fatalf("kgo client: %v", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends := map[int32]int64{}
	committed := map[int32]int64{}
	err = worker.WaitUntil("commit of the input's high-water marks", 60*time.Second, 200*time.Millisecond, func() bool {
		lo, err := adm.ListEndOffsets(txnCtx(t), "orders")
		if err != nil || lo.Error() != nil {
			return false
		}
		lo.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
		res, err := adm.FetchOffsets(txnCtx(t), "e2e")
		if err != nil || res.Error() != nil {
			return false
		}
		res.Each(func(o kadm.OffsetResponse) {
			if o.Topic == "orders" {
				committed[o.Partition] = o.At
			}
		})
		for p, end := range ends {
			if committed[p] != end {
				return false
			}
		}
		return len(ends) == 2
	})
	if err != nil {
		t.Fatalf("%v: committed %v, high-water marks %v", err, committed, ends)
	}
	return ends
}
