package repartition

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomgate/bloomgate/internal/backoff"
	"github.com/bloomgate/bloomgate/internal/fetcher"
	"github.com/bloomgate/bloomgate/internal/group"
	"github.com/bloomgate/bloomgate/internal/producer"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// hopPartition is one assigned input partition of the hop: its fetcher,
// its writer and the offset acknowledged last. Only its goroutine uses it.
type hopPartition struct {
	r       *Repartitioner
	com     *group.Committer
	p       int
	log     *slog.Logger
	f       *fetcher.Partition
	pw      *partWriter
	records prometheus.Counter
	retry   *backoff.Backoff
	// next is the input offset before which every record is written and
	// acknowledged (-1: none yet).
	next int64
}

// runPartition reads one partition from its committed offset and writes
// every record, re-reading from the last acknowledged position after any
// failure, until ctx ends; a revoke ends it with a final commit. A member
// found to have lost its generation (the committer's fence, a pause past
// the session timeout) writes nothing more: the hop is at-least-once, and
// what a zombie writes is a copy the dedup stage removes, but it must not
// commit.
func (r *Repartitioner) runPartition(ctx context.Context, com *group.Committer, p int) {
	hp := &hopPartition{r: r, com: com, p: p, log: r.log.With("partition", p), next: -1,
		retry: backoff.New(100*time.Millisecond, 5*time.Second)}
	defer hp.commitOnRevoke(ctx)
	start, ok := hp.startOffset(ctx)
	if !ok {
		return
	}
	f, err := fetcher.New(fetcher.Config{Transport: r.cfg.Transport, Brokers: r.cfg.Brokers, Topic: r.cfg.Input,
		Partition: p, Isolation: r.cfg.Isolation, MaxBytes: 1 << 20}, start)
	if err != nil {
		hp.log.Error("creating fetcher", "err", err)
		return
	}
	hp.f = f
	hp.records = r.records.WithLabelValues(r.cfg.Input, strconv.Itoa(p))
	hp.pw = r.newPartWriter(p, hp.log)
	for ctx.Err() == nil && hp.step(ctx) {
	}
}

// commitOnRevoke commits where the partition got to if its work ended by a
// revoke (not a loss).
func (hp *hopPartition) commitOnRevoke(ctx context.Context) {
	if cause := context.Cause(ctx); hp.next < 0 || !errors.Is(cause, group.ErrRevoked) {
		return
	}
	cctx, cancel := context.WithTimeout(context.Background(), hp.r.cfg.SessionTimeout)
	defer cancel()
	if err := hp.com.CommitNow(cctx, hp.p, hp.next); err != nil {
		hp.log.Warn("final repartition offset commit failed; the next owner re-reads (copies are removed downstream)", "err", err)
	}
}

// acked records that everything before o is written and acknowledged.
func (hp *hopPartition) acked(ctx context.Context, o int64) {
	hp.next = o
	hp.com.Offer(ctx, hp.p, o)
}

// startOffset is the group's committed offset of the partition, or else
// the log start; read again until it is known or ctx ends (false).
func (hp *hopPartition) startOffset(ctx context.Context) (int64, bool) {
	retry := backoff.New(200*time.Millisecond, 5*time.Second)
	for {
		offs, err := hp.r.member.FetchOffsets(ctx, []int{hp.p})
		if err == nil && offs[hp.p] >= 0 {
			return offs[hp.p], true
		}
		var b int64
		if err == nil {
			b, err = hp.r.firstOffset(ctx, hp.p)
		}
		if err == nil {
			return b, true
		}
		if !hp.r.refused(err) {
			hp.log.Warn("reading the start offset failed; retrying", "err", err)
		}
		if !retry.Wait(ctx, 0) {
			return 0, false
		}
	}
}

// step fetches the partition's next records and writes them. It returns
// false when the partition's work ends: ctx ended, or its generation is
// lost.
func (hp *hopPartition) step(ctx context.Context) bool {
	from := hp.f.Offset()
	c, err := hp.f.Fetch(ctx)
	if err != nil {
		return hp.fetchFailed(ctx, from, err)
	}
	hp.retry.Reset()
	if len(c.Records) == 0 {
		if c.Next > from {
			hp.acked(ctx, c.Next)
		}
		return true
	}
	st, err := hp.pw.build(ctx, &c)
	if err != nil {
		hp.log.Warn("repartition write failed; re-reading from the last acknowledged offset", "err", err, "offset", from)
		hp.f.SetOffset(from)
		return hp.retry.Wait(ctx, 0)
	}
	next := c.Next
	if st != nil {
		next = st.offset
	}
	if hp.com.PausedTooLong() {
		// A zombie: the group has moved this partition on.
		hp.com.Fence(group.ErrPaused)
		return false
	}
	codec := hp.r.codec
	if hp.r.followInput {
		codec = producer.Codec(c.Codec)
	}
	// Never cancelled by a revoke: a cancelled write may land later,
	// and a copy is harmless, but a lost acknowledgement is not.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*hp.r.cfg.WriteTimeout)
	fail := hp.pw.write(wctx, codec)
	cancel()
	if fail != nil {
		return hp.writeFailed(ctx, from, c.Next, fail)
	}
	hp.records.Add(float64(len(hp.pw.recs)))
	hp.pw.acked(next)
	hp.acked(ctx, next)
	if st != nil {
		// Wait before the unwritable record, then read it again with
		// the limits read again: a raised max.message.bytes lets it go.
		hp.pw.stall(st)
		hp.f.SetOffset(st.offset)
		if !backoff.Sleep(ctx, hp.r.cfg.UnwritableRetry) {
			return false
		}
		delete(hp.pw.refused, st.offset)
		hp.r.readLimits(ctx, false, true)
	}
	return true
}

// fetchFailed handles a failed fetch from offset from: past the log start
// (retention), the read skips to it; else it is retried after a wait.
func (hp *hopPartition) fetchFailed(ctx context.Context, from int64, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var oe *fetcher.OffsetError
	if errors.As(err, &oe) {
		b, lerr := hp.r.firstOffset(ctx, hp.p)
		if lerr == nil && b > from {
			hp.log.Warn("input retention passed the position; skipping to the log start", "from", from, "log_start", b)
			hp.f.SetOffset(b)
			return true
		}
	}
	if !hp.r.refused(err) {
		hp.log.Debug("fetch failed; retrying", "err", err)
	}
	return hp.retry.Wait(ctx, 0)
}

// writeFailed handles a failed write of the records read from offset from
// up to next: read again from from, at once if the batch was refused for
// what it holds (written again one record per request, or the refused
// record placed), else after a wait.
func (hp *hopPartition) writeFailed(ctx context.Context, from, next int64, fail *writeFailure) bool {
	hp.f.SetOffset(from)
	if hp.pw.failed(fail, next) {
		hp.log.Info("repartition batch refused for its records; writing them again", "err", fail.err, "records", fail.batch, "offset", from)
		hp.r.readLimits(ctx, false, refusal(fail.err) == worker.ReasonRecordTooLarge)
		return true
	}
	if !hp.r.refused(fail.err) {
		hp.log.Warn("repartition write failed; re-reading from the last acknowledged offset", "err", fail.err, "offset", from)
	}
	return hp.retry.Wait(ctx, 0)
}
