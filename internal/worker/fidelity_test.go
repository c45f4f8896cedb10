package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bloomgate/bloomgate/internal/fetcher"
	"github.com/bloomgate/bloomgate/internal/keys"
	"github.com/bloomgate/bloomgate/internal/producer"
)

// Record fidelity, checked with a client this project did not write:
// franz-go's kgo produces the input (transactional producers, null and
// empty keys, values and header values, every compression codec) and reads
// the outputs back. Every output record is traced to its input record by
// its bloomgate header, so a failure says which kind of record went
// wrong: a record of an aborted transaction forwarded, a committed record
// lost, a transaction marker handled as a record, a record read past the
// last stable offset, or a record whose bytes changed (null became empty or
// the reverse).

// fidCluster starts an in-process broker on 127.0.0.1 with the test topics,
// like newCluster, and also returns the cluster (compaction is triggered
// through it). With compactOut the output topic is created with
// cleanup.policy=compact, delete.retention.ms=0 and retention.ms=-1: a
// compaction then removes every superseded record and every tombstone (null
// value) at once, and nothing for its age (kfake's Compact also applies
// time retention, 7 days by default, to record timestamps, and the test
// records are stamped long ago).
func fidCluster(t *testing.T, partitions int32, compactOut bool) ([]string, *kfake.Cluster) {
	t.Helper()
	seed := []string{tIn, tDup, tDLQ}
	if !compactOut {
		seed = append(seed, tOut)
	}
	c, err := kfake.NewCluster(
		kfake.Ports(0),
		kfake.SeedTopics(partitions, seed...),
		kfake.GroupMinSessionTimeout(100*time.Millisecond),
	)
	if err != nil {
		t.Fatalf("starting kfake: %v", err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	if compactOut {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		compact, zero, forever := "compact", "0", "-1"
		if _, err := fidAdmin(t, brokers).CreateTopic(ctx, partitions, 1,
			map[string]*string{"cleanup.policy": &compact, "delete.retention.ms": &zero, "retention.ms": &forever}, tOut); err != nil {
			t.Fatalf("creating the compacted topic %s: %v", tOut, err)
		}
	}
	return brokers, c
}

func fidClient(t *testing.T, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl := fidNewClient(t, brokers, opts...)
	t.Cleanup(cl.Close)
	return cl
}

// fidNewClient is fidClient for a client the caller closes.
func fidNewClient(t *testing.T, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.DefaultProduceTopic(tIn),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionTimeout(30 * time.Second),
	}, opts...)...)
	if err != nil {
		t.Fatalf("kgo client: %v", err)
	}
	return cl
}

func fidAdmin(t *testing.T, brokers []string) *kadm.Client {
	t.Helper()
	return kadm.NewClient(fidClient(t, brokers))
}

func fidCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fidEnds returns the high-water mark of every partition of topic.
func fidEnds(t *testing.T, brokers []string, topic string) map[int32]int64 {
	t.Helper()
	lo, err := fidAdmin(t, brokers).ListEndOffsets(fidCtx(t), topic)
	if err != nil || lo.Error() != nil {
		t.Fatalf("listing the end offsets of %s: %v %v", topic, err, lo.Error())
	}
	ends := map[int32]int64{}
	lo.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
	return ends
}

// fidGroupOffsets returns the consumer group's committed offsets on topic.
func fidGroupOffsets(t *testing.T, brokers []string, topic string) map[int32]int64 {
	t.Helper()
	res, err := fidAdmin(t, brokers).FetchOffsets(fidCtx(t), "g")
	if err != nil || res.Error() != nil {
		t.Fatalf("fetching the offsets of group g: %v %v", err, res.Error())
	}
	out := map[int32]int64{}
	res.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic {
			out[o.Partition] = o.At
		}
	})
	return out
}

// fidRead reads every record of every partition of topic up to its current
// high-water marks with kgo (read_uncommitted: the worker writes without
// transactions).
func fidRead(t *testing.T, brokers []string, topic string, opts ...kgo.Opt) map[int32][]*kgo.Record {
	t.Helper()
	ends := fidEnds(t, brokers, topic)
	from := map[int32]kgo.Offset{}
	for p, end := range ends {
		if end > 0 {
			from[p] = kgo.NewOffset().AtStart()
		}
	}
	out := map[int32][]*kgo.Record{}
	if len(from) == 0 {
		return out
	}
	cl := fidNewClient(t, brokers, append([]kgo.Opt{kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from})}, opts...)...)
	defer cl.Close()
	ctx := fidCtx(t)
	done := func() bool {
		for p, end := range ends {
			rs := out[p]
			if end > 0 && (len(rs) == 0 || rs[len(rs)-1].Offset+1 < end) {
				return false
			}
		}
		return true
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			// A read_committed read stops at the LSO: report what was read.
			t.Logf("reading %s: stopped at the deadline before the high-water marks %v", topic, ends)
			break
		}
		for _, e := range fs.Errors() {
			t.Fatalf("reading %s/%d: %v", e.Topic, e.Partition, e.Err)
		}
		fs.EachRecord(func(r *kgo.Record) { out[r.Partition] = append(out[r.Partition], r) })
	}
	return out
}

// fidMetric is the value of a per-partition series of the worker (input
// topic, partition p), and whether the series exists.
func fidMetric(t *testing.T, rw *runningWorker, name string, p int32) (float64, bool) {
	t.Helper()
	mfs, err := rw.reg.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	var v float64
	found := false
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var topic, partition string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "topic":
					topic = l.GetValue()
				case "partition":
					partition = l.GetValue()
				}
			}
			if topic != tIn || partition != strconv.Itoa(int(p)) {
				continue
			}
			found = true
			if c := m.GetCounter(); c != nil {
				v += c.GetValue()
			}
			if g := m.GetGauge(); g != nil {
				v += g.GetValue()
			}
		}
	}
	return v, found
}

