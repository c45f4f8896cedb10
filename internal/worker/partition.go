package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"
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
	b := newBackoff(200*time.Millisecond, 5*time.Second)
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
			b.reset() // a session that ran a while is a new failure
		}
		pp.log.Warn("partition failed; re-running exact recovery", "err", err, "backoff", b.delay())
		if !b.wait(ctx, 0) {
			return
		}
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
	pl, err := pp.recover(ctx)
	if err != nil {
		return err
	}
	c, resume, restored := pl.c, pl.resume, pl.restored
	pp.store, pp.filter, pp.seedTopic = pl.store, restored.Filter, pl.seedTopic
	pp.skip, pp.scanFrom, pp.scanTo = pl.skip, pl.scanFrom, pl.scanTo
	pp.pm.alreadyWritten.Add(float64(pl.skip.len()))
	pp.next, pp.resume = c, resume
	if err := pp.beforeReading(ctx, pl); err != nil {
		return err
	}

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
	if pl.fresh {
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
		"checkpoint_offset", c, "committed_offset", pl.committed, "resume_offset", resume,
		"replayed", replayed, "output_scanned", pl.scanned, "already_written", pl.skip.len(), "took", took)
	pp.w.updatePartition(pp.p, func(ps *PartitionStatus) {
		ps.RecoveryReplayed, ps.RecoverySkipped, ps.RecoveryDuration = replayed, pl.skip.len(), took
		ps.NextOffset, ps.Committed = pp.next, pl.committed
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
		pp.commitAfterCheckpoint(sctx, replaying)
		pp.log.Info("partition released; stored checkpoint is current", "offset", pp.next, "took", w.deps.Now().Sub(start))
		return nil
	}
	if err := pp.cp.commit(sctx, pp.checkpoint()); err != nil {
		pp.log.Warn("final checkpoint failed", "offset", pp.next, "err", err)
		return nil
	}
	pp.commitAfterCheckpoint(sctx, replaying)
	pp.log.Info("partition released", "offset", pp.next, "took", w.deps.Now().Sub(start))
	return nil
}

// commitAfterCheckpoint commits the final offset of a partition whose
// commits were paused for stale checkpoints, now that a checkpoint covers
// it: the pause bounds a later replay, which this checkpoint already does.
func (pp *partitionProc) commitAfterCheckpoint(ctx context.Context, replaying bool) {
	if !pp.commitsPaused || replaying {
		return
	}
	if err := pp.com.commitNow(ctx, pp.p, pp.next); err != nil {
		pp.log.Warn("final offset commit failed; the next owner recovers from the output", "offset", pp.next, "err", err)
		return
	}
	pp.commitsPaused = false
	pp.log.Info("final checkpoint current; offset committed although commits were paused", "offset", pp.next)
}

// lost reports whether ctx ended because the partition belongs to someone
// else now (fenced checkpoint, or an offset commit rejected for a stale
// generation): then nothing more may be written, committed or checkpointed.
func lost(ctx context.Context) bool {
	cause := context.Cause(ctx)
	return cause != nil && (errors.Is(cause, errFencedPartition) || errors.Is(cause, errStaleGeneration))
}
