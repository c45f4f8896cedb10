package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/bloomgate/bloomgate/internal/backoff"
	"github.com/bloomgate/bloomgate/internal/errmark"
)

// Recovery, in short (the argument is in docs/worker.md):
//
//	C  = checkpoint input offset (state covers input < C)
//	A  = group's committed offset (outputs of input < A are acknowledged)
//	R  = max(C, A): where forwarding may resume
//	replay input [C, R) into the filter without writing;
//	scan every written partition from the checkpoint's output offset O for
//	records naming this partition at src offset >= R: they were written but
//	not committed. They form the skip set: from R on, input is processed in
//	order as always, but a record in the skip set is only inserted, not
//	written again.
//
// Processing in input order (instead of inserting scanned keys first) keeps
// the filter a pure function of the input sequence, rotation included.

type offsetBounds struct{ first, last int64 } // log start and high-water mark

// bounds lists log start and high-water mark of partitions of one topic.
func (w *Worker) bounds(ctx context.Context, topic string, partitions []int) (map[int]offsetBounds, error) {
	reqs := make([]kafka.OffsetRequest, 0, 2*len(partitions))
	for _, p := range partitions {
		reqs = append(reqs, kafka.FirstOffsetOf(p), kafka.LastOffsetOf(p))
	}
	res, err := w.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("listing offsets of %s: %w", topic, err)
	}
	out := map[int]offsetBounds{}
	for _, po := range res.Topics[topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("listing offsets of %s/%d: %w", topic, po.Partition, po.Error)
		}
		out[po.Partition] = offsetBounds{first: po.FirstOffset, last: po.LastOffset}
	}
	for _, p := range partitions {
		if _, ok := out[p]; !ok {
			return nil, fmt.Errorf("listing offsets of %s/%d: partition missing from the answer", topic, p)
		}
	}
	return out, nil
}

// restore loads the partition's newest usable checkpoint through h,
// retrying store failures until ctx ends. None at all is an empty memory;
// none usable is one too with on-restore-failure=empty (counted and
// reported: discards.go), else fatal.
func (pp *partitionProc) restore(ctx context.Context, h PartitionStore) (*Restored, error) {
	w := pp.w
	w.discards.enter()
	defer w.discards.leave(w)
	b := backoff.New(200*time.Millisecond, 10*time.Second)
	for {
		r, err := h.Restore(ctx, w.params)
		switch {
		case err == nil:
			return r, nil
		case errors.Is(err, ErrNoCheckpoint):
			// The session logs what it does instead (new group, or a
			// rebuild from the retained input).
			return pp.empty(h)
		case errors.Is(err, ErrNoUsableCheckpoint):
			if w.cfg.OnRestoreFailure == RestoreEmpty {
				w.discards.discarded(w, pp.p, err)
				return pp.empty(h)
			}
			if errors.Is(err, ErrIncompatible) {
				return nil, errmark.Mark(err, errWorkerStopped) // names the settings and the fix itself
			}
			return nil, fmt.Errorf("%w: restoring %s/%d: %w; --on-restore-failure empty starts it empty instead, rebuilt from the retained input",
				errWorkerStopped, w.cfg.Input, pp.p, err)
		case ctx.Err() != nil:
			return nil, ctx.Err()
		}
		pp.log.Warn("restoring checkpoint failed; retrying", "err", err, "backoff", b.Delay())
		if !b.Wait(ctx, 0) {
			return nil, ctx.Err()
		}
	}
}

// empty returns an empty memory: from the handle h if its filters belong
// to their partition (PartitionFilterMaker), else from the StateStore.
func (pp *partitionProc) empty(h PartitionStore) (*Restored, error) {
	newFilter := pp.w.deps.State.NewFilter
	if m, ok := h.(PartitionFilterMaker); ok {
		newFilter = m.NewFilter
	}
	f, err := newFilter(pp.w.params)
	if err != nil {
		return nil, fmt.Errorf("%w: creating filter: %w", errWorkerStopped, err)
	}
	return &Restored{Filter: f, InputOffset: -1}, nil
}

// claim fences earlier owners through h, retrying store failures until ctx
// ends; ErrFenced (someone committed between Restore and Claim) ends the
// session, whose successor restores again.
func (pp *partitionProc) claim(ctx context.Context, h PartitionStore) error {
	b := backoff.New(200*time.Millisecond, 10*time.Second)
	for {
		err := h.Claim(ctx, pp.w.cfg.Owner)
		if err == nil || ctx.Err() != nil {
			return err
		}
		if errors.Is(err, ErrFenced) {
			return fmt.Errorf("claiming checkpoint: %w", err)
		}
		pp.log.Warn("claiming checkpoint failed; retrying", "err", err, "backoff", b.Delay())
		if !b.Wait(ctx, 0) {
			return ctx.Err()
		}
	}
}

