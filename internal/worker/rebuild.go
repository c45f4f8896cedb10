package worker

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"
)

// Rebuilding lost generations (docs/checkpoints.md, "Partial restore").
//
// A checkpoint whose objects do not all verify is restored in part: the
// generations that did not load come back empty (Restored.Lost). Before the
// session replays anything, the worker re-reads the input from where those
// generations' keys begin (LostGeneration.KeysFrom) to the checkpoint's
// offset and hands every key to the filter (Rebuilder), which adds it to
// the lost generation that held it; from there recovery goes on as always
// (replay to the committed offset, output scan, processing). Where the
// input no longer holds that range, the keys of the records it dropped are
// forgotten: reported at error level with the span of event time they
// cover, counted, and shown on the status page.
//
// No checkpoint is written during the rebuild (the checkpointer starts
// after it): one would store a half-rebuilt generation as if it were
// whole. A session that ends during the rebuild restores the same
// checkpoint again (its claim names the generations lost) and rebuilds
// again.

const phaseRebuilding = "rebuilding"

// beforeReading runs once the session's checkpoint is restored and
// claimed, before anything of the input is read: it tells the filter where
// its keys come from (InputTracker) and rebuilds what the restore lost.
func (pp *partitionProc) beforeReading(ctx context.Context, pl *recoveryPlan) error {
	r := pl.restored
	if t, ok := r.Filter.(InputTracker); ok {
		t.ReadingFrom(pl.c, pl.seedTopic != nil && pl.seedTopic.Next < pl.seedTopic.End)
	}
	if len(r.Lost) == 0 {
		return nil
	}
	return pp.rebuildLost(ctx, r, pl.resetReason == resetRecreated)
}

// rebuildLost re-reads the input for the lost generations of r and
// reports each one as rebuilt, forgotten or unverified. With otherLog (the
// input's log was re-created since the checkpoint, inputlog.go) the input
// holds none of their keys: they are reported forgotten without reading.
func (pp *partitionProc) rebuildLost(ctx context.Context, r *Restored, otherLog bool) error {
	w := pp.w
	in, err := w.bounds(ctx, w.cfg.Input, []int{pp.p})
	if err != nil {
		return err
	}
	logStart, hwm := in[pp.p].first, in[pp.p].last
	start := lostKeysFrom(r.Lost)
	from, to := max(start, logStart), min(r.InputOffset, hwm)
	rb, canRebuild := r.Filter.(Rebuilder)
	canRebuild = canRebuild && !otherLog
	var read uint64
	if canRebuild {
		defer rb.FinishRebuild()
	}
	if start >= 0 && canRebuild {
		rb.StartRebuild(from)
		if from < to {
			pp.setState(phaseRebuilding)
			pp.log.Info(fmt.Sprintf("rebuilding %s of checkpoint %d from the input, reading %d records", plural(len(r.Lost), "lost generation"), r.Sequence, to-from),
				"from", from, "to", to, "checkpoint_seq", r.Sequence)
			began := w.deps.Now()
			if read, err = pp.readForRebuild(ctx, rb, from, to); err != nil {
				return fmt.Errorf("rebuilding lost generations from input offsets [%d, %d): %w", from, to, err)
			}
			pp.log.Info(fmt.Sprintf("read %d keys of the input from offset %d back into the lost generations", read, from),
				"keys", read, "took", w.deps.Now().Sub(began).Round(time.Millisecond))
		}
	}
	pp.lostOutcomes(r, from, to, logStart, hwm, canRebuild)
	return nil
}

// lostKeysFrom is the earliest recorded start of the keys of the lost
// generations that the input can rebuild (-1: none).
func lostKeysFrom(lost []LostGeneration) int64 {
	start := int64(-1)
	for _, lg := range lost {
		if !lg.ExactOnly && lg.KeysFrom >= 0 && (start < 0 || lg.KeysFrom < start) {
			start = lg.KeysFrom
		}
	}
	return start
}

// lostOutcomes decides what became of each lost generation of r after the
// rebuild read [from, to) (if canRebuild), and shows and reports each one
// once per assignment.
func (pp *partitionProc) lostOutcomes(r *Restored, from, to, logStart, hwm int64, canRebuild bool) {
	for i := range r.Lost {
		lg := &r.Lost[i]
		switch {
		case lg.ExactOnly:
			lg.Outcome = LostUnverified
		case canRebuild && to == r.InputOffset && lg.RebuiltFrom(from):
			lg.Outcome = LostRebuilt
		default:
			lg.Outcome = LostForgotten
		}
		// Once per assignment: a session that fails before its first
		// checkpoint restores the same loss again (from its claim).
		fresh := false
		pp.w.updatePartition(pp.p, func(ps *PartitionStatus) {
			if !slices.ContainsFunc(ps.Lost, func(x LostGeneration) bool {
				return x.ID == lg.ID && x.Start.Equal(lg.Start) && x.End.Equal(lg.End) && x.Outcome == lg.Outcome
			}) {
				ps.Lost, fresh = append(ps.Lost, *lg), true
			}
		})
		if fresh {
			pp.pm.lost[lg.Outcome].Inc()
			pp.reportLost(*lg, r.InputOffset, logStart, hwm, canRebuild)
		}
	}
}

