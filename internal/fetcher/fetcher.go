// Package fetcher reads one partition of a Kafka topic the way the brokers
// committed it, on kafka-go's protocol layer (Fetch requests sent with
// kafka.Transport.RoundTrip).
//
// kafka-go's high-level Reader loses what a faithful consumer needs: it
// returns nil for both a null and a zero-length key, value or header value,
// hands transaction markers (control records) over as messages, and does not
// filter the records of aborted transactions. A Partition keeps all three
// apart:
//
//   - null stays nil and empty stays a non-nil empty slice, for keys, values
//     and every header value;
//   - control batches (transaction commit/abort markers) are never returned
//     as records; the position moves past them;
//   - at ReadCommitted, fetches stop at the last stable offset and the data
//     batches of aborted transactions are dropped (KIP-98): per producer ID
//     the broker lists the first offsets of aborted transactions overlapping
//     the fetched range; a transactional batch of producer P at or after the
//     first still-open aborted transaction of P is dropped, and P's next
//     control batch (its abort marker) closes that transaction.
//
// Every Chunk says how far the partition was examined (Next), which can lie
// beyond its last record: markers, aborted records and offsets removed by
// compaction are consumed without being returned. Reading the same range
// twice returns the same records, which is what makes replay-based recovery
// exact.
//
// Cost: one Fetch request per call, up to MaxBytes. The record batches are
// decoded here (raw.go), not by kafka-go: keys, values and header values
// are slices of the fetched bytes (of a compressed batch's decompressed
// bytes), no copy and no allocation per record besides header slices and
// header keys. Each batch's CRC-32C is checked. A chunk's buffers are
// reused by later fetches once it is released (Chunk.Release).
package fetcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	fetchapi "github.com/segmentio/kafka-go/protocol/fetch"
)

// Isolation is the Kafka isolation level of the fetches.
type Isolation int8

const (
	ReadUncommitted Isolation = 0
	ReadCommitted   Isolation = 1
)

func (i Isolation) String() string {
	if i == ReadCommitted {
		return "read_committed"
	}
	return "read_uncommitted"
}

// Config of a Partition.
type Config struct {
	// Transport sends the requests (TLS and SASL are set on it). Required.
	Transport *kafka.Transport
	// Brokers are the bootstrap addresses. Required.
	Brokers   []string
	Topic     string
	Partition int
	Isolation Isolation
	// MaxBytes bounds one response (default 8 MiB): the bytes fetched and,
	// for compressed input, what they decompress to, together (the limit
	// sent is scaled by the recent fetches' compression; partitionBytes).
	// A first batch larger than the limit is still returned whole (KIP-74).
	MaxBytes int
	// MaxWait is how long the broker may hold a fetch when no data is
	// available (default 500ms). It also bounds how long Fetch blocks on an
	// idle partition.
	MaxWait time.Duration
	// Timeout bounds one request beyond MaxWait (default 30s).
	Timeout time.Duration
}

// requestSlack lifts the response limit above the partition limit. The
// partition limit is the one meant (one partition per request); a response
// limit reached first makes kfake leave the aborted-transactions list of
// the partition out of the response (its fetch handler breaks out of the
// partition loop before building it), which would hand over aborted
// records. Apache Kafka applies both limits the same way, so the slack
// costs nothing there.
const requestSlack = 64 << 20

// Validate reports missing or impossible settings.
func (c Config) Validate() error {
	var errs []error
	if c.Transport == nil {
		errs = append(errs, errors.New("fetcher: Transport is required"))
	}
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("fetcher: at least one broker is required"))
	}
	if c.Topic == "" {
		errs = append(errs, errors.New("fetcher: Topic is required"))
	}
	if c.Partition < 0 {
		errs = append(errs, fmt.Errorf("fetcher: partition %d is negative", c.Partition))
	}
	if c.Isolation != ReadCommitted && c.Isolation != ReadUncommitted {
		errs = append(errs, fmt.Errorf("fetcher: isolation level %d is not 0 or 1", c.Isolation))
	}
	if c.MaxBytes < 0 || c.MaxBytes > 1<<30 || c.MaxWait < 0 || c.Timeout < 0 {
		errs = append(errs, errors.New("fetcher: MaxWait and Timeout must not be negative, MaxBytes must be in 0..1GiB"))
	}
	return errors.Join(errs...)
}

