package worker

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// TestStartFrom: a new group put in front of an input that already holds
// records forwards only what its start position says, remembers what the
// seed position says, and keeps both across a crash and a restart while new
// records arrive.
func TestStartFrom(t *testing.T) {
	t.Parallel()
	const parts = 2
	old := genEvents(1200, parts, 0.2, 41, base)
	later := genEvents(800, parts, 0.2, 42, base.Add(10*time.Second))
	// Half of the later events repeat keys of the old ones.
	for i := 0; i < len(later); i += 2 {
		o := old[(i*7)%len(old)]
		later[i].Key, later[i].Partition = o.Key, o.Partition
	}
	startAt := old[700].TS
	cases := []struct {
		name  string
		start Position
		seed  *Position
		// seen are the events the filter must have remembered (not
		// forwarded) before the first later event.
		seen func() []event
		// forwarded are the old events forwarded by the first worker.
		forwarded func() []event
	}{
		{"latest, no seed", Position{Latest: true}, nil,
			func() []event { return nil }, func() []event { return nil }},
		{"latest, seeded from earliest", Position{Latest: true}, &Position{},
			func() []event { return old }, func() []event { return nil }},
		{"latest, seeded from a time", Position{Latest: true}, &Position{At: startAt},
			func() []event { return since(old, startAt) }, func() []event { return nil }},
		{"from a time, no seed", Position{At: startAt}, nil,
			func() []event { return nil }, func() []event { return since(old, startAt) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			brokers := newCluster(t, parts)
			produce(t, brokers, old)
			store := newMemStore()
			cfg := testConfig(brokers)
			cfg.StartFrom, cfg.SeedFrom = tc.start, tc.seed
			cfg.Owner = "first"
			a := startWorker(t, cfg, store, nil)
			perPartition := map[int]int64{}
			for _, e := range old {
				perPartition[e.Partition]++
			}
			caughtUp(t, a, perPartition)
			// kill -9 once everything was read: the restart must neither
			// forward the old records nor forget the seeded keys.
			a.w.hooks.Halted.Store(true)
			a.cancel()
			<-a.done
			a.done <- nil

			produce(t, brokers, later)
			for _, e := range later {
				perPartition[e.Partition]++
			}
			cfg.Owner = "second"
			b := startWorker(t, cfg, store, nil)
			caughtUp(t, b, perPartition)
			b.stop(t)

			// Expected: the events the workers processed (seeded, forwarded
			// old ones, later ones), minus the seeded ones' own entries.
			// Seeded events come first in every partition (seed < start),
			// so they account for the first entries of the expectation.
			history := append(append([]event(nil), tc.seen()...), tc.forwarded()...)
			full, fullDup, _ := expectation(append(history, later...), time.Hour)
			wantOut, wantDup := map[int][]string{}, map[int][]string{}
			seenOut, seenDup, _ := expectation(tc.seen(), time.Hour)
			for p := range parts {
				// forwarded old events appear on the output; seeded ones do not.
				wantOut[p] = append(wantOut[p], full[p][len(seenOut[p]):]...)
				wantDup[p] = append(wantDup[p], fullDup[p][len(seenDup[p]):]...)
			}
			checkKeys(t, "output", readTopic(t, brokers, tOut, parts), wantOut)
			checkKeys(t, "duplicates", readTopic(t, brokers, tDup, parts), wantDup)
			b.conservation(t)
		})
	}
}

// since returns the events with a timestamp at or after ts.
func since(evs []event, ts time.Time) []event {
	var out []event
	for _, e := range evs {
		if !e.TS.Before(ts) {
			out = append(out, e)
		}
	}
	return out
}

// caughtUp waits until every partition of want runs at its offset.
func caughtUp(t *testing.T, rw *runningWorker, want map[int]int64) {
	t.Helper()
	waitFor(t, 60*time.Second, "worker caught up", func() bool {
		done := 0
		for _, p := range rw.w.Status().Partitions {
			if p.State == "running" && p.NextOffset == want[p.Partition] {
				done++
			}
		}
		return done == len(want)
	})
}

