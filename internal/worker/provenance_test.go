package worker

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/bloomgate/bloomgate/internal/producer"
)

// sealed is the origin of the last record of a batch of the src offsets
// offs written to topic by pv, as the scan parses it.
func sealed(pv *provenance, topic string, offs ...int64) (origin, []byte) {
	v := appendOrigin(nil, pv.partition, offs[len(offs)-1])
	v = pv.appendSeal(v, topic, len(offs), func(i int) int64 { return offs[i] })
	var o origin
	o.parse(v)
	return o, v
}

// TestSealVerdicts: a seal verifies only under the key, group, input
// topic, src partition, written topic and the src offsets of the records
// it covers; everything else gets the verdict that says what it is.
func TestSealVerdicts(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	offs := []int64{40, 41, 43, 44, 45}
	pv := newProvenance(key, "orders-dedup", "orders", 3)
	own, v := sealed(pv, "orders-unique", offs...)
	other := func(key []byte, group, topic string, p int) origin {
		o, _ := sealed(newProvenance(key, group, topic, p), "orders-unique", offs...)
		return o
	}
	parsed := func(v []byte) origin {
		var o origin
		o.parse(v)
		return o
	}
	at := func(v []byte, i int, b byte) []byte {
		v = bytes.Clone(v)
		if i < 0 {
			i += len(v)
		}
		v[i] = b
		return v
	}
	otherKey := bytes.Repeat([]byte{8}, 32)
	for _, c := range []struct {
		name   string
		o      origin
		topic  string
		offs   []int64
		expect provenanceVerdict
	}{
		{"its own", own, "orders-unique", offs, provOurs},
		{"another written topic", own, "orders-dead-letter", offs, provInvalid},
		{"other offsets", own, "orders-unique", []int64{40, 41, 42, 44, 45}, provInvalid},
		{"another memory", other(otherKey, "orders-dedup", "orders", 3), "orders-unique", offs, provOtherMemory},
		{"another group", other(key, "billing-dedup", "orders", 3), "orders-unique", offs, provOtherGroup},
		{"another input", other(key, "orders-dedup", "payments", 3), "orders-unique", offs, provOtherGroup},
		{"another partition of this group", other(key, "orders-dedup", "orders", 4), "orders-unique", offs, provOtherPartition},
		{"one bit of the mac", parsed(at(v, -1, v[len(v)-1]^0x80)), "orders-unique", offs, provInvalid},
		{"a mac of zeros", parsed(append(bytes.Clone(v[:len(v)-provenanceMACLen]), make([]byte, provenanceMACLen)...)), "orders-unique", offs, provInvalid},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !c.o.srcOK || !c.o.sealed {
				t.Fatalf("seal does not parse: %+v", c.o)
			}
			got, _ := pv.verifySeal(c.o, c.topic, func(i int) int64 { return c.offs[i] })
			if got != c.expect {
				t.Errorf("verdict %d (%q), want %d (%q)", got, foreignReasons[got], c.expect, foreignReasons[c.expect])
			}
		})
	}
	// n is bound by the mac: a seal claiming 4 records does not verify
	// over the last 4.
	fewer := bytes.Clone(v)
	fewer[len(appendOrigin(nil, 3, 45))] = 4
	if got, _ := pv.verifySeal(parsed(fewer), "orders-unique", func(i int) int64 { return offs[1+i] }); got != provInvalid {
		t.Errorf("a seal's n changed: verdict %d, want invalid_mac", got)
	}
	for _, c := range []struct {
		name string
		v    []byte
	}{
		{"short", v[:len(v)-1]},
		{"trailing byte", append(bytes.Clone(v), 0)},
		{"n of 0", at(v, len(appendOrigin(nil, 3, 45)), 0)},
		{"unknown format", at(v, 0, 3)},
		{"overlong varint", append([]byte{provenanceFormat}, bytes.Repeat([]byte{0xff}, 11)...)},
		{"empty", []byte{}},
	} {
		if o := parsed(c.v); o.srcOK {
			t.Errorf("%s: parsed as %+v", c.name, o)
		}
	}
}

