package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/segmentio/kafka-go"

	"github.com/bloomgate/bloomgate/internal/keys"
)

// The per-batch path of a partition: every fetched batch is looked up in
// the filter in one pass (lookahead.go), routed record by record, written
// with one acknowledged write, counted, and its offset handed to the
// committer. Replayed records (below resume) only rebuild the filter.

// tally counts one batch; applied only once its writes are acknowledged.
type tally struct {
	consumed, forwarded, duplicates, replayed uint64
	markers, aborted                          int
	deadLettered, dropped                     map[string]uint64
}

func (t *tally) dead(reason string) {
	if t.deadLettered == nil {
		t.deadLettered = map[string]uint64{}
	}
	t.deadLettered[reason]++
}

func (t *tally) drop(reason string) {
	if t.dropped == nil {
		t.dropped = map[string]uint64{}
	}
	t.dropped[reason]++
}

// handle processes one batch: replay below resume, dedup and route above
// (routeBatch), one acknowledged write through the partition's writer,
// then the batch is counted and its offset goes to the committer
// (advance).
func (pp *partitionProc) handle(ctx context.Context, b batch) (replayed int64, err error) {
	pp.wr.begin(pp.writtenProvenance())
	var t tally
	// A stalled partition processes nothing from its unwritable record on.
	pp.wr.cutAtStall(&b)
	next, stalled, fatal := pp.routeBatch(ctx, b.msgs, &t)
	if err := pp.filterErr(); err != nil { // records tested one by one
		pp.wr.discard()
		return 0, err
	}
	if err := pp.wr.write(ctx, &t, pp.w.cfg.outputCodec(pp.inCodec)); err != nil {
		pp.wr.discard()
		return 0, err
	}
	if fatal == nil && stalled == nil {
		// Markers, aborted records and gaps after the last record.
		next = max(next, b.next)
		t.markers, t.aborted = b.markers, b.aborted
	}
	pp.advance(ctx, b, next, &t)
	if fatal != nil {
		return int64(t.replayed), fatal
	}
	if stalled != nil {
		// The filter has seen keys past the stall (the lookahead): the
		// session ends, and the recovery replays up to the stall.
		pp.wr.stallAt(stalled)
		return int64(t.replayed), stalled
	}
	return int64(t.replayed), nil
}

// routeBatch runs the batch's records from the partition's position
// through the filter (one lookahead call, lookahead.go) and routes them
// to the writer, counting them in t. It returns the offset after the last
// record handled, and stops before a record that it stalls before
// (stalled) or that stops the partition (fatal, on-missing-key=fail). If
// the filter failed, its answers are not to be trusted (filterErr).
func (pp *partitionProc) routeBatch(ctx context.Context, batch []*kafka.Message, t *tally) (next int64, stalled *stallError, fatal error) {
	next = pp.next
	pp.filterAhead(batch)
	// The lookahead goes back before the writes: they wait for
	// acknowledgements.
	defer pp.releaseAhead()
	if pp.filterErr() != nil {
		return next, nil, nil
	}
	for i, m := range batch {
		if m.Offset < next {
			continue
		}
		if m.Offset < pp.resume {
			// Handled before the crash or rebalance: only rebuild the filter.
			pp.lookup(i, m)
			t.replayed++
			next = m.Offset + 1
			continue
		}
		if seen, err := pp.lookup(i, m); err != nil {
			stalled, fatal = pp.routeKeyless(ctx, t, m, err)
		} else {
			stalled = pp.routeKeyed(ctx, t, m, seen)
		}
		if fatal != nil || stalled != nil {
			return next, stalled, fatal
		}
		t.consumed++
		next = m.Offset + 1
	}
	return next, nil, nil
}

// routeKeyed routes record m whose key the filter had seen or not: to the
// output if unseen, else to the duplicates topic or counted as dropped. A
// record the recovery scan found written is counted, not written again.
func (pp *partitionProc) routeKeyed(ctx context.Context, t *tally, m *kafka.Message, seen bool) *stallError {
	if e, ok := pp.skip.take(m.Offset); ok {
		// Written before the crash, not committed: do not write again.
		pp.countWritten(t, e, "")
		return nil
	}
	cfg := &pp.w.cfg
	switch {
	case !seen:
		return pp.wr.route(ctx, t, cfg.Output, m, "")
	case cfg.Duplicates != "":
		return pp.wr.route(ctx, t, cfg.Duplicates, m, "")
	}
	t.duplicates++
	return nil
}

// routeKeyless routes record m whose key could not be extracted (err) by
// --on-missing-key; fatal is set when the partition stops before it.
func (pp *partitionProc) routeKeyless(ctx context.Context, t *tally, m *kafka.Message, err error) (stalled *stallError, fatal error) {
	w := pp.w
	reason := reasonOf(err)
	if e, ok := pp.skip.take(m.Offset); ok {
		pp.countWritten(t, e, reason)
		return nil, nil
	}
	switch w.cfg.OnMissingKey {
	case MissingKeyDeadLetter:
		return pp.wr.route(ctx, t, w.cfg.DeadLetter, m, reason), nil
	case MissingKeyForward:
		return pp.wr.route(ctx, t, w.cfg.Output, m, ""), nil
	case MissingKeyDrop:
		t.drop(reason)
		return nil, nil
	}
	// fail: stop before this record
	return nil, fmt.Errorf("%w: %s/%d offset %d: key not extractable (%s) and on-missing-key=fail",
		errWorkerStopped, w.cfg.Input, pp.p, m.Offset, reason)
}