// TestSeedingResumesFromCheckpoint: a seeding replay writes periodic
// checkpoints, shows its progress, and a worker killed in the middle of it
// resumes from the last checkpoint instead of seeding again from the start;
// the seeded keys are remembered either way.
func TestSeedingResumesFromCheckpoint(t *testing.T) {
	t.Parallel()
	old := genEvents(6000, 1, 0, 51, base)
	later := genEvents(400, 1, 0, 52, base.Add(time.Minute))
	for i := 0; i < len(later); i += 2 { // half repeat seeded keys
		later[i].Key = old[(i*13)%len(old)].Key
	}
	brokers := newCluster(t, 1)
	produce(t, brokers, old)
	store := newMemStore()
	cfg := testConfig(brokers)
	cfg.StartFrom, cfg.SeedFrom = Position{Latest: true}, &Position{}
	cfg.Owner = "first"
	slow := func(w *Worker) {
		w.hooks.AfterWrite = func(int, int64) { time.Sleep(25 * time.Millisecond) }
	}
	a := startWorker(t, cfg, store, slow)
	waitFor(t, 60*time.Second, "the status showing the seeding's progress", func() bool {
		for _, p := range a.w.Status().Partitions {
			if pr := p.Progress; pr != nil && pr.Phase == phaseSeeding && pr.Done > 0 && pr.To == int64(len(old)) && pr.Keys > 0 {
				return true
			}
		}
		return false
	})
	waitFor(t, 60*time.Second, "a checkpoint in the middle of the seeding", func() bool {
		cp, ok := store.latest(tIn, 0)
		return ok && cp.InputOffset > 0 && cp.InputOffset < int64(len(old))
	})
	a.w.hooks.Halted.Store(true) // kill -9
	a.cancel()
	<-a.done
	a.done <- nil

	cp, _ := store.latest(tIn, 0)
	if cp.InputOffset >= int64(len(old)) {
		t.Fatalf("seeding finished before the kill (checkpoint at %d); slow it down", cp.InputOffset)
	}
	if cp.SeedingUntil != int64(len(old)) {
		t.Errorf("the checkpoint in the middle of the seeding has SeedingUntil %d, want the start offset %d", cp.SeedingUntil, len(old))
	}
	produce(t, brokers, later)
	cfg.Owner = "second"
	b := startWorker(t, cfg, store, slow)
	// The restart resumes a seeding, not a replay of forwarded input: its
	// state and phase say so, and of its lag only records after the start
	// wait to be forwarded.
	waitFor(t, 60*time.Second, "the restart's status showing the resumed seeding", func() bool {
		for _, p := range b.w.Status().Partitions {
			if pr := p.Progress; pr != nil && p.State == phaseSeeding && pr.Phase == phaseSeeding && pr.From == cp.InputOffset &&
				pr.To == int64(len(old)) && p.Lag > int64(len(later)) && p.FillLag > 0 && p.ForwardLag() <= int64(len(later)) {
				return true
			}
		}
		return false
	})
	caughtUp(t, b, map[int]int64{0: int64(len(old) + len(later))})
	if got, want := b.metricSum(t, "bloomgate_recovery_replayed_records_total"), float64(int64(len(old))-cp.InputOffset); got != want {
		t.Errorf("the restart replayed %v records, want %v (from the checkpoint at %d to the start at %d)", got, want, cp.InputOffset, len(old))
	}
	b.stop(t)
	full, fullDup, _ := expectation(append(append([]event(nil), old...), later...), time.Hour)
	seenOut, seenDup, _ := expectation(old, time.Hour)
	checkKeys(t, "output", readTopic(t, brokers, tOut, 1), map[int][]string{0: full[0][len(seenOut[0]):]})
	checkKeys(t, "duplicates", readTopic(t, brokers, tDup, 1), map[int][]string{0: fullDup[0][len(seenDup[0]):]})
}

// headerExtractor takes the key from a header: a seed topic whose records
// carry the key elsewhere than the input's.
type headerExtractor struct {
	name string
	slow *atomic.Bool
}

func (h headerExtractor) Extract(dst []byte, _, _ []byte, hs []kafka.Header) ([]byte, error) {
	if h.slow != nil && h.slow.Load() {
		time.Sleep(200 * time.Microsecond)
	}
	for _, x := range hs {
		if x.Key == h.name && len(x.Value) > 0 {
			return append(dst, x.Value...), nil
		}
	}
	return nil, &KeyError{Reason: "missing"}
}

