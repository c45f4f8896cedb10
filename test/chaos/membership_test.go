package chaos_test

import (
	"context"
	"flag"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// Group membership under failures (docs/chaos.md, "Group membership"):
//
//   - a rolling restart of the three workers as static members
//     (--group-instance-id): the members not being restarted must give up
//     no partition, and each restarted worker must process again within
//     goalRollingStart of its start with the partitions it had. (Apache
//     Kafka lets a static member rejoin without a rebalance unless the
//     group's protocol would change; the embedded broker also rebalances
//     when the member's subscription bytes differ — a restarted member no
//     longer lists the partitions it owned — so the others join new
//     generations, cooperatively, keeping every partition. The figure is
//     reported.);
//   - two of three workers killed at once: the survivor's partitions must
//     keep flowing (the longest gap between output writes of its
//     partitions, measured every 100 ms, goalSurvivorGap).

var flagStatic = flag.Bool("chaos.static", false, "run TestChaos's workers as static members (--group-instance-id chaos-<slot>)")

const (
	// goalRollingStart is the 2 s with room for a loaded machine
	// (process start, topic checks and the checkpoint restore are in it);
	// the figures are reported.
	goalRollingStart = 5 * time.Second
	// goalSurvivorGap is the 1 s with room for a loaded 2-core
	// machine running other test packages at the same time; the figure
	// itself is reported.
	goalSurvivorGap = 3 * time.Second
)

// TestChaosRolling restarts the three static members in turn, twice over,
// while events flow (SIGTERM, then a new process in the same slot).
func TestChaosRolling(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos test: runs processes for about a minute; skipped with -short")
	}
	if *flagOnly != "" {
		t.Skip("-chaos.only runs TestChaos with one failure kind")
	}
	runChaos(t, chaosRun{only: "rolling", kills: 2, duration: 60 * time.Second, events: 60_000, static: true})
}

// procStats are what a worker process said about its membership.
type procStats struct {
	generations int   // "joined generation" lines
	revoked     int   // partitions released on a revoke (not at its own shutdown)
	assigned    []int // partitions of the last generation joined
	recovered   int   // "partition recovered" lines
	stopping    bool  // it logged "worker stopping"
}

