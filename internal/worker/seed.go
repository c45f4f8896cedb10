package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
)

// Seeding from another topic (Config.SeedTopic): a new memory first reads
// the same-numbered partition of that topic, from SeedFrom (or its start)
// to its high-water mark at that moment, and remembers the keys it finds
// there without forwarding anything; e.g. the deduplicated topic an earlier
// system wrote. Then it seeds from the input (SeedFrom up to StartFrom) and
// runs. The read is recorded in the checkpoints (SeedProgress), so a crash
// or a restart resumes it, and the memory stays a pure function of what it
// read in this order. A memory without any checkpoint seeds again.

// checkSeedTopic checks that the seed topic exists with as many partitions
// as the input: partition p of it seeds the filter of input partition p.
func (w *Worker) checkSeedTopic(ctx context.Context) error {
	if w.cfg.SeedTopic == "" {
		return nil
	}
	// checkTopics read it with the other topics (and refused it if not
	// readable).
	if w.seedErr != nil {
		return fmt.Errorf("%w: --seed-topic %q: %w (name an existing topic, or drop --seed-topic)", ErrTopicConfig, w.cfg.SeedTopic, w.seedErr)
	}
	if n, want := w.seedPartitions, w.partitions[w.cfg.Input]; n != want {
		return fmt.Errorf("%w: --seed-topic %q has %d partitions, the input %q has %d: partition p of the seed topic seeds the memory of "+
			"input partition p, so it must be partitioned like the input (the output of a dedup stage with the same partitioning, "+
			"or a topic keyed by the dedup key with the same partitioner)", ErrTopicConfig, w.cfg.SeedTopic, n, w.cfg.Input, want)
	}
	return nil
}

// seedTopicRead is the seed topic's read a session begins with: where the
// checkpoint left it, or, for a memory without a checkpoint, all of it
// (logged); nil if none.
func (pp *partitionProc) seedTopicRead(ctx context.Context, restored *Restored) (*SeedProgress, error) {
	w := pp.w
	switch {
	case restored.InputOffset >= 0:
		if restored.Seed == nil {
			return nil, nil
		}
		s := *restored.Seed
		return &s, nil
	case w.cfg.SeedTopic == "":
		return nil, nil
	}
	sp, err := pp.seedRange(ctx)
	if err != nil {
		return nil, err
	}
	pp.log.Info("seeding from another topic first", "seed_topic", w.cfg.SeedTopic,
		"from", sp.Next, "to", sp.End, "records", sp.End-sp.Next)
	return sp, nil
}

// seedRange resolves the seeding read of a memory that has no checkpoint:
// partition pp.p of the seed topic from SeedFrom (or its start) to its
// high-water mark now.
func (pp *partitionProc) seedRange(ctx context.Context) (*SeedProgress, error) {
	w := pp.w
	b, err := w.bounds(ctx, w.cfg.SeedTopic, []int{pp.p})
	if err != nil {
		return nil, err
	}
	from := b[pp.p].first
	if w.cfg.SeedFrom != nil {
		if from, err = w.resolve(ctx, w.cfg.SeedTopic, *w.cfg.SeedFrom, pp.p, b[pp.p], w.deps.Now()); err != nil {
			return nil, err
		}
	}
	return &SeedProgress{Topic: w.cfg.SeedTopic, Partition: pp.p, Next: from, End: b[pp.p].last}, nil
}

// seedFromTopic reads the rest of the seed topic's range into the filter.
// Periodic checkpoints record how far it got. It returns ctx's error if
// ctx ends first (the caller then finishes with a checkpoint).
func (pp *partitionProc) seedFromTopic(ctx context.Context) error {
	w, sp := pp.w, pp.seedTopic
	ex := w.deps.SeedExtractor
	if ex == nil {
		ex = w.deps.Extractor
	}
	began, start := w.deps.Now(), sp.Next
	pr := pp.beginProgress(phaseSeeding, sp.Next, sp.End)
	pr.topic = sp.Topic
	defer pr.end()
	var keys, bad uint64
	var key []byte
	// at is a point where the filter covers the topic below o: progress and
	// periodic checkpoints happen there (every 256 records, and after each
	// fetch, whose records may span more).
	at := func(o int64) {
		sp.Next = o
		pr.update(o-start, keys)
		pp.housekeeping(ctx)
	}
	n := 0
	_, err := w.scanRange(ctx, sp.Topic, pp.p, sp.Next, sp.End, func(m *kafka.Message) {
		if k, err := ex.Extract(key[:0], m.Key, m.Value, m.Headers); err != nil {
			bad++
		} else {
			key = k
			pp.filter.TestAndAdd(k, m.Time)
			keys++
		}
		if n++; n%256 == 0 {
			at(m.Offset + 1)
		}
	}, at)
	if err != nil {
		return err
	}
	if err := pp.filterErr(); err != nil {
		return err
	}
	pp.seedTopic = nil
	pp.log.Info(fmt.Sprintf("seeded %d keys from topic %s", keys, sp.Topic),
		"seed_topic", sp.Topic, "from", start, "to", sp.End, "keys", keys, "without_key", bad,
		"took", w.deps.Now().Sub(began).Round(time.Millisecond))
	return nil
}
