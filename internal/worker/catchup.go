package worker

import (
	"slices"
	"time"
)

// Catching up. After a start or a rebalance the worker works off the
// input that waited meanwhile; the log says once when that is done, the
// "caught up" line (partitions, how long it took, records handled), so that
// nobody has to read lag columns to know it. A worker that then stays
// behind its input for behindAfter says so too ("fell behind"), and says
// "caught up" again when it is back.
//
// A partition is caught up when it runs and its readable lag (lag less the
// records of open transactions, which read_committed waits for) is at most
// a batch or a tenth of a second of its rate, whichever is more: records
// keep coming while the reader is one fetch behind, and exact zero would
// rarely be seen under load. (A whole second of the rate, tried first,
// said "caught up" with 40 k of a 400 k backlog left at 80 k/s.) It is
// behind when that lag exceeds a batch or behindSeconds of its rate.
const (
	caughtUpSeconds = 0.1
	behindSeconds   = 10
	behindAfter     = time.Minute
)

// catchUp is what logProgress follows between its samples.
type catchUp struct {
	assigned []int     // the assignment followed
	since    time.Time // when it began (or the worker fell behind)
	from     totals    // the counts then
	caughtUp bool
	// behindSince: since when every sample found a partition behind (zero:
	// the last one found none); again: the worker fell behind after it
	// had caught up.
	behindSince time.Time
	again       bool
}

// readableLag sums the readable lag of the assigned partitions of s (lag
// less the records of open transactions) and says whether all of them
// are caught up and how many are behind.
func (w *Worker) readableLag(s Status) (up bool, behind int, lag int64) {
	up = true
	for _, p := range s.Partitions {
		if !slices.Contains(s.Assigned, p.Partition) {
			continue
		}
		readable := max(p.Lag-max(p.LSOLag, 0), 0)
		lag += readable
		batch := float64(w.cfg.BatchSize)
		if p.State != "running" || float64(readable) > max(batch, caughtUpSeconds*p.Rate) {
			up = false
		}
		if float64(readable) > max(batch, behindSeconds*p.Rate) {
			behind++
		}
	}
	return up, behind, lag
}

// followCatchUp updates cu from a status sample and logs the transitions.
func (w *Worker) followCatchUp(cu *catchUp, s Status, cur totals, now time.Time) {
	grown := false
	for _, p := range s.Assigned {
		if !slices.Contains(cu.assigned, p) {
			grown = true
		}
	}
	cu.assigned = slices.Clone(s.Assigned)
	if grown {
		w.mu.Lock()
		since, from := w.assignedAt, w.assignedTotals
		w.mu.Unlock()
		if since.IsZero() || since.After(now) {
			since, from = now, cur
		}
		*cu = catchUp{assigned: cu.assigned, since: since, from: from}
	}
	if len(s.Assigned) == 0 || !s.Joined || !s.Ready {
		return
	}
	up, behind, lag := w.readableLag(s)
	records := func() uint64 { return cur.consumed + cur.replayed - cu.from.consumed - cu.from.replayed }
	switch {
	case !cu.caughtUp && up:
		msg := "caught up with the input"
		if cu.again {
			msg = "caught up with the input again"
		}
		w.log.Info(msg, "partitions", len(s.Assigned), "took", now.Sub(cu.since).Round(100*time.Millisecond).String(),
			"records", records(), "lag", lag)
		cu.caughtUp, cu.behindSince = true, time.Time{}
	case cu.caughtUp && behind > 0:
		if cu.behindSince.IsZero() {
			cu.behindSince = now
		}
		if now.Sub(cu.behindSince) >= behindAfter {
			w.log.Info("fell behind the input", "partitions_behind", behind, "partitions", len(s.Assigned), "lag", lag,
				"for", now.Sub(cu.behindSince).Round(time.Second).String())
			cu.caughtUp, cu.again, cu.since, cu.from = false, true, cu.behindSince, cur
		}
	case behind == 0:
		cu.behindSince = time.Time{}
	}
}
