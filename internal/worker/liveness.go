package worker

import (
	"context"
	"time"

	"github.com/bloomgate/bloomgate/internal/group"
)

// Group liveness: how long the worker waits for the coordinator, and what it
// does when no generation forms (docs/worker.md, "Group liveness").
//
// kafka-go gives a JoinGroup Timeout + RebalanceTimeout and a SyncGroup
// Timeout + SessionTimeout before it gives up on the connection. A JoinGroup
// that times out makes kafka-go forget its member ID and join as a new
// member, which restarts the rebalance for everyone on kfake (and adds a
// member everywhere). Apache Kafka answers a JoinGroup within the rebalance
// timeout of the rebalance's start, so the worker's deadline for coordinator
// requests is the rebalance timeout: joins wait 2 × rebalance timeout, syncs
// rebalance + session timeout, both beyond what the coordinator takes.

// rebalanceTimeout is the rebalance timeout the group runs with.
func (c Config) rebalanceTimeout() time.Duration {
	_, r, _ := group.Timings(c.SessionTimeout, c.RebalanceTimeout, c.HeartbeatInterval)
	return r
}

// sessionTimeout is the session timeout the group runs with.
func (c Config) sessionTimeout() time.Duration {
	s, _, _ := group.Timings(c.SessionTimeout, c.RebalanceTimeout, c.HeartbeatInterval)
	return s
}

// coordinatorTimeout is kafka-go's ConsumerGroupConfig.Timeout: the deadline
// of heartbeats, commits and offset fetches, and the part of the JoinGroup
// and SyncGroup deadlines beyond the coordinator's own timers.
func (c Config) coordinatorTimeout() time.Duration {
	return max(c.RebalanceTimeout, c.sessionTimeout()+5*time.Second)
}

// groupStallAfter is how long without a generation counts as stalled: a
// healthy rebalance ends within the rebalance timeout (every member rejoined
// or dropped) plus a session timeout (a dead leader's sync).
func (c Config) groupStallAfter() time.Duration {
	return c.RebalanceTimeout + c.sessionTimeout()
}

// groupRebuildAfter is how long without a generation before the worker drops
// its consumer group and joins afresh: beyond every kafka-go deadline of one
// join and sync, so it only fires when kafka-go's own retries go nowhere.
func (c Config) groupRebuildAfter() time.Duration {
	return c.RebalanceTimeout + c.coordinatorTimeout() + c.groupStallAfter()
}

// setJoined records entering (true) or leaving (false) a generation.
func (w *Worker) setJoined(joined bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.status.Joined = joined
	switch {
	case joined:
		w.unjoinedSince = time.Time{}
		w.joinLog.Succeeded()
	case w.unjoinedSince.IsZero():
		w.unjoinedSince = w.deps.Now()
	}
}

// watchGroup keeps the group gauges current and, while no generation forms,
// says so in the log after groupStallAfter and then at doubling intervals
// (up to group.RetrySummaryMax), and calls rebuild every
// groupRebuildAfter: the first rebuild of a run at WARN, the next ones
// counted in that line and in bloomgate_group_rebuilds_total. It returns
// when ctx ends.
func (w *Worker) watchGroup(ctx context.Context, rebuild func()) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	stall, rebuildAfter := w.cfg.groupStallAfter(), w.cfg.groupRebuildAfter()
	var warnAt, rebuilt time.Duration
	every, rebuilds := stall, 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		w.mu.Lock()
		since := w.unjoinedSince
		w.mu.Unlock()
		if since.IsZero() {
			w.m.groupJoined.Set(1)
			w.m.groupUnjoined.Set(0)
			warnAt, rebuilt, every, rebuilds = 0, 0, stall, 0
			continue
		}
		d := w.deps.Now().Sub(since)
		w.m.groupJoined.Set(0)
		w.m.groupUnjoined.Set(d.Seconds())
		if d >= rebuilt+rebuildAfter {
			rebuilt = d
			rebuilds++
			if rebuilds == 1 {
				w.log.Warn("no consumer group generation for too long; leaving the group and joining as a new member", "for", d.Round(time.Second))
			} else {
				w.log.Debug("no consumer group generation for too long; leaving the group and joining as a new member again", "for", d.Round(time.Second))
			}
			w.m.groupRebuilds.Inc()
			rebuild()
		}
		if d >= warnAt+every {
			if warnAt > 0 {
				every = min(2*every, group.RetrySummaryMax)
			}
			warnAt = d
			w.log.Warn("no consumer group generation; waiting for the coordinator to answer JoinGroup/SyncGroup "+
				"(every member must rejoin within the rebalance timeout, dead members drop out after the session timeout)",
				"for", d.Round(time.Second), "rebalance_timeout", w.cfg.RebalanceTimeout, "session_timeout", w.cfg.sessionTimeout(),
				"rebuild_after", rebuildAfter, "rebuilds", rebuilds)
		}
	}
}
