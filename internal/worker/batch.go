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
	pp.rb.reset(pp.p)
	pp.rb.prov = pp.prov
	if w.hooks.LegacyHeaders.Load() {
		pp.rb.prov = nil
	}
	var t tally
	batch := b.msgs
	pp.filterAhead(batch)
	if err := pp.filterErr(); err != nil {
		return 0, err
	}
	next := pp.next
	var fatal error
	hwm := b.hwm
	for i := range batch {
		m := &batch[i]
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
				pp.rb.add(w.cfg.DeadLetter, m, reason)
				t.dead(reason)
			case MissingKeyForward:
				pp.rb.add(w.cfg.Output, m, "")
				t.forwarded++
			case MissingKeyDrop:
				t.drop(reason)
			default: // fail: stop before this record
				fatal = fmt.Errorf("%w: %s/%d offset %d: key not extractable (%s) and on-missing-key=fail",
					errFatal, w.cfg.Input, pp.p, m.Offset, reason)
			}
			if fatal != nil {
				break
			}
			t.consumed++
			next = m.Offset + 1
			continue
		}
		t.consumed++
		next = m.Offset + 1
		if e, ok := pp.skip.take(m.Offset); ok {
			// Written before the crash, not committed: do not write again.
			pp.countWritten(&t, e, "")
			continue
		}
		if seen {
			t.duplicates++
			if w.cfg.Duplicates != "" {
				pp.rb.add(w.cfg.Duplicates, m, "")
			}
			continue
		}
		t.forwarded++
		pp.rb.add(w.cfg.Output, m, "")
	}

	if err := pp.filterErr(); err != nil { // records tested one by one
		pp.rb = recordBuilder{}
		return 0, err
	}
	if len(pp.rb.msgs) > 0 {
		if lost(ctx) {
			return 0, fmt.Errorf("not writing: %w", context.Cause(ctx))
		}
		if pp.com.pausedTooLong() {
			// A zombie: the group has moved this partition on.
			pp.com.fence(errPaused)
			return 0, fmt.Errorf("not writing: %w", errPaused)
		}
		// A write is never cancelled by a revoke: cancelled writes may still
		// land later. WriteTimeout bounds it.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*w.cfg.WriteTimeout)
		err := w.out.write(wctx, pp.p, pp.rb.msgs)
		cancel()
		if err == nil && w.hooks.LoseAck != nil && w.hooks.LoseAck(pp.p) {
			err = errors.New("acknowledgement lost (test)")
		}
		var tooLarge kafka.MessageTooLargeError
		if errors.As(err, &tooLarge) {
			// Nothing was written; retrying cannot help.
			return 0, fmt.Errorf("%w: %s/%d offset %s: record of %d bytes exceeds --max-batch-bytes %d; raise it (e.g. --max-batch-bytes 4MiB) and the output topics' max.message.bytes with it",
				errFatal, w.cfg.Input, pp.p, headerValue(tooLarge.Message.Headers, HeaderSrcOffset),
				len(tooLarge.Message.Key)+len(tooLarge.Message.Value), w.cfg.MaxBatchBytes)
		}
		if err != nil {
			pp.pm.writeFailures.Inc()
			n := len(pp.rb.msgs)
			var we kafka.WriteErrors
			if !errors.As(err, &we) {
				// Returned on the deadline: records may still be queued or in
				// flight. The recovery that follows scans the output, so they
				// must have completed first; if they do not in time, stop
				// rather than risk writing them twice.
				if !w.out.waitIdle(pp.p, 2*w.cfg.WriteTimeout+5*time.Second) {
					return 0, fmt.Errorf("%w: %s/%d: a write to Kafka neither completed nor failed in %v (%v); "+
						"stopping so that it cannot land after the recovery scan",
						errFatal, w.cfg.Input, pp.p, 4*w.cfg.WriteTimeout+5*time.Second, err)
				}
			}
			// The failed records may still be referenced by the writer.
			pp.rb = recordBuilder{}
			return 0, fmt.Errorf("writing %d records: %w", n, summarizeWriteErrors(err))
		}
	}
	if fatal == nil {
		// Markers, aborted records and gaps after the last record.
		next = max(next, b.next)
		t.markers, t.aborted = b.markers, b.aborted
	}
	pp.apply(&t)
	for i := len(batch) - 1; i >= 0; i-- {
		if o := batch[i].Offset; o < next && o >= pp.next {
			m := markOf(&batch[i])
			pp.mark = &m
			break
		}
	}
	pp.next = next
	if hwm >= 0 {
		pp.pm.lag.Set(float64(max(hwm-next, 0)))
	}
	if w.hooks.AfterWrite != nil {
		w.hooks.AfterWrite(pp.p, next)
	}
	pp.offerCommit(ctx)
	pp.w.updatePartition(pp.p, func(ps *PartitionStatus) {
		ps.NextOffset = pp.next
		if hwm >= 0 {
			ps.Lag = max(hwm-next, 0)
		}
		ps.Consumed, ps.Forwarded, ps.Duplicates, ps.DeadLettered, ps.Dropped =
			pp.consumed, pp.forwarded, pp.duplicates, pp.deadLettered, pp.dropped
		ps.SkippedMarkers, ps.SkippedAborted = pp.skippedMarkers, pp.skippedAborted
	})
	if fatal != nil {
		return int64(t.replayed), fatal
	}
	return int64(t.replayed), nil
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
	pp.rateCount += t.consumed
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
		pp.com.offer(ctx, pp.p, o)
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
