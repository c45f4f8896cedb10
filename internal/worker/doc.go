// Package worker is the bloomgate pipeline: a Kafka consumer-group member that
// reads an input topic, drops events whose dedup key was seen inside the
// window, forwards the rest, and keeps each partition's filter in a
// checkpoint store so that a partition that moves or a worker that dies
// resumes with its memory intact.
//
// Layout, one concern per file:
//
//	config.go       Config, defaults, Validate
//	seams.go        what the worker needs from outside: Filter, StateStore,
//	                PartitionStore, Planner, Extractor; Checkpoint, Restored
//	worker.go       New, Run: topic checks, the group member (internal/group), shutdown
//	preflight.go    Preflight: what the start finds on the Kafka side, for check
//	access.go       authentication and authorization failures: stop at start,
//	                give up after brokercheck.DefaultGiveUp while running
//	timings.go      the rules of the worker's durations, in the words run shows
//	membership.go   the member's partitions (group.Partitions): what joining a
//	                generation and a stopped partition change for the worker
//	agreement.go    settings members of one group must agree on
//	crosspartition.go keys met in two partitions: an input not keyed by the dedup key
//	provenance.go   the bloomgate header of written records: written, read, verified
//	scan.go         the recovery scan of the written topics (scanWritten:
//	                a writtenScan, one targetScan per written partition)
//	inputlog.go     a re-created, truncated or retention-shortened input
//	liveness.go     group timings, the watchdog that rebuilds a stuck membership
//	partition.go    a partition's lifecycle: session (recover → seed → replay →
//	                run, one step each), housekeeping, checkpoint, finish on
//	                revoke or shutdown
//	recovery.go     exact recovery in named steps: restore and claim, C/A/R,
//	                the output scan; returns a recoveryPlan that the session
//	                takes in one place (applyPlan)
//	rebuild.go      rebuilding generations a partial restore lost
//	discards.go     memories discarded once to be rebuilt from the input
//	skipset.go      records written but not committed, found by the scan
//	start.go        --start-from / --seed-from positions of a new group
//	seed.go         seeding a new memory from another topic
//	source.go       the partition's reader: the fetcher pump, batches
//	catchup.go      the log line once the input that waited is worked off
//	batch.go        the per-batch path: handle (route the batch through the
//	                filter, write through the partition's writer, account),
//	                commit offer
//	lookahead.go    a batch's keys extracted and looked up in one filter call
//	writer.go       partitionWriter, a partition's side of the output: its
//	                record builders, writes, write failures, unwritable records
//	output.go       writes: records per topic partition in bounded batches
//	                (internal/producer), partitioning, forwarded-record headers
//	limits.go       the written topics' max.message.bytes and the produce bound
//	unwritable.go   records a topic cannot take: placed by --on-unwritable
//	                (dead letter, reference record, drop, stall; the writer's
//	                part), refused batches written one record per request
//	stuck.go        the stall watchdog: lag from the log end, stalled partitions
//	writeerr.go     write failures summarised for logs and errors
//	checkpointer.go the background checkpoint upload of one partition
//	progress.go     progress of seeding, replay and scans; the minute log line
//	metrics.go      Prometheus metrics
//	status.go       Status, a partition's statistics (partitionStats), the HTTP
//	                handler (/metrics, /healthz, /readyz, /status.json)
//
// The production StateStore is internal/memory (bloom shards checkpointed
// in a checkpoint.Store); this package imports neither the filter nor the
// store.
//
// Cost: one goroutine owns a partition's filter, so the hot path takes no
// locks; per record it costs one key extraction and one filter probe; per batch
// one synchronous, acknowledged (acks=all) write of the whole batch.
//
// Guarantees and their limits are argued in docs/worker.md.
package worker