// noteMembership reads a worker's log line for the membership figures.
func (c *cluster) noteMembership(p *proc, line string) {
	var kv map[string]string
	switch {
	case strings.Contains(line, `msg="joined generation"`):
		kv = parseLogKV(line)
	case strings.Contains(line, `msg="partition released`),
		strings.Contains(line, `msg="partition recovered"`),
		strings.Contains(line, `msg="worker stopping"`):
	default:
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.procStats == nil {
		c.procStats = map[*proc]*procStats{}
	}
	st := c.procStats[p]
	if st == nil {
		st = &procStats{}
		c.procStats[p] = st
	}
	switch {
	case kv != nil:
		st.generations++
		st.assigned = parsePartitionList(kv["partitions"])
	case strings.Contains(line, `msg="partition released`):
		if !st.stopping {
			st.revoked++
		}
	case strings.Contains(line, `msg="partition recovered"`):
		st.recovered++
	case strings.Contains(line, `msg="worker stopping"`):
		st.stopping = true
	}
}

// parsePartitionList reads "[0 1 2]" (or "[]").
func parsePartitionList(s string) []int {
	var out []int
	for _, f := range strings.Fields(strings.Trim(s, "[]\"")) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

func (c *cluster) statsOf(p *proc) procStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.procStats[p]; st != nil {
		s := *st
		s.assigned = slices.Clone(st.assigned)
		return s
	}
	return procStats{}
}

// rollingStep is one worker restarted in a rolling restart.
type rollingStep struct {
	slot           int
	took           time.Duration // from the new process's start to its partitions recovered (-1: not within the limit)
	same           bool          // it got the partitions it had
	othersRevoked  int           // partitions the other members gave up meanwhile
	othersNewGens  int           // generations the other members joined meanwhile
	had, got       []int
	stoppedCleanly bool
}

// rolling restarts each worker in turn: SIGTERM, then a new process in its
// slot, and waits until it processes again before the next.
func (c *cluster) rolling() {
	for _, sl := range c.slots {
		c.mu.Lock()
		old := sl.cur
		var others []*proc
		for _, o := range c.slots {
			if o != sl && o.cur != nil {
				others = append(others, o.cur)
			}
		}
		c.mu.Unlock()
		if old == nil {
			continue
		}
		had := c.statsOf(old).assigned
		before := map[*proc]procStats{}
		for _, o := range others {
			before[o] = c.statsOf(o)
		}
		old.deliberate.Store(true)
		clean := old.terminate(2 * shutdownTimeout)
		p, started, err := c.startWorker(sl)
		step := rollingStep{slot: sl.id, took: -1, had: had, stoppedCleanly: clean}
		if err != nil {
			c.mu.Lock()
			c.logEvent("rolling: restarting worker%d: %v", sl.id, err)
			c.mu.Unlock()
			continue
		}
		c.mu.Lock()
		c.restarts++
		c.mu.Unlock()
		begun := p.Started()
		select {
		case <-started:
		case <-time.After(30 * time.Second):
		}
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			st := c.statsOf(p)
			if st.generations > 0 && st.recovered >= len(st.assigned) && len(st.assigned) > 0 {
				step.took = time.Since(begun)
				step.got = st.assigned
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		step.same = slices.Equal(step.had, step.got)
		for _, o := range others {
			now := c.statsOf(o)
			step.othersRevoked += now.revoked - before[o].revoked
			step.othersNewGens += now.generations - before[o].generations
		}
		c.mu.Lock()
		c.rollingSteps = append(c.rollingSteps, step)
		c.logEvent("rolling: worker%d processing again %v after its start, partitions %v (had %v); the others gave up %d partitions and joined %d generations",
			sl.id, step.took.Round(time.Millisecond), step.got, step.had, step.othersRevoked, step.othersNewGens)
		c.mu.Unlock()
		c.sleepRand(time.Second, 3*time.Second)
	}
}

// watchSurvivor measures, after two of three workers died, the longest gap
// between writes to the survivor's output partitions, for window.
func (c *cluster) watchSurvivor(survivor *proc, window time.Duration) {
	parts := c.statsOf(survivor).assigned
	if len(parts) == 0 {
		return
	}
	cl := &kafka.Client{Addr: kafka.TCP(c.brokerAddr), Timeout: 2 * time.Second}
	last := map[int]int64{}
	moved := map[int]time.Time{}
	var gap time.Duration
	worst := -1
	end := time.Now().Add(window)
	for time.Now().Before(end) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		reqs := make([]kafka.OffsetRequest, len(parts))
		for i, p := range parts {
			reqs[i] = kafka.LastOffsetOf(p)
		}
		res, err := cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{names.Output: reqs}})
		cancel()
		now := time.Now()
		if err == nil {
			for _, po := range res.Topics[names.Output] {
				if po.Error != nil {
					continue
				}
				if prev, ok := last[po.Partition]; !ok || po.LastOffset > prev {
					if t0, ok := moved[po.Partition]; ok && now.Sub(t0) > gap {
						gap, worst = now.Sub(t0), po.Partition
					}
					last[po.Partition], moved[po.Partition] = po.LastOffset, now
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A partition that did not move at all since its last write.
	for p, t0 := range moved {
		if d := time.Since(t0) - window; d > 0 && d > gap {
			gap, worst = d, p
		}
	}
	c.mu.Lock()
	c.survivorGaps = append(c.survivorGaps, gap)
	c.logEvent("two-of-three: the survivor's partitions %v: longest output gap %v (partition %d)", parts, gap.Round(10*time.Millisecond), worst)
	c.mu.Unlock()
}

// reportMembership logs the membership figures and checks the goals.
func (c *cluster) reportMembership(t *testing.T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.rollingSteps {
		t.Logf("chaos: rolling restart        worker%d: processing again after %v with %v (had %v, clean stop %v); the others gave up %d partitions, joined %d generations",
			s.slot, s.took.Round(time.Millisecond), s.got, s.had, s.stoppedCleanly, s.othersRevoked, s.othersNewGens)
		switch {
		case s.took < 0:
			t.Errorf("rolling restart: worker%d did not process again within 30 s", s.slot)
		case s.took > goalRollingStart:
			t.Errorf("rolling restart: worker%d processed again only %v after its start (goal 2 s, bound %v)", s.slot, s.took.Round(time.Millisecond), goalRollingStart)
		}
		if c.run.static && (s.othersRevoked != 0 || !s.same) {
			t.Errorf("rolling restart of static members: worker%d got %v (had %v); the others gave up %d partitions; want the same partitions and none given up",
				s.slot, s.got, s.had, s.othersRevoked)
		}
	}
	for _, g := range c.survivorGaps {
		t.Logf("chaos: two of three killed    the survivor's longest output gap %v (goal 1 s)", g.Round(10*time.Millisecond))
		if g > goalSurvivorGap {
			t.Errorf("two of three killed: the survivor's partitions stopped for %v (goal 1 s, bound %v)", g.Round(10*time.Millisecond), goalSurvivorGap)
		}
	}
}
