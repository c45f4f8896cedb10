package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/bloomgate/bloomgate/internal/backoff"
	"github.com/bloomgate/bloomgate/internal/fetcher"
	"github.com/bloomgate/bloomgate/internal/group"
	"github.com/bloomgate/bloomgate/internal/leaders"
)

// partitionProc owns one assigned input partition: its filter, its reader,
// its checkpoints. Only its goroutine touches the filter.
type partitionProc struct {
	w     *Worker
	p     int
	gen   int32
	com   *group.Committer
	log   *slog.Logger
	pm    *partitionMetrics
	store PartitionStore
	// fence ends the partition's work at once (no more writes, no final
	// commit or checkpoint).
	fence context.CancelCauseFunc

	// seeded is where a new group's partition began remembering (see
	// startOffsets), kept for later sessions of the assignment in case the
	// first one ended before its initial checkpoint; -1 if not such a start.
	seeded int64
	// seeding is set from a new group's start until its seeding replay
	// ends: the replay's progress is then reported as seeding.
	seeding bool
	// seedTopic is the unfinished read of Config.SeedTopic (nil: none).
	seedTopic *SeedProgress

	// Session state, rebuilt by every recovery (applyPlan).
	filter Filter
	next   int64 // next input offset: everything before is handled and acknowledged
	resume int64 // input before it is replayed, not written
	// writtenState: the skip set, the recovery scan's bounds, the
	// provenance written records carry, legacyBefore (recovery.go).
	writtenState
	cp     *checkpointer
	pieces chan piece
	joined []*kafka.Message // the records of the batch being handled (nextBatch)
	// handled are the fetches whose last piece is in the batch being
	// handled: released by the next nextBatch.
	handled []*fetcher.Chunk
	// inCodec is the compression of the input batch the last records
	// came from: the output's with --compression input.
	inCodec int8
	// fetchErr is a fetch error that arrived while a batch was filling:
	// the batch is handed over first, the error by the next nextBatch.
	fetchErr error
	lsoLag   int64

	// wr builds, writes and places the records of the batch being
	// handled; it keeps the assignment's state about unwritable records
	// (writer.go, unwritable.go).
	wr     *partitionWriter
	keyBuf []byte
	ahead  *lookahead // from filterAhead to the end of the routing loop; nil between

	lastCheckpoint time.Time
	// soon: the next periodic checkpoint is due this long after the last
	// one instead of CheckpointInterval, while shorter (0: not at all).
	// A new memory and a seeding start at firstCheckpointAfter, and each
	// checkpoint doubles it (firstCheckpoint).
	soon          time.Duration
	commitsPaused bool
	// commitsHeld: commits wait at the last checkpoint plus MaxReplay
	// (commitLimit).
	commitsHeld bool
	// restoredOffset is the input offset of the checkpoint this session
	// restored (-1: none).
	restoredOffset int64
	// mark is the last input record handled (Checkpoint.Mark).
	mark *InputMark
	// stats: the assignment's counts, rate and filter statistics for the
	// status page.
	stats partitionStats
}

const filterStatsInterval = 5 * time.Second

// firstCheckpointAfter is when the first periodic checkpoint of a new
// memory, or of a seeding, comes after its records began: the stored state
// (inspect, a restart) shows them within seconds instead of a whole
// interval, and a seeding killed early does not start over. The next ones
// come after twice as long each, until the interval: a handful more
// checkpoints, and a kill in the first minutes costs at most about half of
// what was done.
const firstCheckpointAfter = 10 * time.Second

// errFencedPartition is the cause of a partition stop because another owner
// took it.
var errFencedPartition = errors.New("partition fenced")