// recoveryPlan is what recovery decides before a session reads its input
// (see the top of this file): the restored and claimed checkpoint, C, A and
// R, the skip set and where the output scan ran, and the seed topic's read.
// The session takes it in one place (applyPlan).
type recoveryPlan struct {
	store    PartitionStore // this session's handle: claimed
	restored *Restored
	// fresh: a new group's partition; its start offset is committed and
	// its initial checkpoint is due before anything is read.
	fresh     bool
	committed int64 // A: the group's committed offset, or where this process got to
	c, resume int64 // C: where reading starts; R: where forwarding resumes
	// seeding: the replay [c, resume) seeds a new group's memory (begun
	// by this assignment, or by an earlier process) and is shown so.
	seeding bool
	// writtenState: the skip set, where the output scan ran, the
	// provenance of this memory's records and where records without one
	// may be this memory's.
	writtenState
	scanned   int
	seedTopic *SeedProgress // the seed topic's unfinished read, if any
	// reset: the input's log is another than the memory's, or was cut
	// short (inputlog.go): nothing the written topics hold counts as
	// written for it, and a checkpoint and a commit of the new position
	// (resume) come before anything is read.
	reset bool
	// resetReason is what checkInputLog found ("": the log is the
	// memory's).
	resetReason string
	// mark is the input mark to carry until a record is handled.
	mark *InputMark
}

// writtenState is what recovery found of this partition's records in the
// written topics, kept by the session: the skip set, the scan's bounds
// (the output offsets of checkpoints), the provenance this memory's
// records carry and are judged by, and legacyBefore, where records
// without provenance may still be this memory's (Checkpoint.LegacyBefore).
type writtenState struct {
	skip         *skipSet
	scanFrom     map[topicPartition]int64 // per written partition: where the scan began
	scanTo       map[topicPartition]int64 // … and the high-water mark it ran to
	prov         *provenance
	legacyBefore map[topicPartition]int64
}

// inputPositions is what recovery reads of the input partition before it
// decides C, A and R.
type inputPositions struct {
	bounds    offsetBounds // log start and high-water mark
	committed int64        // the group's committed offset (-1: none), read at every recovery
	// lastCommitted is what this process committed, if haveCommitted
	// (group.Committer.LastCommitted).
	lastCommitted int64
	haveCommitted bool
}

// recover restores and claims the partition's newest usable checkpoint and
// decides C, A and R and the skip set (recovery.go's top comment), logging
// what it will do. It changes no session state of pp (applyPlan does); for
// a new group it commits the start offset and records the seeding range in
// pp at once (assignment state, startNewGroup: a later session of the same
// assignment needs it even if this recovery fails after the commit).
func (pp *partitionProc) recover(ctx context.Context) (*recoveryPlan, error) {
	pl, err := pp.restoreAndClaim(ctx)
	if err != nil {
		return nil, err
	}
	pp.setState("recovering")
	pos, err := pp.readPositions(ctx)
	if err != nil {
		return nil, err
	}
	if pl.fresh = pp.newGroup(pos, pl.restored); pl.fresh {
		if pos.committed, err = pp.startNewGroup(ctx, pos.bounds); err != nil {
			return nil, err
		}
	}
	if pl.seedTopic, err = pp.seedTopicRead(ctx, pl.restored); err != nil {
		return nil, err
	}
	pp.planOffsets(ctx, pl, pos)
	pp.logPlan(pl)
	if err := pp.scanForSkip(ctx, pl); err != nil {
		return nil, err
	}
	return pl, nil
}

// applyPlan starts the session from pl: the one place where recovery's
// decisions become session state of pp.
func (pp *partitionProc) applyPlan(pl *recoveryPlan) {
	pp.store, pp.filter, pp.seedTopic = pl.store, pl.restored.Filter, pl.seedTopic
	pp.writtenState = pl.writtenState
	pp.restoredOffset, pp.commitsHeld = pl.restored.InputOffset, false
	pp.mark = pl.mark
	pp.seeding = pl.seeding
	pp.pm.alreadyWritten.Add(float64(pl.skip.len()))
	pp.next, pp.resume = pl.c, pl.resume
	pp.w.updatePartition(pp.p, func(ps *PartitionStatus) { ps.NextOffset, ps.ResumeOffset = pl.c, pl.resume })
}

