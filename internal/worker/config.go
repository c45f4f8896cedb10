package worker

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
)

// MissingKeyPolicy says what happens to a record whose dedup key cannot be
// extracted.
type MissingKeyPolicy string

const (
	MissingKeyDeadLetter MissingKeyPolicy = "dead-letter" // to the dead-letter topic, reason in the bloomgate-error header
	MissingKeyForward    MissingKeyPolicy = "forward"     // to the output topic, without dedup
	MissingKeyDrop       MissingKeyPolicy = "drop"        // counted in bloomgate_records_dropped_total
	MissingKeyFail       MissingKeyPolicy = "fail"        // Run returns an error
)

// Partitioning chooses the output partition of a written record.
type Partitioning string

const (
	// PartitioningSame writes to the partition numbered like the input
	// partition (modulo the partition count for the duplicates and
	// dead-letter topics). Output and input must have equal partition
	// counts. Keeps per-key order and keeps the recovery scan to one
	// partition per topic.
	PartitioningSame Partitioning = "same"
	// PartitioningHash hashes the record's Kafka key (murmur2, like the Java
	// client). The recovery scan then reads every partition of the written
	// topics.
	PartitioningHash Partitioning = "hash"
)

// IsolationLevel says which records of transactional producers are read
// (KIP-98). Transaction markers (control records) are never events at
// either level.
type IsolationLevel string

const (
	// ReadCommitted reads up to the last stable offset and skips the
	// records of aborted transactions: the records an exactly-once
	// upstream really produced, as a Java consumer with
	// isolation.level=read_committed sees them.
	ReadCommitted IsolationLevel = "read_committed"
	// ReadUncommitted reads every data record up to the high-water mark,
	// including those of aborted and still open transactions.
	ReadUncommitted IsolationLevel = "read_uncommitted"
)

// RestorePolicy says what happens when checkpoints exist but none loads.
type RestorePolicy string

const (
	RestoreFail  RestorePolicy = "fail"  // Run returns an error
	RestoreEmpty RestorePolicy = "empty" // start as if no checkpoint existed (replay the retained input)
)

// Config is everything the worker needs. Zero durations and sizes take the
// defaults documented on each field.
type Config struct {
	Brokers    []string
	Group      string // consumer group id, also the checkpoint namespace
	Input      string
	Output     string
	Duplicates string // optional: records judged duplicate; else they are dropped and counted
	DeadLetter string // optional: records whose key cannot be extracted

	OnMissingKey MissingKeyPolicy // default dead-letter when DeadLetter is set, else forward
	// Filter sizes the filters; its Capacity is the expected number of
	// distinct keys per window in the whole input topic, and each
	// partition's filter gets Capacity / partitions (rounded up).
	Filter       FilterParams
	Partitioning Partitioning // default same
	// StartFrom is where a partition with neither a committed offset nor a
	// checkpoint (a new group) begins forwarding; default earliest. Any
	// other position is committed before anything is processed, so a
	// restart does not resolve it again.
	StartFrom Position
	// SeedFrom, if set, is where such a partition begins remembering: the
	// input in [SeedFrom, StartFrom) is replayed into the filter without
	// being forwarded (warm seeding), like a recovery replay.
	SeedFrom *Position
	// SeedTopic, if set, seeds such a partition first from another topic
	// partitioned like the input (e.g. the deduplicated topic an earlier
	// system wrote): partition p of it, from SeedFrom (or its start) to its
	// end at that moment, keys extracted by Deps.SeedExtractor; see seed.go.
	SeedTopic string
	// IsolationLevel: default ReadCommitted. Recovery replay and the
	// recovery scan of the written topics read at the same level, so replay
	// drops exactly what the first pass dropped.
	IsolationLevel IsolationLevel

	CheckpointInterval time.Duration // default 30s
	// MaxCheckpointStaleness: while no checkpoint succeeded for this long,
	// processing goes on but offset commits stop (a later recovery would
	// otherwise replay more than the bound). Default 10 × CheckpointInterval;
	// negative: no bound.
	MaxCheckpointStaleness time.Duration
	CheckpointTimeout      time.Duration // one upload; default max(CheckpointInterval, 2m)
	OnRestoreFailure       RestorePolicy // default fail
	// MaxReplay bounds the records replayed when no checkpoint covers the
	// committed offset (0: replay the whole retained partition, exact).
	MaxReplay int64

	BatchSize int // records per read/write batch; default 5000
	// MaxBatchBytes bounds one produce batch per partition; it must not
	// exceed the output topics' max.message.bytes (Kafka's default 1 MiB,
	// also the default here). A single record larger than it stops Run.
	MaxBatchBytes   int64
	BatchTimeout    time.Duration // how long a batch waits to fill; default 5ms
	CommitInterval  time.Duration // default 1s
	ShutdownTimeout time.Duration // revoke and shutdown: flush, commit, checkpoint; default 30s
	WriteTimeout    time.Duration // one output write; default 10s

	// Group timings (kafka-go defaults when zero, except RebalanceTimeout:
	// SessionTimeout + 10s). kafka-go sends no heartbeats while a member
	// revokes, so a revoke must end within the session timeout: it flushes
	// and commits, and leaves the final checkpoint to the next owner's
	// recovery (docs/worker.md, "Group liveness").
	SessionTimeout    time.Duration
	RebalanceTimeout  time.Duration
	HeartbeatInterval time.Duration
	JoinGroupBackoff  time.Duration

	// Dialer is used by the consumer group and the readers, Transport by the
	// writer and metadata requests; set TLS and SASL on both.
	Dialer    *kafka.Dialer
	Transport *kafka.Transport

	// Owner names this worker in checkpoints (default host/pid).
	Owner string
}

