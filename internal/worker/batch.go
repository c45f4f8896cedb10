package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

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

// handle processes one batch: replay below resume, dedup and route above,
// one acknowledged write, then the offset goes to the committer.
func (pp *partitionProc) handle(ctx context.Context, b batch) (replayed int64, err error) {
	w := pp.w
	pp.resetBuilder(&pp.rb)
	var t tally
	// A stalled partition processes nothing from its unwritable record on.
	pp.cutAtStall(&b)
	batch := b.msgs
	pp.filterAhead(batch)
	defer pp.releaseAhead() // (done earlier below; this covers the early returns)
	if err := pp.filterErr(); err != nil {
		return 0, err
	}
	next := pp.next
	var fatal error
	var stalled *stallError
	hwm := b.hwm
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
		seen, err := pp.lookup(i, m)
		if err != nil {
			reason := reasonOf(err)
			if e, ok := pp.skip.take(m.Offset); ok {
				t.consumed++
				pp.countWritten(&t, e, reason)
				next = m.Offset + 1
				continue
			}
			switch w.cfg.OnMissingKey {
			case MissingKeyDeadLetter:
				stalled = pp.route(ctx, &t, w.cfg.DeadLetter, m, reason)
			case MissingKeyForward:
				stalled = pp.route(ctx, &t, w.cfg.Output, m, "")
			case MissingKeyDrop:
				t.drop(reason)
			default: // fail: stop before this record
				fatal = fmt.Errorf("%w: %s/%d offset %d: key not extractable (%s) and on-missing-key=fail",
					errWorkerStopped, w.cfg.Input, pp.p, m.Offset, reason)
			}
			if fatal != nil || stalled != nil {
				break
			}
			t.consumed++
			next = m.Offset + 1
			continue
		}
		if e, ok := pp.skip.take(m.Offset); ok {
			// Written before the crash, not committed: do not write again.
			t.consumed++
			next = m.Offset + 1
			pp.countWritten(&t, e, "")
			continue
		}
		switch {
		case !seen:
			stalled = pp.route(ctx, &t, w.cfg.Output, m, "")
		case w.cfg.Duplicates != "":
			stalled = pp.route(ctx, &t, w.cfg.Duplicates, m, "")
		default:
			t.duplicates++
		}
		if stalled != nil {
			break
		}
		t.consumed++
		next = m.Offset + 1
	}

	// The lookahead goes back before the writes: they wait for
	// acknowledgements.
	pp.releaseAhead()
	if err := pp.filterErr(); err != nil { // records tested one by one
		pp.rb = recordBuilder{}
		return 0, err
	}
	if len(pp.rb.recs) > 0 {
		if err := pp.writeOut(ctx, &t); err != nil {
			// A new builder: the session ends, and its records point
			// into fetches it will not read again.
			pp.rb = recordBuilder{}
			return 0, err
		}
	}
	if fatal == nil && stalled == nil {
		// Markers, aborted records and gaps after the last record.
		next = max(next, b.next)
		t.markers, t.aborted = b.markers, b.aborted
	}
	pp.apply(&t)
	for i := len(batch) - 1; i >= 0; i-- {
		if o := batch[i].Offset; o < next && o >= pp.next {
			m := markOf(batch[i])
			pp.mark = &m
			break
		}
	}
	pp.next = next
	if pp.isolate != nil && next > pp.isolate.hi {
		pp.isolate = nil
	}
	if hwm >= 0 {
		pp.setLag(hwm)
	}
	if w.hooks.AfterWrite != nil {
		w.hooks.AfterWrite(pp.p, next)
	}
	pp.offerCommit(ctx)
	pp.w.updatePartition(pp.p, func(ps *PartitionStatus) {
		ps.NextOffset = pp.next
		ps.Consumed, ps.Forwarded, ps.Duplicates, ps.DeadLettered, ps.Dropped =
			pp.consumed, pp.forwarded, pp.duplicates, pp.deadLettered, pp.dropped
		ps.SkippedMarkers, ps.SkippedAborted = pp.skippedMarkers, pp.skippedAborted
	})
	if fatal != nil {
		return int64(t.replayed), fatal
	}
	if stalled != nil {
		// The filter has seen keys past the stall (the lookahead): the
		// session ends, and the recovery replays up to the stall.
		pp.stall = &stall{stallError: stalled, since: w.deps.Now()}
		return int64(t.replayed), stalled
	}
	return int64(t.replayed), nil
}

// writeOut writes the batch's records in order: runs of ordinary records
// with one write each (batches per topic partition, output.go), the
// records in a range to isolate after a refused batch one record per
// produce request, an unwritable one placed by settle. Each write is
// acknowledged before the next starts, so the output keeps the input's
// order.
func (pp *partitionProc) writeOut(ctx context.Context, t *tally) error {
	if lost(ctx) {
		return fmt.Errorf("not writing: %w", context.Cause(ctx))
	}
	if pp.com.PausedTooLong() {
		// A zombie: the group has moved this partition on.
		pp.com.Fence(errPaused)
		return fmt.Errorf("not writing: %w", errPaused)
	}
	recs := pp.rb.recs
	start := 0
	for i := 0; i <= len(recs); i++ {
		if i < len(recs) && !recs[i].alone {
			continue
		}
		if i > start {
			if err := pp.writeRun(ctx, recs[start:i]); err != nil {
				return err
			}
		}
		if i < len(recs) {
			m := pp.rb.message(i)
			if err := pp.writeOne(ctx, t, &m, &recs[i]); err != nil {
				return err
			}
		}
		start = i + 1
	}
	return nil
}

