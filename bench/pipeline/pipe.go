package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

type pipeConfig struct {
	brokers      string
	group        string
	input        string
	output       string
	batchSize    int
	batchTimeout time.Duration
	linger       time.Duration // kgo pipe: ProducerLinger
	codec        string        // output compression: none, gzip, snappy, lz4, zstd
}

// runPipe is the baseline: what the worker does minus key extraction and
// the filter. Same consumer group, one reader per assigned partition with
// the worker's reader settings, batches of batchSize filled for at most
// batchTimeout, a synchronous acks=all write to the same output partition
// (with the worker's two source headers), and one committer per generation
// committing every second what was written.
func runPipe(ctx context.Context, cfg pipeConfig) error {
	if cfg.brokers == "" || cfg.group == "" || cfg.input == "" || cfg.output == "" {
		return errors.New("pipe: -brokers, -group, -input and -output are required")
	}
	w := &kafka.Writer{
		Addr:         kafka.TCP(cfg.brokers),
		Topic:        cfg.output,
		Balancer:     samePartition{},
		RequiredAcks: kafka.RequireAll,
		Compression:  kafkaCodec(cfg.codec),
		MaxAttempts:  1,
		BatchSize:    cfg.batchSize,
		BatchTimeout: cfg.batchTimeout,
		WriteTimeout: 10 * time.Second,
		ReadTimeout:  10 * time.Second,
	}
	defer w.Close()
	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:          cfg.group,
		Brokers:     []string{cfg.brokers},
		Topics:      []string{cfg.input},
		StartOffset: kafka.FirstOffset,
	})
	if err != nil {
		return err
	}
	defer cg.Close()
	for {
		gen, err := cg.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, kafka.ErrGroupClosed) {
				return nil
			}
			time.Sleep(200 * time.Millisecond)
			continue
		}
		var mu sync.Mutex
		written := map[int]int64{}
		for _, a := range gen.Assignments[cfg.input] {
			part, off := a.ID, a.Offset
			gen.Start(func(ctx context.Context) {
				if err := pipePartition(ctx, cfg, w, part, off, func(next int64) {
					mu.Lock()
					written[part] = next
					mu.Unlock()
				}); err != nil && ctx.Err() == nil {
					fmt.Printf("partition %d: %v\n", part, err)
				}
			})
		}
		gen.Start(func(ctx context.Context) {
			commit := func() {
				mu.Lock()
				pending := map[int]int64{}
				for p, o := range written {
					pending[p] = o
				}
				mu.Unlock()
				if len(pending) > 0 {
					_ = gen.CommitOffsets(map[string]map[int]int64{cfg.input: pending})
				}
			}
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					commit()
					return
				case <-t.C:
					commit()
				}
			}
		})
	}
}

func pipePartition(ctx context.Context, cfg pipeConfig, w *kafka.Writer, part int, offset int64, done func(next int64)) error {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:       []string{cfg.brokers},
		Topic:         cfg.input,
		Partition:     part,
		MinBytes:      1,
		MaxBytes:      16 << 20,
		MaxWait:       250 * time.Millisecond,
		QueueCapacity: cfg.batchSize,
	})
	defer r.Close()
	if offset >= 0 {
		if err := r.SetOffset(offset); err != nil {
			return err
		}
	} else if err := r.SetOffset(kafka.FirstOffset); err != nil {
		return err
	}
	msgs := make(chan kafka.Message, cfg.batchSize)
	go func() {
		defer close(msgs)
		for {
			m, err := r.FetchMessage(ctx)
			if err != nil {
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	timer := time.NewTimer(time.Hour)
	for {
		var m kafka.Message
		var ok bool
		select {
		case m, ok = <-msgs:
			if !ok {
				return nil
			}
		case <-ctx.Done():
			return nil
		}
		batch := make([]kafka.Message, 0, min(cfg.batchSize, 1024))
		batch = append(batch, m)
		timer.Reset(cfg.batchTimeout)
	fill:
		for len(batch) < cfg.batchSize {
			select {
			case m, ok := <-msgs:
				if !ok {
					break fill
				}
				batch = append(batch, m)
			case <-timer.C:
				break fill
			}
		}
		out := make([]kafka.Message, len(batch))
		for i, m := range batch {
			hs := make([]kafka.Header, 0, len(m.Headers)+1)
			hs = append(hs, m.Headers...)
			hs = append(hs, kafka.Header{Key: "bloomgate", Value: workerHeader(nil, part, m.Offset)})
			out[i] = kafka.Message{Key: m.Key, Value: m.Value, Headers: hs, Time: m.Time, Partition: part}
		}
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		err := w.WriteMessages(wctx, out...)
		cancel()
		if err != nil {
			return fmt.Errorf("writing %d records: %w", len(out), err)
		}
		done(batch[len(batch)-1].Offset + 1)
	}
}

// samePartition writes each record to the partition it came from.
type samePartition struct{}

func (samePartition) Balance(m kafka.Message, partitions ...int) int { return m.Partition }

// probe reads high-water marks and committed offsets.
type probe struct{ c *kafka.Client }

func newProbe(addr string) *probe {
	return &probe{c: &kafka.Client{Addr: kafka.TCP(addr), Timeout: 5 * time.Second}}
}

func (p *probe) highWater(ctx context.Context, topic string, partitions int) (int64, error) {
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for i := 0; i < partitions; i++ {
		req.Topics[topic] = append(req.Topics[topic], kafka.LastOffsetOf(i))
	}
	resp, err := p.c.ListOffsets(ctx, req)
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, po := range resp.Topics[topic] {
		if po.Error != nil {
			return 0, po.Error
		}
		sum += po.LastOffset
	}
	return sum, nil
}

func (p *probe) committed(ctx context.Context, group, topic string, partitions int) (int64, error) {
	ps := make([]int, partitions)
	for i := range ps {
		ps[i] = i
	}
	resp, err := p.c.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: ps}})
	if err != nil {
		return 0, err
	}
	if resp.Error != nil {
		return 0, resp.Error
	}
	var sum int64
	for _, po := range resp.Topics[topic] {
		if po.CommittedOffset > 0 {
			sum += po.CommittedOffset
		}
	}
	return sum, nil
}

// kafkaCodec is the kafka-go Compression of a codec name (none: 0).
func kafkaCodec(name string) kafka.Compression {
	var c kafka.Compression
	if name == "" || name == "none" || c.UnmarshalText([]byte(name)) != nil {
		return 0
	}
	return c
}

// workerHeader appends the value of the bloomgate header the worker adds
// to a record that is not the last of its batch (format 2: the input
// partition and offset as varints), so that the pipes write records of the
// worker's size; the worker's seal, 21 bytes once per batch, is left out.
func workerHeader(dst []byte, partition int, offset int64) []byte {
	dst = append(dst, 2)
	dst = binary.AppendUvarint(dst, uint64(partition))
	return binary.AppendUvarint(dst, uint64(offset))
}
