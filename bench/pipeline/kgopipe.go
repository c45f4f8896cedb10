package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// runKgoPipe is the second baseline: the pass-through pipe a Go team
// would write with franz-go. Poll, produce every polled record to the same
// partition of the output (acks=all, franz-go's defaults otherwise:
// idempotent, batches per partition, several in flight), wait for the
// acknowledgements, mark the polled records and let the client commit the
// marks every second. The records carry the worker's two source headers,
// as in the kafka-go pipe.
func runKgoPipe(ctx context.Context, cfg pipeConfig) error {
	if cfg.brokers == "" || cfg.group == "" || cfg.input == "" || cfg.output == "" {
		return errors.New("kgo pipe: -brokers, -group, -input and -output are required")
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(cfg.brokers),
		kgo.ConsumerGroup(cfg.group),
		kgo.ConsumeTopics(cfg.input),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(time.Second),
		kgo.DefaultProduceTopic(cfg.output),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// 0 by default: a synchronous pipe waits for every poll's records,
		// so lingering only delays it (-kgo-linger 10ms is franz-go's
		// default, as system kgo-linger).
		kgo.ProducerLinger(cfg.linger),
		// The codec every system writes with (-output-compression), not
		// franz-go's default (snappy): the same bytes to compress.
		kgo.ProducerBatchCompression(kgoCodec(cfg.codec)),
	)
	if err != nil {
		return err
	}
	defer cl.Close()
	var out []*kgo.Record
	var arena []byte
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return nil
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("fetching %s/%d: %w", t, p, err) })
		if ferr != nil {
			fmt.Println(ferr)
			continue
		}
		out, arena = out[:0], arena[:0]
		fs.EachRecord(func(r *kgo.Record) {
			start := len(arena)
			arena = workerHeader(arena, int(r.Partition), r.Offset)
			hs := make([]kgo.RecordHeader, 0, len(r.Headers)+1)
			hs = append(hs, r.Headers...)
			hs = append(hs, kgo.RecordHeader{Key: "bloomgate", Value: arena[start:len(arena):len(arena)]})
			out = append(out, &kgo.Record{Key: r.Key, Value: r.Value, Headers: hs, Timestamp: r.Timestamp, Partition: r.Partition})
		})
		if len(out) == 0 {
			continue
		}
		if err := cl.ProduceSync(ctx, out...).FirstErr(); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("producing %d records: %w", len(out), err)
		}
		cl.MarkCommitRecords(fs.Records()...)
	}
}

// kgoCodec is franz-go's codec of a codec name.
func kgoCodec(name string) kgo.CompressionCodec {
	switch name {
	case "gzip":
		return kgo.GzipCompression()
	case "snappy":
		return kgo.SnappyCompression()
	case "lz4":
		return kgo.Lz4Compression()
	case "zstd":
		return kgo.ZstdCompression()
	}
	return kgo.NoCompression()
}
