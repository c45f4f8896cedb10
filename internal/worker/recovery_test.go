package worker

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// TestCrashRecoveryExact kills a worker (no final commit, no final
// checkpoint) right after an acknowledged output write, in three orders of
// checkpoint and commit progress; the next worker must forward nothing twice
// and lose nothing.
func TestCrashRecoveryExact(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name               string
		commit, checkpoint time.Duration
	}{
		{"nothing committed nor checkpointed", time.Hour, time.Hour},
		{"checkpoint ahead of commit", time.Hour, 30 * time.Millisecond},
		{"commit ahead of checkpoint", 20 * time.Millisecond, time.Hour},
		{"both progressing", 20 * time.Millisecond, 50 * time.Millisecond},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			brokers := newCluster(t, 2)
			evs := genEvents(3000, 2, 0.3, int64(10+i), base)
			produce(t, brokers, evs)
			store := newMemStore()
			cfg := testConfig(brokers)
			cfg.BatchSize = 40
			cfg.CommitInterval, cfg.CheckpointInterval = tc.commit, tc.checkpoint
			cfg.MaxCheckpointStaleness = 2 * time.Hour
			cfg.Owner = "crashing"
			var batches atomic.Int64
			crash := make(chan struct{})
			a := startWorker(t, cfg, store, func(w *Worker) {
				w.hooks.AfterWrite = func(int, int64) {
					if batches.Add(1) == 30 {
						// kill -9 right after an acknowledged write, before its commit.
						w.hooks.Halted.Store(true)
						close(crash)
					}
				}
			})
			go func() { <-crash; a.cancel() }()
			select {
			case <-a.done:
			case <-time.After(60 * time.Second):
				t.Fatal("crashing worker did not stop")
			}
			a.done <- nil // let cleanup's stop return
			written := a.metricSum(t, "bloomgate_records_consumed_total")

			cfg = testConfig(brokers)
			cfg.Owner = "successor"
			b := startWorker(t, cfg, store, nil)
			perPartition := map[int]int64{}
			for _, e := range evs {
				perPartition[e.Partition]++
			}
			waitFor(t, 60*time.Second, "successor caught up", func() bool {
				s := b.w.Status()
				done := 0
				for _, p := range s.Partitions {
					if p.State == "running" && p.NextOffset == perPartition[p.Partition] {
						done++
					}
				}
				return done == len(perPartition)
			})
			b.stop(t)
			t.Logf("crashed after %v records; successor replayed %v, found %v already written",
				written, b.metricSum(t, "bloomgate_recovery_replayed_records_total"),
				b.metricSum(t, "bloomgate_recovery_already_written_records_total"))
			// The crash follows an acknowledged, uncommitted write: the
			// successor must have found that batch in the output.
			if b.metricSum(t, "bloomgate_recovery_already_written_records_total") == 0 {
				t.Errorf("recovery found no already-written records")
			}
			wantOut, wantDup, _ := expectation(evs, time.Hour)
			checkKeys(t, "output", readTopic(t, brokers, tOut, 2), wantOut)
			checkKeys(t, "duplicates", readTopic(t, brokers, tDup, 2), wantDup)
			b.conservation(t)
		})
	}
}

