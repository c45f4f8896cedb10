// Package producer writes record batches to Kafka on kafka-go's protocol
// layer: batches it encodes itself (batch.go) sent as produce requests with
// kafka.Transport.RoundTrip, acks=all.
//
// kafka-go's Writer costs more per record than the records' bytes: it
// balances, queues and hands over every message on its own, and encodes
// through interfaces. Here a partition's records are appended to one
// buffer (no allocation per record once it has grown) that becomes the
// request's record set as it is.
//
// A write is one batch to one partition, acknowledged or failed as a
// whole. It is retried only when the broker's answer proves that nothing
// was appended: the request could not be routed (no leader known), or the
// leader refused it because the metadata it was sent with was stale
// (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE,
// FENCED/UNKNOWN_LEADER_EPOCH). Before such a retry the Transport's
// metadata is refreshed (internal/leaders), so that a leader move costs a
// round trip, not the 0-6 s until kafka-go's next periodic refresh. Every
// other failure is returned: a timeout, a lost connection, REQUEST_TIMED_OUT
// or NOT_ENOUGH_REPLICAS_AFTER_APPEND (the batch may have landed, and only
// the caller can find out), a refusal of the records, or NOT_ENOUGH_REPLICAS
// (nothing landed, but a shrunk ISR is no matter of routing: the caller
// decides how long to wait, and shows why).
//
// No producer ID: writes are not idempotent. Retrying only what provably
// did not land keeps every record at most once on the output without one.
package producer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/produce"
	"github.com/segmentio/kafka-go/protocol/rawproduce"

	"github.com/bloomgate/bloomgate/internal/leaders"
)

// Config of a Producer.
type Config struct {
	// Transport sends the requests (TLS and SASL are set on it). Required.
	Transport *kafka.Transport
	// Brokers are the bootstrap addresses. Required.
	Brokers []string
	// Leaders refreshes the Transport's metadata after a stale answer;
	// nil: one of its own.
	Leaders *leaders.Refresher
	// Timeout is how long the brokers may take to acknowledge a batch
	// (the produce request's timeout; default 10s).
	Timeout time.Duration
	// OnRetry, if set, is called before a batch that provably did not
	// land is sent again, with the error that proved it.
	OnRetry func(topic string, partition int, err error)
}

// Validate reports missing settings.
func (c Config) Validate() error {
	var errs []error
	if c.Transport == nil {
		errs = append(errs, errors.New("producer: Transport is required"))
	}
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("producer: at least one broker is required"))
	}
	if c.Timeout < 0 {
		errs = append(errs, errors.New("producer: Timeout must not be negative"))
	}
	return errors.Join(errs...)
}

// Producer writes batches. It is safe for concurrent use; it starts no
// goroutine.
type Producer struct {
	cfg  Config
	addr net.Addr
}

// New returns a Producer. It sends nothing.
func New(cfg Config) (*Producer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Leaders == nil {
		cfg.Leaders = leaders.New(cfg.Transport, cfg.Brokers)
	}
	return &Producer{cfg: cfg, addr: kafka.TCP(cfg.Brokers...)}, nil
}

// Error is a broker's refusal of a batch. Code is the partition's error
// code (a kafka.Error, which errors.As and errors.Is reach).
type Error struct {
	Topic     string
	Partition int
	Code      kafka.Error
	Message   string // the broker's message, if any
}

func (e *Error) Error() string {
	s := fmt.Sprintf("producing to %s/%d: %v", e.Topic, e.Partition, e.Code)
	if e.Message != "" {
		s += " (" + e.Message + ")"
	}
	return s
}

func (e *Error) Unwrap() error { return e.Code }

// notLanded reports whether err proves that nothing of the batch was
// appended.
func notLanded(err error) bool {
	var re *rawproduce.Error
	if errors.As(err, &re) {
		return true // not routed: nothing was sent
	}
	if errors.Is(err, kafka.BrokerNotAvailable) {
		return true // no connection to the leader: nothing was sent
	}
	var pe *Error
	if !errors.As(err, &pe) {
		return false
	}
	return leaders.Stale(pe.Code)
}

// retryBackoff is the first wait before a retry; it doubles up to
// maxRetryBackoff.
const (
	retryBackoff    = 20 * time.Millisecond
	maxRetryBackoff = time.Second
)

// Produce writes b to topic/partition and returns the offset of its first
// record. Batches that provably did not land are retried, with the
// metadata refreshed, until ctx ends; then the last error is returned.
// b must hold at least one record; it is not modified.
func (p *Producer) Produce(ctx context.Context, topic string, partition int, b *Batch) (int64, error) {
	if b.Len() == 0 {
		return 0, errors.New("producer: empty batch")
	}
	enc := b.encoded()
	wait := retryBackoff
	for {
		base, err := p.send(ctx, topic, partition, enc)
		if err == nil {
			return base, nil
		}
		if !notLanded(err) || ctx.Err() != nil {
			return 0, err
		}
		if p.cfg.OnRetry != nil {
			p.cfg.OnRetry(topic, partition, err)
		}
		if rerr := p.cfg.Leaders.Refresh(ctx); rerr != nil && ctx.Err() != nil {
			return 0, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, err
		case <-t.C:
		}
		wait = min(2*wait, maxRetryBackoff)
	}
}

func (p *Producer) send(ctx context.Context, topic string, partition int, enc []byte) (int64, error) {
	req := &rawproduce.Request{
		Acks:    -1,
		Timeout: int32(p.cfg.Timeout / time.Millisecond),
		Topics: []rawproduce.RequestTopic{{
			Topic: topic,
			Partitions: []rawproduce.RequestPartition{{
				Partition: int32(partition),
				RecordSet: protocol.RawRecordSet{Reader: bytes.NewReader(enc)},
			}},
		}},
	}
	m, err := p.cfg.Transport.RoundTrip(ctx, p.addr, req)
	if err != nil {
		return 0, fmt.Errorf("producing to %s/%d: %w", topic, partition, err)
	}
	res, ok := m.(*produce.Response)
	if !ok {
		return 0, fmt.Errorf("producing to %s/%d: unexpected response %T", topic, partition, m)
	}
	for _, t := range res.Topics {
		if t.Topic != topic {
			continue
		}
		for _, rp := range t.Partitions {
			if int(rp.Partition) != partition {
				continue
			}
			if rp.ErrorCode != 0 {
				return 0, &Error{Topic: topic, Partition: partition, Code: kafka.Error(rp.ErrorCode), Message: rp.ErrorMessage}
			}
			return rp.BaseOffset, nil
		}
	}
	return 0, fmt.Errorf("producing to %s/%d: partition missing from the response", topic, partition)
}
