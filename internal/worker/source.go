package worker

import (
	"context"
	"errors"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/bloomgate/bloomgate/internal/backoff"
	"github.com/bloomgate/bloomgate/internal/fetcher"
	"github.com/bloomgate/bloomgate/internal/leaders"
)

// batch is a run of input records handed to handle, and the position after
// it. next can lie beyond the last record: transaction markers, records of
// aborted transactions and compacted offsets are passed over by the read
// path and never become events, but the committed offset moves past them.
type batch struct {
	msgs []*kafka.Message
	next int64
	// As of the last fetch that contributed, -1 if none did.
	hwm, lso int64
	// markers and aborted count the offsets passed over in this batch.
	markers, aborted int
}

// piece is what the pump hands over: at most BatchSize records of one
// fetch (slicing the fetch's records, no copy), or a fetch error that
// ends the session.
type piece struct {
	msgs []kafka.Message
	next int64
	// As of the fetch.
	hwm, lso         int64
	markers, aborted int
	// codec is the input's compression (fetcher.Chunk.Codec).
	codec int8
	err   error
	// fetched is set on a fetch's last piece: the chunk to release once
	// the batch holding the piece is handled (nextBatch).
	fetched *fetcher.Chunk
}

// isolation maps the setting to the fetcher's level.
func (c Config) isolation() fetcher.Isolation {
	if c.IsolationLevel == ReadUncommitted {
		return fetcher.ReadUncommitted
	}
	return fetcher.ReadCommitted
}

// newFetcher reads one partition from offset, outside any group, at the
// configured isolation level. Processing, recovery replay and the recovery
// scan all read through it, so replay drops exactly what the first pass
// dropped.
func (w *Worker) newFetcher(topic string, partition int, offset int64) (*fetcher.Partition, error) {
	return fetcher.New(fetcher.Config{
		Transport: w.cfg.Transport,
		Brokers:   w.cfg.Brokers,
		Topic:     topic,
		Partition: partition,
		Isolation: w.cfg.isolation(),
		MaxBytes:  fetchBytes(w.assignedCount()),
		MaxWait:   500 * time.Millisecond,
	}, offset)
}

// fetchMaxBytes bounds one fetch of one partition (half of Kafka's Java
// consumer default max.partition.fetch.bytes; a larger first batch is still
// returned whole). It sets the memory held per assigned partition (about
// three fetches: one being decoded, one queued, one being processed)
// against throughput. At 4 M keys over 8 partitions, 512 KiB instead of
// 1 MiB lowered the peak RSS from 131 to 106 MiB (GC headroom 16 MiB);
// with the fetcher's size hints and joined batches the rate was 1.04-1.81x
// the franz-go pipe's (docs/benchmarks-journal.md, "Peak RSS at 4 M keys").
// Earlier, with kafka-go's Writer: 1 MiB measured 1.08-1.09x
// the pass-through pipe at 163 MiB, 512 KiB 0.95x at 109 MiB, 8 MiB 1.17x
// at 492 MiB ("Read path").
//
// fetchBudget bounds the sum over the partitions a worker owns, so that
// the memory held for fetches does not grow with their number: beyond 32
// partitions each fetch gets its share, down to fetchMinBytes (which
// still holds hundreds of typical records).
const (
	fetchMaxBytes = 512 << 10
	fetchBudget   = 16 << 20
	fetchMinBytes = 128 << 10
)

// fetchBytes is the fetch size of each of n assigned partitions.
func fetchBytes(n int) int {
	return min(fetchMaxBytes, max(fetchMinBytes, fetchBudget/max(n, 1)))
}

// assignedCount is the number of input partitions the worker owns.
func (w *Worker) assignedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.status.Assigned)
}

// fetchRetryBackoff bounds the wait between failed fetches (as Java
// clients' reconnect.backoff.max.ms: a broker that is back is fetched from
// within a second); failures are retried until fetchGiveUp has passed
// without a successful fetch, then the error ends the session (which
// re-runs recovery and starts over).
const (
	fetchRetryBackoff = time.Second
	fetchGiveUp       = time.Minute
)