// Chunk is what one fetch yielded.
type Chunk struct {
	// Records are the data records at offsets >= the position the fetch
	// started at, in offset order. Key, Value and header values are nil
	// where the record holds null. They are valid until Release.
	Records []kafka.Message
	// Next is the position after this chunk: every offset below it was
	// returned, or was a marker, an aborted record or a gap.
	Next int64
	// As the broker reported them with this fetch.
	HighWatermark    int64
	LastStableOffset int64 // equals HighWatermark at ReadUncommitted
	LogStartOffset   int64
	// Markers, Aborted and Gaps count the offsets in [start, Next) passed
	// over: transaction markers, records of aborted transactions, offsets
	// that hold no record (compaction).
	Markers, Aborted, Gaps int
	// Codec is the compression of the last batch of data records the
	// chunk holds (0: none), kafka-go's compress.Compression id: what the
	// input's producers chose, for writing alike.
	Codec int8

	// own is what Records point into, for Release (pool.go).
	own *owned
}

// ErrOffsetOutOfRange is returned (wrapped in an *OffsetError) when the
// position is outside the partition's log: below its start after retention,
// or beyond its end after the topic was truncated or recreated.
var ErrOffsetOutOfRange = errors.New("offset out of range")

// OffsetError carries the position that the broker refused.
type OffsetError struct {
	Topic     string
	Partition int
	Offset    int64
	Err       error
}

func (e *OffsetError) Error() string {
	return fmt.Sprintf("fetching %s/%d at offset %d: %v", e.Topic, e.Partition, e.Offset, e.Err)
}

func (e *OffsetError) Unwrap() error { return e.Err }

