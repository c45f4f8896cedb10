package demo

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/murmur3"

	"github.com/bloomgate/bloomgate/internal/fetcher"
	"github.com/bloomgate/bloomgate/internal/loadgen"
)

// The demo's producer, and the crawler scenario's check of its output.
//
// Events come from loadgen's generator, so the ground truth (which events
// repeat a key) is exact. In the crawler scenario they are links found by
// several simulated fetchers: each fetcher crawls its own sites and writes
// every link it finds keyed by the host of the page it was found on, as
// crawlers key what their fetchers emit; so copies of one URL, found on
// different sites and spelled differently, land in different partitions,
// and only the --repartition hop brings them together.

const (
	sitesPerFetcher = 8
	// fetcherHeader names the fetcher on every link event.
	fetcherHeader = "fetcher"
)

// produce writes the scenario's events and returns the ground truth. It
// stops between writes, never inside one, so that after an interrupt too
// the truth covers exactly what reached the broker. Orders are keyed by
// order_id, as loadgen keys them; links by their source host.
func (d *demo) produce(ctx context.Context, gen loadgen.GenConfig) (devTruth, error) {
	gen.Kind = loadgen.KindOrder
	if d.sc.repartition {
		gen.Kind = loadgen.KindURL
	}
	g, err := loadgen.NewGenerator(gen)
	if err != nil {
		return devTruth{}, err
	}
	rng := rand.New(rand.NewPCG(gen.Seed, 0x6665746368)) //nolint:gosec // synthetic data
	fetchers := d.opts.fetchers
	names := make([][]byte, fetchers)
	for f := range names {
		names[f] = fmt.Appendf(nil, "fetcher-%d", f+1)
	}
	hosts := make([][]byte, fetchers*sitesPerFetcher) // site i is crawled by fetcher i % fetchers
	for i := range hosts {
		hosts[i] = fmt.Appendf(nil, "site%03d.example.net", i)
	}
	parts := make([]int, d.opts.partitions)
	for p := range parts {
		parts[p] = p
	}
	chunk := 10000
	if d.opts.rate > 0 {
		// About 50 writes a second keep a limited rate smooth.
		chunk = max(1, min(chunk, d.opts.rate/50))
	}
	balancer := kafka.Murmur2Balancer{} // the Java client's default partitioner
	w := &kafka.Writer{
		Addr:         kafka.TCP(d.brokerAddr),
		Topic:        d.sc.input,
		Balancer:     balancer,
		BatchSize:    chunk,
		BatchBytes:   64 << 20,
		BatchTimeout: time.Millisecond,
		RequiredAcks: kafka.RequireAll,
	}
	defer w.Close()

	type landed struct {
		id        uint64
		partition int
	}
	type meta struct {
		landed
		canon   []byte
		dup     bool
		fetcher int
	}
	truth := devTruth{}
	if d.sc.repartition {
		truth.fetchers, truth.urls = make([]int64, fetchers), map[[2]uint64]struct{}{}
	}
	seen := map[landed]struct{}{}
	msgs := make([]kafka.Message, 0, chunk)
	metas := make([]meta, 0, chunk)
	start := time.Now()
	for ctx.Err() == nil {
		msgs, metas = msgs[:0], metas[:0]
		for len(msgs) < chunk {
			ev, ok := g.Next()
			if !ok {
				break
			}
			m := kafka.Message{Key: ev.Key, Value: ev.Value, Time: ev.Time}
			mt := meta{canon: ev.Key, dup: ev.Duplicate}
			if d.sc.repartition {
				site := rng.IntN(len(hosts))
				mt.fetcher = site % fetchers
				m.Key = hosts[site]
				m.Headers = []kafka.Header{{Key: fetcherHeader, Value: names[mt.fetcher]}}
				mt.landed = landed{ev.KeyID, balancer.Balance(m, parts...)}
			}
			msgs = append(msgs, m)
			metas = append(metas, mt)
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
		for i, mt := range metas {
			m := &msgs[i]
			truth.events++
			truth.bytes += int64(len(m.Key) + len(m.Value))
			for _, h := range m.Headers {
				truth.bytes += int64(len(h.Key) + len(h.Value))
			}
			if mt.dup {
				truth.duplicates++
			} else {
				truth.unique++
			}
			if !d.sc.repartition {
				continue
			}
			truth.fetchers[mt.fetcher]++
			if _, ok := seen[mt.landed]; !ok && mt.dup {
				truth.crossPartition++
			}
			seen[mt.landed] = struct{}{}
			if !mt.dup {
				truth.urls[urlHash(mt.canon)] = struct{}{}
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

func urlHash(canonical []byte) [2]uint64 {
	h1, h2 := murmur3.Sum128(canonical)
	return [2]uint64{h1, h2}
}

// forwardCheck is the crawler's output read back and compared with the
// ground truth, and what the repartition topic holds.
type forwardCheck struct {
	records  int64 // in the output topic
	distinct int64 // canonical URLs among them
	repeated int64 // canonical URLs forwarded more than once
	unknown  int64 // forwarded canonical URLs the producer did not write
	badKeys  int64 // forwarded records without an extractable URL
	missing  int64 // canonical URLs written but never forwarded: false positives

	hopRecords, hopBytes int64 // the repartition topic: records, keys+values+headers
	err                  error
}

// checkForwarded reads the output and the repartition topic back. The
// canonical URL of every forwarded record is extracted with the worker's
// own key setting (json:url, normalize url) and counted.
func (d *demo) checkForwarded(ctx context.Context, truth *devTruth) forwardCheck {
	var c forwardCheck
	ex, err := d.cfg.Extractor()
	if err != nil {
		c.err = err
		return c
	}
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	copies := make(map[[2]uint64]int32, len(truth.urls))
	var kb []byte
	c.err = readTopic(ctx, tr, d.brokerAddr, d.sc.output, d.opts.partitions, func(m *kafka.Message) {
		c.records++
		var err error
		if kb, err = ex.Extract(kb[:0], m.Key, m.Value, m.Headers); err != nil {
			c.badKeys++
			return
		}
		h := urlHash(kb)
		copies[h]++
		switch copies[h] {
		case 1:
			if _, ok := truth.urls[h]; !ok {
				c.unknown++
			}
		case 2:
			c.repeated++
		}
	})
	if c.err != nil {
		return c
	}
	c.distinct = int64(len(copies))
	for h := range truth.urls {
		if copies[h] == 0 {
			c.missing++
		}
	}
	c.err = readTopic(ctx, tr, d.brokerAddr, d.cfg.RepartitionTopic(), d.opts.partitions, func(m *kafka.Message) {
		c.hopRecords++
		c.hopBytes += int64(len(m.Key) + len(m.Value))
		for _, h := range m.Headers {
			c.hopBytes += int64(len(h.Key) + len(h.Value))
		}
	})
	return c
}

// readTopic calls fn with every record of a topic, up to the high
// watermark each partition had when its reading began.
func readTopic(ctx context.Context, tr *kafka.Transport, addr, topic string, partitions int, fn func(*kafka.Message)) error {
	for p := range partitions {
		f, err := fetcher.New(fetcher.Config{Transport: tr, Brokers: []string{addr}, Topic: topic, Partition: p,
			Isolation: fetcher.ReadUncommitted, MaxWait: 100 * time.Millisecond}, 0)
		if err != nil {
			return err
		}
		end := int64(-1)
		for end < 0 || f.Offset() < end {
			c, err := f.Fetch(ctx)
			if err != nil {
				return fmt.Errorf("reading %s back: %w", topic, err)
			}
			if end < 0 {
				end = c.HighWatermark
			}
			for i := range c.Records {
				if c.Records[i].Offset < end {
					fn(&c.Records[i])
				}
			}
		}
	}
	return nil
}
