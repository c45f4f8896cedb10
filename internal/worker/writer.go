package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/bloomgate/bloomgate/internal/group"
	"github.com/bloomgate/bloomgate/internal/producer"
)

// partitionWriter is a partition's side of the output: it builds the
// records of the batch being handled, writes them through the worker's
// output (output.go) within the written topics' bounds (limits.go), and
// places a record a topic cannot take by --on-unwritable (unwritable.go).
// It keeps what the partition's assignment knows about unwritable
// records: the input offsets to write one record per request after a
// refused batch, and the record the partition stalls before.
//
// It stays in package worker: it reads the worker's settings, limits,
// hooks and clock, counts in the batch's tally and builds the provenance
// header, all of them the worker's; what it needs of the partition (its
// number, committer, log, metrics) is given at construction, and the
// provenance of a session with each batch.
type partitionWriter struct {
	w   *Worker
	p   int
	com *group.Committer
	log *slog.Logger
	pm  *partitionMetrics
	// prov is the provenance the records being built carry
	// (partitionProc.writtenProvenance), set by begin.
	prov *provenance

	rb      recordBuilder // the batch's records
	rbAlone recordBuilder // records written alone, one at a time

	// isolate: input offsets written one record per request after a
	// refused batch; nil when none.
	isolate *offsetRange
	// stall: the unwritable record the partition waits before; nil when
	// none.
	stall *stall
	// unwritableLogAt and unwritableQuiet rate-limit the log lines about
	// placed unwritable records (noteUnwritable).
	unwritableLogAt time.Time
	unwritableQuiet int
}

func newPartitionWriter(w *Worker, p int, com *group.Committer, log *slog.Logger, pm *partitionMetrics) *partitionWriter {
	return &partitionWriter{w: w, p: p, com: com, log: log, pm: pm}
}

// begin readies the writer for a batch whose records carry prov.
func (wr *partitionWriter) begin(prov *provenance) {
	wr.prov = prov
	wr.reset(&wr.rb)
}

// reset readies rb for new records.
func (wr *partitionWriter) reset(rb *recordBuilder) {
	rb.reset(wr.p, wr.prov, wr.w.hooks.TextHeaders.Load())
}

// discard drops the batch's records unwritten: the session ends, and
// they point into fetches it will not read again.
func (wr *partitionWriter) discard() { wr.rb = recordBuilder{} }

// passed notes that the partition's position moved to next: the range
// to isolate ends once it lies behind.
func (wr *partitionWriter) passed(next int64) {
	if wr.isolate != nil && next > wr.isolate.hi {
		wr.isolate = nil
	}
}

// stallAt makes the partition wait before the record of st.
func (wr *partitionWriter) stallAt(st *stallError) {
	wr.stall = &stall{stallError: st, since: wr.w.deps.Now()}
}

// write writes the batch's records in order, compressed with codec: runs
// of ordinary records with one write each (batches per topic partition,
// output.go), the records in a range to isolate after a refused batch one
// record per produce request, an unwritable one placed by settle. Each
// write is acknowledged before the next starts, so the output keeps the
// input's order. A batch without records writes nothing.
func (wr *partitionWriter) write(ctx context.Context, t *tally, codec producer.Codec) error {
	recs := wr.rb.recs
	if len(recs) == 0 {
		return nil
	}
	if lost(ctx) {
		return fmt.Errorf("not writing: %w", context.Cause(ctx))
	}
	if wr.com.PausedTooLong() {
		// A zombie: the group has moved this partition on.
		wr.com.Fence(errPaused)
		return fmt.Errorf("not writing: %w", errPaused)
	}
	start := 0
	for i := 0; i <= len(recs); i++ {
		if i < len(recs) && !recs[i].alone {
			continue
		}
		if i > start {
			if err := wr.writeRun(ctx, codec, recs[start:i]); err != nil {
				return err
			}
		}
		if i < len(recs) {
			m := wr.rb.message(i)
			if err := wr.writeOne(ctx, t, &m, &recs[i]); err != nil {
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
func (wr *partitionWriter) writeRun(ctx context.Context, codec producer.Codec, recs []outRecord) error {
	w := wr.w
	// A write is never cancelled by a revoke: a cancelled request may
	// still land. WriteTimeout bounds it.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*w.cfg.WriteTimeout)
	err := w.out.write(wctx, wr.p, codec, wr.rb.prov, recs, wr.rb.arena)
	cancel()
	if err == nil && w.hooks.LoseAck != nil && w.hooks.LoseAck(wr.p) {
		err = errors.New("acknowledgement lost (test)")
	}
	if err == nil {
		return nil
	}
	wr.pm.writeFailures.Inc()
	var we kafka.WriteErrors
	if errors.As(err, &we) {
		for i, e := range we {
			if e != nil && i < len(recs) && refusalReason(e) != "" {
				wr.isolateOffset(recs[i].input().Offset)
			}
		}
	}
	// write returns once every request it sent completed, so nothing of
	// it can land after the recovery scan that follows; waitIdle covers
	// writes of this partition that other goroutines may have started.
	if !w.out.waitIdle(wr.p, 2*w.cfg.WriteTimeout+5*time.Second) {
		return fmt.Errorf("%w: %s/%d: a write to Kafka neither completed nor failed in %v (%v); "+
			"stopping so that it cannot land after the recovery scan",
			errWorkerStopped, w.cfg.Input, wr.p, 2*w.cfg.WriteTimeout+5*time.Second, err)
	}
	if wr.isolate != nil {
		return fmt.Errorf("writing %d records: %w; writing input offsets %d to %d one record per request after recovery",
			len(recs), summarizeWriteErrors(err), wr.isolate.lo, wr.isolate.hi)
	}
	return fmt.Errorf("writing %d records: %w", len(recs), summarizeWriteErrors(err))
}

// writeOne writes one record in a produce request of its own; one refused
// for what it is is placed by --on-unwritable instead.
func (wr *partitionWriter) writeOne(ctx context.Context, t *tally, m *kafka.Message, r *outRecord) error {
	w := wr.w
	err := w.writeAlone(ctx, wr.p, m)
	if err == nil {
		return nil
	}
	in := r.input()
	why := refusalReason(err)
	if why == "" {
		wr.pm.writeFailures.Inc()
		return fmt.Errorf("writing the record of input offset %d alone: %w", in.Offset, err)
	}
	reason := string(r.errValue.of(wr.rb.arena))
	t.unrouted(w.kindOf(m.Topic), reason)
	size := recordSize(m)
	if _, _, err := wr.settle(ctx, t, in, m.Topic, reason, why, err, size, w.limits.bound(m.Topic), true); err != nil {
		var st *stallError
		if errors.As(err, &st) {
			// Records before it are written; the recovery that follows
			// finds them, and the session after it waits before this one.
			wr.stallAt(st)
		}
		return err
	}
	return nil
}
