package worker

import (
	"testing"
	"time"
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
		later[i].key, later[i].partition = o.key, o.partition
	}
	startAt := old[700].ts
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
				perPartition[e.partition]++
			}
			caughtUp(t, a, perPartition)
			// kill -9 once everything was read: the restart must neither
			// forward the old records nor forget the seeded keys.
			a.w.halted.Store(true)
			a.cancel()
			<-a.done
			a.done <- nil

			produce(t, brokers, later)
			for _, e := range later {
				perPartition[e.partition]++
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
		if !e.ts.Before(ts) {
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
