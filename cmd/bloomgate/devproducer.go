package main

import (
	"context"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/bloomgate/bloomgate/internal/loadgen"
)

// produce writes the demo's order events, keyed by order_id as loadgen
// keys them, and returns the ground truth. The events come from loadgen's
// generator, so the truth (which events repeat a key) is exact. It stops
// between writes, never inside one, so that after an interrupt too the
// truth covers exactly what reached the broker.
func (d *demo) produce(ctx context.Context, gen loadgen.GenConfig) (devTruth, error) {
	gen.Kind = loadgen.KindOrder
	g, err := loadgen.NewGenerator(gen)
	if err != nil {
		return devTruth{}, err
	}
	chunk := 10000
	if d.opts.rate > 0 {
		// About 50 writes a second keep a limited rate smooth.
		chunk = max(1, min(chunk, d.opts.rate/50))
	}
	w := &kafka.Writer{
		Addr:         kafka.TCP(d.brokerAddr),
		Topic:        d.sc.input,
		Balancer:     kafka.Murmur2Balancer{}, // the Java client's default partitioner
		BatchSize:    chunk,
		BatchBytes:   64 << 20,
		BatchTimeout: time.Millisecond,
		RequiredAcks: kafka.RequireAll,
	}
	defer w.Close()

	var truth devTruth
	msgs := make([]kafka.Message, 0, chunk)
	dups := make([]bool, 0, chunk)
	start := time.Now()
	for ctx.Err() == nil {
		msgs, dups = msgs[:0], dups[:0]
		for len(msgs) < chunk {
			ev, ok := g.Next()
			if !ok {
				break
			}
			msgs = append(msgs, kafka.Message{Key: ev.Key, Value: ev.Value, Time: ev.Time})
			dups = append(dups, ev.Duplicate)
		}
		if len(msgs) == 0 {
			return truth, nil
		}
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		err := w.WriteMessages(wctx, msgs...)
		cancel()
		if err != nil {
			return truth, fmt.Errorf("writing events %d..%d: %w", truth.events, truth.events+int64(len(msgs)), err)
		}
		for _, dup := range dups {
			truth.events++
			if dup {
				truth.duplicates++
			} else {
				truth.unique++
			}
		}
		d.produced.Store(truth.events)
		if d.opts.rate > 0 {
			due := start.Add(time.Duration(float64(truth.events) / float64(d.opts.rate) * float64(time.Second)))
			select {
			case <-ctx.Done():
			case <-time.After(time.Until(due)):
			}
		}
	}
	return truth, ctx.Err()
}