// pump fetches from f and hands the records over in pieces of at most size
// until ctx ends. Transient failures are retried; an offset outside the log
// or a failure lasting fetchGiveUp is handed over as an error, after which
// the pump stops.
func (pp *partitionProc) pump(ctx context.Context, f *fetcher.Partition, size int, out chan<- piece) {
	fr := &fetchRetry{pp: pp, b: backoff.New(100*time.Millisecond, fetchRetryBackoff)}
	for ctx.Err() == nil {
		from := f.Offset()
		c, err := f.Fetch(ctx)
		if err != nil {
			if !fr.failed(ctx, err, out) {
				return
			}
			continue
		}
		fr.reset()
		if !sendPieces(ctx, &c, from, size, out) {
			return
		}
	}
}

// fetchRetry is the run of failed fetches of a partition: since when, its
// backoff, whether a leader move was logged.
type fetchRetry struct {
	pp           *partitionProc
	b            *backoff.Backoff
	failingSince time.Time
	leaderMoved  bool // logged for the current run of failures
}

func (fr *fetchRetry) reset() {
	fr.failingSince, fr.leaderMoved = time.Time{}, false
	fr.b.Reset()
}

// failed handles a failed fetch: handed to the partition (out) if it is not
// one to wait out, else retried after a wait (and a metadata refresh if
// the leader moved). It returns false when the pump ends.
func (fr *fetchRetry) failed(ctx context.Context, err error, out chan<- piece) bool {
	pp := fr.pp
	if ctx.Err() != nil {
		return false
	}
	var oe *fetcher.OffsetError
	var ce *fetcher.CorruptError
	if fr.failingSince.IsZero() {
		fr.failingSince = pp.w.deps.Now()
	}
	// Refused access is not waited out here: the partition's
	// failure path logs it and applies the runtime rule (access.go).
	// Nor are records that do not decode: the broker sends the
	// same bytes again, and the partition's failure path shows
	// them (status page, log, stall alert) at once instead of
	// after fetchGiveUp of retries at debug level; its sessions
	// retry with backoff.
	if errors.As(err, &oe) || errors.As(err, &ce) || pp.w.deps.Now().Sub(fr.failingSince) > fetchGiveUp || pp.w.check.Explain(err) != nil {
		select {
		case out <- piece{err: err}:
		case <-ctx.Done():
		}
		return false
	}
	if leaders.Stale(err) && pp.w.leaders != nil {
		// kafka-go's Transport would keep sending to the old
		// leader until its next periodic refresh (0-6 s).
		if !fr.leaderMoved {
			fr.leaderMoved = true
			pp.log.Info("fetch refused: the partition's leader moved; metadata refreshed, fetching again", "err", err)
		}
		_ = pp.w.leaders.Refresh(ctx)
	} else {
		pp.log.Debug("fetch failed; retrying", "err", err, "backoff", fr.b.Delay())
	}
	return fr.b.Wait(ctx, 0)
}