func (w *Worker) runPartition(gctx context.Context, gen int32, com *group.Committer, p int) {
	ctx, cancel := context.WithCancelCause(gctx)
	defer cancel(nil)
	pp := &partitionProc{
		w: w, p: p, gen: gen, com: com,
		log:    w.log.With("partition", p, "generation", gen),
		pm:     w.m.partition(w.cfg.Input, p),
		next:   -1,
		seeded: -1,
		fence:  func(err error) { cancel(errors.Join(errFencedPartition, err)) },
	}
	pp.wr = newPartitionWriter(w, p, com, pp.log, pp.pm)
	defer w.removePartition(p, gen)
	// A moved partition's gauges belong to its new owner: summing filter
	// bytes or lag over workers must not count it twice.
	defer func() {
		pp.pm.lag.Set(0)
		pp.pm.setFilter(FilterStats{})
	}()
	w.startPartitionStatus(p, gen, -1)
	b := backoff.New(200*time.Millisecond, 5*time.Second)
	var failing failureLog
	for {
		began := w.deps.Now()
		err := pp.session(ctx)
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			pp.log.Info("partition revoked during recovery", "err", err)
			return
		}
		if errors.Is(err, errWorkerStopped) {
			// Run returns err, and its caller reports it: once.
			pp.log.Info("partition stopped; stopping the worker")
			w.stop(err)
			return
		}
		var st *stallError
		if errors.As(err, &st) {
			// Not a failure: the next session recovers up to the record
			// and waits before it. Logged once per record.
			if failing.stalledAt != st.offset+1 {
				failing.stalledAt = st.offset + 1
				pp.log.Error("partition stalled before an unwritable record; other partitions go on",
					"offset", st.offset, "topic", st.topic, "reason", st.why, "size", st.size, "err", st)
			}
			pp.showStall(w.deps.Now().Add(w.unwritableRetry))
			b.Reset()
			continue
		}
		if w.deps.Now().Sub(began) > time.Minute {
			b.Reset() // a session that ran a while is a new failure
		}
		if w.accessFailed(err) {
			// Logged at ERROR by the access rule; the status shows it.
			pp.failed(err, &failureLog{last: err.Error(), at: w.deps.Now()}, b.Delay())
		} else {
			pp.failed(err, &failing, b.Delay())
		}
		if leaders.Stale(err) && w.leaders != nil {
			// A request of the session (listing offsets, reading the
			// output back) went to a broker that no longer leads the
			// partition: without a refresh, kafka-go's Transport sends
			// the next session's requests there too until its periodic
			// refresh (0-6 s).
			_ = w.leaders.Refresh(ctx)
		}
		if !b.Wait(ctx, 0) {
			return
		}
	}
}

// failureLog rate-limits the log lines of a partition whose sessions keep
// failing: the first failure and each new error at WARN, repeats of the
// same one at most once a minute (the stall watchdog reports the
// partition at ERROR; stuck.go).
type failureLog struct {
	last      string
	at        time.Time
	repeats   int
	stalledAt int64 // 1 + the offset of the last stall logged
}

const failureLogEvery = time.Minute

// failed records a failed session: its state and error on the status
// page, and a log line unless a recent one said the same.
func (pp *partitionProc) failed(err error, fl *failureLog, backoff time.Duration) {
	msg := err.Error()
	now := pp.w.deps.Now()
	pp.w.updatePartition(pp.p, func(ps *PartitionStatus) {
		ps.Topic, ps.Partition, ps.Generation, ps.State = pp.w.cfg.Input, pp.p, pp.gen, "failing"
		ps.LastError, ps.LastErrorAt = msg, now
	})
	if msg == fl.last && now.Sub(fl.at) < failureLogEvery {
		fl.repeats++
		pp.log.Debug("partition failed again; re-running exact recovery", "err", err, "backoff", backoff)
		return
	}
	attrs := []any{"err", err, "backoff", backoff, "offset", pp.next}
	if fl.repeats > 0 && msg == fl.last {
		attrs = append(attrs, "same_failures_since_last_line", fl.repeats)
	}
	pp.log.Warn("partition failed; re-running exact recovery", attrs...)
	fl.last, fl.at, fl.repeats = msg, now, 0
}

func (pp *partitionProc) setState(s string) {
	pp.w.updatePartition(pp.p, func(ps *PartitionStatus) {
		ps.Topic, ps.Partition, ps.Generation, ps.State = pp.w.cfg.Input, pp.p, pp.gen, s
	})
}