// advance moves the partition past the handled records of b up to next:
// counts t, marks the last record handled, shows the new position and
// offers it to the committer.
func (pp *partitionProc) advance(ctx context.Context, b batch, next int64, t *tally) {
	pp.apply(t)
	for i := len(b.msgs) - 1; i >= 0; i-- {
		if o := b.msgs[i].Offset; o < next && o >= pp.next {
			m := markOf(b.msgs[i])
			pp.mark = &m
			break
		}
	}
	pp.next = next
	pp.wr.passed(next)
	if b.hwm >= 0 {
		pp.setLag(b.hwm)
	}
	if pp.w.hooks.AfterWrite != nil {
		pp.w.hooks.AfterWrite(pp.p, next)
	}
	pp.offerCommit(ctx)
	pp.w.updatePartition(pp.p, func(ps *PartitionStatus) {
		ps.NextOffset = pp.next
		pp.stats.show(ps)
	})
}

// writtenProvenance is the provenance the partition's written records
// carry (nil: none, only when a test stages an older build).
func (pp *partitionProc) writtenProvenance() *provenance {
	if pp.w.hooks.LegacyHeaders.Load() {
		return nil
	}
	return pp.prov
}

// filterErr reports a failure of the filter (FallibleFilter): its answers
// for the batch cannot be trusted, so nothing of it is written and the
// session ends for a new recovery.
func (pp *partitionProc) filterErr() error {
	if f, ok := pp.filter.(FallibleFilter); ok {
		if err := f.Err(); err != nil {
			return fmt.Errorf("filter failed; recovering from the last checkpoint: %w", err)
		}
	}
	return nil
}

// countWritten counts a record found by the recovery scan where it was written.
func (pp *partitionProc) countWritten(t *tally, e skipEntry, reason string) {
	switch e.kind {
	case toDuplicates:
		t.duplicates++
	case toDeadLetter:
		if e.reason != "" {
			reason = e.reason
		}
		if reason == "" {
			reason = "other"
		}
		t.dead(reason)
	default:
		t.forwarded++
	}
}

// apply counts t in the partition's metrics and statistics and in the
// worker's totals.
func (pp *partitionProc) apply(t *tally) {
	pm, count := pp.pm, &pp.w.count
	pm.consumed.Add(float64(t.consumed))
	pm.forwarded.Add(float64(t.forwarded))
	pm.duplicates.Add(float64(t.duplicates))
	pm.replayed.Add(float64(t.replayed))
	count.consumed.Add(t.consumed)
	count.forwarded.Add(t.forwarded)
	count.duplicates.Add(t.duplicates)
	count.replayed.Add(t.replayed)
	pm.skippedMarkers.Add(float64(t.markers))
	pm.skippedAborted.Add(float64(t.aborted))
	for r, n := range t.deadLettered {
		c, ok := pm.deadLettered[r]
		if !ok {
			c = pm.deadLettered["other"]
		}
		c.Add(float64(n))
		count.deadLettered.Add(n)
	}
	for r, n := range t.dropped {
		c, ok := pm.dropped[r]
		if !ok {
			c = pm.dropped["other"]
		}
		c.Add(float64(n))
		count.dropped.Add(n)
	}
	pp.stats.add(t)
}

// offerCommit hands the acknowledged position to the committer unless
// checkpoints are too stale.
func (pp *partitionProc) offerCommit(ctx context.Context) {
	lastOK, _, lastErr := pp.cp.state()
	bound := pp.w.cfg.MaxCheckpointStaleness
	stale := bound >= 0 && pp.w.deps.Now().Sub(lastOK) > bound
	if stale != pp.commitsPaused {
		pp.commitsPaused = stale
		if stale {
			pp.log.Error("checkpoints are failing beyond max staleness; offset commits paused until one succeeds",
				"last_success", lastOK, "err", lastErr)
		} else {
			pp.log.Info("checkpoint succeeded; offset commits resumed")
		}
	}
	// Below resume the group already committed further: never move it back.
	if stale || pp.next < pp.resume {
		return
	}
	if o := pp.commitLimit(pp.next); o >= pp.resume {
		pp.com.Offer(ctx, pp.p, o)
	}
}

// commitLimit returns the highest offset up to next that the partition may
// commit: with --max-replay, a restart replays at most that many records
// after the last good checkpoint, so a commit beyond the checkpoint plus
// the bound would make the successor forget keys (its replay would start
// after them). Commits wait at the bound until a checkpoint moves it; what
// lies beyond is found written by the next recovery's scan.
func (pp *partitionProc) commitLimit(next int64) int64 {
	bound := pp.w.cfg.MaxReplay
	if bound <= 0 {
		return next
	}
	_, last, lastErr := pp.cp.state()
	last = max(last, pp.restoredOffset)
	if last < 0 || next <= last+bound {
		if pp.commitsHeld {
			pp.commitsHeld = false
			pp.log.Info("a checkpoint covers the replay bound again; offset commits resumed", "checkpoint_offset", last)
		}
		return next
	}
	if !pp.commitsHeld {
		pp.commitsHeld = true
		pp.log.Warn("offset commits held at the last checkpoint plus max-replay until a checkpoint succeeds "+
			"(a restart replays at most max-replay records after the checkpoint)",
			"checkpoint_offset", last, "max_replay", bound, "held_at", last+bound, "next", next, "checkpoint_err", lastErr)
	}
	return last + bound
}

// reasonOf maps an extraction error to its reason label.
func reasonOf(err error) string {
	if r := keys.ReasonOf(err); r != "" {
		return r
	}
	var ke *KeyError
	if errors.As(err, &ke) && ke.Reason != "" {
		return ke.Reason
	}
	return "other"
}