// TestBadInputPolicies routes unextractable events by policy.
func TestBadInputPolicies(t *testing.T) {
	t.Parallel()
	evs := []event{
		{Key: []byte("k1"), Value: "v0"},
		{Key: nil, Value: "v1"},
		{Key: []byte("k2"), Value: "v2"},
		{Key: []byte{}, Value: "v3"},
		{Key: []byte("k1"), Value: "v4"},
		{Key: []byte("k3"), Value: "malformed"},
		{Key: []byte("k4"), Value: "v6"},
	}
	for i := range evs {
		evs[i].TS = base.Add(time.Duration(i) * time.Second)
	}
	cases := []struct {
		policy     MissingKeyPolicy
		out, dlq   string
		dlqReasons string
		dropped    float64
		wantErr    bool
	}{
		{policy: MissingKeyDeadLetter, out: "v0 v2 v6", dlq: "v1 v3 malformed", dlqReasons: "null_key empty malformed_json"}, // a null and an empty key stay apart
		{policy: MissingKeyForward, out: "v0 v1 v2 v3 malformed v6"},
		{policy: MissingKeyDrop, out: "v0 v2 v6", dropped: 3},
		{policy: MissingKeyFail, out: "v0", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(string(tc.policy), func(t *testing.T) {
			t.Parallel()
			brokers := newCluster(t, 1)
			produce(t, brokers, evs)
			cfg := testConfig(brokers)
			cfg.OnMissingKey = tc.policy
			rw := startWorker(t, cfg, newMemStore(), nil)
			var runErr error
			if tc.wantErr {
				select {
				case runErr = <-rw.done:
					rw.done <- nil
				case <-time.After(60 * time.Second):
					t.Fatal("worker did not stop on a bad event with on-missing-key=fail")
				}
				if runErr == nil || !strings.Contains(runErr.Error(), "offset 1") {
					t.Errorf("Run error = %v, want one naming offset 1", runErr)
				}
			} else {
				waitFor(t, 60*time.Second, "events consumed", func() bool { return rw.consumed() == uint64(len(evs)) })
				if err := rw.stop(t); err != nil {
					t.Fatalf("Run: %v", err)
				}
			}
			if got := values(readTopic(t, brokers, tOut, 1)[0]); got != tc.out {
				t.Errorf("output %q, want %q", got, tc.out)
			}
			dlq := readTopic(t, brokers, tDLQ, 1)[0]
			if got := values(dlq); got != tc.dlq {
				t.Errorf("dead-letter %q, want %q", got, tc.dlq)
			}
			var reasons []string
			for _, m := range dlq {
				reasons = append(reasons, headerValue(m.Headers, HeaderError))
			}
			if got := strings.Join(reasons, " "); got != tc.dlqReasons {
				t.Errorf("dead-letter reasons %q, want %q", got, tc.dlqReasons)
			}
			if d := rw.metricSum(t, "bloomgate_records_dropped_total"); d != tc.dropped {
				t.Errorf("dropped %v, want %v", d, tc.dropped)
			}
			rw.conservation(t)
		})
	}
}

var _ = errors.Is
var _ = context.Background

// slowExtractor makes replays long enough to rebalance in the middle.
type slowExtractor struct {
	keyExtractor
	slow *atomic.Bool
}

func (s slowExtractor) Extract(dst []byte, key, value []byte, hs []kafka.Header) ([]byte, error) {
	if s.slow.Load() {
		time.Sleep(100 * time.Microsecond)
	}
	return s.keyExtractor.Extract(dst, key, value, hs)
}

// TestRebalanceDuringReplay: a partition revoked while it replays commits
// nothing (its final checkpoint keeps the replay's progress); whoever gets
// it next recovers exactly.
func TestRebalanceDuringReplay(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 2)
	evs := genEvents(4000, 2, 0.3, 71, base)
	produce(t, brokers, evs[:3000])
	store := newMemStore()
	cfg := testConfig(brokers)
	cfg.CheckpointInterval = time.Hour // nothing checkpointed: the successor replays everything committed
	cfg.CommitInterval = 20 * time.Millisecond
	cfg.Owner = "first"
	crash := make(chan struct{})
	var once sync.Once
	first := startWorker(t, cfg, store, func(w *Worker) {
		w.hooks.AfterWrite = func(p int, next int64) {
			if ps := w.Status().Partitions; len(ps) == 2 && ps[0].NextOffset+ps[1].NextOffset == 3000 {
				once.Do(func() { w.hooks.Halted.Store(true); close(crash) })
			}
		}
	})
	go func() { <-crash; first.cancel() }()
	waitFor(t, 60*time.Second, "first worker crashed after everything", func() bool {
		select {
		case <-crash:
			return true
		default:
			return false
		}
	})
	<-first.done
	first.done <- nil // Run returned: its committer is closed, nothing lands later

	var slow atomic.Bool
	slow.Store(true)
	cfg.Owner = "replayer"
	a := startWorkerWith(t, cfg, store, slowExtractor{slow: &slow}, nil)
	waitFor(t, 60*time.Second, "replay under way", func() bool {
		for _, p := range a.w.Status().Partitions {
			if p.State == "replaying" {
				return true
			}
		}
		return false
	})
	cfg.Owner = "joiner"
	b := startWorkerWith(t, cfg, store, slowExtractor{slow: &slow}, nil)
	waitFor(t, 60*time.Second, "partitions split", func() bool {
		return len(a.w.Status().Assigned) == 1 && len(b.w.Status().Assigned) == 1
	})
	slow.Store(false)
	produce(t, brokers, evs[3000:])
	per := map[int]int64{}
	for _, e := range evs {
		per[e.Partition]++
	}
	waitFor(t, 60*time.Second, "everything processed", func() bool {
		done := 0
		for _, rw := range []*runningWorker{a, b} {
			for _, p := range rw.w.Status().Partitions {
				if p.State == "running" && p.NextOffset == per[p.Partition] {
					done++
				}
			}
		}
		return done == 2
	})
	a.stop(t)
	b.stop(t)
	wantOut, wantDup, _ := expectation(evs, time.Hour)
	checkKeys(t, "output", readTopic(t, brokers, tOut, 2), wantOut)
	checkKeys(t, "duplicates", readTopic(t, brokers, tDup, 2), wantDup)
}