// writeRun writes records in one write. A write refused for what it holds
// marks its records' input offsets to be written one record per request
// after the recovery that follows.
func (pp *partitionProc) writeRun(ctx context.Context, recs []outRecord) error {
	w := pp.w
	// A write is never cancelled by a revoke: a cancelled request may
	// still land. WriteTimeout bounds it.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*w.cfg.WriteTimeout)
	err := w.out.write(wctx, pp.p, w.cfg.outputCodec(pp.inCodec), pp.rb.prov, recs, pp.rb.arena)
	cancel()
	if err == nil && w.hooks.LoseAck != nil && w.hooks.LoseAck(pp.p) {
		err = errors.New("acknowledgement lost (test)")
	}
	if err == nil {
		return nil
	}
	pp.pm.writeFailures.Inc()
	var we kafka.WriteErrors
	if errors.As(err, &we) {
		for i, e := range we {
			if e != nil && i < len(recs) && refusalReason(e) != "" {
				pp.isolateOffset(recs[i].input().Offset)
			}
		}
	}
	// write returns once every request it sent completed, so nothing of
	// it can land after the recovery scan that follows; waitIdle covers
	// writes of this partition that other goroutines may have started.
	if !w.out.waitIdle(pp.p, 2*w.cfg.WriteTimeout+5*time.Second) {
		return fmt.Errorf("%w: %s/%d: a write to Kafka neither completed nor failed in %v (%v); "+
			"stopping so that it cannot land after the recovery scan",
			errWorkerStopped, w.cfg.Input, pp.p, 2*w.cfg.WriteTimeout+5*time.Second, err)
	}
	if pp.isolate != nil {
		return fmt.Errorf("writing %d records: %w; writing input offsets %d to %d one record per request after recovery",
			len(recs), summarizeWriteErrors(err), pp.isolate.lo, pp.isolate.hi)
	}
	return fmt.Errorf("writing %d records: %w", len(recs), summarizeWriteErrors(err))
}

// writeOne writes one record in a produce request of its own; one refused
// for what it is is placed by --on-unwritable instead.
func (pp *partitionProc) writeOne(ctx context.Context, t *tally, m *kafka.Message, r *outRecord) error {
	w := pp.w
	err := w.writeAlone(ctx, pp.p, m)
	if err == nil {
		return nil
	}
	in := r.input()
	why := refusalReason(err)
	if why == "" {
		pp.pm.writeFailures.Inc()
		return fmt.Errorf("writing the record of input offset %d alone: %w", in.Offset, err)
	}
	reason := string(r.errValue.of(pp.rb.arena))
	t.unrouted(w.kindOf(m.Topic), reason)
	size := recordSize(m)
	if _, _, err := pp.settle(ctx, t, in, m.Topic, reason, why, err, size, w.limits.bound(m.Topic), true); err != nil {
		var st *stallError
		if errors.As(err, &st) {
			// Records before it are written; the recovery that follows
			// finds them, and the session after it waits before this one.
			pp.stall = &stall{stallError: st, since: w.deps.Now()}
		}
		return err
	}
	return nil
}

// writtenProvenance is the provenance the partition's written records
// carry (nil: none, only when a test stages an older build).
func (pp *partitionProc) writtenProvenance() *provenance {
	if pp.w.hooks.LegacyHeaders.Load() {
		return nil
	}
	return pp.prov
}

// resetBuilder readies rb for the records of a batch.
func (pp *partitionProc) resetBuilder(rb *recordBuilder) {
	rb.reset(pp.p, pp.writtenProvenance(), pp.w.hooks.TextHeaders.Load())
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

func (pp *partitionProc) apply(t *tally) {
	pm := pp.pm
	pm.consumed.Add(float64(t.consumed))
	pm.forwarded.Add(float64(t.forwarded))
	pm.duplicates.Add(float64(t.duplicates))
	pm.replayed.Add(float64(t.replayed))
	pp.consumed += t.consumed
	pp.forwarded += t.forwarded
	pp.duplicates += t.duplicates
	pp.w.count.consumed.Add(t.consumed)
	pp.w.count.forwarded.Add(t.forwarded)
	pp.w.count.duplicates.Add(t.duplicates)
	pp.w.count.replayed.Add(t.replayed)
	pp.rateCount += t.consumed
	if t.consumed+t.replayed > 0 {
		pp.statsStale = true
	}
	pm.skippedMarkers.Add(float64(t.markers))
	pm.skippedAborted.Add(float64(t.aborted))
	pp.skippedMarkers += uint64(t.markers)
	pp.skippedAborted += uint64(t.aborted)
	for r, n := range t.deadLettered {
		c, ok := pm.deadLettered[r]
		if !ok {
			c = pm.deadLettered["other"]
		}
		c.Add(float64(n))
		pp.deadLettered += n
		pp.w.count.deadLettered.Add(n)
	}
	for r, n := range t.dropped {
		c, ok := pm.dropped[r]
		if !ok {
			c = pm.dropped["other"]
		}
		c.Add(float64(n))
		pp.dropped += n
		pp.w.count.dropped.Add(n)
	}
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
