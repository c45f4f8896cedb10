package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/bloomgate/bloomgate/internal/keys"
)

// partitionProc owns one assigned input partition: its filter, its reader,
// its checkpoints. Only its goroutine touches the filter.
type partitionProc struct {
	w     *Worker
	p     int
	gen   int32
	com   *committer
	log   *slog.Logger
	pm    *partitionMetrics
	store PartitionStore
	// fence ends the partition's work at once (no more writes, no final
	// commit or checkpoint).
	fence context.CancelCauseFunc

	assigned int64 // offset from the group at assignment (committed, or FirstOffset)
	// seeded is where a new group's partition began remembering (see
	// startOffsets), kept for later sessions of the assignment in case the
	// first one ended before its initial checkpoint; -1 if not such a start.
	seeded int64
	// seeding is set from a new group's start until its seeding replay
	// ends: the replay's progress is then reported as seeding.
	seeding bool
	// seedTopic is the unfinished read of Config.SeedTopic (nil: none).
	seedTopic *SeedProgress

	// Session state, rebuilt by every recovery.
	filter   Filter
	next     int64 // next input offset: everything before is handled and acknowledged
	resume   int64 // input before it is replayed, not written
	skip     *skipSet
	scanFrom map[topicPartition]int64
	scanTo   map[topicPartition]int64
	cp       *checkpointer
	pieces   chan piece
	lsoLag   int64

	rb             recordBuilder
	keyBuf         []byte
	ahead          lookahead
	lastCheckpoint time.Time
	commitsPaused  bool
	rateCount      uint64
	rateAt         time.Time
	stats          FilterStats
	statsAt        time.Time
	// totals for the status page
	consumed, forwarded, duplicates, deadLettered, dropped uint64
	skippedMarkers, skippedAborted                         uint64
}

const filterStatsInterval = 5 * time.Second

// errFencedPartition is the cause of a partition stop because another owner
// took it.
var errFencedPartition = errors.New("partition fenced")

