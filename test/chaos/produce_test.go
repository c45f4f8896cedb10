package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/bloomgate/bloomgate/internal/loadgen"
)

// producerConfig describes the input of a chaos run.
type producerConfig struct {
	Brokers  []string
	Topic    string
	Gen      loadgen.GenConfig
	Duration time.Duration // spread the events over about this long
	// BadEvery: one event in BadEvery (on average) is malformed input for
	// the dead-letter topic; 0 for none.
	BadEvery int
	Seed     uint64
}

// producerStats is what the generator wrote, by its own account. Retried
// batches may have landed twice; the input topic read at the end is the
// ground truth for the checks, these counts are compared with it.
type producerStats struct {
	Events     int64 // generator events acknowledged
	Unique     int64
	Duplicates int64
	Adjacent   int64
	Bad        int64 // malformed events acknowledged
	Retries    int64 // failed writes retried (broker down)
	Elapsed    time.Duration
}

// produce writes the generator's sequence at a steady rate, interleaving
// malformed events, and retries failed writes (the broker restarts during
// the run) with the same records: an upstream producer with at-least-once
// delivery. It stops at ctx's end.
func produce(ctx context.Context, cfg producerConfig, progress func(producerStats)) (producerStats, error) {
	gen, err := loadgen.NewGenerator(cfg.Gen)
	if err != nil {
		return producerStats{}, err
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0xbad)) //nolint:gosec // test data
	w := &kafka.Writer{
		Addr:         kafka.TCP(cfg.Brokers...),
		Topic:        cfg.Topic,
		Balancer:     kafka.Murmur2Balancer{},
		BatchSize:    1000,
		BatchBytes:   1 << 20,
		BatchTimeout: time.Millisecond,
		RequiredAcks: kafka.RequireAll,
		MaxAttempts:  1,
		WriteTimeout: 5 * time.Second,
		ReadTimeout:  5 * time.Second,
	}
	defer w.Close()

	rate := float64(cfg.Gen.Count) / cfg.Duration.Seconds()
	chunk := max(50, min(1000, int(rate/20)))
	var st producerStats
	start := time.Now()
	msgs := make([]kafka.Message, 0, chunk+chunk/8)
	evs := make([]loadgen.Event, 0, chunk)
	for {
		msgs, evs = msgs[:0], evs[:0]
		bad := 0
		for len(evs) < chunk {
			ev, ok := gen.Next()
			if !ok {
				break
			}
			if cfg.BadEvery > 0 && rng.IntN(cfg.BadEvery) == 0 {
				msgs = append(msgs, badEvent(rng, ev.Time))
				bad++
			}
			msgs = append(msgs, kafka.Message{Key: ev.Key, Value: ev.Value, Time: ev.Time})
			evs = append(evs, ev)
		}
		if len(msgs) == 0 {
			break
		}
		if err := writeRetrying(ctx, w, msgs, &st); err != nil {
			st.Elapsed = time.Since(start)
			return st, err
		}
		for _, ev := range evs {
			st.Events++
			switch {
			case !ev.Duplicate:
				st.Unique++
			case ev.Adjacent:
				st.Duplicates++
				st.Adjacent++
			default:
				st.Duplicates++
			}
		}
		st.Bad += int64(bad)
		st.Elapsed = time.Since(start)
		if progress != nil {
			progress(st)
		}
		due := start.Add(time.Duration(float64(st.Events) / rate * float64(time.Second)))
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(time.Until(due)):
		}
	}
	st.Elapsed = time.Since(start)
	return st, nil
}

// writeRetrying writes msgs, retrying the records that failed for up to a
// minute. A record whose write failed may still have landed: it is then in
// the input twice, which the checks treat like any other duplicate.
func writeRetrying(ctx context.Context, w *kafka.Writer, msgs []kafka.Message, st *producerStats) error {
	deadline := time.Now().Add(time.Minute)
	for attempt := 0; ; attempt++ {
		err := w.WriteMessages(ctx, msgs...)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("writing %d input records (attempt %d): %w", len(msgs), attempt+1, err)
		}
		st.Retries++
		var werrs kafka.WriteErrors
		if errors.As(err, &werrs) && len(werrs) == len(msgs) {
			failed := msgs[:0:0]
			for i, e := range werrs {
				if e != nil {
					failed = append(failed, msgs[i])
				}
			}
			msgs = failed
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// badEvent is an event whose dedup key (json:order_id) cannot be
// extracted: malformed JSON or a missing field.
func badEvent(rng *rand.Rand, ts time.Time) kafka.Message {
	id := rng.Uint64()
	key := []byte(fmt.Sprintf("BAD-%016x", id))
	var value []byte
	if id%2 == 0 {
		value = []byte(`{"order_id":"ORD-broken","amount":`) // truncated
	} else {
		value = []byte(`{"orderid":"ORD-misspelled","amount":1}`)
	}
	return kafka.Message{Key: key, Value: value, Time: ts}
}