// readForRebuild hands the keys of input records [from, to) to rb, in
// order, through the fetcher every other read of the input uses (same
// isolation level: the records the first pass dropped are dropped again),
// and shows its progress as a phase. It returns the keys handed over.
func (pp *partitionProc) readForRebuild(ctx context.Context, rb Rebuilder, from, to int64) (uint64, error) {
	w := pp.w
	pr := pp.beginProgress(phaseRebuilding, from, to)
	defer pr.end()
	// The scan ends early (by this context) once the filter says no later
	// record can go into a lost generation.
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	var keys uint64
	var key []byte
	done := false
	_, err := w.scanRange(sctx, w.cfg.Input, pp.p, from, to, func(m *kafka.Message) {
		if m.Offset < from || done {
			return
		}
		// A record without a key never reached the filter, whatever the
		// policy that handled it.
		k, err := w.deps.Extractor.Extract(key[:0], m.Key, m.Value, m.Headers)
		if err != nil {
			return
		}
		key = k
		keys++
		if !rb.RebuildKey(m.Offset, k, m.Time) {
			done = true
			stop()
		}
	}, func(o int64) { pr.update(o-from, keys) })
	if done && ctx.Err() == nil {
		return keys, nil
	}
	return keys, err
}

// reportLost logs what became of one lost generation: rebuilt (warning:
// something was corrupt, nothing is lost), forgotten (error: repeats of
// its keys are forwarded until it would have left the window), unverified
// (warning: its exact store's keys are gone, the filter's answer stands).
func (pp *partitionProc) reportLost(lg LostGeneration, offset, logStart, hwm int64, canRebuild bool) {
	w := pp.w
	span := fmt.Sprintf("between %s and %s", lg.Start.UTC().Format(time.RFC3339), lg.End.UTC().Format(time.RFC3339))
	attrs := []any{"lost_generation", lg.ID, "checkpoint_seq", lg.Checkpoint, "event_time_from", lg.Start.UTC(), "event_time_to", lg.End.UTC(),
		"until", lg.Until.UTC(), "keys", lg.Keys, "keys_from_offset", lg.KeysFrom, "outcome", lg.Outcome, "reason", lg.Reason}
	switch lg.Outcome {
	case LostRebuilt:
		pp.log.Warn(fmt.Sprintf("generation %d of checkpoint %d (event time %s) did not load; rebuilt from input offsets %d to %d: nothing is forgotten",
			lg.ID, lg.Checkpoint, span, lg.KeysFrom, offset), attrs...)
	case LostUnverified:
		pp.log.Warn(fmt.Sprintf("the exact store of checkpoint %d did not load; it starts empty: positives matching generation %d (event time %s) "+
			"are unverified, the filter's answer stands (no repeat is forwarded; false positives are not refuted) until event time %s",
			lg.Checkpoint, lg.ID, span, lg.Until.UTC().Format(time.RFC3339)), attrs...)
	default:
		var why string
		switch {
		case !canRebuild:
			why = "this filter cannot be rebuilt from the input"
		case lg.KeysFrom < 0:
			why = "the checkpoint does not record which input offsets hold its keys (written by an older build, or after a seed topic)"
		case lg.KeysFrom < logStart:
			why = fmt.Sprintf("the input no longer holds offsets %d to %d where its keys begin (log start %d; the retained records were read back)",
				lg.KeysFrom, logStart, logStart)
		default:
			why = fmt.Sprintf("the input holds records only up to offset %d, not %d (truncated or recreated)", hwm, offset)
		}
		pp.log.Error(fmt.Sprintf("%s/%d: generation %d of checkpoint %d (%d keys) did not load and %s: keys last seen while the partition's event time was %s "+
			"are forgotten: their repeats are forwarded until event time %s",
			w.cfg.Input, pp.p, lg.ID, lg.Checkpoint, lg.Keys, why, span, lg.Until.UTC().Format(time.RFC3339)), attrs...)
	}
}

// plural is "1 lost generation", "2 lost generations".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
