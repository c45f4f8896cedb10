package worker

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// TestProvenanceVerdicts: a header verifies only under the key, group,
// input topic, src partition, src offset and written topic it was made
// for; everything else gets the verdict that says what it is.
func TestProvenanceVerdicts(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	pv := newProvenance(key, "orders-dedup", "orders", 3)
	v := pv.appendValue(nil, 42, "orders-unique")
	if got, _ := pv.verify(v, 3, 42, "orders-unique"); got != provOurs {
		t.Fatalf("own header: verdict %d, want ours", got)
	}
	other := func(key []byte, group, topic string, p int) []byte {
		return newProvenance(key, group, topic, p).appendValue(nil, 42, "orders-unique")
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
		{"no header", nil, 3, 42, "orders-unique", provNone},
		{"another offset", v, 3, 43, "orders-unique", provInvalid},
		{"another written topic", v, 3, 42, "orders-dead-letter", provInvalid},
		{"another memory", other(otherKey, "orders-dedup", "orders", 3), 3, 42, "orders-unique", provOtherMemory},
		{"another group", other(key, "billing-dedup", "orders", 3), 3, 42, "orders-unique", provOtherGroup},
		{"another input", other(key, "orders-dedup", "payments", 3), 3, 42, "orders-unique", provOtherGroup},
		{"another partition of this group", other(key, "orders-dedup", "orders", 4), 4, 42, "orders-unique", provOtherPartition},
		{"this memory's id, forged mac", tamper(v, 2, "AAAAAAAAAAAAAAAAAAAAAA"), 3, 42, "orders-unique", provInvalid},
		{"mac of another record", tamper(v, 2, strings.SplitN(string(pv.appendValue(nil, 41, "orders-unique")), " ", 5)[2]), 3, 42, "orders-unique", provInvalid},
		{"group swapped in clear", tamper(v, 4, "billing-dedup"), 3, 42, "orders-unique", provOtherGroup},
		{"short mac", tamper(v, 2, "AAAA"), 3, 42, "orders-unique", provInvalid},
		{"unknown version", tamper(v, 0, "2"), 3, 42, "orders-unique", provMalformed},
		{"garbage", []byte("nonsense"), 3, 42, "orders-unique", provMalformed},
		{"empty value", []byte{}, 3, 42, "orders-unique", provMalformed},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got, _ := pv.verify(c.v, c.p, c.off, c.topic); got != c.expect {
				t.Errorf("verdict %d (%q), want %d (%q)", got, foreignReasons[got], c.expect, foreignReasons[c.expect])
			}
		})
	}
}

// TestProvenanceGroupWithSpaces: a group ID may hold spaces (it is the last
// field); topic names cannot.
func TestProvenanceGroupWithSpaces(t *testing.T) {
	pv := newProvenance([]byte("k"), "my group id", "in", 0)
	v := pv.appendValue(nil, 1, "out")
	if got, f := pv.verify(v, 0, 1, "out"); got != provOurs || string(f.group) != "my group id" {
		t.Errorf("verdict %d group %q", got, f.group)
	}
}

// TestProvenanceMemoryID: the memory id is derived from the key (stable
// across restores, different between memories) and does not contain it.
func TestProvenanceMemoryID(t *testing.T) {
	a := newProvenance([]byte("key-a"), "g", "in", 0)
	a2 := newProvenance([]byte("key-a"), "g", "in", 5)
	b := newProvenance([]byte("key-b"), "g", "in", 0)
	if a.memID != a2.memID || a.memID == b.memID || len(a.memID) != 16 {
		t.Errorf("memory ids %q %q %q", a.memID, a2.memID, b.memID)
	}
}

// TestSrcOfTakesTheWorkersHeaders: an input record may carry src headers of
// its own (an earlier stage, or garbage); the worker's come last and win.
func TestSrcOfTakesTheWorkersHeaders(t *testing.T) {
	hs := []kafka.Header{
		{Key: HeaderSrcPartition, Value: []byte("not a number")},
		{Key: HeaderSrcOffset, Value: []byte("-")},
		{Key: HeaderSrcPartition, Value: []byte("2")},
		{Key: HeaderSrcOffset, Value: []byte("17")},
	}
	if p, o, ok := srcOf(hs); !ok || p != 2 || o != 17 {
		t.Errorf("srcOf = %d, %d, %v; want 2, 17, true", p, o, ok)
	}
}

// TestRecordBuilderWritesProvenance: every built record carries the
// provenance of its offset and the topic it is addressed to, after the
// input record's own headers.
func TestRecordBuilderWritesProvenance(t *testing.T) {
	pv := newProvenance([]byte("k"), "g", "in", 1)
	var b recordBuilder
	b.reset(1, pv)
	for i := range 50 {
		in := kafka.Message{Offset: int64(100 + i), Key: []byte(fmt.Sprint(i)),
			Headers: []kafka.Header{{Key: HeaderProvenance, Value: []byte("1 upstream stage's")}}}
		topic := []string{"out", "dups", "dlq"}[i%3]
		b.add(topic, &in, "")
	}
	for i := range b.recs {
		m := b.message(i)
		v, _ := lastHeader(m.Headers, HeaderProvenance)
		if got, _ := pv.verify(v, 1, int64(100+i), m.Topic); got != provOurs {
			t.Errorf("record %d: verdict %d for %q", i, got, v)
		}
		if string(m.Headers[0].Value) != "1 upstream stage's" {
			t.Errorf("record %d: the input's own header changed: %q", i, m.Headers[0].Value)
		}
	}
}

func BenchmarkProvenance(b *testing.B) {
	pv := newProvenance(bytes.Repeat([]byte{1}, 32), "orders-dedup", "orders", 3)
	var dst []byte
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		dst = pv.appendValue(dst[:0], int64(i), "orders-unique")
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
				_, so, _ := srcOf(m.Headers)
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
		scanFrom: map[topicPartition]int64{out: 10, dlq: 5}, scanTo: map[topicPartition]int64{out: 50, dlq: 5},
		legacyBefore: map[topicPartition]int64{out: 50, dlq: 5},
		next:         100, resume: 100, skip: newSkipSet(100, 200)}
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