// TestProvenanceValueBytes: a record's header value is 3 bytes for small
// partitions and offsets, the sealed last record of a batch 21 more; the
// largest fit originMaxLen; group and topic names are not in them.
func TestProvenanceValueBytes(t *testing.T) {
	if n := len(appendOrigin(nil, 0, 5)); n != 3 {
		t.Errorf("partition 0, offset 5: %d bytes, want 3", n)
	}
	pv := newProvenance([]byte("k"), "orders-dedup", "orders", 1<<31-1)
	o, v := sealed(pv, "orders-unique", 1<<63-1)
	if len(v) != 1+5+9+sealLen {
		t.Errorf("largest partition and offset, sealed: %d bytes, want %d", len(v), 1+5+9+sealLen)
	}
	if len(v) > originMaxLen || bytes.Contains(v, []byte("orders")) {
		t.Errorf("value %q: over %d bytes, or a name in clear", v, originMaxLen)
	}
	if got, _ := pv.verifySeal(o, "orders-unique", func(int) int64 { return 1<<63 - 1 }); got != provOurs || o.offset != 1<<63-1 || o.partition != 1<<31-1 {
		t.Errorf("largest partition and offset: verdict %d, source %d/%d", got, o.partition, o.offset)
	}
	big := make([]byte, 0, originMaxLen)
	big = append(appendOrigin(big, 1<<31-1, 1<<63-1), pv.appendSeal(nil, "t", maxSealed, func(int) int64 { return 1 })...)
	if len(big) > originMaxLen {
		t.Errorf("a seal of %d records: %d bytes, over originMaxLen %d", maxSealed, len(big), originMaxLen)
	}
}

// TestTextProvenanceVerdicts: records of format 1 (three text headers, as
// builds before format 2 wrote them) are still judged as they were.
func TestTextProvenanceVerdicts(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	pv := newProvenance(key, "orders-dedup", "orders", 3)
	v := pv.appendTextValue(nil, 42, "orders-unique")
	other := func(key []byte, group, topic string, p int) []byte {
		return newProvenance(key, group, topic, p).appendTextValue(nil, 42, "orders-unique")
	}
	otherKey := bytes.Repeat([]byte{8}, 32)
	tamper := func(v []byte, field int, to string) []byte {
		parts := strings.SplitN(string(v), " ", 5)
		parts[field] = to
		return []byte(strings.Join(parts, " "))
	}
	for _, c := range []struct {
		name   string
		v      []byte
		p      int
		off    int64
		topic  string
		expect provenanceVerdict
	}{
		{"its own", v, 3, 42, "orders-unique", provOurs},
		{"no provenance header", nil, 3, 42, "orders-unique", provNone},
		{"another offset", v, 3, 43, "orders-unique", provInvalid},
		{"another written topic", v, 3, 42, "orders-dead-letter", provInvalid},
		{"another memory", other(otherKey, "orders-dedup", "orders", 3), 3, 42, "orders-unique", provOtherMemory},
		{"another group", other(key, "billing-dedup", "orders", 3), 3, 42, "orders-unique", provOtherGroup},
		{"another input", other(key, "orders-dedup", "payments", 3), 3, 42, "orders-unique", provOtherGroup},
		{"another partition of this group", other(key, "orders-dedup", "orders", 4), 4, 42, "orders-unique", provOtherPartition},
		{"this memory's id, forged mac", tamper(v, 2, "AAAAAAAAAAAAAAAAAAAAAA"), 3, 42, "orders-unique", provInvalid},
		{"mac of another record", tamper(v, 2, strings.SplitN(string(pv.appendTextValue(nil, 41, "orders-unique")), " ", 5)[2]), 3, 42, "orders-unique", provInvalid},
		{"group swapped in clear", tamper(v, 4, "billing-dedup"), 3, 42, "orders-unique", provOtherGroup},
		{"short mac", tamper(v, 2, "AAAA"), 3, 42, "orders-unique", provInvalid},
		{"unknown version", tamper(v, 0, "2"), 3, 42, "orders-unique", provMalformed},
		{"garbage", []byte("nonsense"), 3, 42, "orders-unique", provMalformed},
		{"empty value", []byte{}, 3, 42, "orders-unique", provMalformed},
	} {
		t.Run(c.name, func(t *testing.T) {
			hs := []kafka.Header{
				{Key: HeaderSrcPartition, Value: []byte(strconv.Itoa(c.p))},
				{Key: HeaderSrcOffset, Value: []byte(strconv.FormatInt(c.off, 10))},
			}
			if c.v != nil {
				hs = append(hs, kafka.Header{Key: HeaderTextProvenance, Value: c.v})
			}
			if got, _ := pv.judge(originOf(hs), c.topic); got != c.expect {
				t.Errorf("verdict %d (%q), want %d (%q)", got, foreignReasons[got], c.expect, foreignReasons[c.expect])
			}
		})
	}
}