func (c *Config) applyDefaults() {
	if c.Group == "" {
		c.Group = "bloomgate"
	}
	if c.OnMissingKey == "" {
		if c.DeadLetter != "" {
			c.OnMissingKey = MissingKeyDeadLetter
		} else {
			c.OnMissingKey = MissingKeyForward
		}
	}
	if c.Partitioning == "" {
		c.Partitioning = PartitioningSame
	}
	if c.CheckpointInterval == 0 {
		c.CheckpointInterval = 30 * time.Second
	}
	if c.MaxCheckpointStaleness == 0 {
		c.MaxCheckpointStaleness = 10 * c.CheckpointInterval
	}
	if c.CheckpointTimeout == 0 {
		// Uploads of large generations take a while; a short interval must
		// not make them fail.
		c.CheckpointTimeout = max(c.CheckpointInterval, 2*time.Minute)
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = 1 << 20
	}
	if c.IsolationLevel == "" {
		c.IsolationLevel = ReadCommitted
	}
	if c.OnRestoreFailure == "" {
		c.OnRestoreFailure = RestoreFail
	}
	if c.BatchSize == 0 {
		c.BatchSize = 5000
	}
	if c.BatchTimeout == 0 {
		c.BatchTimeout = 5 * time.Millisecond
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = time.Second
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 30 * time.Second
	}
	if c.RebalanceTimeout == 0 {
		// Members revoke within the session timeout (no heartbeats while
		// they do); the rebalance waits for them a little longer.
		c.RebalanceTimeout = c.sessionTimeout() + 10*time.Second
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.Dialer == nil {
		c.Dialer = &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true}
	}
	if c.Transport == nil {
		c.Transport = &kafka.Transport{DialTimeout: 10 * time.Second}
	}
	if c.Owner == "" {
		host, _ := os.Hostname()
		c.Owner = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
}

// Validate reports every invalid setting, each naming the setting and the fix.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if len(c.Brokers) == 0 {
		bad("brokers: at least one broker address (host:port) is required")
	}
	for _, b := range c.Brokers {
		if strings.TrimSpace(b) == "" || !strings.Contains(b, ":") {
			bad("brokers: %q is not a host:port address", b)
		}
	}
	if c.Input == "" {
		bad("input: the input topic is required")
	}
	if c.Output == "" {
		bad("output: the output topic is required")
	}
	topics := map[string]string{}
	for _, t := range []struct{ name, topic string }{{"input", c.Input}, {"output", c.Output}, {"duplicates", c.Duplicates}, {"dead-letter", c.DeadLetter}} {
		if t.topic == "" {
			continue
		}
		if prev, ok := topics[t.topic]; ok {
			bad("%s: topic %q is already used as %s; every topic must be different", t.name, t.topic, prev)
			continue
		}
		topics[t.topic] = t.name
	}
	switch c.OnMissingKey {
	case "", MissingKeyForward, MissingKeyDrop, MissingKeyFail:
	case MissingKeyDeadLetter:
		if c.DeadLetter == "" {
			bad("on-missing-key: dead-letter needs a dead-letter topic; set dead-letter or choose forward|drop|fail")
		}
	default:
		bad("on-missing-key: %q is not one of dead-letter|forward|drop|fail", c.OnMissingKey)
	}
	switch c.Partitioning {
	case "", PartitioningSame, PartitioningHash:
	default:
		bad("partitioning: %q is not one of same|hash", c.Partitioning)
	}
	switch c.IsolationLevel {
	case "", ReadCommitted, ReadUncommitted:
	default:
		bad("isolation-level: %q is not one of read_committed|read_uncommitted", c.IsolationLevel)
	}
	switch c.OnRestoreFailure {
	case "", RestoreFail, RestoreEmpty:
	default:
		bad("on-restore-failure: %q is not one of fail|empty", c.OnRestoreFailure)
	}
	if c.Filter.Window <= 0 {
		bad("window: must be > 0 (e.g. 24h)")
	}
	if c.Filter.Generations < 2 {
		bad("generations: %d is below 2", c.Filter.Generations)
	}
	if c.Filter.Capacity == 0 {
		bad("capacity: expected distinct keys per window must be > 0")
	}
	if !(c.Filter.FPR > 0 && c.Filter.FPR < 1) {
		bad("fpr: %v is outside (0,1)", c.Filter.FPR)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"checkpoint-interval", c.CheckpointInterval},
		{"checkpoint-timeout", c.CheckpointTimeout}, {"batch-timeout", c.BatchTimeout},
		{"commit-interval", c.CommitInterval}, {"shutdown-timeout", c.ShutdownTimeout}, {"write-timeout", c.WriteTimeout},
		{"session-timeout", c.SessionTimeout}, {"rebalance-timeout", c.RebalanceTimeout},
		{"heartbeat-interval", c.HeartbeatInterval}, {"join-group-backoff", c.JoinGroupBackoff},
	} {
		if d.v < 0 {
			bad("%s: %v is negative", d.name, d.v)
		}
	}
	if c.MaxCheckpointStaleness > 0 && c.CheckpointInterval > 0 && c.MaxCheckpointStaleness < c.CheckpointInterval {
		bad("max-checkpoint-staleness: %v is below checkpoint-interval %v", c.MaxCheckpointStaleness, c.CheckpointInterval)
	}
	if c.RebalanceTimeout > 0 && c.RebalanceTimeout <= c.sessionTimeout() {
		bad("rebalance-timeout: %v must exceed session-timeout %v (members revoke within the session timeout, the rebalance waits for them)",
			c.RebalanceTimeout, c.sessionTimeout())
	}
	if c.BatchSize < 0 || c.BatchSize > 1_000_000 {
		bad("batch-size: %d is outside 1..1000000", c.BatchSize)
	}
	if c.MaxBatchBytes < 0 {
		bad("max-batch-bytes: %d is negative", c.MaxBatchBytes)
	}
	if c.MaxReplay < 0 {
		bad("max-replay: %d is negative", c.MaxReplay)
	}
	return errors.Join(errs...)
}

// partitionParams gives one partition's share of the topic-wide capacity.
func (c Config) partitionParams(partitions int) FilterParams {
	p := c.Filter
	if partitions > 1 {
		p.Capacity = (p.Capacity + uint64(partitions) - 1) / uint64(partitions)
	}
	return p
}