// session restores, recovers and processes until ctx ends (nil) or a
// failure needs a new recovery (error). Its steps: recover (recovery.go)
// and adopt the plan, start reading, start checkpointing (startCheckpoints),
// seed from another topic (seedFirst), replay up to resume (replay),
// report the recovery (recovered), then run.
//
// The steps that may end the session return end: then the session returns
// their err as it is (nil included), which is finish's result when ctx
// ended.
func (pp *partitionProc) session(ctx context.Context) error {
	w := pp.w
	start := w.deps.Now()
	pl, err := pp.recover(ctx)
	if err != nil {
		return err
	}
	pp.applyPlan(pl)
	c, restored := pl.c, pl.restored
	if err := pp.beforeReading(ctx, pl); err != nil {
		return err
	}

	stopReading, err := pp.startReading(ctx, c)
	if err != nil {
		return err
	}
	defer func() { stopReading() }()

	pp.cp = newCheckpointer(pp.store, w.cfg.CheckpointTimeout, pp.log, w.deps.Now, pp.fence)
	if restored.InputOffset >= 0 && restored.InputOffset == c {
		// The restored checkpoint (re-stored by Claim) covers c.
		pp.cp.lastOffset = c
	}
	pp.cp.start()
	defer pp.cp.stop()
	if err := pp.startCheckpoints(ctx, pl); err != nil {
		return err
	}
	if end, err := pp.seedFirst(ctx); end {
		return err
	}
	replayed, end, err := pp.replay(ctx)
	if end {
		return err
	}
	pp.recovered(pl, start, replayed)
	return pp.run(ctx, &stopReading)
}

// startCheckpoints stores the session's first checkpoint where it must be
// durable before anything is written, commits a reset input's new
// position, and schedules the periodic checkpoints.
func (pp *partitionProc) startCheckpoints(ctx context.Context, pl *recoveryPlan) error {
	restored := pl.restored
	if pl.fresh || restored.InputOffset < 0 || pl.reset {
		// A new memory is durable before it writes anything: the records
		// it writes carry provenance under its key, and a successor that
		// started yet another memory could not recognize them (they would
		// be written again). A new group's seeding range is durable too: a
		// restart replays [seed, start) from this checkpoint instead of
		// the whole retained input.
		if err := pp.cp.commit(ctx, pp.checkpoint()); err != nil {
			return fmt.Errorf("writing the initial checkpoint: %w", err)
		}
	}
	if pl.reset {
		// After the checkpoint: a successor restoring the old checkpoint
		// with this commit would resume in the middle of the new log.
		if err := pp.com.CommitNow(ctx, pp.p, pl.resume); err != nil {
			return fmt.Errorf("committing the input's new position %d: %w", pl.resume, err)
		}
	}
	pp.lastCheckpoint = pp.w.deps.Now()
	pp.stats.startRate(pp.lastCheckpoint)
	pp.soon = 0
	if restored.InputOffset < 0 || pl.reset || pp.seeding || pp.seedTopic != nil {
		pp.soon = firstCheckpointAfter
	}
	return nil
}

// seedFirst reads the unfinished seeding from Config.SeedTopic, if any.
// end: the session ends with err.
func (pp *partitionProc) seedFirst(ctx context.Context) (end bool, err error) {
	if pp.seedTopic != nil && pp.seedTopic.Next < pp.seedTopic.End {
		pp.setState("seeding")
		err := pp.seedFromTopic(ctx)
		if ctx.Err() != nil {
			return true, pp.finish(ctx)
		}
		if err != nil {
			return true, err
		}
	}
	pp.seedTopic = nil
	return false, nil
}

// replay handles [next, resume) before the partition is declared running,
// and returns the records replayed. Periodic checkpoints go on meanwhile
// (see checkpoint: their output offsets stay at the scan's start), so a
// long replay or seeding that is interrupted resumes where it was. end:
// the session ends with err.
func (pp *partitionProc) replay(ctx context.Context) (replayed int64, end bool, err error) {
	phase := phaseReplaying
	if pp.seeding {
		phase = phaseSeeding
	}
	pp.setState(phase)
	if pp.next >= pp.resume {
		return 0, false, nil
	}
	from := pp.next
	rp := pp.beginProgress(phase, pp.next, pp.resume)
	defer rp.end()
	for pp.next < pp.resume {
		batch, err := pp.nextBatch(ctx, replayIdle)
		if ctx.Err() != nil {
			return replayed, true, pp.finish(ctx)
		}
		if err != nil {
			return replayed, true, err
		}
		if len(batch.msgs) == 0 && batch.next <= pp.next {
			pp.log.Warn("replay idle before the committed offset; continuing", "at", pp.next, "resume", pp.resume)
			break
		}
		n, err := pp.handle(ctx, batch)
		replayed += n
		if err != nil {
			return replayed, true, err
		}
		rp.update(pp.next-from, uint64(replayed))
		pp.housekeeping(ctx)
	}
	return replayed, false, nil
}

