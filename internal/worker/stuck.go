package worker

import (
	"context"
	"slices"
	"strconv"
	"time"
)

// The stall watchdog. A partition that has input waiting and does not move
// its position, whatever the reason (writes refused and retried by
// recovery, a restore or a fetch that keeps failing, a record it stalls
// before), must be visible without reading every log line: its state,
// offset and last error on the status page, bloomgate_partition_stalled
// and bloomgate_partition_stalled_seconds, an ERROR line when it starts
// (then one every stallReportEvery), and the shipped alert
// BloomgatePartitionStalled. The watchdog also refreshes every assigned
// partition's lag from the input's high-water marks (one ListOffsets per
// round), so that the lag grows while a partition fetches nothing.
//
// /readyz is not involved: a partition that recovered once stays "ready"
// while it stalls. Kubernetes acts on readiness by taking the pod out of
// service (or, with a startup probe, restarting it), which would only move
// the partition to another worker that stalls the same way.

const (
	// StallAfter is how long input may wait without progress before a
	// partition counts as stalled: longer than a slow write's whole cycle
	// (twice the write timeout, the wait for in-flight records, recovery)
	// and a fetch's give-up bound (1 min) at the default settings.
	StallAfter = 2 * time.Minute
	// stallWatchEvery is the watchdog's round.
	stallWatchEvery = 5 * time.Second
	// stallReportEvery bounds the ERROR lines about one stalled partition.
	stallReportEvery = 10 * time.Minute
)

// track notes progress and waiting input after an update of ps.
func (ps *partitionStatus) track(now time.Time) {
	if ps.NextOffset > ps.maxNext {
		ps.maxNext, ps.progressAt = ps.NextOffset, now
	}
	if pr := ps.Progress; pr != nil && pr.Done > ps.maxDone[pr.Phase] {
		if ps.maxDone == nil {
			ps.maxDone = map[string]int64{}
		}
		ps.maxDone[pr.Phase], ps.progressAt = pr.Done, now
	}
	switch {
	case ps.Lag-max(ps.LSOLag, 0) <= 0:
		// Nothing readable waits: an open transaction's records wait at
		// the last stable offset (read_committed), which is not a stall.
		ps.lagSince = time.Time{}
	case ps.lagSince.IsZero():
		ps.lagSince = now
	}
}

// waitedFor is how long input has waited without progress.
func (ps *partitionStatus) waitedFor(now time.Time) time.Duration {
	if ps.lagSince.IsZero() {
		return 0
	}
	since := ps.lagSince
	if ps.progressAt.After(since) {
		since = ps.progressAt
	}
	return max(now.Sub(since), 0)
}

// watchPartitions runs the watchdog until ctx ends.
func (w *Worker) watchPartitions(ctx context.Context) {
	t := time.NewTicker(w.stallWatchEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.refreshLag(ctx)
		w.refreshUnprocessedLag(ctx)
		w.checkStalls()
	}
}

// refreshUnprocessedLag sets the lag of the input partitions no member
// that agrees with this one processes (checkAgreement finds them): the
// records that wait in them, from their high-water marks to the group's
// committed offsets (the log start where none is committed), so that the
// group's lag includes what nobody deduplicates.
func (w *Worker) refreshUnprocessedLag(ctx context.Context) {
	w.mu.Lock()
	parts := slices.Clone(w.status.Unprocessed)
	w.mu.Unlock()
	var lag int64
	if len(parts) > 0 {
		bctx, cancel := context.WithTimeout(ctx, w.stallWatchEvery)
		defer cancel()
		b, err := w.bounds(bctx, w.cfg.Input, parts)
		if err != nil {
			w.log.Debug("listing the offsets of unprocessed partitions failed", "err", err)
			return
		}
		committed, err := w.member.FetchOffsets(bctx, parts)
		if err != nil {
			w.log.Debug("reading the committed offsets of unprocessed partitions failed", "err", err)
			return
		}
		for _, p := range parts {
			from := max(committed[p], b[p].first)
			lag += max(b[p].last-from, 0)
		}
	}
	w.m.unprocessedLag.WithLabelValues(w.cfg.Input).Set(float64(lag))
	w.mu.Lock()
	w.status.UnprocessedLag = lag
	w.mu.Unlock()
}

// refreshLag sets the lag of every assigned partition from the input's
// log end, for partitions that do not fetch (failing, recovering,
// stalled) as well.
func (w *Worker) refreshLag(ctx context.Context) {
	w.mu.Lock()
	parts := make([]int, 0, len(w.parts))
	for p, ps := range w.parts {
		if ps.Generation == w.status.Generation {
			parts = append(parts, p)
		}
	}
	w.mu.Unlock()
	if len(parts) == 0 {
		return
	}
	bctx, cancel := context.WithTimeout(ctx, w.stallWatchEvery)
	defer cancel()
	b, err := w.bounds(bctx, w.cfg.Input, parts)
	if err != nil {
		w.log.Debug("stall watchdog: listing the input's offsets failed", "err", err)
		return
	}
	now := w.deps.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for p, ob := range b {
		ps := w.parts[p]
		if ps == nil {
			continue
		}
		pos := ps.NextOffset
		if pos < 0 {
			pos = ps.base
		}
		if pos < 0 || pos < ob.first {
			pos = ob.first
		}
		ps.Lag, ps.FillLag = max(ob.last-pos, 0), fillLag(pos, ps.ResumeOffset, ob.last)
		ps.track(now)
		w.m.lag.WithLabelValues(w.cfg.Input, strconv.Itoa(p)).Set(float64(ps.Lag))
	}
}

// checkStalls updates every partition's stall status, metrics and log.
func (w *Worker) checkStalls() {
	now := w.deps.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for p, ps := range w.parts {
		waited := ps.waitedFor(now)
		// A partition waiting before an unwritable record stays stalled
		// through the recoveries that bring it back to the record.
		stalled := waited >= w.stallAfter || ps.Unwritable != nil
		was := ps.Stalled
		ps.Stalled, ps.StalledSeconds = stalled, waited.Seconds()
		ls := strconv.Itoa(p)
		w.m.stalledSeconds.WithLabelValues(w.cfg.Input, ls).Set(ps.StalledSeconds)
		if !stalled {
			w.m.stalled.WithLabelValues(w.cfg.Input, ls).Set(0)
			if was {
				w.log.Info("partition progressing again", "partition", p, "offset", ps.NextOffset, "lag", ps.Lag)
			}
			ps.reportedAt = time.Time{}
			continue
		}
		w.m.stalled.WithLabelValues(w.cfg.Input, ls).Set(1)
		first := ps.reportedAt.IsZero()
		if !first && now.Sub(ps.reportedAt) < stallReportEvery {
			continue
		}
		ps.reportedAt = now
		if first && ps.Unwritable != nil {
			continue // the partition logged the record it stalls before
		}
		msg := "partition stalled: input waits and its position does not move"
		if !first {
			msg = "partition still stalled"
		}
		w.log.Error(msg, "partition", p, "offset", ps.NextOffset, "state", ps.State, "lag", ps.Lag,
			"no_progress_for", waited.Round(time.Second), "last_error", ps.LastError,
			"last_error_at", ps.LastErrorAt)
	}
}
