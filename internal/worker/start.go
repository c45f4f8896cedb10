package worker

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"
)

// Position names an input position by what a user knows: the start or the
// end of the retained input, a moment, or a time before now. The zero
// Position is the earliest retained record.
type Position struct {
	Latest bool
	At     time.Time     // the first record with a timestamp at or after At
	Ago    time.Duration // the first record with a timestamp at or after now − Ago
}

// IsEarliest reports whether p is the zero Position.
func (p Position) IsEarliest() bool { return p == Position{} }

func (p Position) String() string {
	switch {
	case p.Latest:
		return "latest"
	case !p.At.IsZero():
		return p.At.UTC().Format(time.RFC3339)
	case p.Ago > 0:
		return p.Ago.String() + " ago"
	}
	return "earliest"
}

// LogValue logs p as String says it ("latest", not its fields: a JSON
// log handler would write the struct).
func (p Position) LogValue() slog.Value { return slog.StringValue(p.String()) }

// resolve maps p to an offset of partition part of topic within b, reading
// timestamps from the brokers; now is the reference of Ago.
func (w *Worker) resolve(ctx context.Context, topic string, p Position, part int, b offsetBounds, now time.Time) (int64, error) {
	switch {
	case p.Latest:
		return b.last, nil
	case p.IsEarliest():
		return b.first, nil
	}
	at := p.At
	if at.IsZero() {
		at = now.Add(-p.Ago)
	}
	res, err := w.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{
		topic: {kafka.TimeOffsetOf(part, at)},
	}})
	if err != nil {
		return 0, fmt.Errorf("looking up the offset of %s/%d at %v: %w", topic, part, at, err)
	}
	for _, po := range res.Topics[topic] {
		if po.Partition != part {
			continue
		}
		if po.Error != nil {
			return 0, fmt.Errorf("looking up the offset of %s/%d at %v: %w", topic, part, at, po.Error)
		}
		off := int64(-1)
		for o := range po.Offsets {
			off = max(off, o)
		}
		if off < 0 { // no record at or after at
			return b.last, nil
		}
		return min(max(off, b.first), b.last), nil
	}
	return 0, fmt.Errorf("looking up the offset of %s/%d at %v: partition missing from the answer", topic, part, at)
}

// startOffsets decides where a partition that has neither a committed offset
// nor a checkpoint begins: it forwards from StartFrom, and seeds the filter
// (replay without forwarding) from SeedFrom up to there.
func (pp *partitionProc) startOffsets(ctx context.Context, b offsetBounds) (start, seed int64, err error) {
	w := pp.w
	now := w.deps.Now()
	if start, err = w.resolve(ctx, w.cfg.Input, w.cfg.StartFrom, pp.p, b, now); err != nil {
		return 0, 0, err
	}
	seed = start
	if w.cfg.SeedFrom != nil {
		if seed, err = w.resolve(ctx, w.cfg.Input, *w.cfg.SeedFrom, pp.p, b, now); err != nil {
			return 0, 0, err
		}
		if seed > start {
			pp.log.Warn("seed-from lies after start-from; nothing to seed", "seed_from", w.cfg.SeedFrom, "start_from", w.cfg.StartFrom)
			seed = start
		}
	}
	return start, seed, nil
}