// TestSeedTopic: a new group seeds its memory from another topic (the
// deduplicated topic an earlier system wrote, its key in a header) before
// it forwards anything: keys found there are duplicates when the input
// repeats them, records without a key are skipped, and a worker killed in
// the middle of the seeding read resumes it from its checkpoint.
func TestSeedTopic(t *testing.T) {
	t.Parallel()
	const parts, seedTopic = 2, "old-unique"
	brokers := newCluster(t, parts)
	cl := &kafka.Client{Addr: kafka.TCP(brokers...)}
	if _, err := cl.CreateTopics(context.Background(), &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{
		{Topic: seedTopic, NumPartitions: parts, ReplicationFactor: 1}}}); err != nil {
		t.Fatal(err)
	}
	old := genEvents(4000, parts, 0, 61, base)
	sw := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: seedTopic, Balancer: partitionBalancer{},
		RequiredAcks: kafka.RequireAll, BatchSize: 1000, BatchTimeout: time.Millisecond}
	msgs := make([]kafka.Message, 0, len(old)+2)
	for _, e := range old {
		msgs = append(msgs, kafka.Message{Value: []byte(e.Value), Time: e.TS, Headers: []kafka.Header{
			{Key: "p", Value: []byte(strconv.Itoa(e.Partition))}, {Key: "id", Value: e.Key}}})
	}
	msgs = append(msgs, kafka.Message{Value: []byte("no key"), Headers: []kafka.Header{{Key: "p", Value: []byte("0")}}})
	if err := sw.WriteMessages(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	sw.Close()
	later := genEvents(1000, parts, 0.1, 62, base.Add(time.Minute))
	for i := 0; i < len(later); i += 2 { // half repeat keys of the seed topic, in their partition
		o := old[(i*17)%len(old)]
		later[i].Key, later[i].Partition = o.Key, o.Partition
	}
	produce(t, brokers, later)

	store := newMemStore()
	cfg := testConfig(brokers)
	cfg.SeedTopic = seedTopic
	cfg.CheckpointInterval = 50 * time.Millisecond
	cfg.Owner = "first"
	var slow atomic.Bool
	slow.Store(true)
	seeder := func(w *Worker) { w.deps.SeedExtractor = headerExtractor{name: "id", slow: &slow} }
	a := startWorker(t, cfg, store, seeder)
	waitFor(t, 60*time.Second, "a checkpoint in the middle of the seed topic", func() bool {
		for p := range parts {
			cp, ok := store.latest(tIn, p)
			if !ok || cp.Seed == nil || cp.Seed.Next <= 0 || cp.Seed.Next >= cp.Seed.End {
				return false
			}
		}
		for _, p := range a.w.Status().Partitions {
			if p.Progress == nil || p.Progress.Topic != seedTopic {
				return false
			}
		}
		return true
	})
	a.w.hooks.Halted.Store(true) // kill -9
	a.cancel()
	<-a.done
	a.done <- nil
	if n := readTopic(t, brokers, tOut, parts); len(n[0])+len(n[1]) != 0 {
		t.Fatalf("%d records forwarded during the seeding", len(n[0])+len(n[1]))
	}

	slow.Store(false)
	cfg.Owner = "second"
	b := startWorker(t, cfg, store, seeder)
	per := map[int]int64{}
	for _, e := range later {
		per[e.Partition]++
	}
	caughtUp(t, b, per)
	b.stop(t)
	for p := range parts {
		if cp, _ := store.latest(tIn, p); cp.Seed != nil {
			t.Errorf("partition %d: the last checkpoint still records an unfinished seed read %+v", p, *cp.Seed)
		}
	}
	// Expected: the input's first occurrences, with the seed topic's keys
	// (per partition) already remembered.
	full, fullDup, _ := expectation(append(append([]event(nil), old...), later...), time.Hour)
	seenOut, seenDup, _ := expectation(old, time.Hour)
	wantOut, wantDup := map[int][]string{}, map[int][]string{}
	for p := range parts {
		wantOut[p] = full[p][len(seenOut[p]):]
		wantDup[p] = fullDup[p][len(seenDup[p]):]
	}
	checkKeys(t, "output", readTopic(t, brokers, tOut, parts), wantOut)
	checkKeys(t, "duplicates", readTopic(t, brokers, tDup, parts), wantDup)
	b.conservation(t)
}

// TestPositionLogsAsText: a JSON log writes a position as its text
// ("latest"), as the text log does, not as the struct's fields.
func TestPositionLogsAsText(t *testing.T) {
	var b strings.Builder
	log := slog.New(slog.NewJSONHandler(&b, nil))
	seed := &Position{Ago: 72 * time.Hour}
	log.Info("x", "start_from", Position{Latest: true}, "seed_from", seed, "earliest", Position{})
	for _, want := range []string{`"start_from":"latest"`, `"seed_from":"72h0m0s ago"`, `"earliest":"earliest"`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("%s lacks %s", b.String(), want)
		}
	}
}