// CorruptError is returned when the records the broker sent at a
// position do not decode: a CRC mismatch, a malformed or unsupported
// batch, one that decompresses beyond the bound. Fetching again returns
// the same bytes.
type CorruptError struct {
	Topic     string
	Partition int
	Offset    int64
	Err       error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("decoding %s/%d at offset %d: %v", e.Topic, e.Partition, e.Offset, e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// Partition reads one partition from a position onwards. It is used by one
// goroutine at a time.
type Partition struct {
	cfg  Config
	addr net.Addr
	next int64
	// size is what the next fetch's records slice and arena are made for
	// (growing the slice record by record cost ~7 % of the worker's CPU).
	size sizeHint
	// wireShare is the share of a recent fetch's memory that its bytes on
	// the wire were (the rest: its compressed batches decompressed); 1:
	// none compressed; 0: no fetch returned records yet.
	wireShare float64
}

// minPartitionBytes is the least a fetch asks for however compressed the
// input (a larger first batch is still returned whole).
const minPartitionBytes = 16 << 10

// partitionBytes is the partition limit of the next fetch: MaxBytes of
// memory, the fetched bytes and their decompression together. The limit
// counts bytes on the wire, so a fetch of lz4 batches compressed 4:1 held
// 5 times MaxBytes once decompressed (with its records slice more): at 4 M
// keys over 8 partitions of lz4 input the worker peaked at 141-142 MiB
// against 66-67 MiB uncompressed, and at 82-83 MiB with the limit scaled
// (docs/benchmarks-journal.md, "Compressed input, and the executable's pages").
//
// Until a fetch returned records the compression is not known, and the
// limit is a quarter of MaxBytes: a first fetch of MaxBytes of lz4 (and
// the records slices sized after it, for the fetches after) made a peak of
// ~140 MiB at the start where the steady state held ~75.
func (p *Partition) partitionBytes() int {
	share := p.wireShare
	if share <= 0 {
		share = 0.25
	}
	if share >= 1 {
		return p.cfg.MaxBytes
	}
	return max(min(minPartitionBytes, p.cfg.MaxBytes), int(float64(p.cfg.MaxBytes)*share))
}

// observeWire updates wireShare from a fetch of wire bytes whose
// compressed batches decompressed to inflated bytes: the mean of the last
// share and this one, so that one odd fetch does not swing the next.
func (p *Partition) observeWire(wire, inflated int) {
	if wire <= 0 {
		return
	}
	share := float64(wire) / float64(wire+inflated)
	if p.wireShare <= 0 {
		p.wireShare = share
		return
	}
	p.wireShare = (p.wireShare + share) / 2
}

// New returns a reader of cfg.Topic/cfg.Partition positioned at offset (a
// real offset, not FirstOffset/LastOffset). It sends nothing.
func New(cfg Config, offset int64) (*Partition, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if offset < 0 {
		return nil, fmt.Errorf("fetcher: start offset %d of %s/%d is negative", offset, cfg.Topic, cfg.Partition)
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = 8 << 20
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = 500 * time.Millisecond
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	return &Partition{cfg: cfg, addr: kafka.TCP(cfg.Brokers...), next: offset}, nil
}

// Offset is the position: the offset the next Fetch starts at.
func (p *Partition) Offset() int64 { return p.next }

// SetOffset moves the position.
func (p *Partition) SetOffset(offset int64) { p.next = offset }

// Fetch sends one fetch request from the position and returns what it
// yielded, moving the position to Chunk.Next. An empty chunk with Next
// unchanged means nothing is there yet (the broker waited MaxWait). Errors
// are returned as they come (the caller retries): an offset outside the log
// as an *OffsetError wrapping ErrOffsetOutOfRange, a partition error as a
// kafka.Error, anything else from the transport.
func (p *Partition) Fetch(ctx context.Context) (Chunk, error) {
	start := p.next
	rctx, cancel := context.WithTimeout(ctx, p.cfg.MaxWait+p.cfg.Timeout)
	defer cancel()
	m, err := p.cfg.Transport.RoundTrip(rctx, p.addr, &fetchapi.Request{
		ReplicaID:      -1,
		MaxWaitTime:    int32(p.cfg.MaxWait / time.Millisecond),
		MinBytes:       1,
		MaxBytes:       int32(p.cfg.MaxBytes + requestSlack),
		IsolationLevel: int8(p.cfg.Isolation),
		SessionID:      -1,
		SessionEpoch:   -1,
		Topics: []fetchapi.RequestTopic{{
			Topic: p.cfg.Topic,
			Partitions: []fetchapi.RequestPartition{{
				Partition:          int32(p.cfg.Partition),
				CurrentLeaderEpoch: -1,
				FetchOffset:        start,
				LogStartOffset:     -1,
				PartitionMaxBytes:  int32(p.partitionBytes()),
			}},
		}},
	})
	if err != nil {
		return Chunk{Next: start}, fmt.Errorf("fetching %s/%d at offset %d: %w", p.cfg.Topic, p.cfg.Partition, start, err)
	}
	res, ok := m.(*Response)
	if !ok {
		return Chunk{Next: start}, fmt.Errorf("fetching %s/%d: unexpected response %T", p.cfg.Topic, p.cfg.Partition, m)
	}
	if res.ErrorCode != 0 {
		return Chunk{Next: start}, fmt.Errorf("fetching %s/%d at offset %d: %w", p.cfg.Topic, p.cfg.Partition, start, kafka.Error(res.ErrorCode))
	}
	rp := findPartition(res, p.cfg.Topic, p.cfg.Partition)
	if rp == nil {
		return Chunk{Next: start}, fmt.Errorf("fetching %s/%d: partition missing from the response", p.cfg.Topic, p.cfg.Partition)
	}
	if rp.ErrorCode != 0 {
		kerr := kafka.Error(rp.ErrorCode)
		if kerr == kafka.OffsetOutOfRange {
			return Chunk{Next: start}, &OffsetError{Topic: p.cfg.Topic, Partition: p.cfg.Partition, Offset: start, Err: ErrOffsetOutOfRange}
		}
		return Chunk{Next: start}, fmt.Errorf("fetching %s/%d at offset %d: %w", p.cfg.Topic, p.cfg.Partition, start, kerr)
	}
	c := Chunk{
		Next:             start,
		HighWatermark:    rp.HighWatermark,
		LastStableOffset: rp.LastStableOffset,
		LogStartOffset:   rp.LogStartOffset,
	}
	if p.cfg.Isolation == ReadUncommitted || c.LastStableOffset < 0 {
		c.LastStableOffset = c.HighWatermark
	}
	c.own = &owned{set: rp.Records.B}
	complete, copied, err := decodeRaw(&c, rp.Records.B, rp.AbortedTransactions, start, p.cfg.Isolation == ReadCommitted, p.size.margin())
	c.own.records = c.Records
	if err == nil && len(c.Records) > 0 {
		inflated := 0
		for _, b := range c.own.inflated {
			inflated += len(b)
		}
		p.observeWire(len(rp.Records.B), inflated)
	}
	if err != nil {
		c.Release()
		return Chunk{Next: start}, &CorruptError{Topic: p.cfg.Topic, Partition: p.cfg.Partition, Offset: start, Err: err}
	}
	if len(c.Records) == 0 {
		c.Release() // nothing points into it
	}
	// The broker returns batches from the one holding start on, and the
	// position moves past each batch's last offset (decodeRaw). Only
	// message sets of magic 0 and 1 (decoded by kafka-go, which does not
	// expose where a batch ends) can leave it at start although records
	// were there: start is then an offset no record holds any more; step
	// over it, one offset per fetch, never past an offset that might still
	// hold a record.
	if c.Next == start && complete && start < c.LastStableOffset {
		c.Next = start + 1
		c.Gaps = 1
	}
	p.next = c.Next
	if len(c.Records) > 0 {
		p.size.observe(len(c.Records), copied)
	}
	return c, nil
}

func findPartition(res *Response, topic string, partition int) *ResponsePartition {
	for i := range res.Topics {
		if res.Topics[i].Topic != topic {
			continue
		}
		for j := range res.Topics[i].Partitions {
			if int(res.Topics[i].Partitions[j].Partition) == partition {
				return &res.Topics[i].Partitions[j]
			}
		}
	}
	return nil
}

// abortedTxns tracks, per producer ID, the first offsets of the aborted
// transactions of one fetch response that are still open at the current
// batch, ascending.
type abortedTxns map[int64][]int64

func newAbortedTxns(list []fetchapi.ResponseTransaction) abortedTxns {
	if len(list) == 0 {
		return nil
	}
	a := abortedTxns{}
	for _, t := range list {
		a[t.ProducerID] = append(a[t.ProducerID], t.FirstOffset)
	}
	for _, offs := range a {
		sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
	}
	return a
}

// aborted reports whether a batch of producer pid starting at base belongs
// to an aborted transaction.
func (a abortedTxns) aborted(pid, base int64) bool {
	offs := a[pid]
	return len(offs) > 0 && base >= offs[0]
}

// marker handles a control batch of producer pid at base: it ends the
// producer's oldest open aborted transaction if that began before it.
func (a abortedTxns) marker(pid, base int64) {
	offs := a[pid]
	if len(offs) == 0 || base < offs[0] {
		return
	}
	if len(offs) == 1 {
		delete(a, pid)
		return
	}
	a[pid] = offs[1:]
}

// sizeHint sizes a fetch's records slice and arena for the most records
// and bytes a recent fetch returned, the maximum decaying by an eighth per
// fetch. Fetches end at batch boundaries, so their sizes vary: sized for
// the last fetch alone, every larger one grew its slice to twice the
// size, and the arena's fixed blocks left up to half of the last one
// unused.
type sizeHint struct{ records, bytes int }

func (h *sizeHint) observe(records, bytes int) {
	h.records = max(records, h.records-h.records/8)
	h.bytes = max(bytes, h.bytes-h.bytes/8)
}

// margin is the size to make: an eighth above the hint.
func (h sizeHint) margin() sizeHint {
	return sizeHint{h.records + h.records/8, h.bytes + h.bytes/8}
}

// decode fills c from the record batches of rp at offsets >= start; the
// records' slice and the first block of the arena are made for the sizes
// of hint when the first record comes. It returns the bytes of keys and
// values copied into the arena.
func decode(c *Chunk, rp *fetchapi.ResponsePartition, start int64, committed bool, hint sizeHint) (int, error) {
	if rp.RecordSet.Records == nil {
		return 0, nil
	}
	var txns abortedTxns
	if committed {
		txns = newAbortedTxns(rp.AbortedTransactions)
	}
	var batches []protocol.RecordReader
	if s, ok := rp.RecordSet.Records.(*protocol.RecordStream); ok {
		batches = s.Records
	} else {
		batches = []protocol.RecordReader{rp.RecordSet.Records}
	}
	ar := arena{next: hint.bytes}
	for _, b := range batches {
		switch b := b.(type) {
		case *protocol.ControlBatch:
			if txns != nil {
				txns.marker(b.ProducerID, b.BaseOffset)
			}
			if err := skipRecords(b, start, c, &c.Markers); err != nil {
				return ar.used, err
			}
		case *protocol.RecordBatch:
			if txns != nil && b.Attributes.Transactional() && txns.aborted(b.ProducerID, b.BaseOffset) {
				if err := skipRecords(b, start, c, &c.Aborted); err != nil {
					return ar.used, err
				}
				continue
			}
			if err := readRecords(b, start, c, &ar, hint.records); err != nil {
				return ar.used, err
			}
		default: // message sets of magic 0 and 1: no transactions
			if err := readRecords(b, start, c, &ar, hint.records); err != nil {
				return ar.used, err
			}
		}
	}
	return ar.used, nil
}

// forRecords calls fn for every record of b at or after start and past
// c.Next, in order, and moves c.Next past each; the keys and values of the
// others are released.
func forRecords(b protocol.RecordReader, start int64, c *Chunk, fn func(*protocol.Record) error) error {
	for {
		r, err := b.ReadRecord()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if r.Offset < start || r.Offset < c.Next {
			closeBytes(r.Key)
			closeBytes(r.Value)
			continue
		}
		if err := fn(r); err != nil {
			return err
		}
		c.Next = r.Offset + 1
	}
}

// skipRecords passes over the records of a batch that is not returned,
// counting those at or after start.
func skipRecords(b protocol.RecordReader, start int64, c *Chunk, count *int) error {
	return forRecords(b, start, c, func(r *protocol.Record) error {
		closeBytes(r.Key)
		closeBytes(r.Value)
		*count++
		return nil
	})
}

func readRecords(b protocol.RecordReader, start int64, c *Chunk, ar *arena, sizeHint int) error {
	return forRecords(b, start, c, func(r *protocol.Record) error {
		if c.Records == nil {
			c.Records = make([]kafka.Message, 0, max(sizeHint, 64))
		}
		key, err := ar.read(r.Key)
		if err != nil {
			return err
		}
		value, err := ar.read(r.Value)
		if err != nil {
			return err
		}
		c.Records = append(c.Records, kafka.Message{
			Offset:        r.Offset,
			Time:          r.Time,
			Key:           key,
			Value:         value,
			Headers:       r.Headers,
			HighWaterMark: c.HighWatermark,
		})
		return nil
	})
}

// arena hands out slices of large blocks: records of one fetch share a few
// allocations. A block is never reallocated, so earlier slices stay valid.
type arena struct {
	block []byte
	next  int // the size of the next block, if above arenaBlock
	used  int // bytes handed out from blocks
}

const arenaBlock = 256 << 10

// read copies b into the arena: nil for a null b, a non-nil empty slice for
// an empty one.
func (a *arena) read(b protocol.Bytes) ([]byte, error) {
	if b == nil {
		return nil, nil
	}
	defer closeBytes(b)
	n := b.Len()
	if n == 0 {
		return []byte{}, nil
	}
	if n > arenaBlock/4 {
		out := make([]byte, n)
		_, err := io.ReadFull(b, out)
		return out, err
	}
	if cap(a.block)-len(a.block) < n {
		a.block = make([]byte, 0, max(a.next, arenaBlock))
		a.next = 0
	}
	a.used += n
	start := len(a.block)
	a.block = a.block[:start+n]
	out := a.block[start : start+n : start+n]
	_, err := io.ReadFull(b, out)
	return out, err
}

func closeBytes(b protocol.Bytes) {
	if b != nil {
		_ = b.Close()
	}
}