// TestTextProvenanceGroupWithSpaces: in format 1 a group ID may hold
// spaces (it is the last field); topic names cannot.
func TestTextProvenanceGroupWithSpaces(t *testing.T) {
	pv := newProvenance([]byte("k"), "my group id", "in", 0)
	hs := []kafka.Header{{Key: HeaderSrcPartition, Value: []byte("0")}, {Key: HeaderSrcOffset, Value: []byte("1")},
		{Key: HeaderTextProvenance, Value: pv.appendTextValue(nil, 1, "out")}}
	if got, _ := pv.judge(originOf(hs), "out"); got != provOurs {
		t.Errorf("verdict %d", got)
	}
	other := newProvenance([]byte("k"), "other group", "in", 0)
	hs[2].Value = other.appendTextValue(nil, 1, "out")
	if got, who := pv.judge(originOf(hs), "out"); got != provOtherGroup || who != `group "other group" (input "in")` {
		t.Errorf("verdict %d, writer %q", got, who)
	}
}

// TestProvenanceMemoryID: the memory id is derived from the key (stable
// across restores, different between memories) and does not contain it.
func TestProvenanceMemoryID(t *testing.T) {
	a := newProvenance([]byte("key-a"), "g", "in", 0)
	a2 := newProvenance([]byte("key-a"), "g", "in", 5)
	b := newProvenance([]byte("key-b"), "g", "in", 0)
	if a.memID != a2.memID || a.memID == b.memID || bytes.Contains(a.memID[:], []byte("key-a")) {
		t.Errorf("memory ids %x %x %x", a.memID, a2.memID, b.memID)
	}
}

// TestSourceOfTakesTheWorkersHeaders: an input record may carry worker
// headers of its own (an earlier stage, or garbage); the worker's come
// last and win, whichever format each is.
func TestSourceOfTakesTheWorkersHeaders(t *testing.T) {
	_, upstream := sealed(newProvenance([]byte("u"), "upstream", "raw", 9), "orders", 1234)
	for _, c := range []struct {
		name string
		hs   []kafka.Header
	}{
		{"format 1 after garbage", []kafka.Header{
			{Key: HeaderSrcPartition, Value: []byte("not a number")},
			{Key: HeaderSrcOffset, Value: []byte("-")},
			{Key: HeaderSrcPartition, Value: []byte("2")},
			{Key: HeaderSrcOffset, Value: []byte("17")},
		}},
		{"format 1 after an upstream stage's format 2", []kafka.Header{
			{Key: HeaderProvenance, Value: upstream},
			{Key: HeaderSrcPartition, Value: []byte("2")},
			{Key: HeaderSrcOffset, Value: []byte("17")},
		}},
		{"format 2 after an upstream stage's format 2 and 1", []kafka.Header{
			{Key: HeaderSrcPartition, Value: []byte("5")},
			{Key: HeaderSrcOffset, Value: []byte("5")},
			{Key: HeaderProvenance, Value: upstream},
			{Key: HeaderProvenance, Value: appendOrigin(nil, 2, 17)},
		}},
	} {
		if p, o, ok := SourceOf(c.hs); !ok || p != 2 || o != 17 {
			t.Errorf("%s: SourceOf = %d, %d, %v; want 2, 17, true", c.name, p, o, ok)
		}
	}
}