// fidCaughtUp waits until every partition in ends is running with its next
// offset at ends[p] (the high-water mark: the offsets of markers and
// aborted records are passed too).
func fidCaughtUp(t *testing.T, rw *runningWorker, ends map[int32]int64) {
	t.Helper()
	var last []PartitionStatus
	deadline := time.Now().Add(30 * time.Second)
	for {
		last = rw.w.Status().Partitions
		done := 0
		for _, ps := range last {
			if end, ok := ends[int32(ps.Partition)]; ok && ps.State == "running" && ps.NextOffset == end {
				done++
			}
		}
		if done == len(ends) {
			return
		}
		if time.Now().After(deadline) {
			var s []string
			for _, ps := range last {
				s = append(s, fmt.Sprintf("%d: %s next %d", ps.Partition, ps.State, ps.NextOffset))
			}
			t.Fatalf("timed out after 30s waiting for the next offsets to reach the high-water marks %v; partitions %v", ends, s)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fidFate is what became of an input record's transaction.
type fidFate string

const (
	fidPlain     fidFate = "non-transactional"
	fidCommitted fidFate = "committed"
	fidAborted   fidFate = "aborted"
	fidOpen      fidFate = "open" // its transaction has not ended
)

// fidIn is one input data record as produced (Offset and Partition set by
// the produce) and the fate of its transaction.
type fidIn struct {
	rec  *kgo.Record
	fate fidFate
}

// fidLog produces the input and remembers every data record.
type fidLog struct {
	t    *testing.T
	n    int
	recs []*fidIn
	open map[*kgo.Client][]*fidIn
}

func newFidLog(t *testing.T) *fidLog {
	return &fidLog{t: t, open: map[*kgo.Client][]*fidIn{}}
}

// r is a record for partition p with key k (value "k#n", a header n=n, a
// timestamp n ms after base).
func (l *fidLog) r(p int32, k string) *kgo.Record {
	return l.rk(p, []byte(k))
}

// rk is r with a key that may be null or empty.
func (l *fidLog) rk(p int32, k []byte) *kgo.Record {
	l.n++
	return &kgo.Record{Topic: tIn, Partition: p, Key: k, Value: fmt.Appendf(nil, "%s#%d", k, l.n),
		Timestamp: base.Add(time.Duration(l.n) * time.Millisecond),
		Headers:   []kgo.RecordHeader{{Key: "n", Value: []byte(strconv.Itoa(l.n))}}}
}

func (l *fidLog) produce(cl *kgo.Client, fate fidFate, recs ...*kgo.Record) []*fidIn {
	l.t.Helper()
	if err := cl.ProduceSync(fidCtx(l.t), recs...).FirstErr(); err != nil {
		l.t.Fatalf("producing: %v", err)
	}
	var ins []*fidIn
	for _, r := range recs {
		in := &fidIn{rec: r, fate: fate}
		l.recs = append(l.recs, in)
		ins = append(ins, in)
	}
	return ins
}

// plain produces records without a transaction.
func (l *fidLog) plain(cl *kgo.Client, recs ...*kgo.Record) { l.produce(cl, fidPlain, recs...) }

func (l *fidLog) begin(cl *kgo.Client) {
	l.t.Helper()
	if err := cl.BeginTransaction(); err != nil {
		l.t.Fatalf("beginning a transaction: %v", err)
	}
}

// send produces records inside cl's open transaction.
func (l *fidLog) send(cl *kgo.Client, recs ...*kgo.Record) {
	l.t.Helper()
	l.open[cl] = append(l.open[cl], l.produce(cl, fidOpen, recs...)...)
}

func (l *fidLog) end(cl *kgo.Client, commit bool) {
	l.t.Helper()
	if err := cl.EndTransaction(fidCtx(l.t), kgo.TransactionEndTry(commit)); err != nil {
		l.t.Fatalf("ending a transaction (commit %v): %v", commit, err)
	}
	fate := fidAborted
	if commit {
		fate = fidCommitted
	}
	for _, in := range l.open[cl] {
		in.fate = fate
	}
	delete(l.open, cl)
}

// txn produces recs in one transaction of cl and commits or aborts it.
func (l *fidLog) txn(cl *kgo.Client, commit bool, recs ...*kgo.Record) {
	l.t.Helper()
	l.begin(cl)
	l.send(cl, recs...)
	l.end(cl, commit)
}

// at returns the data record at offset o of partition p, if there is one.
func (l *fidLog) at(p int32, o int64) *fidIn {
	for _, in := range l.recs {
		if in.rec.Partition == p && in.rec.Offset == o {
			return in
		}
	}
	return nil
}

// lso is the last stable offset of partition p as far as this log knows:
// the first offset of a still open transaction, else -1.
func (l *fidLog) lso(p int32) int64 {
	lso := int64(-1)
	for _, in := range l.recs {
		if in.fate == fidOpen && in.rec.Partition == p && (lso < 0 || in.rec.Offset < lso) {
			lso = in.rec.Offset
		}
	}
	return lso
}

// visible returns, per partition in offset order, the data records a
// consumer at isolation level iso reads: read_committed stops at the LSO
// and skips aborted transactions.
func (l *fidLog) visible(iso IsolationLevel) map[int32][]*fidIn {
	out := map[int32][]*fidIn{}
	for _, in := range l.recs {
		p := in.rec.Partition
		if iso == ReadCommitted {
			if in.fate == fidAborted || in.fate == fidOpen {
				continue
			}
			if lso := l.lso(p); lso >= 0 && in.rec.Offset >= lso {
				continue
			}
		}
		out[p] = append(out[p], in)
	}
	for _, ins := range out {
		slices.SortFunc(ins, func(a, b *fidIn) int { return int(a.rec.Offset - b.rec.Offset) })
	}
	return out
}

// fidOut is an expected written record: the input record, and the
// dead-letter reason when it goes to the dead-letter topic.
type fidOut struct {
	in     *fidIn
	reason string
}

// fidWant is what the worker must write and count, per input partition.
type fidWant struct {
	out, dup, dlq map[int32][]fidOut
	consumed      map[int32]int
}

// expect computes the exact outcome for a worker reading at iso with
// extractor ex (window one hour: every test stays far inside it). Records
// before from[p] were handled earlier: they only seed the dedup memory.
func (l *fidLog) expect(iso IsolationLevel, ex Extractor, from map[int32]int64) fidWant {
	w := fidWant{out: map[int32][]fidOut{}, dup: map[int32][]fidOut{}, dlq: map[int32][]fidOut{}, consumed: map[int32]int{}}
	for p, ins := range l.visible(iso) {
		seen := map[string]bool{}
		for _, in := range ins {
			k, err := ex.Extract(nil, in.rec.Key, in.rec.Value, fidKafkaHeaders(in.rec.Headers))
			if in.rec.Offset < from[p] {
				if err == nil {
					seen[string(k)] = true
				}
				continue
			}
			w.consumed[p]++
			switch {
			case err != nil:
				w.dlq[p] = append(w.dlq[p], fidOut{in: in, reason: fidReason(err)})
			case seen[string(k)]:
				w.dup[p] = append(w.dup[p], fidOut{in: in})
			default:
				seen[string(k)] = true
				w.out[p] = append(w.out[p], fidOut{in: in})
			}
		}
	}
	return w
}

func fidReason(err error) string {
	if r := keys.ReasonOf(err); r != "" {
		return r
	}
	var ke *KeyError
	if errors.As(err, &ke) {
		return ke.Reason
	}
	return "other"
}

func fidKafkaHeaders(hs []kgo.RecordHeader) []kafka.Header {
	out := make([]kafka.Header, len(hs))
	for i, h := range hs {
		out[i] = kafka.Header{Key: h.Key, Value: h.Value}
	}
	return out
}

// fidBytes shows nil as null and anything else quoted, so that null and
// empty differ in messages.
func fidBytes(b []byte) string {
	if b == nil {
		return "null"
	}
	return strconv.Quote(string(b))
}

// fidRender renders everything of a record that must survive the trip.
func fidRender(key, value []byte, ts time.Time, hs []kgo.RecordHeader) string {
	var b strings.Builder
	fmt.Fprintf(&b, "key=%s value=%s ts=%d headers=[", fidBytes(key), fidBytes(value), ts.UnixMilli())
	for i, h := range hs {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s:%s", h.Key, fidBytes(h.Value))
	}
	b.WriteString("]")
	return b.String()
}

// rendered is the record the worker must write for o to topic: the input
// record with the bloomgate header naming it, its batch's seal left out
// (fidUnsealed; the recovery tests judge seals).
func (o fidOut) rendered(topic string) string {
	r := o.in.rec
	hs := append(slices.Clone(r.Headers), kgo.RecordHeader{Key: HeaderProvenance, Value: appendOrigin(nil, int(r.Partition), r.Offset)})
	if o.reason != "" {
		hs = append(hs, kgo.RecordHeader{Key: HeaderError, Value: []byte(o.reason)})
	}
	return fidRender(r.Key, r.Value, r.Timestamp, hs)
}

// fidUnsealed is hs with the seal, if any, cut from the last bloomgate
// header: which record of a batch carries it depends on how the batches
// were cut.
func fidUnsealed(hs []kgo.RecordHeader) []kgo.RecordHeader {
	out := slices.Clone(hs)
	for i := len(out) - 1; i >= 0; i-- {
		if out[i].Key == HeaderProvenance {
			var o origin
			o.parse(out[i].Value)
			if o.srcOK {
				out[i].Value = appendOrigin(nil, o.partition, o.offset)
			}
			break
		}
	}
	return out
}

// fidSrc reads the input partition and offset of a written record.
func fidSrc(r *kgo.Record) (p int32, o int64, ok bool) {
	hs := make([]kafka.Header, len(r.Headers))
	for i, h := range r.Headers {
		hs[i] = kafka.Header{Key: h.Key, Value: h.Value}
	}
	src, o, ok := SourceOf(hs)
	return int32(src), o, ok
}

// fidTally counts what went wrong on one topic.
type fidTally struct {
	abortedWritten, openWritten, markers, lost, twice, changed, misplaced, wrongOrder int
}

func (c fidTally) String() string {
	return fmt.Sprintf("aborted written %d, past the LSO written %d, markers written %d, lost %d, written twice %d, changed %d, misplaced %d, out of order %d",
		c.abortedWritten, c.openWritten, c.markers, c.lost, c.twice, c.changed, c.misplaced, c.wrongOrder)
}

// fidCheck compares a written topic with the expectation, record by record,
// each written record traced to its input by its src headers. The
// partitions of the written topic equal the input partitions (partitioning
// "same").
func fidCheck(t *testing.T, l *fidLog, topic string, got map[int32][]*kgo.Record, want map[int32][]fidOut) fidTally {
	t.Helper()
	var c fidTally
	parts := map[int32]bool{}
	for p := range got {
		parts[p] = true
	}
	for p := range want {
		parts[p] = true
	}
	const show = 4
	for p := range parts {
		wantBy := map[int64]fidOut{}
		for _, o := range want[p] {
			wantBy[o.in.rec.Offset] = o
		}
		var problems []string
		report := func(format string, a ...any) {
			if len(problems) < 3*show {
				problems = append(problems, fmt.Sprintf(format, a...))
			}
		}
		seen := map[int64]bool{}
		var order []int64
		for _, g := range got[p] {
			sp, so, ok := fidSrc(g)
			if !ok || sp != p {
				c.misplaced++
				report("record at %d has no src headers of input partition %d: %s", g.Offset, p, fidRender(g.Key, g.Value, g.Timestamp, g.Headers))
				continue
			}
			if seen[so] {
				c.twice++
				report("input offset %d written twice", so)
				continue
			}
			seen[so] = true
			w, expected := wantBy[so]
			in := l.at(p, so)
			switch {
			case in == nil:
				c.markers++
				report("input offset %d is no data record (a transaction marker) but was written: %s", so, fidRender(g.Key, g.Value, g.Timestamp, g.Headers))
			case !expected && in.fate == fidAborted:
				c.abortedWritten++
				report("record of an aborted transaction written: offset %d key %s", so, fidBytes(in.rec.Key))
			case !expected && (in.fate == fidOpen || (l.lso(p) >= 0 && so >= l.lso(p))):
				c.openWritten++
				report("record at or past the LSO %d written while a transaction is open: offset %d (%s) key %s", l.lso(p), so, in.fate, fidBytes(in.rec.Key))
			case !expected:
				c.misplaced++
				report("%s record at offset %d key %s does not belong on %s", in.fate, so, fidBytes(in.rec.Key), topic)
			default:
				order = append(order, so)
				if gr := fidRender(g.Key, g.Value, g.Timestamp, fidUnsealed(g.Headers)); gr != w.rendered(topic) {
					c.changed++
					report("offset %d changed:\n\t got %s\n\twant %s", so, gr, w.rendered(topic))
				}
			}
		}
		var wantOrder []int64
		for _, o := range want[p] {
			if !seen[o.in.rec.Offset] {
				c.lost++
				report("%s record at offset %d key %s missing", o.in.fate, o.in.rec.Offset, fidBytes(o.in.rec.Key))
				continue
			}
			wantOrder = append(wantOrder, o.in.rec.Offset)
		}
		if !slices.Equal(order, wantOrder) {
			c.wrongOrder++
			report("input offsets written in the order %v, want %v", order, wantOrder)
		}
		if len(problems) > 0 {
			t.Errorf("%s partition %d: %d records, want %d:\n\t%s", topic, p, len(got[p]), len(want[p]), strings.Join(problems, "\n\t"))
		}
	}
	return c
}

// fidVerify checks the three written topics, the consumed counts, the
// conservation of records and the committed offsets (after rw stopped):
// the committed offset of every input partition is its high-water mark,
// past trailing markers and aborted records.
func fidVerify(t *testing.T, brokers []string, l *fidLog, rw *runningWorker, want fidWant, ends map[int32]int64) {
	t.Helper()
	out := fidCheck(t, l, tOut, fidRead(t, brokers, tOut), want.out)
	dup := fidCheck(t, l, tDup, fidRead(t, brokers, tDup), want.dup)
	dlq := fidCheck(t, l, tDLQ, fidRead(t, brokers, tDLQ), want.dlq)
	t.Logf("output: %v", out)
	t.Logf("duplicates: %v", dup)
	t.Logf("dead-letter: %v", dlq)
	if rw != nil {
		for p := range ends {
			consumed, _ := fidMetric(t, rw, "bloomgate_records_consumed_total", p)
			if int(consumed) != want.consumed[p] {
				t.Errorf("partition %d: bloomgate_records_consumed_total %v, want %d data records (markers and aborted records are not events)",
					p, consumed, want.consumed[p])
			}
		}
		rw.conservation(t)
	}
	committed := fidGroupOffsets(t, brokers, tIn)
	for p, end := range ends {
		if committed[p] != end {
			t.Errorf("partition %d: committed offset %d, want the high-water mark %d", p, committed[p], end)
		}
	}
}

// fidScript writes, over two partitions: committed transactions (one
// across both partitions), an aborted attempt retried with the same keys
// and committed, an aborted transaction never retried whose key a plain
// record then uses, interleaved transactions of two producers on one
// partition (one commits, one aborts) between plain records, committed
// keyless records (dead letters), and an aborted transaction as the last
// thing in partition 0 (its abort marker is the last offset).
func fidScript(l *fidLog, a, b, plain *kgo.Client) {
	l.plain(plain, l.r(0, "p-0"), l.r(1, "p-1"))
	l.txn(a, true, l.r(0, "c-0"), l.r(0, "c-1"), l.r(1, "c-2"))
	l.txn(a, false, l.r(0, "r-0"), l.r(0, "r-1"), l.r(1, "r-2"), l.rk(0, nil))
	l.txn(a, true, l.r(0, "r-0"), l.r(0, "r-1"), l.r(1, "r-2"))
	l.plain(plain, l.r(0, "c-0")) // a real duplicate
	l.txn(b, false, l.r(0, "x-0"), l.r(1, "x-1"))
	l.plain(plain, l.r(0, "x-0"), l.r(1, "x-1")) // first occurrences: the aborted ones never happened
	l.begin(a)
	l.begin(b)
	for i := range 3 {
		l.send(b, l.r(1, fmt.Sprint("ib-", i)), l.r(1, fmt.Sprint("shared-", i)))
		l.send(a, l.r(1, fmt.Sprint("ia-", i)), l.r(1, fmt.Sprint("shared-", i)))
		l.plain(plain, l.r(1, fmt.Sprint("ip-", i)))
	}
	l.end(b, false)
	l.end(a, true)
	l.txn(a, true, l.rk(0, nil), l.rk(0, []byte{}))
	l.txn(b, true, l.r(1, "ib-0")) // partition 1 ends with a commit marker
	l.txn(b, false, l.r(0, "tail-0"), l.r(0, "tail-1"))
}

// TestFidelityTransactions: read_committed forwards no record of an aborted
// transaction, loses no committed record (an aborted attempt does not make
// its committed retry a duplicate), handles no transaction marker, and
// commits up to the high-water mark; read_uncommitted handles every data
// record, aborted ones too, and still no marker.
func TestFidelityTransactions(t *testing.T) {
	t.Parallel()
	for _, iso := range []IsolationLevel{ReadCommitted, ReadUncommitted} {
		t.Run(string(iso), func(t *testing.T) {
			t.Parallel()
			brokers, _ := fidCluster(t, 2, false)
			l := newFidLog(t)
			fidScript(l, fidClient(t, brokers, kgo.TransactionalID("fid-a")), fidClient(t, brokers, kgo.TransactionalID("fid-b")), fidClient(t, brokers))
			ends := fidEnds(t, brokers, tIn)
			want := l.expect(iso, keyExtractor{}, nil)

			cfg := testConfig(brokers)
			cfg.IsolationLevel = iso
			rw := startWorker(t, cfg, newMemStore(), nil)
			fidCaughtUp(t, rw, ends)
			if err := rw.stop(t); err != nil {
				t.Fatalf("Run: %v", err)
			}
			fidVerify(t, brokers, l, rw, want, ends)
		})
	}
}

// TestFidelityOpenTransaction: while a transaction is open, a partition is
// read up to its last stable offset (the open transaction's first record)
// and no further: records other producers wrote after it wait too, other
// partitions go on. Once the transaction commits or aborts, everything
// correct follows.
func TestFidelityOpenTransaction(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		name := "then aborts"
		if commit {
			name = "then commits"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			brokers, _ := fidCluster(t, 2, false)
			l := newFidLog(t)
			x := fidClient(t, brokers, kgo.TransactionalID("fid-x"))
			plain := fidClient(t, brokers)
			l.plain(plain, l.r(0, "b-0"), l.r(0, "b-1"), l.r(0, "b-2"), l.r(0, "b-3"), l.r(0, "b-4"), l.r(1, "q-0"))
			l.begin(x)
			l.send(x, l.r(0, "o-0"), l.r(0, "o-1"))
			l.plain(plain, l.r(0, "a-0"), l.r(0, "a-1"), l.r(0, "a-2"), l.r(1, "q-1"), l.r(1, "q-2"))
			l.send(x, l.r(0, "o-2"), l.r(0, "b-0"))
			l.plain(plain, l.r(0, "o-0"), l.r(0, "a-3"))
			lso := l.lso(0)
			ends := fidEnds(t, brokers, tIn)
			held := l.expect(ReadCommitted, keyExtractor{}, nil)

			rw := startWorker(t, testConfig(brokers), newMemStore(), nil)
			waitFor(t, 30*time.Second, "partition 1 caught up and partition 0 at its LSO", func() bool {
				c0, _ := fidMetric(t, rw, "bloomgate_records_consumed_total", 0)
				c1, _ := fidMetric(t, rw, "bloomgate_records_consumed_total", 1)
				return int(c0) >= held.consumed[0] && int(c1) >= held.consumed[1]
			})
			rw.housekept(t, 0, 2) // fetching on: the partition must stay held

			t.Run("held at the LSO", func(t *testing.T) {
				for _, ps := range rw.w.Status().Partitions {
					if ps.Partition == 0 && ps.NextOffset != lso {
						t.Errorf("partition 0: next offset %d while the transaction starting at offset %d is open, want %d", ps.NextOffset, lso, lso)
					}
				}
				fidCheck(t, l, tOut, fidRead(t, brokers, tOut), held.out)
				fidCheck(t, l, tDup, fidRead(t, brokers, tDup), held.dup)
				fidCheck(t, l, tDLQ, fidRead(t, brokers, tDLQ), held.dlq)
			})
			t.Run("lso lag gauge while open", func(t *testing.T) {
				fidLSOLag(t, rw, map[int32]float64{0: float64(ends[0] - lso), 1: 0})
			})

			l.end(x, commit)
			ends = fidEnds(t, brokers, tIn)
			want := l.expect(ReadCommitted, keyExtractor{}, nil)
			fidCaughtUp(t, rw, ends)
			t.Run("lso lag gauge after the end", func(t *testing.T) {
				fidLSOLag(t, rw, map[int32]float64{0: 0, 1: 0})
			})
			if err := rw.stop(t); err != nil {
				t.Fatalf("Run: %v", err)
			}
			fidVerify(t, brokers, l, rw, want, ends)
		})
	}
}

// fidLSOLag waits up to 10 s for bloomgate_partition_lso_lag to show want
// (3 s while the series does not exist).
func fidLSOLag(t *testing.T, rw *runningWorker, want map[int32]float64) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(10 * time.Second)
	for {
		got := map[int32]float64{}
		missing := false
		for p := range want {
			v, ok := fidMetric(t, rw, "bloomgate_partition_lso_lag", p)
			missing = missing || !ok
			got[p] = v
		}
		if !missing && fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
		if time.Now().After(deadline) || (missing && time.Since(start) > 3*time.Second) {
			if missing {
				t.Fatalf("bloomgate_partition_lso_lag{topic=%q} is not exported for every partition", tIn)
			}
			t.Fatalf("bloomgate_partition_lso_lag per partition %v, want %v (high-water mark - last stable offset)", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestFidelityTransactionalCrash: kill -9 of a worker (no final commit or
// checkpoint) in the middle of transactional input; the successor's replay
// and output scan must drop exactly what the first pass dropped: no
// aborted record forwarded, nothing forwarded twice, nothing lost.
func TestFidelityTransactionalCrash(t *testing.T) {
	t.Parallel()

	t.Run("kill -9 in the middle", func(t *testing.T) {
		t.Parallel()
		brokers, _ := fidCluster(t, 2, false)
		l := newFidLog(t)
		a := fidClient(t, brokers, kgo.TransactionalID("fid-a"))
		plain := fidClient(t, brokers)
		for i := range 30 {
			p := int32(i / 3 % 2) // a key set stays in its partition
			var recs []*kgo.Record
			for j := range 6 {
				recs = append(recs, l.r(p, fmt.Sprintf("t%d-%d", i/3, j))) // three attempts per key set
			}
			// Attempt 0 of a key set aborts, attempt 1 retries it and
			// commits, attempt 2 commits again (duplicates).
			l.txn(a, i%3 != 0, recs...)
			l.plain(plain, l.r(p, fmt.Sprint("p-", i)), l.r(p, fmt.Sprintf("t%d-0", i/6)))
		}
		ends := fidEnds(t, brokers, tIn)
		want := l.expect(ReadCommitted, keyExtractor{}, nil)

		store := newMemStore()
		cfg := testConfig(brokers)
		cfg.BatchSize = 5
		cfg.CommitInterval, cfg.CheckpointInterval = 15*time.Millisecond, 25*time.Millisecond
		cfg.MaxCheckpointStaleness = time.Hour
		cfg.Owner = "crashing"
		var batches atomic.Int64
		crash := make(chan struct{})
		first := startWorker(t, cfg, store, func(w *Worker) {
			w.hooks.AfterWrite = func(int, int64) {
				time.Sleep(10 * time.Millisecond) // several checkpoints before the crash
				if batches.Add(1) == 12 {
					w.hooks.Halted.Store(true) // kill -9 right after an acknowledged write
					close(crash)
				}
			}
		})
		go func() { <-crash; first.cancel() }()
		select {
		case <-first.done:
		case <-time.After(30 * time.Second):
			t.Fatal("crashing worker did not stop")
		}
		first.done <- nil
		fidLogCheckpoints(t, l, store, brokers)

		cfg = testConfig(brokers)
		cfg.Owner = "successor"
		rw := startWorker(t, cfg, store, nil)
		fidCaughtUp(t, rw, ends)
		if err := rw.stop(t); err != nil {
			t.Fatalf("Run: %v", err)
		}
		t.Logf("successor replayed %v, found %v already written",
			rw.metricSum(t, "bloomgate_recovery_replayed_records_total"), rw.metricSum(t, "bloomgate_recovery_already_written_records_total"))
		fidVerify(t, brokers, l, nil, want, ends)
	})

	t.Run("kill -9 while a transaction is open, which then aborts", func(t *testing.T) {
		t.Parallel()
		brokers, _ := fidCluster(t, 1, false)
		l := newFidLog(t)
		x := fidClient(t, brokers, kgo.TransactionalID("fid-x"))
		plain := fidClient(t, brokers)
		l.plain(plain, l.r(0, "p-0"), l.r(0, "p-1"), l.r(0, "p-2"))
		l.begin(x)
		l.send(x, l.r(0, "o-0"), l.r(0, "o-1"))
		l.plain(plain, l.r(0, "a-0"), l.r(0, "o-0"))
		l.send(x, l.r(0, "o-2"))
		lso := l.lso(0)
		held := l.expect(ReadCommitted, keyExtractor{}, nil)

		store := newMemStore()
		cfg := testConfig(brokers)
		cfg.CommitInterval, cfg.CheckpointInterval = 15*time.Millisecond, 25*time.Millisecond
		cfg.Owner = "crashing"
		var wk *Worker
		first := startWorker(t, cfg, store, func(w *Worker) { wk = w })
		waitFor(t, 30*time.Second, "the records before the open transaction consumed", func() bool {
			c, _ := fidMetric(t, first, "bloomgate_records_consumed_total", 0)
			return int(c) >= held.consumed[0]
		})
		// An idle partition checkpoints about once a second.
		waitFor(t, 10*time.Second, "a checkpoint and a commit", func() bool {
			cp, ok := store.latest(tIn, 0)
			return ok && cp.InputOffset > 0 && fidGroupOffsets(t, brokers, tIn)[0] > 0
		})
		wk.hooks.Halted.Store(true)
		first.cancel()
		select {
		case <-first.done:
		case <-time.After(30 * time.Second):
			t.Fatal("crashing worker did not stop")
		}
		first.done <- nil
		if cp, ok := store.latest(tIn, 0); !ok || cp.InputOffset != lso {
			t.Errorf("newest checkpoint of the crashed worker covers input up to %d (found %v), want the LSO %d", cp.InputOffset, ok, lso)
		}
		if c := fidGroupOffsets(t, brokers, tIn)[0]; c != lso {
			t.Errorf("committed offset at the crash %d, want the LSO %d", c, lso)
		}

		l.end(x, false)
		l.txn(x, true, l.r(0, "o-0"), l.r(0, "o-1"), l.r(0, "o-2")) // the retry commits
		l.plain(plain, l.r(0, "a-0"), l.r(0, "z-0"))
		ends := fidEnds(t, brokers, tIn)
		want := l.expect(ReadCommitted, keyExtractor{}, nil)
		cfg = testConfig(brokers)
		cfg.Owner = "successor"
		rw := startWorker(t, cfg, store, nil)
		fidCaughtUp(t, rw, ends)
		if err := rw.stop(t); err != nil {
			t.Fatalf("Run: %v", err)
		}
		fidVerify(t, brokers, l, nil, want, ends)
	})

	t.Run("resume inside aborted transactions", func(t *testing.T) {
		t.Parallel()
		// A checkpoint in the middle of one aborted transaction and a
		// committed offset in the middle of another: the replay between
		// them must insert the committed records and none of the aborted
		// ones, and reading from the committed offset must drop the rest
		// of the second aborted transaction, which began before it.
		brokers, _ := fidCluster(t, 1, false)
		l := newFidLog(t)
		a := fidClient(t, brokers, kgo.TransactionalID("fid-a"))
		b := fidClient(t, brokers, kgo.TransactionalID("fid-b"))
		plain := fidClient(t, brokers)
		ab := func() []*kgo.Record {
			return []*kgo.Record{l.r(0, "ab-0"), l.r(0, "ab-1"), l.r(0, "ab-2"), l.r(0, "ab-3"), l.r(0, "ab-4")}
		}
		bb := func() []*kgo.Record {
			return []*kgo.Record{l.r(0, "bb-0"), l.r(0, "bb-1"), l.r(0, "bb-2"), l.r(0, "bb-3")}
		}
		l.plain(plain, l.r(0, "k-0"), l.r(0, "k-1"))
		abAborted := ab()
		l.txn(a, false, abAborted...)
		l.txn(a, true, l.r(0, "cm-0"), l.r(0, "cm-1"))
		bbAborted := bb()
		l.txn(b, false, bbAborted...)
		l.txn(a, true, ab()...)
		l.txn(b, true, bb()...)
		l.plain(plain, l.r(0, "cm-0"), l.r(0, "k-0"), l.r(0, "ab-0"), l.r(0, "n-0"))
		ends := fidEnds(t, brokers, tIn)
		checkpointAt, committedAt := abAborted[2].Offset, bbAborted[2].Offset

		// The checkpoint knows the keys of the records before it.
		seen := map[string]time.Time{}
		for _, in := range l.visible(ReadCommitted)[0] {
			if in.rec.Offset < checkpointAt {
				seen[string(in.rec.Key)] = in.rec.Timestamp
			}
		}
		cfg := testConfig(brokers)
		store := newMemStore()
		store.parts[fmt.Sprintf("%s/%d", tIn, 0)] = &memHistory{seq: 1, cps: []Checkpoint{{
			InputOffset:   checkpointAt,
			OutputOffsets: map[string]map[int]int64{tOut: {0: 0}, tDup: {0: 0}, tDLQ: {0: 0}},
			Params:        cfg.partitionParams(1),
			Snapshot:      &exactSnapshot{last: seen},
			Owner:         "earlier",
		}}}
		var offs kadm.Offsets
		offs.AddOffset(tIn, 0, committedAt, -1)
		if err := fidAdmin(t, brokers).CommitAllOffsets(fidCtx(t), "g", offs); err != nil {
			t.Fatalf("committing offset %d for group g: %v", committedAt, err)
		}
		want := l.expect(ReadCommitted, keyExtractor{}, map[int32]int64{0: committedAt})

		rw := startWorker(t, cfg, store, nil)
		fidCaughtUp(t, rw, ends)
		if err := rw.stop(t); err != nil {
			t.Fatalf("Run: %v", err)
		}
		t.Logf("checkpoint at %d, committed offset %d: replayed %v records", checkpointAt, committedAt,
			rw.metricSum(t, "bloomgate_recovery_replayed_records_total"))
		fidVerify(t, brokers, l, rw, want, ends)
	})
}

// fidLogCheckpoints logs where the crashed worker's checkpoints and commit
// landed, and how many checkpoints fell inside an aborted transaction.
func fidLogCheckpoints(t *testing.T, l *fidLog, store *memStore, brokers []string) {
	t.Helper()
	store.mu.Lock()
	defer store.mu.Unlock()
	for p := int32(0); p < 2; p++ {
		h := store.parts[fmt.Sprintf("%s/%d", tIn, p)]
		if h == nil {
			continue
		}
		var offsets []int64
		inside := 0
		for _, cp := range h.cps {
			offsets = append(offsets, cp.InputOffset)
			if prev := l.at(p, cp.InputOffset-1); prev != nil && prev.fate == fidAborted {
				inside++
			}
		}
		t.Logf("partition %d: crashed worker checkpointed at input offsets %v (%d right after an aborted record)", p, offsets, inside)
	}
	t.Logf("committed offsets at the crash: %v", fidGroupOffsets(t, brokers, tIn))
}

// fidIDExtractor keys records by their "id" header, with the real extractor.
func fidIDExtractor(t *testing.T) Extractor {
	t.Helper()
	ex, err := keys.NewExtractor("header:id", "none", 0)
	if err != nil {
		t.Fatal(err)
	}
	return ex
}

// fidNullEmpty writes records whose key, value and header values are null
// or empty in every combination, keyed by an "id" header: first
// occurrences, duplicates and records without a usable id.
func fidNullEmpty(l *fidLog, cl *kgo.Client) {
	id := func(v []byte) kgo.RecordHeader { return kgo.RecordHeader{Key: "id", Value: v} }
	hn := kgo.RecordHeader{Key: "hn", Value: nil}
	he := kgo.RecordHeader{Key: "he", Value: []byte{}}
	hv := kgo.RecordHeader{Key: "hv", Value: []byte("x")}
	rec := func(key, value []byte, hs ...kgo.RecordHeader) *kgo.Record {
		l.n++
		return &kgo.Record{Topic: tIn, Partition: 0, Key: key, Value: value, Headers: hs,
			Timestamp: base.Add(time.Duration(l.n) * time.Millisecond)}
	}
	l.plain(cl,
		rec(nil, nil, id([]byte("1")), hn, he),                     // tombstone
		rec([]byte{}, []byte{}, id([]byte("2")), he, hn, hv),       // empty, not null
		rec(nil, []byte{}, id([]byte("3")), hn),                    // null key, empty value
		rec([]byte{}, nil, id([]byte("4")), he),                    // empty key, null value
		rec([]byte("k5"), []byte("v5"), id([]byte("5")), hv),       // plain
		rec([]byte{}, []byte{}, hn, id([]byte("1")), he),           // duplicate of 1
		rec(nil, nil, he, id([]byte("2"))),                         // duplicate of 2
		rec(nil, []byte{}, he, hn),                                 // no id: missing
		rec([]byte{}, nil, id([]byte{}), hn),                       // empty id: empty
		rec([]byte("k10"), []byte{}, id(nil), he),                  // null id: empty
		rec([]byte{}, []byte("v11"), id([]byte("11")), he, he),     // repeated empty header
		rec(nil, nil, id([]byte("12")), kgo.RecordHeader{Key: ""}), // empty header name, null value
	)
}

// TestFidelityNullAndEmpty: null and empty keys, values and header values
// come out exactly as they went in, on the output, the duplicates and the
// dead-letter topic, with the worker's own headers added after them.
func TestFidelityNullAndEmpty(t *testing.T) {
	t.Parallel()
	brokers, _ := fidCluster(t, 1, false)
	l := newFidLog(t)
	fidNullEmpty(l, fidClient(t, brokers))
	ex := fidIDExtractor(t)
	// The tools first: kgo and kfake keep null and empty apart on the input.
	in := fidRead(t, brokers, tIn)[0]
	if len(in) != len(l.recs) {
		t.Fatalf("input holds %d records, produced %d", len(in), len(l.recs))
	}
	for i, r := range in {
		p := l.recs[i].rec
		if got, want := fidRender(r.Key, r.Value, r.Timestamp, r.Headers), fidRender(p.Key, p.Value, p.Timestamp, p.Headers); got != want {
			t.Fatalf("input record %d as read back with kgo:\n\t got %s\n\twant %s", i, got, want)
		}
	}
	ends := fidEnds(t, brokers, tIn)
	want := l.expect(ReadCommitted, ex, nil)
	if len(want.out[0]) != 7 || len(want.dup[0]) != 2 || len(want.dlq[0]) != 3 {
		t.Fatalf("test data: %d first occurrences, %d duplicates, %d dead letters; want 7, 2, 3", len(want.out[0]), len(want.dup[0]), len(want.dlq[0]))
	}
	rw := startWorkerWith(t, testConfig(brokers), newMemStore(), ex, nil)
	fidCaughtUp(t, rw, ends)
	if err := rw.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	fidVerify(t, brokers, l, rw, want, ends)
}

// TestFidelityCompactedOutput: on a compacted output topic an empty value
// is a record, not a tombstone: compaction keeps it (kfake compacts like
// Kafka: it removes null values older than delete.retention.ms, here 0, and
// superseded keys).
func TestFidelityCompactedOutput(t *testing.T) {
	t.Parallel()
	brokers, cluster := fidCluster(t, 1, true)
	l := newFidLog(t)
	cl := fidClient(t, brokers)
	rec := func(key string, value []byte) *kgo.Record {
		l.n++
		return &kgo.Record{Topic: tIn, Partition: 0, Key: []byte(key), Value: value,
			Timestamp: base.Add(time.Duration(l.n) * time.Millisecond)}
	}
	l.plain(cl, rec("empty-value", []byte{}), rec("null-value", nil), rec("value", []byte("v")))
	ends := fidEnds(t, brokers, tIn)
	rw := startWorker(t, testConfig(brokers), newMemStore(), nil)
	fidCaughtUp(t, rw, ends)
	if err := rw.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// Compaction never touches the last batch: close it with a record of
	// another key, written separately.
	if err := fidClient(t, brokers).ProduceSync(fidCtx(t), &kgo.Record{Topic: tOut, Partition: 0, Key: []byte("last"), Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatalf("writing to %s: %v", tOut, err)
	}
	cluster.Compact()
	got := map[string][]byte{}
	for _, r := range fidRead(t, brokers, tOut)[0] {
		got[string(r.Key)] = r.Value
	}
	if v, ok := got["empty-value"]; !ok || v == nil {
		t.Errorf("record with an empty value: after compaction present %v, value %s; want present, value \"\" (an empty value is not a tombstone)", ok, fidBytes(v))
	}
	if v, ok := got["value"]; !ok || string(v) != "v" {
		t.Errorf("record with value \"v\": after compaction present %v, value %s", ok, fidBytes(v))
	}
	if _, ok := got["null-value"]; ok {
		t.Errorf("tombstone (null value) still present after compaction with delete.retention.ms=0: kfake did not compact")
	}
}

// TestFidelityCompression: input in every codec kgo produces (none, gzip,
// snappy, lz4, zstd) is forwarded with key, value, headers and timestamp
// exact.
func TestFidelityCompression(t *testing.T) {
	t.Parallel()
	codecs := []struct {
		name  string
		codec kgo.CompressionCodec
	}{
		{"none", kgo.NoCompression()},
		{"gzip", kgo.GzipCompression()},
		{"snappy", kgo.SnappyCompression()},
		{"lz4", kgo.Lz4Compression()},
		{"zstd", kgo.ZstdCompression()},
	}
	for _, c := range codecs {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			brokers, _ := fidCluster(t, 2, false)
			l := newFidLog(t)
			cl := fidClient(t, brokers, kgo.ProducerBatchCompression(c.codec), kgo.ProducerLinger(5*time.Millisecond))
			var recs []*kgo.Record
			for i := range 300 {
				r := l.r(int32(i%2), fmt.Sprintf("key-%d", i%250)) // 50 duplicates
				r.Value = bytes.Repeat(fmt.Appendf(nil, "value %d of %s; ", i, c.name), 1+i%7)
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: "codec", Value: []byte(c.name)},
					kgo.RecordHeader{Key: "n", Value: []byte("repeated header name")})
				recs = append(recs, r)
			}
			l.plain(cl, recs...)
			ends := fidEnds(t, brokers, tIn)
			want := l.expect(ReadCommitted, keyExtractor{}, nil)
			rw := startWorker(t, testConfig(brokers), newMemStore(), nil)
			fidCaughtUp(t, rw, ends)
			if err := rw.stop(t); err != nil {
				t.Fatalf("Run: %v", err)
			}
			fidVerify(t, brokers, l, rw, want, ends)
			// Written as read: the output keeps the input's codec
			// (--compression input, the default).
			for p, codec := range writtenCodecs(t, brokers, tOut, 2) {
				if producer.Codec(codec).String() != c.name {
					t.Errorf("output partition %d written with %v, the input with %s", p, producer.Codec(codec), c.name)
				}
			}
		})
	}
}

// writtenCodecs returns the codec of the last batch of data records in
// each partition of topic.
func writtenCodecs(t *testing.T, brokers []string, topic string, partitions int) []int8 {
	t.Helper()
	out := make([]int8, partitions)
	for p := range partitions {
		f, err := fetcher.New(fetcher.Config{Transport: &kafka.Transport{}, Brokers: brokers, Topic: topic, Partition: p}, 0)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		for ctx.Err() == nil {
			c, err := f.Fetch(ctx)
			if err != nil {
				t.Fatalf("reading %s/%d: %v", topic, p, err)
			}
			if len(c.Records) > 0 {
				out[p] = c.Codec
			}
			c.Release()
			if c.Next >= c.HighWatermark {
				break
			}
		}
		cancel()
	}
	return out
}