// recovered ends the session's recovery, begun at start: logged, measured
// and shown, the partition running (or stalled before an unwritable
// record).
func (pp *partitionProc) recovered(pl *recoveryPlan, start time.Time, replayed int64) {
	w := pp.w
	pp.seeding = false
	took := w.deps.Now().Sub(start)
	w.m.recoveryDuration.WithLabelValues(w.cfg.Input).Observe(took.Seconds())
	pp.log.Info("partition recovered",
		"checkpoint_offset", pl.c, "committed_offset", pl.committed, "resume_offset", pl.resume,
		"replayed", replayed, "output_scanned", pl.scanned, "already_written", pl.skip.len(), "took", took)
	w.updatePartition(pp.p, func(ps *PartitionStatus) {
		ps.RecoveryReplayed, ps.RecoverySkipped, ps.RecoveryDuration = replayed, pl.skip.len(), took
		ps.NextOffset, ps.Committed = pp.next, pl.committed
	})
	pp.stats.setFilter(pp.filter.Stats(), w.deps.Now())
	stats := pp.stats.filter
	pp.pm.setFilter(stats)
	w.updatePartition(pp.p, func(ps *PartitionStatus) { ps.Filter = stats })
	w.partitionRecovered(pp.p)
	if pp.wr.stall == nil {
		pp.setState("running")
	} else {
		pp.showStall(w.deps.Now().Add(w.unwritableRetry))
	}
}

