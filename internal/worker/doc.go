// Package worker is the bloomgate pipeline: a Kafka consumer-group member that
// reads an input topic, drops events whose dedup key was seen inside the
// window, forwards the rest, and keeps each partition's filter in a
// checkpoint store so that a partition that moves or a worker that dies
// resumes with its memory intact.
//
// Layout, one concern per file:
//
//	config.go       Config, defaults, Validate
//	seams.go        the interfaces the worker needs (Filter, StateStore, Extractor)
//	worker.go       New, Run: topic validation, group loop, one goroutine per partition
//	partition.go    the partition processor: restore → recover → read → dedup → write
//	recovery.go     exact recovery: input replay and output scan
//	output.go       the shared kafka.Writer, its Balancer, forwarded-record headers
//	committer.go    the single offset committer of a generation
//	checkpointer.go the background checkpoint upload of one partition
//	metrics.go      Prometheus metrics
//	status.go       Status, the HTTP handler (/metrics, /healthz, /readyz, /status.json)
//
// Cost: one goroutine owns a partition's filter, so the hot path takes no
// locks; per record it costs one key extraction and one filter probe; per batch
// one synchronous, acknowledged (acks=all) write of the whole batch.
//
// Guarantees and their limits are argued in docs/worker.md.
package worker