func (w *Worker) runPartition(gctx context.Context, gen int32, com *committer, a kafka.PartitionAssignment) {
	ctx, cancel := context.WithCancelCause(gctx)
	defer cancel(nil)
	pp := &partitionProc{
		w: w, p: a.ID, gen: gen, com: com,
		log:      w.log.With("partition", a.ID, "generation", gen),
		pm:       w.m.partition(w.cfg.Input, a.ID),
		assigned: a.Offset,
		next:     -1,
		seeded:   -1,
		fence:    func(err error) { cancel(errors.Join(errFencedPartition, err)) },
	}
	defer w.removePartition(a.ID, gen)
	// A moved partition's gauges belong to its new owner: summing filter
	// bytes or lag over workers must not count it twice.
	defer func() {
		pp.pm.lag.Set(0)
		pp.pm.setFilter(FilterStats{})
	}()
	backoff := 200 * time.Millisecond
	for {
		began := time.Now()
		err := pp.session(ctx)
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			pp.log.Info("partition revoked during recovery", "err", err)
			return
		}
		if errors.Is(err, errFatal) {
			pp.log.Error("partition stopped; stopping the worker", "err", err)
			w.stop(err)
			return
		}
		if time.Since(began) > time.Minute {
			backoff = 200 * time.Millisecond
		}
		pp.log.Warn("partition failed; re-running exact recovery", "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (pp *partitionProc) setState(s string) {
	pp.w.updatePartition(pp.p, func(ps *PartitionStatus) {
		ps.Topic, ps.Partition, ps.Generation, ps.State = pp.w.cfg.Input, pp.p, pp.gen, s
	})
}

// session restores, recovers and processes until ctx ends (nil) or a
// failure needs a new recovery (error).
func (pp *partitionProc) session(ctx context.Context) error {
	w := pp.w
	start := w.deps.Now()
	pp.setState("restoring")
	// A fresh handle per session: a handle claims once, and after ErrFenced
	// from Claim the store wants a new Restore on a new handle.
	pp.store = w.deps.State.Partition(w.cfg.Input, pp.p)
	restored, err := pp.restore(ctx)
	if err != nil {
		return err
	}
	pp.filter = restored.Filter
	if err := pp.claim(ctx); err != nil {
		return err
	}

	pp.setState("recovering")
	in, err := w.bounds(ctx, w.cfg.Input, []int{pp.p})
	if err != nil {
		return err
	}
	ib := in[pp.p]
	committed := pp.assigned
	lastCommitted, haveCommitted := pp.com.lastCommitted(pp.p)
	// A new group's partition: where to start forwarding and seeding.
	fresh := committed < 0 && !haveCommitted && pp.next < 0 && restored.InputOffset < 0 &&
		(!w.cfg.StartFrom.IsEarliest() || w.cfg.SeedFrom != nil || w.cfg.SeedTopic != "")
	var seed int64
	if fresh {
		var start int64
		if start, seed, err = pp.startOffsets(ctx, ib); err != nil {
			return err
		}
		// Durable before anything is read: a restart must not resolve
		// "latest" or "72h ago" again and skip or re-forward records.
		if err := pp.com.commitNow(ctx, pp.p, start); err != nil {
			return fmt.Errorf("committing the start offset %d: %w", start, err)
		}
		pp.log.Info("new group: starting", "start_from", w.cfg.StartFrom, "start_offset", start,
			"seed_offset", seed, "seed_records", start-seed, "retained_from", ib.first)
		committed, pp.seeded, pp.seeding = start, seed, seed < start
	}
	// The seed topic's read: where the checkpoint left it, or, for a memory
	// without a checkpoint, all of it.
	pp.seedTopic = nil
	switch {
	case restored.InputOffset >= 0:
		if restored.Seed != nil {
			s := *restored.Seed
			pp.seedTopic = &s
		}
	case w.cfg.SeedTopic != "":
		if pp.seedTopic, err = pp.seedRange(ctx); err != nil {
			return err
		}
		pp.log.Info("seeding from another topic first", "seed_topic", w.cfg.SeedTopic,
			"from", pp.seedTopic.Next, "to", pp.seedTopic.End, "records", pp.seedTopic.End-pp.seedTopic.Next)
	}
	if committed < 0 {
		committed = ib.first
	}
	if haveCommitted && lastCommitted > committed {
		committed = lastCommitted
	}
	if pp.next > committed { // an earlier session of this assignment got further
		committed = pp.next
	}
	c := restored.InputOffset
	if c < 0 && pp.seeded >= 0 {
		c = pp.seeded
	}
	if c < ib.first {
		if c >= 0 && restored.OutputOffsets != nil {
			pp.log.Warn("input retention dropped records the checkpoint does not cover; keys among them are forgotten",
				"checkpoint_offset", c, "log_start", ib.first)
		}
		c = ib.first
	}
	resume := max(c, committed)
	if resume > ib.last {
		pp.log.Warn("committed offset is beyond the high-water mark; input was truncated or recreated",
			"committed", resume, "high_water_mark", ib.last)
		resume = ib.last
		c = min(c, resume)
	}
	if w.cfg.MaxReplay > 0 && resume-c > w.cfg.MaxReplay {
		pp.log.Warn("replay bounded by max-replay; older keys of this partition are forgotten",
			"from", c, "to", resume, "max_replay", w.cfg.MaxReplay)
		c = resume - w.cfg.MaxReplay
	}
	switch {
	case restored.InputOffset >= 0:
		st := pp.filter.Stats()
		attrs := []any{"checkpoint_seq", restored.Sequence, "checkpoint_offset", restored.InputOffset,
			"estimated_keys", st.EstKeys, "replay_from", c, "replay_to", resume}
		if !restored.Written.IsZero() {
			attrs = append(attrs, "checkpoint_age", w.deps.Now().Sub(restored.Written).Round(time.Second).String())
		}
		pp.log.Info(fmt.Sprintf("restored %d keys from checkpoint seq %d, replaying %d records", st.EstKeys, restored.Sequence, resume-c), attrs...)
	case pp.seeding:
		// "new group: starting" said what is seeded.
	default:
		pp.log.Info(fmt.Sprintf("no checkpoint; rebuilding the filter from the retained input, replaying %d records", resume-c),
			"replay_from", c, "replay_to", resume)
	}
	var scan *progress
	skip, from, to, scanned, err := w.scanWritten(ctx, pp.p, resume, restored.OutputOffsets, func(done, total int64) {
		if scan == nil {
			scan = pp.beginProgress(phaseScanning, 0, total)
		}
		scan.update(done, 0)
	})
	if scan != nil {
		scan.end()
	}
	if err != nil {
		return err
	}
	pp.skip, pp.scanFrom, pp.scanTo = skip, from, to
	pp.pm.alreadyWritten.Add(float64(skip.len()))
	pp.next, pp.resume = c, resume

	src, err := w.newFetcher(w.cfg.Input, pp.p, c)
	if err != nil {
		return err
	}
	rctx, stopReading := context.WithCancel(ctx)
	pp.pieces = make(chan piece, 1)
	pumpDone := make(chan struct{})
	go func() { defer close(pumpDone); pp.pump(rctx, src, w.cfg.BatchSize, pp.pieces) }()
	defer func() { stopReading(); <-pumpDone }()

	pp.cp = newCheckpointer(pp.store, w.cfg.CheckpointTimeout, pp.log, w.deps.Now, pp.fence)
	if restored.InputOffset >= 0 && restored.InputOffset == c {
		// The restored checkpoint (re-stored by Claim) covers c.
		pp.cp.lastOffset = c
	}
	pp.cp.start()
	defer pp.cp.stop()
	if fresh {
		// The seeding range is durable too: a restart replays [seed,
		// start) from this checkpoint instead of the whole retained input.
		if err := pp.cp.commit(ctx, pp.checkpoint()); err != nil {
			return fmt.Errorf("writing the initial checkpoint: %w", err)
		}
	}
	pp.lastCheckpoint = w.deps.Now()
	pp.rateAt = pp.lastCheckpoint
	if pp.seedTopic != nil && pp.seedTopic.Next < pp.seedTopic.End {
		pp.setState("replaying")
		err := pp.seedFromTopic(ctx)
		if ctx.Err() != nil {
			return pp.finish(ctx)
		}
		if err != nil {
			return err
		}
	}
	pp.seedTopic = nil

	// Replay [c, resume) before declaring the partition running. Periodic
	// checkpoints go on meanwhile (see checkpoint: their output offsets stay
	// at the scan's start), so a long replay or seeding that is interrupted
	// resumes where it was.
	pp.setState("replaying")
	phase := phaseReplaying
	if pp.seeding {
		phase = phaseSeeding
	}
	replayed := int64(0)
	var rp *progress
	if pp.next < pp.resume {
		rp = pp.beginProgress(phase, pp.next, pp.resume)
		defer rp.end()
	}
	for pp.next < pp.resume {
		batch, err := pp.nextBatch(ctx, replayIdle)
		if ctx.Err() != nil {
			return pp.finish(ctx)
		}
		if err != nil {
			return err
		}
		if len(batch.msgs) == 0 && batch.next <= pp.next {
			pp.log.Warn("replay idle before the committed offset; continuing", "at", pp.next, "resume", pp.resume)
			break
		}
		n, err := pp.handle(ctx, batch)
		replayed += n
		if err != nil {
			return err
		}
		rp.update(pp.next-c, uint64(replayed))
		pp.housekeeping(ctx)
	}
	if rp != nil {
		rp.end()
	}
	pp.seeding = false
	took := w.deps.Now().Sub(start)
	w.m.recoveryDuration.WithLabelValues(w.cfg.Input).Observe(took.Seconds())
	pp.log.Info("partition recovered",
		"checkpoint_offset", c, "committed_offset", committed, "resume_offset", resume,
		"replayed", replayed, "output_scanned", scanned, "already_written", skip.len(), "took", took)
	pp.w.updatePartition(pp.p, func(ps *PartitionStatus) {
		ps.RecoveryReplayed, ps.RecoverySkipped, ps.RecoveryDuration = replayed, skip.len(), took
		ps.NextOffset, ps.Committed = pp.next, committed
	})
	pp.stats, pp.statsAt = pp.filter.Stats(), w.deps.Now()
	pp.pm.setFilter(pp.stats)
	pp.w.updatePartition(pp.p, func(ps *PartitionStatus) { ps.Filter = pp.stats })
	pp.setState("running")

	for {
		batch, err := pp.nextBatch(ctx, time.Second)
		if ctx.Err() != nil {
			return pp.finish(ctx)
		}
		if err != nil {
			return err
		}
		if _, err := pp.handle(ctx, batch); err != nil {
			return err
		}
		pp.housekeeping(ctx)
	}
}

// restore loads the partition's checkpoint, retrying store failures until
// ctx ends.
func (pp *partitionProc) restore(ctx context.Context) (*Restored, error) {
	w := pp.w
	backoff := 200 * time.Millisecond
	for {
		r, err := pp.store.Restore(ctx, w.params)
		switch {
		case err == nil:
			return r, nil
		case errors.Is(err, ErrNoCheckpoint):
			// The session logs what it does instead (new group, or a
			// rebuild from the retained input).
			return pp.empty()
		case errors.Is(err, ErrNoUsableCheckpoint):
			if w.cfg.OnRestoreFailure == RestoreEmpty {
				pp.log.Error("no usable checkpoint; starting from the retained input (on-restore-failure=empty)", "err", err)
				return pp.empty()
			}
			return nil, fmt.Errorf("%w: restoring %s/%d: %w (set on-restore-failure=empty to start from the retained input)",
				errFatal, w.cfg.Input, pp.p, err)
		case ctx.Err() != nil:
			return nil, ctx.Err()
		}
		pp.log.Warn("restoring checkpoint failed; retrying", "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

func (pp *partitionProc) empty() (*Restored, error) {
	f, err := pp.w.deps.State.NewFilter(pp.w.params)
	if err != nil {
		return nil, fmt.Errorf("%w: creating filter: %w", errFatal, err)
	}
	return &Restored{Filter: f, InputOffset: -1}, nil
}

func (pp *partitionProc) claim(ctx context.Context) error {
	backoff := 200 * time.Millisecond
	for {
		err := pp.store.Claim(ctx, pp.w.cfg.Owner)
		if err == nil || ctx.Err() != nil {
			return err
		}
		if errors.Is(err, ErrFenced) {
			// Someone wrote a newer checkpoint between our Restore and Claim.
			return fmt.Errorf("claiming checkpoint: %w", err)
		}
		pp.log.Warn("claiming checkpoint failed; retrying", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

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
	var t tally
	batch := b.msgs
	pp.filterAhead(batch)
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
	if !stale && pp.next >= pp.resume {
		pp.com.offer(ctx, pp.p, pp.next)
	}
}

// housekeeping starts due checkpoints and refreshes filter metrics.
func (pp *partitionProc) housekeeping(ctx context.Context) {
	w := pp.w
	if w.hooks.Halted.Load() {
		return
	}
	now := w.deps.Now()
	if now.Sub(pp.lastCheckpoint) >= w.cfg.CheckpointInterval {
		if _, lastOffset, _ := pp.cp.state(); lastOffset == pp.next && pp.seedTopic == nil {
			// Idle: the stored checkpoint still covers everything.
			pp.cp.touch(now)
			pp.lastCheckpoint = now
		} else if pp.cp.trySubmit(pp.checkpoint) {
			pp.lastCheckpoint = now
		}
		pp.offerCommit(ctx)
	}
	if dt := now.Sub(pp.rateAt); dt >= time.Second {
		// Stats may walk the filter: keep it rare.
		if now.Sub(pp.statsAt) >= filterStatsInterval {
			pp.stats = pp.filter.Stats()
			pp.statsAt = now
			pp.pm.setFilter(pp.stats)
		}
		stats := pp.stats
		rate := float64(pp.rateCount) / dt.Seconds()
		pp.rateCount, pp.rateAt = 0, now
		lastOK, lastOffset, lastErr := pp.cp.state()
		committed, _ := pp.com.lastCommitted(pp.p)
		pp.w.updatePartition(pp.p, func(ps *PartitionStatus) {
			ps.Filter = stats
			ps.Rate = 0.7*rate + 0.3*ps.Rate
			ps.LastCheckpoint, ps.LastCheckpointOffset = lastOK, lastOffset
			ps.CheckpointError = ""
			if lastErr != nil {
				ps.CheckpointError = lastErr.Error()
			}
			ps.CommitsPaused = pp.commitsPaused
			ps.Committed = committed
		})
	}
}

// checkpoint captures the partition's state; called by the owner goroutine.
func (pp *partitionProc) checkpoint() Checkpoint {
	out := map[string]map[int]int64{}
	for tp, from := range pp.scanFrom {
		o := from
		// Below resume (replay), only the scan's start is known to lie
		// before every record written for input >= next: records of
		// [next, resume) were written by an earlier owner, anywhere after
		// it (docs/worker.md, "Checkpoints during replay").
		if pp.skip.len() == 0 && pp.next >= pp.resume {
			// Every record of this partition at src offset >= next is
			// written after now, so after anything acknowledged so far.
			o = max(o, pp.scanTo[tp], pp.w.out.ackedOffset(tp.topic, tp.partition))
		}
		if out[tp.topic] == nil {
			out[tp.topic] = map[int]int64{}
		}
		out[tp.topic][tp.partition] = o
	}
	var seed *SeedProgress
	if pp.seedTopic != nil {
		s := *pp.seedTopic
		seed = &s
	}
	return Checkpoint{
		InputOffset:   pp.next,
		OutputOffsets: out,
		Params:        pp.w.params,
		Snapshot:      pp.filter.Snapshot(),
		Owner:         pp.w.cfg.Owner,
		Seed:          seed,
	}
}

// finish ends a session whose ctx ended: on revoke or shutdown it commits and
// writes a final checkpoint (on revoke within half the session timeout);
// when fenced or halted it just stops.
func (pp *partitionProc) finish(ctx context.Context) error {
	w := pp.w
	cause := context.Cause(ctx)
	if w.hooks.Halted.Load() {
		return nil
	}
	if lost(ctx) {
		pp.log.Warn("partition lost; stopped without final commit", "cause", cause)
		return nil
	}
	replaying := pp.next < pp.resume
	pp.setState("stopping")
	// A revoke must end within the session timeout (kafka-go sends no
	// heartbeats meanwhile): a final checkpoint that does not fit in half of
	// it is abandoned, and the next owner's recovery replays from the
	// stored one.
	budget := w.cfg.ShutdownTimeout
	if !w.stopping.Load() {
		budget = min(budget, w.cfg.sessionTimeout()/2)
	}
	sctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	start := w.deps.Now()
	// During replay the group's offset is already beyond next: nothing to
	// commit, but a checkpoint keeps the replay's progress.
	if !pp.commitsPaused && !replaying {
		if err := pp.com.commitNow(sctx, pp.p, pp.next); err != nil {
			pp.log.Warn("final offset commit failed; the next owner recovers from the output", "offset", pp.next, "err", err)
		}
	}
	if err := pp.cp.idle(sctx); err != nil {
		pp.log.Warn("final checkpoint skipped: previous upload still running", "err", err)
		return nil
	}
	if _, lastOffset, _ := pp.cp.state(); lastOffset == pp.next && pp.seedTopic == nil {
		pp.log.Info("partition released; stored checkpoint is current", "offset", pp.next, "took", w.deps.Now().Sub(start))
		return nil
	}
	if err := pp.cp.commit(sctx, pp.checkpoint()); err != nil {
		pp.log.Warn("final checkpoint failed", "offset", pp.next, "err", err)
		return nil
	}
	pp.log.Info("partition released", "offset", pp.next, "took", w.deps.Now().Sub(start))
	return nil
}

// lost reports whether ctx ended because the partition belongs to someone
// else now (fenced checkpoint, or an offset commit rejected for a stale
// generation): then nothing more may be written, committed or checkpointed.
func lost(ctx context.Context) bool {
	cause := context.Cause(ctx)
	return cause != nil && (errors.Is(cause, errFencedPartition) || errors.Is(cause, errStaleGeneration))
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