// TestRecordBuilderWritesProvenance: every record built alone carries the
// bloomgate header of its offset, sealed for the topic it is addressed to,
// after the input record's own headers.
func TestRecordBuilderWritesProvenance(t *testing.T) {
	pv := newProvenance([]byte("k"), "g", "in", 1)
	_, upstream := sealed(newProvenance([]byte("u"), "upstream", "raw", 1), "in", 1)
	var b recordBuilder
	b.reset(1, pv, false)
	for i := range 50 {
		in := kafka.Message{Offset: int64(100 + i), Key: []byte(fmt.Sprint(i)),
			Headers: []kafka.Header{{Key: HeaderProvenance, Value: upstream}}}
		topic := []string{"out", "dups", "dlq"}[i%3]
		b.add(topic, &in, "")
	}
	for i := range b.recs {
		m := b.message(i)
		o := originOf(m.Headers)
		got, _ := pv.verifySeal(o, m.Topic, func(int) int64 { return o.offset })
		if !o.sealed || o.n != 1 || got != provOurs || o.offset != int64(100+i) {
			t.Errorf("record %d: sealed %v n %d verdict %d, source offset %d", i, o.sealed, o.n, got, o.offset)
		}
		if !bytes.Equal(m.Headers[0].Value, upstream) || len(m.Headers) != 2 {
			t.Errorf("record %d: want the input's own header unchanged and one added: %v", i, m.Headers)
		}
	}
}

// BenchmarkProvenance: the seal of a batch of 1,000 records (ns per
// record: divide by 1,000).
func BenchmarkProvenance(b *testing.B) {
	pv := newProvenance(bytes.Repeat([]byte{1}, 32), "orders-dedup", "orders", 3)
	var dst []byte
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		base := int64(i) * 1000
		dst = pv.appendSeal(dst[:0], "orders-unique", 1000, func(k int) int64 { return base + int64(k) })
	}
}

// TestRollingUpgradeKeepsLegacyRecords: a build from before provenance
// headers wrote records it did not commit, then was replaced. Restoring
// the old build's checkpoint, the new one counts those records as written
// (nothing forwarded twice); restoring one of its own, it does not accept
// records without provenance (they are another writer's as far as it can
// tell, and their input is forwarded again).
func TestRollingUpgradeKeepsLegacyRecords(t *testing.T) {
	for _, c := range []struct {
		name   string
		legacy bool
	}{{"checkpoint of the old build", true}, {"checkpoint of this build", false}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			brokers := newCluster(t, 1)
			evs := genEvents(1000, 1, 0.2, 91, base)
			produce(t, brokers, evs)
			store := newMemStore()
			store.legacy.Store(c.legacy)
			cfg := testConfig(brokers)
			cfg.CommitInterval, cfg.CheckpointInterval, cfg.BatchSize = time.Hour, time.Hour, 50
			cfg.Owner = "old build"
			crash := make(chan struct{})
			var once sync.Once
			var batches atomic.Int64
			old := startWorker(t, cfg, store, func(w *Worker) {
				w.hooks.LegacyHeaders.Store(true)
				w.hooks.AfterWrite = func(int, int64) {
					if batches.Add(1) == 10 {
						once.Do(func() { w.hooks.Halted.Store(true); close(crash) })
					}
				}
			})
			<-crash
			old.cancel()
			old.done <- <-old.done // for the cleanup's stop
			store.legacy.Store(false)

			rw := startWorker(t, testConfig(brokers), store, nil)
			waitFor(t, 60*time.Second, "everything consumed", func() bool {
				ps := rw.w.Status().Partitions
				return len(ps) == 1 && ps[0].NextOffset == int64(len(evs))
			})
			if err := rw.stop(t); err != nil {
				t.Fatalf("Run: %v", err)
			}
			twice := 0
			seen := map[int64]bool{}
			for _, m := range readTopic(t, brokers, tOut, 1)[0] {
				_, so, _ := SourceOf(m.Headers)
				if seen[so] {
					twice++
				}
				seen[so] = true
			}
			wantOut, _, _ := expectation(evs, time.Hour)
			if len(seen) != len(wantOut[0]) {
				t.Errorf("%d input records on the output, want %d", len(seen), len(wantOut[0]))
			}
			foreign := rw.metricSum(t, "bloomgate_foreign_records_total")
			switch {
			case c.legacy && (twice != 0 || foreign != 0):
				t.Errorf("restoring the old build's checkpoint: %d records forwarded twice, %v foreign; want 0, 0", twice, foreign)
			case !c.legacy && (twice == 0 || foreign == 0):
				t.Errorf("restoring this build's checkpoint: %d records forwarded twice, %v foreign; want the old build's records not accepted", twice, foreign)
			}
			if cp, ok := store.latest(tIn, 0); !ok || cp.LegacyBefore != nil {
				t.Errorf("the final checkpoint, past every record without provenance, still names %v", cp.LegacyBefore)
			}
		})
	}
}