// restoreAndClaim starts a plan with the partition's newest usable
// checkpoint, restored and claimed through a new handle.
func (pp *partitionProc) restoreAndClaim(ctx context.Context) (*recoveryPlan, error) {
	w := pp.w
	pp.setState("restoring")
	// A fresh handle per session: a handle claims once, and after ErrFenced
	// from Claim the store wants a new Restore on a new handle.
	pl := &recoveryPlan{store: w.deps.State.Partition(w.cfg.Input, pp.p)}
	restored, err := pp.restore(ctx, pl.store)
	if err != nil {
		return nil, err
	}
	pl.restored = restored
	if err := pp.claim(ctx, pl.store); err != nil {
		return nil, err
	}
	return pl, nil
}

// readPositions reads the input partition's bounds and the group's
// committed offset.
func (pp *partitionProc) readPositions(ctx context.Context) (inputPositions, error) {
	w := pp.w
	in, err := w.bounds(ctx, w.cfg.Input, []int{pp.p})
	if err != nil {
		return inputPositions{}, err
	}
	offsets, err := w.member.FetchOffsets(ctx, []int{pp.p})
	if err != nil {
		return inputPositions{}, err
	}
	pos := inputPositions{bounds: in[pp.p], committed: offsets[pp.p]}
	pos.lastCommitted, pos.haveCommitted = pp.com.LastCommitted(pp.p)
	return pos, nil
}

// newGroup reports whether the partition starts a new group's memory:
// nothing committed, no checkpoint, nothing read by this assignment, and a
// start or seeding other than the whole retained input.
func (pp *partitionProc) newGroup(pos inputPositions, restored *Restored) bool {
	cfg := &pp.w.cfg
	return pos.committed < 0 && !pos.haveCommitted && pp.next < 0 && restored.InputOffset < 0 &&
		(!cfg.StartFrom.IsEarliest() || cfg.SeedFrom != nil || cfg.SeedTopic != "")
}

// startNewGroup resolves a new group's start and seed offsets, commits the
// start and records the seeding range in pp (seeded, seeding: assignment
// state). It returns the start offset, now the group's committed offset.
func (pp *partitionProc) startNewGroup(ctx context.Context, ib offsetBounds) (int64, error) {
	w := pp.w
	start, seed, err := pp.startOffsets(ctx, ib)
	if err != nil {
		return 0, err
	}
	// Durable before anything is read: a restart must not resolve
	// "latest" or "72h ago" again and skip or re-forward records.
	if err := pp.com.CommitNow(ctx, pp.p, start); err != nil {
		return 0, fmt.Errorf("committing the start offset %d: %w", start, err)
	}
	pp.log.Info("new group: starting", "start_from", w.cfg.StartFrom, "start_offset", start,
		"seed_offset", seed, "seed_records", start-seed, "retained_from", ib.first)
	pp.seeded, pp.seeding = seed, seed < start
	return start, nil
}

// acknowledged is A: the group's committed offset, this process's, or
// where an earlier session of this assignment got to (-1: none).
func (pp *partitionProc) acknowledged(pos inputPositions) int64 {
	a := max(pos.committed, -1)
	if pos.haveCommitted && pos.lastCommitted > a {
		a = pos.lastCommitted
	}
	if pp.next > a {
		a = pp.next
	}
	return a
}

// planOffsets decides C, A and R of pl (and whether the input's log was
// reset under the memory), logging what the input's retention, a reset
// and max-replay cost.
func (pp *partitionProc) planOffsets(ctx context.Context, pl *recoveryPlan, pos inputPositions) {
	restored, ib := pl.restored, pos.bounds
	a := pp.acknowledged(pos)
	// Is the log still the one the memory was built from? (inputlog.go)
	chk := pp.checkInputLog(ctx, restored, ib, a)
	c := restored.InputOffset
	if c < 0 && pp.seeded >= 0 {
		c = pp.seeded
	}
	committed := a
	pl.mark = restored.Mark
	switch chk.reason {
	case resetRecreated:
		// Another log: the memory's positions name records of the old one.
		// Everything the new log holds is read, with the memory kept.
		c, committed, pl.reset = ib.first, ib.first, true
		pl.mark = nil
	case resetTruncated:
		// The log is the memory's up to the checkpoint (its mark matches);
		// after it, records the group processed are gone and new ones may
		// already have taken their offsets. Read on from the checkpoint:
		// what the written topics hold for those offsets was written for
		// the old records and may not count as written for new ones.
		committed, pl.reset = c, true
	}
	if committed < 0 {
		committed = ib.first
	}
	if c < ib.first {
		if c >= 0 && restored.OutputOffsets != nil {
			pp.log.Warn("input retention dropped records the checkpoint does not cover; keys among them are forgotten",
				"checkpoint_offset", c, "log_start", ib.first)
		}
		c = ib.first
	}
	resume := max(c, committed)
	if resume > ib.last { // truncated (checkInputLog): the records after the end are gone
		resume = ib.last
		c = min(c, resume)
	}
	if chk.reason != "" {
		pp.reportReset(chk, ib, a, restored.InputOffset, resume)
	}
	pl.resetReason = chk.reason
	pl.committed, pl.c, pl.resume = committed, c, resume
	pp.boundReplay(pl)
}