// TestRecoveryIgnoresOffsetsBeyondInput: records on the output naming input
// offsets at or beyond the input's high-water mark (a garbled header, an
// input recreated since) are not in the skip set: the input record that
// later gets such an offset is forwarded, and a huge offset allocates
// nothing.
func TestRecoveryIgnoresOffsetsBeyondInput(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1)
	evs := genEvents(30, 1, 0, 5, base)
	produce(t, brokers, evs[:20])
	ow := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: tOut, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer ow.Close()
	var injected []kafka.Message
	for _, so := range []string{"25", "4611686018427387904"} {
		injected = append(injected, kafka.Message{Key: []byte("injected"), Value: []byte(so), Headers: []kafka.Header{
			{Key: HeaderSrcPartition, Value: []byte("0")}, {Key: HeaderSrcOffset, Value: []byte(so)}}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ow.WriteMessages(ctx, injected...); err != nil {
		t.Fatalf("writing to %s: %v", tOut, err)
	}

	rw := startWorker(t, testConfig(brokers), newMemStore(), nil)
	waitFor(t, 60*time.Second, "first 20 consumed", func() bool { return rw.consumed() == 20 })
	produce(t, brokers, evs[20:])
	waitFor(t, 60*time.Second, "all consumed", func() bool { return rw.consumed() == 30 })
	rw.stop(t)
	if n := rw.metricSum(t, "bloomgate_recovery_already_written_records_total"); n != 0 {
		t.Errorf("recovery found %v already-written records, want 0", n)
	}
	got := readTopic(t, brokers, tOut, 1)
	if len(got[0]) < len(injected) || string(got[0][0].Key) != "injected" || string(got[0][1].Key) != "injected" {
		t.Fatalf("output does not start with the injected records")
	}
	got[0] = got[0][len(injected):]
	wantOut, _, _ := expectation(evs, time.Hour)
	checkKeys(t, "output", got, wantOut)
}

// TestCrashDuringReplay: a replay writes periodic checkpoints below the
// resume offset; a worker killed in the middle of such a replay, with
// records written but not committed by the worker before it, is followed
// by one that resumes from the replay's checkpoint and still finds every
// written record (its checkpoints keep the recovery scan's start).
func TestCrashDuringReplay(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 2)
	evs := genEvents(4000, 2, 0.3, 81, base)
	produce(t, brokers, evs[:3000])
	store := newMemStore()
	cfg := testConfig(brokers)
	cfg.CheckpointInterval = time.Hour // the first worker never checkpoints
	cfg.CommitInterval = 20 * time.Millisecond
	cfg.BatchSize = 50
	cfg.Owner = "first"
	crash := make(chan struct{})
	var once sync.Once
	var batches atomic.Int64
	first := startWorker(t, cfg, store, func(w *Worker) {
		w.hooks.AfterWrite = func(int, int64) { batches.Add(1) }
	})
	// Crash after 2,500 records were written (the last ones, within the
	// commit interval, not yet committed) and once both partitions have a
	// committed offset, so that both replay: the commits, every 20 ms, may
	// lag the writes on a fast machine.
	waitFor(t, 30*time.Second, "50 batches written and an offset committed on both partitions", func() bool {
		if batches.Load() < 50 {
			return false
		}
		parts := first.w.Status().Partitions
		for _, ps := range parts {
			if ps.Committed <= 0 {
				return false
			}
		}
		return len(parts) == 2
	})
	once.Do(func() { first.w.hooks.Halted.Store(true); close(crash) })
	<-crash
	first.cancel()
	<-first.done
	first.done <- nil

	var slow atomic.Bool
	slow.Store(true)
	cfg.CheckpointInterval = 50 * time.Millisecond
	cfg.Owner = "replayer"
	a := startWorkerWith(t, cfg, store, slowExtractor{slow: &slow}, nil)
	var cps [2]Checkpoint
	waitFor(t, 60*time.Second, "checkpoints in the middle of both replays", func() bool {
		for p := range 2 {
			cp, ok := store.latest(tIn, p)
			if !ok || cp.InputOffset <= 0 {
				return false
			}
			cps[p] = cp
		}
		for _, ps := range a.w.Status().Partitions {
			if ps.State != "replaying" {
				return false
			}
		}
		return true
	})
	a.w.hooks.Halted.Store(true)
	a.cancel()
	<-a.done
	a.done <- nil
	slow.Store(false)

	produce(t, brokers, evs[3000:])
	cfg.Owner = "last"
	b := startWorker(t, cfg, store, nil)
	per := map[int]int64{}
	for _, e := range evs {
		per[e.Partition]++
	}
	caughtUp(t, b, per)
	b.stop(t)
	wantOut, wantDup, _ := expectation(evs, time.Hour)
	checkKeys(t, "output", readTopic(t, brokers, tOut, 2), wantOut)
	checkKeys(t, "duplicates", readTopic(t, brokers, tDup, 2), wantDup)
	b.conservation(t)
	t.Logf("replay checkpoints at input offsets %d and %d", cps[0].InputOffset, cps[1].InputOffset)
}

// TestAcknowledged: A is the largest of the group's committed offset, what
// this process committed and where an earlier session of the assignment
// got to; -1 when none of them is known.
func TestAcknowledged(t *testing.T) {
	cases := []struct {
		name            string
		committed, last int64
		haveCommitted   bool
		next            int64
		want            int64
	}{
		{"nothing known", -1, 0, false, -1, -1},
		{"group's offset", 40, 0, false, -1, 40},
		{"this process committed further", 40, 55, true, -1, 55},
		{"this process's older commit", 40, 30, true, -1, 40},
		{"an earlier session got further", 40, 55, true, 70, 70},
		{"an earlier session got less far", 40, 0, false, 10, 40},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pp := &partitionProc{next: tc.next}
			pos := inputPositions{committed: tc.committed, lastCommitted: tc.last, haveCommitted: tc.haveCommitted}
			if got := pp.acknowledged(pos); got != tc.want {
				t.Errorf("A = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestBoundReplay: max-replay moves C up to R-MaxReplay, and the replay
// seeds when this assignment began a seeding or a checkpoint says an
// earlier process did and [C, R) lies before its start offset.
func TestBoundReplay(t *testing.T) {
	cases := []struct {
		name               string
		maxReplay          int64
		seeded             int64 // pp.seeded
		seeding            bool  // pp.seeding
		inputOffset, until int64 // the restored checkpoint's offset and SeedingUntil
		c, resume          int64
		wantC              int64
		wantSeeding        bool
	}{
		{"unbounded", 0, -1, false, 100, 0, 100, 900, 100, false},
		{"within the bound", 1000, -1, false, 100, 0, 100, 900, 100, false},
		{"bounded", 500, -1, false, 100, 0, 100, 900, 400, false},
		{"seeding begun by this assignment", 0, 50, true, -1, 0, 50, 900, 50, true},
		{"seeding resumed from a checkpoint", 0, -1, false, 100, 900, 100, 900, 100, true},
		{"checkpoint's seeding ended before R", 0, -1, false, 100, 800, 100, 900, 100, false},
		{"nothing to replay", 0, -1, false, 900, 900, 900, 900, 900, false},
		{"no checkpoint", 0, -1, false, -1, 900, 100, 900, 100, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pp := &partitionProc{w: &Worker{cfg: Config{MaxReplay: tc.maxReplay}}, log: slog.New(slog.DiscardHandler),
				seeded: tc.seeded, seeding: tc.seeding}
			pl := &recoveryPlan{restored: &Restored{InputOffset: tc.inputOffset, SeedingUntil: tc.until}, c: tc.c, resume: tc.resume}
			pp.boundReplay(pl)
			if pl.c != tc.wantC || pl.resume != tc.resume || pl.seeding != tc.wantSeeding {
				t.Errorf("C, R, seeding = %d, %d, %v; want %d, %d, %v", pl.c, pl.resume, pl.seeding, tc.wantC, tc.resume, tc.wantSeeding)
			}
			if pp.seeding != tc.seeding {
				t.Errorf("boundReplay changed pp.seeding to %v: only applyPlan may", pp.seeding)
			}
		})
	}
}

// TestLegacyBounds: with a checkpoint of a build from before provenance
// headers, records without one may be this memory's up to where the scan
// ends; otherwise only below the bounds the checkpoint carries.
func TestLegacyBounds(t *testing.T) {
	out, dlq := topicPartition{tOut, 0}, topicPartition{tDLQ, 0}
	targets := []topicPartition{out, dlq}
	to := map[topicPartition]int64{out: 70, dlq: 9}
	got := legacyBounds(targets, &Restored{LegacyProvenance: true}, to)
	if len(got) != 2 || got[out] != 70 || got[dlq] != 9 {
		t.Errorf("legacy checkpoint: %v, want the scan's ends", got)
	}
	got = legacyBounds(targets, &Restored{LegacyBefore: map[string]map[int]int64{tOut: {0: 30}}}, to)
	if len(got) != 1 || got[out] != 30 {
		t.Errorf("checkpoint with LegacyBefore: %v, want only %s/0 below 30", got, tOut)
	}
	if got = legacyBounds(targets, &Restored{}, to); len(got) != 0 {
		t.Errorf("checkpoint without legacy records: %v, want none", got)
	}
}