// TestCheckpointKeepsLegacyBound: a checkpoint carries where records
// without provenance may be this memory's only while its output offsets
// are below that bound (a later scan can still meet them).
func TestCheckpointKeepsLegacyBound(t *testing.T) {
	w := &Worker{cfg: Config{Owner: "t"}, out: newOutput(Config{}, nil, nil, nil)}
	out, dlq := topicPartition{tOut, 0}, topicPartition{tDLQ, 0}
	pp := &partitionProc{w: w, filter: &exactFilter{last: map[string]time.Time{}},
		writtenState: writtenState{
			scanFrom: map[topicPartition]int64{out: 10, dlq: 5}, scanTo: map[topicPartition]int64{out: 50, dlq: 5},
			legacyBefore: map[topicPartition]int64{out: 50, dlq: 5},
			skip:         newSkipSet(100, 200)},
		next: 100, resume: 100}
	pp.skip.add(150, skipEntry{kind: toOutput})
	// The skip set holds a record: output offsets stay at the scan's start.
	cp := pp.checkpoint()
	if got := cp.LegacyBefore; len(got) != 1 || got[tOut][0] != 50 {
		t.Errorf("during the skip set: LegacyBefore %v, want only %s/0 below 50", got, tOut)
	}
	pp.skip.take(150)
	if cp := pp.checkpoint(); cp.LegacyBefore != nil {
		t.Errorf("past the scan: LegacyBefore %v, want none", cp.LegacyBefore)
	}
}

// TestRollingUpgradeFromTextHeaders: a build writing format 1 (three text
// headers) wrote records it did not commit and was killed; this build,
// restoring its checkpoint, counts them as written (nothing forwarded
// twice, nothing foreign), and writes one bloomgate header from then on.
func TestRollingUpgradeFromTextHeaders(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1)
	evs := genEvents(1000, 1, 0.2, 92, base)
	produce(t, brokers, evs)
	store := newMemStore()
	cfg := testConfig(brokers)
	cfg.CommitInterval, cfg.CheckpointInterval, cfg.BatchSize = time.Hour, time.Hour, 50
	cfg.Owner = "format 1 build"
	crash := make(chan struct{})
	var once sync.Once
	var batches atomic.Int64
	old := startWorker(t, cfg, store, func(w *Worker) {
		w.hooks.TextHeaders.Store(true)
		w.hooks.AfterWrite = func(int, int64) {
			if batches.Add(1) == 10 {
				once.Do(func() { w.hooks.Halted.Store(true); close(crash) })
			}
		}
	})
	<-crash
	old.cancel()
	old.done <- <-old.done // for the cleanup's stop

	rw := startWorker(t, testConfig(brokers), store, nil)
	waitFor(t, 60*time.Second, "everything consumed", func() bool {
		ps := rw.w.Status().Partitions
		return len(ps) == 1 && ps[0].NextOffset == int64(len(evs))
	})
	if err := rw.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	twice, text := 0, 0
	seen := map[int64]bool{}
	for _, m := range readTopic(t, brokers, tOut, 1)[0] {
		o := originOf(m.Headers)
		if o.format == 1 {
			text++
		}
		if seen[o.offset] {
			twice++
		}
		seen[o.offset] = true
	}
	wantOut, _, _ := expectation(evs, time.Hour)
	if len(seen) != len(wantOut[0]) {
		t.Errorf("%d input records on the output, want %d", len(seen), len(wantOut[0]))
	}
	if text == 0 || text == len(seen) {
		t.Errorf("%d of %d records in format 1: want the old build's and this build's both", text, len(seen))
	}
	if foreign := rw.metricSum(t, "bloomgate_foreign_records_total"); twice != 0 || foreign != 0 {
		t.Errorf("%d records forwarded twice, %v foreign; want 0, 0", twice, foreign)
	}
	if n := rw.metricSum(t, "bloomgate_recovery_already_written_records_total"); n == 0 {
		t.Errorf("the recovery found none of the old build's records")
	}
}