// boundReplay shortens the replay [c, resume) of pl to max-replay and
// decides whether it seeds.
func (pp *partitionProc) boundReplay(pl *recoveryPlan) {
	w, restored := pp.w, pl.restored
	if w.cfg.MaxReplay > 0 && pl.resume-pl.c > w.cfg.MaxReplay {
		pp.log.Warn("replay bounded by max-replay; older keys of this partition are forgotten",
			"from", pl.c, "to", pl.resume, "max_replay", w.cfg.MaxReplay)
		pl.c = pl.resume - w.cfg.MaxReplay
	}
	// A seeding that an earlier process began: [c, resume) lies before
	// the group's start and was never forwarded.
	resumed := restored.InputOffset >= 0 && pp.seeded < 0 && pl.c < pl.resume && pl.resume <= restored.SeedingUntil
	pl.seeding = pp.seeding || resumed
}

// logPlan says what the session restored and will replay or seed.
func (pp *partitionProc) logPlan(pl *recoveryPlan) {
	w, restored, c, resume := pp.w, pl.restored, pl.c, pl.resume
	switch {
	case restored.InputOffset >= 0 && pl.seeding:
		st := restored.Filter.Stats()
		pp.log.Info(fmt.Sprintf("restored %d keys from checkpoint seq %d, resuming the seeding: %d records before the start offset %d",
			st.EstKeys, restored.Sequence, resume-c, resume),
			"checkpoint_seq", restored.Sequence, "checkpoint_offset", restored.InputOffset,
			"estimated_keys", st.EstKeys, "seed_from", c, "start_offset", resume)
	case restored.InputOffset >= 0:
		st := restored.Filter.Stats()
		attrs := []any{"checkpoint_seq", restored.Sequence, "checkpoint_offset", restored.InputOffset,
			"estimated_keys", st.EstKeys, "replay_from", c, "replay_to", resume}
		if !restored.Written.IsZero() {
			attrs = append(attrs, "checkpoint_age", w.deps.Now().Sub(restored.Written).Round(time.Second).String())
		}
		pp.log.Info(fmt.Sprintf("restored %d keys from checkpoint seq %d, replaying %d records", st.EstKeys, restored.Sequence, resume-c), attrs...)
	case pl.seeding:
		// "new group: starting" said what is seeded.
	case resume == c:
		pp.log.Info("no checkpoint and nothing to replay: a new memory", "start_offset", resume)
	default:
		pp.log.Info(fmt.Sprintf("no checkpoint; rebuilding the filter from the retained input, replaying %d records", resume-c),
			"replay_from", c, "replay_to", resume)
	}
}

// scanForSkip scans the written topics for this memory's records at input
// offsets from resume on (scanWritten), showing its progress as a phase,
// and fills pl's writtenState.
func (pp *partitionProc) scanForSkip(ctx context.Context, pl *recoveryPlan) error {
	w := pp.w
	var key []byte
	if k, ok := pl.restored.Filter.(ProvenanceKeyer); ok {
		key = k.ProvenanceKey()
	}
	prov := newProvenance(key, w.cfg.Group, w.cfg.Input, pp.p)
	var scan *progress
	res, err := w.scanWritten(ctx, pp.p, pl.resume, pl.restored, prov, pl.reset, func(done, total int64) {
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
	pl.writtenState = writtenState{skip: res.skip, scanFrom: res.from, scanTo: res.to, prov: prov, legacyBefore: res.legacyBefore}
	pl.scanned = res.scanned
	return nil
}