// run processes batches until ctx ends (finish) or a failure needs a new
// recovery. stopReading stops the session's reader; run replaces it when
// it reads again after a stall.
func (pp *partitionProc) run(ctx context.Context, stopReading *func()) error {
	for {
		if st := pp.wr.stall; st != nil && st.msg != nil && pp.next == st.offset {
			if end, err := pp.passStall(ctx, stopReading); end {
				return err
			}
		}
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

// passStall waits until the record the partition stalls before is placed
// (waitStalled). The reader is ahead of the record: it is stopped, and
// reads again from the record once it is placed. end: the session ends
// with err.
func (pp *partitionProc) passStall(ctx context.Context, stopReading *func()) (end bool, err error) {
	(*stopReading)()
	done, err := pp.waitStalled(ctx)
	if done {
		return true, pp.finish(ctx)
	}
	if err != nil {
		return true, err
	}
	if *stopReading, err = pp.startReading(ctx, pp.next); err != nil {
		return true, err
	}
	return false, nil
}

// startReading starts the pump from offset; the returned function stops
// it and waits for it (calling it again does nothing).
func (pp *partitionProc) startReading(ctx context.Context, offset int64) (stop func(), err error) {
	w := pp.w
	src, err := w.newFetcher(w.cfg.Input, pp.p, offset)
	if err != nil {
		return func() {}, err
	}
	rctx, cancel := context.WithCancel(ctx)
	// Fetches of an earlier reader are left to the collector: a session
	// that ended with an error may have stopped anywhere.
	clear(pp.handled)
	pp.handled = pp.handled[:0]
	pp.fetchErr = nil
	// Unbuffered: the pump fetches one piece ahead of the batch being
	// handled and waits with it, so a partition holds the batch's fetches
	// and one more. A buffered piece held a fourth fetch and its records
	// per partition (~2 MiB of peak RSS at 8 partitions; docs/
	// benchmarks-journal.md, "Output batches of 256 KiB").
	pp.pieces = make(chan piece)
	pumpDone := make(chan struct{})
	go func() { defer close(pumpDone); pp.pump(rctx, src, w.cfg.BatchSize, pp.pieces) }()
	return func() { cancel(); <-pumpDone }, nil
}

// housekeeping starts due checkpoints and refreshes filter metrics.
func (pp *partitionProc) housekeeping(ctx context.Context) {
	w := pp.w
	if w.hooks.Halted.Load() {
		return
	}
	now := w.deps.Now()
	every := w.cfg.CheckpointInterval
	if pp.soon > 0 && pp.soon < every {
		every = pp.soon
	}
	if now.Sub(pp.lastCheckpoint) >= every {
		if _, lastOffset, _ := pp.cp.state(); lastOffset == pp.next && pp.seedTopic == nil {
			// Idle: the stored checkpoint still covers everything (a new
			// memory's first checkpoint waits for records).
			pp.cp.touch(now)
			pp.lastCheckpoint = now
		} else if pp.cp.trySubmit(pp.checkpoint) {
			pp.lastCheckpoint = now
			pp.soon *= 2
		}
		pp.offerCommit(ctx)
	}
	if pp.stats.rateDue(now) {
		if pp.stats.filterDue(now) {
			pp.stats.refreshFilter(pp.filter.Stats(), now)
			pp.pm.setFilter(pp.stats.filter)
		}
		stats := pp.stats.filter
		rate := pp.stats.takeRate(now)
		lastOK, lastOffset, lastErr := pp.cp.state()
		committed, _ := pp.com.LastCommitted(pp.p)
		pp.w.updatePartition(pp.p, func(ps *PartitionStatus) {
			ps.Filter = stats
			ps.Rate = 0.7*rate + 0.3*ps.Rate
			ps.LastCheckpoint, ps.LastCheckpointOffset = lastOK, lastOffset
			ps.CheckpointError = ""
			if lastErr != nil {
				ps.CheckpointError = lastErr.Error()
			}
			ps.CommitsPaused = pp.commitsPaused || pp.commitsHeld
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
	// Records without provenance stay this memory's only where the next
	// recovery scan can still meet them.
	var legacy map[string]map[int]int64
	for tp, before := range pp.legacyBefore {
		if o, ok := out[tp.topic][tp.partition]; ok && o < before {
			if legacy == nil {
				legacy = map[string]map[int]int64{}
			}
			if legacy[tp.topic] == nil {
				legacy[tp.topic] = map[int]int64{}
			}
			legacy[tp.topic][tp.partition] = before
		}
	}
	return Checkpoint{
		InputOffset:   pp.next,
		OutputOffsets: out,
		Params:        pp.w.params,
		Snapshot:      pp.filter.Snapshot(),
		Owner:         pp.w.cfg.Owner,
		Seed:          seed,
		SeedingUntil:  pp.seedingUntil(),
		LegacyBefore:  legacy,
		Mark:          pp.mark,
	}
}

// seedingUntil is Checkpoint.SeedingUntil: the start offset while a
// seeding of the input is unfinished, else 0.
func (pp *partitionProc) seedingUntil() int64 {
	if pp.seeding && pp.next < pp.resume {
		return pp.resume
	}
	return 0
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
	// Heartbeats go on while a partition is revoked, but in an eager
	// rebalance the other members wait for this one to rejoin, at most the
	// rebalance timeout: a final checkpoint that does not fit in half of
	// it is abandoned, and the next owner's recovery replays from the
	// stored one.
	budget := w.cfg.ShutdownTimeout
	if !w.stopping.Load() {
		budget = min(budget, w.cfg.rebalanceTimeout()/2)
	}
	sctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	start := w.deps.Now()
	// During replay the group's offset is already beyond next: nothing to
	// commit, but a checkpoint keeps the replay's progress.
	if !pp.commitsPaused && !replaying && pp.commitLimit(pp.next) == pp.next {
		if err := pp.com.CommitNow(sctx, pp.p, pp.next); err != nil {
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
// commits were paused for stale checkpoints or held at the replay bound,
// now that a checkpoint covers it: the pause bounds a later replay, which
// this checkpoint already does.
func (pp *partitionProc) commitAfterCheckpoint(ctx context.Context, replaying bool) {
	if !(pp.commitsPaused || pp.commitsHeld) || replaying {
		return
	}
	if err := pp.com.CommitNow(ctx, pp.p, pp.next); err != nil {
		pp.log.Warn("final offset commit failed; the next owner recovers from the output", "offset", pp.next, "err", err)
		return
	}
	pp.commitsPaused, pp.commitsHeld = false, false
	pp.log.Info("final checkpoint current; offset committed although commits were paused", "offset", pp.next)
}

// lost reports whether ctx ended because the partition belongs to someone
// else now (fenced checkpoint, or an offset commit rejected for a stale
// generation): then nothing more may be written, committed or checkpointed.
func lost(ctx context.Context) bool {
	cause := context.Cause(ctx)
	return cause != nil && (errors.Is(cause, errFencedPartition) || errors.Is(cause, errStaleGeneration))
}