// TestAddedBytesPerRecord measures the bytes the worker's headers add to
// each record of a batch of 1,000 as the broker stores it (uncompressed),
// for format 2 (its seal on the last) against format 1, at offsets of a
// busy partition: README's
// guarantee and docs/worker.md ("Bytes per record") quote them.
func TestAddedBytesPerRecord(t *testing.T) {
	const n = 1000
	pv := newProvenance(bytes.Repeat([]byte{1}, 32), "orders-dedup", "orders", 3)
	in := make([]kafka.Message, n)
	for i := range in {
		in[i] = kafka.Message{Offset: 1_000_000 + int64(i), Key: []byte("order-" + strconv.Itoa(i)),
			Value: []byte(`{"order_id":"x"}`), Time: time.Unix(1_700_000_000, 0)}
	}
	size := func(prov *provenance, text bool) float64 {
		var rb recordBuilder
		rb.reset(3, prov, text)
		for i := range in {
			rb.add("orders-unique", &in[i], "")
		}
		var b producer.Batch
		var scratch [originMaxLen]byte
		for i := range rb.recs {
			var seal []byte
			if i == len(rb.recs)-1 && !text {
				seal = prov.appendSeal(nil, "orders-unique", n, func(k int) int64 { return in[k].Offset })
			}
			hs, k := rb.recs[i].headers(rb.arena, 3, &scratch, seal)
			b.Append(rb.recs[i].in, hs[:k]...)
		}
		return float64(b.Size()) / n
	}
	var plain producer.Batch
	for i := range in {
		plain.Append(&in[i])
	}
	base := float64(plain.Size()) / n
	v2, v1 := size(pv, false)-base, size(pv, true)-base
	t.Logf("bytes added per record: format 2 %.1f, format 1 %.1f (group %q, input %q)", v2, v1, pv.group, pv.topic)
	if v2 > 20 || v1 < 6*v2 {
		t.Errorf("format 2 adds %.1f bytes per record, format 1 %.1f: want at most 20 and a sixth of format 1", v2, v1)
	}
}

// TestSealedBatchesAsWritten: a write cut into many batches (a small
// bound) reads back with every record naming its own input offset, and
// every batch sealed on its last record: each seal verifies over the
// records before it up to the previous seal, and no record is left
// uncovered.
func TestSealedBatchesAsWritten(t *testing.T) {
	t.Parallel()
	brokers := newClusterWith(t, kfake.SeedTopics(4, tOut))
	o := testOutput(t, brokers)
	o.limit = func(string) int64 { return 4096 }
	pv := testProvenance(1)
	var rb recordBuilder
	rb.reset(1, pv, false)
	in := make([]kafka.Message, 2000)
	for i := range in {
		in[i] = kafka.Message{Offset: int64(1000 + 2*i), Key: []byte(fmt.Sprint(1000 + 2*i)), Value: bytes.Repeat([]byte("v"), i%300)}
		rb.add(tOut, &in[i], "")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := o.write(ctx, 1, producer.Zstd, pv, rb.recs, rb.arena); err != nil {
		t.Fatal(err)
	}
	got := readTopic(t, brokers, tOut, 4)[1]
	if len(got) != len(in) {
		t.Fatalf("%d records read back, want %d", len(got), len(in))
	}
	var pending []int64
	seals := 0
	for _, m := range got {
		org := originOf(m.Headers)
		if !org.srcOK || org.partition != 1 || fmt.Sprint(org.offset) != string(m.Key) {
			t.Fatalf("record at %d (key %s) names %d/%d (%v)", m.Offset, m.Key, org.partition, org.offset, org.srcOK)
		}
		pending = append(pending, org.offset)
		if !org.sealed {
			continue
		}
		seals++
		if org.n != len(pending) {
			t.Fatalf("seal at %d covers %d records, %d since the last seal", m.Offset, org.n, len(pending))
		}
		if v, _ := pv.verifySeal(org, tOut, func(i int) int64 { return pending[i] }); v != provOurs {
			t.Fatalf("seal at %d: verdict %d", m.Offset, v)
		}
		pending = pending[:0]
	}
	if len(pending) != 0 || seals < 10 {
		t.Errorf("%d records after the last seal, %d seals: want 0 and a write cut into many batches", len(pending), seals)
	}
}
