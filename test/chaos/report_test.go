package chaos_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"
)

// report prints the figures of the run.
func (c *cluster) report(t *testing.T, seed uint64, ps producerStats, v *verdict, chaosTook, drainTook time.Duration, cleanStops int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t.Logf("chaos: ---- figures (seed %d) ----", seed)
	t.Logf("chaos: events produced        %d generated (%d unique, %d duplicates: %d adjacent, %d far) + %d malformed; %d write retries; %v",
		ps.Events, ps.Unique, ps.Duplicates, ps.Adjacent, ps.Duplicates-ps.Adjacent, ps.Bad, ps.Retries, ps.Elapsed.Round(time.Millisecond))
	t.Logf("chaos: input topic            %d records, %d unique keys, %d repeated, %d malformed", v.Events, v.UniqueKeys, v.DuplicateEvents, v.BadEvents)
	kinds := make([]string, 0, len(c.killsByKind))
	for k, n := range c.killsByKind {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(kinds)
	t.Logf("chaos: kills                  %d worker SIGKILLs (%s); %d worker restarts; %d broker kill+restart", c.kills, strings.Join(kinds, ", "), c.restarts, c.brokerRestarts)
	t.Logf("chaos: timing                 chaos phase %v, drain %v, %d/%d workers stopped cleanly on SIGTERM",
		chaosTook.Round(time.Second), drainTook.Round(100*time.Millisecond), cleanStops, workers)
	var puts int64
	for _, sl := range c.slots {
		puts += sl.puts.Load()
	}
	t.Logf("chaos: checkpoint PUTs        %d (generation objects and manifests, all workers)", puts)
	t.Logf("chaos: written                %d forwarded, %d to duplicates, %d dead-lettered", v.Forwarded, v.DuplicatesWritten, v.DeadLettered)
	t.Logf("chaos: unique lost            %d (of which never processed: %d)", len(v.Lost), len(v.Unprocessed))
	t.Logf("chaos: duplicates forwarded   %d (repeated keys on the output); input records written twice: %d", len(v.DoubleForwarded), len(v.WrittenTwice))
	mode := "filter only"
	if c.run.exact {
		mode = "exact mode"
	}
	t.Logf("chaos: false positives        %d of %d unique keys (%.4f %%; bound %d at fpr %g, %s)",
		len(v.FalsePositives), v.UniqueKeys, 100*float64(len(v.FalsePositives))/float64(max(1, v.UniqueKeys)), v.FPBound, c.run.fpr(), mode)
	if c.run.exact {
		t.Logf("chaos: refuted positives      at least %.0f (false positives of the filters that the exact stores refuted, from the workers' /metrics every 2 s; a killed worker's counts after its last scrape are missing)", c.refutedTotal)
	}
	t.Logf("chaos: misrouted %d, key mismatches %d, orphans %d, keys on the output twice %d",
		len(v.Misrouted), len(v.KeyMismatch), len(v.Orphans), len(v.KeysTwice))
	for _, pc := range v.PerPartition {
		t.Logf("chaos: partition %d           consumed %d = forwarded %d + duplicates %d + dead-lettered %d (%s)",
			pc.Partition, pc.Consumed, pc.Forwarded, pc.Duplicates, pc.DeadLetters,
			map[bool]string{true: "holds", false: "VIOLATED"}[pc.Consumed == pc.Forwarded+pc.Duplicates+pc.DeadLetters])
	}

	// Recovery: every "partition recovered" line, and per restarted worker
	// the time from process start to its first recovered partition.
	var tooks []time.Duration
	var replayed, scanned int64
	first := map[*proc]time.Time{}
	for _, r := range c.recoveries {
		tooks = append(tooks, r.took)
		replayed += r.replayed
		scanned += r.written
		if _, ok := first[r.proc]; !ok {
			first[r.proc] = r.at
		}
	}
	sort.Slice(tooks, func(i, j int) bool { return tooks[i] < tooks[j] })
	if n := len(tooks); n > 0 {
		t.Logf("chaos: partition recoveries   %d: took p50 %v, p95 %v, max %v; %d records replayed, %d found already written by the output scan",
			n, tooks[n/2].Round(time.Millisecond), tooks[n*95/100].Round(time.Millisecond), tooks[n-1].Round(time.Millisecond), replayed, scanned)
	}
	for _, sl := range c.slots {
		for i, p := range sl.history {
			if i == 0 {
				continue
			}
			var parts []string
			var maxTook time.Duration
			for _, r := range c.recoveries {
				if r.proc == p {
					parts = append(parts, r.partition)
					maxTook = max(maxTook, r.took)
				}
			}
			if at, ok := first[p]; ok {
				t.Logf("chaos: restart %-12s first partition recovered %v after start; %d recoveries (partitions %s), longest took %v",
					p.name, at.Sub(p.Started()).Round(10*time.Millisecond), len(parts), strings.Join(parts, ","), maxTook.Round(time.Millisecond))
			} else {
				t.Logf("chaos: restart %-12s recovered no partition (killed before, or got none)", p.name)
			}
		}
	}
	// Recovery per failure kind: from the failure (the last kill of a
	// burst) until every partition that lagged then committed again.
	recKinds := make([]string, 0, len(c.recoveryTimes))
	for k := range c.recoveryTimes {
		recKinds = append(recKinds, k)
	}
	for k := range c.unrecovered {
		if _, ok := c.recoveryTimes[k]; !ok {
			recKinds = append(recKinds, k)
		}
	}
	sort.Strings(recKinds)
	for _, k := range recKinds {
		ds := append([]time.Duration(nil), c.recoveryTimes[k]...)
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		if n := len(ds); n > 0 {
			t.Logf("chaos: recovery %-16s %d: committed again after p50 %v, p95 %v, max %v; %d not within %v",
				k, n, ds[n/2].Round(100*time.Millisecond), ds[(n*95+99)/100-1].Round(100*time.Millisecond), ds[n-1].Round(100*time.Millisecond),
				c.unrecovered[k], recoveryLimit)
		} else {
			t.Logf("chaos: recovery %-16s none within %v (%d failures)", k, recoveryLimit, c.unrecovered[k])
		}
		us := append([]time.Duration(nil), c.caughtUpTimes[k]...)
		sort.Slice(us, func(i, j int) bool { return us[i] < us[j] })
		if n := len(us); n > 0 {
			t.Logf("chaos: caught up %-15s %d: everything produced before the failure committed after p50 %v, p95 %v, max %v",
				k, n, us[n/2].Round(100*time.Millisecond), us[(n*95+99)/100-1].Round(100*time.Millisecond), us[n-1].Round(100*time.Millisecond))
		}
	}
	if n := len(c.burstSpans); n > 0 {
		spans := append([]time.Duration(nil), c.burstSpans...)
		sort.Slice(spans, func(i, j int) bool { return spans[i] < spans[j] })
		t.Logf("chaos: bursts                 %d of %d kills, first to last kill within %v (longest)", n, max(2, *flagBurst), spans[n-1].Round(10*time.Millisecond))
	}
	if len(c.errorLines) > 0 {
		t.Logf("chaos: %d ERROR log lines from workers, first: %s", len(c.errorLines), c.errorLines[0])
	}
}