// sendPieces hands a fetch read from offset from to the partition in
// pieces of at most size records; false if ctx ended first.
func sendPieces(ctx context.Context, c *fetcher.Chunk, from int64, size int, out chan<- piece) bool {
	if c.Next == from && len(c.Records) == 0 {
		// Nothing new: only the offsets are news (an open transaction
		// holds the LSO).
		select {
		case out <- piece{next: from, hwm: c.HighWatermark, lso: c.LastStableOffset}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	recs := c.Records
	for first := true; first || len(recs) > 0; first = false {
		n := min(len(recs), size)
		pc := piece{msgs: recs[:n:n], hwm: c.HighWatermark, lso: c.LastStableOffset, next: c.Next, codec: c.Codec}
		recs = recs[n:]
		if len(recs) > 0 {
			pc.next = pc.msgs[n-1].Offset + 1
		} else {
			pc.markers, pc.aborted = c.Markers, c.Aborted
			pc.fetched = c
		}
		select {
		case out <- pc:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// nextBatch waits up to idle for records (or a position that moved), then up
// to BatchTimeout for the batch to fill. A batch with no records whose next
// is pp.next means idle.
//
// A batch points into its pieces' records (pp.joined, which the batch
// before no longer needs: handle is done with it). A batch joins pieces of
// two or more fetches whenever a fetch holds fewer records than a batch
// (at the defaults, about every batch): copying the records themselves
// cost 152 bytes per record and ~3 MiB at 8 partitions, pointers cost 8
// (docs/benchmarks-journal.md, "Fewer copies").
//
// The fetches whose last piece the batch before held are released here
// (fetcher.Chunk.Release): their buffers go to later fetches. Nothing
// points into them once handle returned: a batch's writes are encoded
// and acknowledged inside handle, the written records' builder is reset
// before it is read again, a stalled record is a copy (copyMessage), the
// resume mark is a digest (markOf). Under the race detector released
// bytes are overwritten, so a test that reads a record after this point
// fails instead of passing by luck.
func (pp *partitionProc) nextBatch(ctx context.Context, idle time.Duration) (batch, error) {
	clear(pp.joined) // drop references into earlier fetches' records
	pp.joined = pp.joined[:0]
	for _, c := range pp.handled {
		c.Release()
	}
	clear(pp.handled)
	pp.handled = pp.handled[:0]
	if err := pp.fetchErr; err != nil {
		pp.fetchErr = nil
		return batch{}, err
	}
	b := batch{next: pp.next, hwm: -1, lso: -1}
	t := time.NewTimer(idle)
	defer t.Stop()
	started := false
	for {
		select {
		case <-ctx.Done():
			return b, ctx.Err()
		case <-t.C:
			return b, nil
		case pc := <-pp.pieces:
			if pc.err != nil {
				if len(b.msgs) > 0 {
					// The records before it first (those before a
					// batch that does not decode, which fails at once:
					// dropped with the error, they were read again
					// after the recovery, and failed again, forever).
					pp.fetchErr = pc.err
					return b, nil
				}
				return batch{}, pc.err
			}
			if pc.fetched != nil {
				pp.handled = append(pp.handled, pc.fetched)
			}
			b.hwm, b.lso = pc.hwm, pc.lso
			pp.observeOffsets(pc.hwm, pc.lso)
			if len(pc.msgs) == 0 && pc.next <= b.next {
				continue
			}
			for i := range pc.msgs {
				pp.joined = append(pp.joined, &pc.msgs[i])
			}
			if len(pc.msgs) > 0 {
				pp.inCodec = pc.codec
			}
			b.msgs = pp.joined
			b.next = max(b.next, pc.next)
			b.markers += pc.markers
			b.aborted += pc.aborted
			if len(b.msgs) >= pp.w.cfg.BatchSize {
				return b, nil
			}
			if !started {
				started = true
				t.Reset(pp.w.cfg.BatchTimeout)
			}
		}
	}
}

// observeOffsets shows, after every fetch, the lag from the input's log
// end (whatever the writes do) and how far an open transaction holds the
// partition back.
func (pp *partitionProc) observeOffsets(hwm, lso int64) {
	if hwm < 0 {
		return
	}
	pp.setLag(hwm)
	if lso < 0 {
		return
	}
	held := max(hwm-lso, 0)
	if held == pp.lsoLag {
		return
	}
	pp.lsoLag = held
	pp.pm.lsoLag.Set(float64(held))
	pp.w.updatePartition(pp.p, func(ps *PartitionStatus) { ps.LSOLag = held })
}

// setLag shows how far the input's high-water mark hwm is ahead of the
// partition's position (the next offset to process).
func (pp *partitionProc) setLag(hwm int64) {
	if pp.next < 0 {
		return
	}
	lag, fill := max(hwm-pp.next, 0), fillLag(pp.next, pp.resume, hwm)
	pp.pm.lag.Set(float64(lag))
	pp.w.updatePartition(pp.p, func(ps *PartitionStatus) { ps.Lag, ps.FillLag = lag, fill })
}
