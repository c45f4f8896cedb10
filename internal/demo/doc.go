// Package demo is `bloomgate dev`, the embedded default: one process runs
// a Kafka-protocol broker on 127.0.0.1 (internal/broker), the dedup worker
// (and for the crawler scenario the --repartition hop) as `bloomgate run`
// builds them (Wiring), and a producer of events with a known share of
// duplicates. It shows progress, and at the end a summary compares what
// the worker forwarded with the producer's ground truth.
package demo
