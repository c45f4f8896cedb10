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
type recoveryPlan struct {
	store    PartitionStore // this session's handle: claimed
	restored *Restored
	// fresh: a new group's partition; its start offset is committed and
	// its initial checkpoint is due before anything is read.
	fresh     bool
	committed int64 // A: the group's committed offset, or where this process got to
	c, resume int64 // C: where reading starts; R: where forwarding resumes
	skip      *skipSet
	scanFrom  map[topicPartition]int64 // per written partition: where the scan began
	scanTo    map[topicPartition]int64 // … and the high-water mark it ran to
	scanned   int
	seedTopic *SeedProgress // the seed topic's unfinished read, if any
	// prov writes and verifies the provenance of this memory's records.
	prov *provenance
	// legacyBefore: where records without provenance may be this memory's
	// (scanResult.legacyBefore).
	legacyBefore map[topicPartition]int64
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

// recover restores and claims the partition's newest usable checkpoint and
// decides C, A and R and the skip set (recovery.go's top comment), logging
// what it will do. It changes no session state of pp; for a new group it
// commits the start offset and records the seeding range in pp (assignment
// state: a later session of the same assignment needs it).
func (pp *partitionProc) recover(ctx context.Context) (*recoveryPlan, error) {
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

	pp.setState("recovering")
	in, err := w.bounds(ctx, w.cfg.Input, []int{pp.p})
	if err != nil {
		return nil, err
	}
	ib := in[pp.p]
	// The group's committed offset (-1: none), read at every recovery.
	offsets, err := w.member.FetchOffsets(ctx, []int{pp.p})
	if err != nil {
		return nil, err
	}
	committed := offsets[pp.p]
	lastCommitted, haveCommitted := pp.com.LastCommitted(pp.p)
	// A new group's partition: where to start forwarding and seeding.
	fresh := committed < 0 && !haveCommitted && pp.next < 0 && restored.InputOffset < 0 &&
		(!w.cfg.StartFrom.IsEarliest() || w.cfg.SeedFrom != nil || w.cfg.SeedTopic != "")
	var seed int64
	if fresh {
		var start int64
		if start, seed, err = pp.startOffsets(ctx, ib); err != nil {
			return nil, err
		}
		// Durable before anything is read: a restart must not resolve
		// "latest" or "72h ago" again and skip or re-forward records.
		if err := pp.com.CommitNow(ctx, pp.p, start); err != nil {
			return nil, fmt.Errorf("committing the start offset %d: %w", start, err)
		}
		pp.log.Info("new group: starting", "start_from", w.cfg.StartFrom, "start_offset", start,
			"seed_offset", seed, "seed_records", start-seed, "retained_from", ib.first)
		committed, pp.seeded, pp.seeding = start, seed, seed < start
	}
	// The seed topic's read: where the checkpoint left it, or, for a memory
	// without a checkpoint, all of it.
	switch {
	case restored.InputOffset >= 0:
		if restored.Seed != nil {
			s := *restored.Seed
			pl.seedTopic = &s
		}
	case w.cfg.SeedTopic != "":
		if pl.seedTopic, err = pp.seedRange(ctx); err != nil {
			return nil, err
		}
		pp.log.Info("seeding from another topic first", "seed_topic", w.cfg.SeedTopic,
			"from", pl.seedTopic.Next, "to", pl.seedTopic.End, "records", pl.seedTopic.End-pl.seedTopic.Next)
	}
	// A: the group's committed offset, this process's, or where an
	// earlier session of this assignment got to (-1: none).
	a := max(committed, -1)
	if haveCommitted && lastCommitted > a {
		a = lastCommitted
	}
	if pp.next > a {
		a = pp.next
	}
	// Is the log still the one the memory was built from? (inputlog.go)
	chk := pp.checkInputLog(ctx, restored, ib, a)
	c := restored.InputOffset
	if c < 0 && pp.seeded >= 0 {
		c = pp.seeded
	}
	committed = a
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
	if w.cfg.MaxReplay > 0 && resume-c > w.cfg.MaxReplay {
		pp.log.Warn("replay bounded by max-replay; older keys of this partition are forgotten",
			"from", c, "to", resume, "max_replay", w.cfg.MaxReplay)
		c = resume - w.cfg.MaxReplay
	}
	if restored.InputOffset >= 0 && pp.seeded < 0 && c < resume && resume <= restored.SeedingUntil {
		// A seeding that an earlier process began: [c, resume) lies
		// before the group's start and was never forwarded.
		pp.seeding = true
	}
	switch {
	case restored.InputOffset >= 0 && pp.seeding:
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
	case pp.seeding:
		// "new group: starting" said what is seeded.
	case resume == c:
		pp.log.Info("no checkpoint and nothing to replay: a new memory", "start_offset", resume)
	default:
		pp.log.Info(fmt.Sprintf("no checkpoint; rebuilding the filter from the retained input, replaying %d records", resume-c),
			"replay_from", c, "replay_to", resume)
	}
	var key []byte
	if k, ok := restored.Filter.(ProvenanceKeyer); ok {
		key = k.ProvenanceKey()
	}
	pl.prov = newProvenance(key, w.cfg.Group, w.cfg.Input, pp.p)
	var scan *progress
	res, err := w.scanWritten(ctx, pp.p, resume, restored, pl.prov, pl.reset, func(done, total int64) {
		if scan == nil {
			scan = pp.beginProgress(phaseScanning, 0, total)
		}
		scan.update(done, 0)
	})
	if scan != nil {
		scan.end()
	}
	if err != nil {
		return nil, err
	}
	pl.skip, pl.scanFrom, pl.scanTo, pl.scanned, pl.legacyBefore = res.skip, res.from, res.to, res.scanned, res.legacyBefore
	pl.fresh, pl.committed, pl.c, pl.resume = fresh, committed, c, resume
	return pl, nil
}
