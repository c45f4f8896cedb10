package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func admin(t *testing.T, brokers []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

func adminCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// recreateInput deletes the input topic and creates it again, empty.
func recreateInput(t *testing.T, brokers []string, partitions int32) {
	t.Helper()
	adm := admin(t, brokers)
	if _, err := adm.DeleteTopics(adminCtx(t), tIn); err != nil {
		t.Fatalf("deleting %s: %v", tIn, err)
	}
	waitFor(t, 20*time.Second, "the input re-created", func() bool {
		r, err := adm.CreateTopic(adminCtx(t), partitions, 1, nil, tIn)
		return err == nil && r.Err == nil
	})
}

// repeatsAndNew returns n events stamped after evs: every fourth repeats a
// key of evs (a duplicate inside the window), the others are new keys.
func repeatsAndNew(evs []event, n int, seed int64) []event {
	later := base.Add(time.Hour / 2)
	out := genEvents(n, 1, 0.1, seed, later)
	for i := range out {
		out[i].Key = append([]byte("new-"), out[i].Key...)
		if i%4 == 0 {
			out[i].Key = evs[(i*7)%len(evs)].Key
		}
	}
	return out
}

// TestInputRecreated: the input topic is deleted and re-created while the
// worker is stopped, with fewer records than the committed offset (the
// README's broker restarted: 0 of 100,000 consumed before) or more (the
// memory's offsets then look valid; only the checkpoint's input mark tells
// the logs apart). Every record of the new log is processed with the
// memory kept: new keys forwarded once, repeats of remembered keys caught.
func TestInputRecreated(t *testing.T) {
	for _, c := range []struct {
		name string
		n    int
	}{{"shorter", 300}, {"longer", 1500}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			brokers := newCluster(t, 1)
			dir := t.TempDir()
			first := genEvents(1000, 1, 0.1, 61, base)
			produce(t, brokers, first)
			a := startWorkerWith(t, realConfig(brokers), realState(t, dir), realExtractor(t), nil)
			waitFor(t, 60*time.Second, "the first log consumed", func() bool { return a.consumed() == 1000 })
			if err := a.stop(t); err != nil {
				t.Fatalf("Run: %v", err)
			}
			recreateInput(t, brokers, 1)
			second := repeatsAndNew(first, c.n, 62)
			produce(t, brokers, second)

			b := startWorkerWith(t, realConfig(brokers), realState(t, dir), realExtractor(t), nil)
			waitFor(t, 60*time.Second, "the new log consumed", func() bool { return b.consumed() == uint64(c.n) })
			if err := b.stop(t); err != nil {
				t.Fatalf("Run: %v", err)
			}
			want, _, _ := expectation(append(append([]event(nil), first...), second...), time.Hour)
			checkKeys(t, "output", readTopic(t, brokers, tOut, 1), want)
			if n := b.metricSum(t, "bloomgate_input_resets_total"); n != 1 {
				t.Errorf("bloomgate_input_resets_total = %v, want 1", n)
			}
			// Restarted again: the new position was stored, no second reset.
			rw := startWorkerWith(t, realConfig(brokers), realState(t, dir), realExtractor(t), nil)
			caughtUp(t, rw, map[int]int64{0: int64(c.n)})
			if n := rw.metricSum(t, "bloomgate_input_resets_total"); n != 0 {
				t.Errorf("after the reset was stored: bloomgate_input_resets_total = %v, want 0", n)
			}
			rw.stop(t)
		})
	}
}

// TestInputRetentionLoss: retention deletes records the group has not
// processed (the committed offset falls below the log start): the worker
// goes on from the log start and reports how many offsets were lost
// upstream.
func TestInputRetentionLoss(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1)
	dir := t.TempDir()
	evs := genEvents(1000, 1, 0, 63, base)
	produce(t, brokers, evs[:500])
	a := startWorkerWith(t, realConfig(brokers), realState(t, dir), realExtractor(t), nil)
	waitFor(t, 60*time.Second, "500 consumed", func() bool { return a.consumed() == 500 })
	if err := a.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	produce(t, brokers, evs[500:])
	adm := admin(t, brokers)
	var to kadm.Offsets
	to.Add(kadm.Offset{Topic: tIn, Partition: 0, At: 800})
	if _, err := adm.DeleteRecords(adminCtx(t), to); err != nil {
		t.Fatalf("deleting records: %v", err)
	}
	b := startWorkerWith(t, realConfig(brokers), realState(t, dir), realExtractor(t), nil)
	caughtUp(t, b, map[int]int64{0: 1000})
	if err := b.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := b.metricSum(t, "bloomgate_input_offsets_lost_total"); n != 300 {
		t.Errorf("bloomgate_input_offsets_lost_total = %v, want 300", n)
	}
	want, _, _ := expectation(append(append([]event(nil), evs[:500]...), evs[800:]...), time.Hour)
	checkKeys(t, "output", readTopic(t, brokers, tOut, 1), want)
}

// TestInputTruncated: the committed offset lies beyond the log's end but
// the record the checkpoint marked is still there (an unclean leader
// election cut the log short, and new records took the lost offsets
// before the worker came back): every new record is processed (none
// skipped as if the old offsets still held the old records), the log is
// not read again from its start, and the truncation is reported.
func TestInputTruncated(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1)
	dir := t.TempDir()
	evs := genEvents(1200, 1, 0, 64, base)
	produce(t, brokers, evs[:1000])
	a := startWorkerWith(t, realConfig(brokers), realState(t, dir), realExtractor(t), nil)
	waitFor(t, 60*time.Second, "1000 consumed", func() bool { return a.consumed() == 1000 })
	if err := a.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// The group had committed 1300 of a log that now ends at 1000; new
	// records take offsets 1000..1199.
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: tIn, Partition: 0, At: 1300, LeaderEpoch: -1})
	if r, err := admin(t, brokers).CommitOffsets(adminCtx(t), "g", offs); err != nil || r.Error() != nil {
		t.Fatalf("committing 1300: %v %v", err, r.Error())
	}
	produce(t, brokers, evs[1000:])
	b := startWorkerWith(t, realConfig(brokers), realState(t, dir), realExtractor(t), nil)
	caughtUp(t, b, map[int]int64{0: 1200})
	if err := b.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := b.metricSum(t, "bloomgate_records_consumed_total"); n != 200 {
		t.Errorf("consumed %v records after the truncation, want the 200 new ones", n)
	}
	if n := b.metricSum(t, "bloomgate_input_resets_total"); n != 1 {
		t.Errorf("bloomgate_input_resets_total = %v, want 1", n)
	}
	want, _, _ := expectation(evs, time.Hour)
	checkKeys(t, "output", readTopic(t, brokers, tOut, 1), want)
}
