package worker

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/bloomgate/bloomgate/internal/group"
	"github.com/bloomgate/bloomgate/internal/producer"
	"github.com/bloomgate/bloomgate/internal/quantity"
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

// UnwritablePolicy says what happens to a record that the topic it is
// meant for cannot take: larger than the topic's produce bound (see
// Config.MaxBatchBytes), or refused by the broker for what it is
// (INVALID_RECORD such as a null key on a compacted topic,
// MESSAGE_TOO_LARGE, INVALID_TIMESTAMP, CORRUPT_MESSAGE). Such a record
// fails the same way on every attempt, so retrying the write cannot help.
type UnwritablePolicy string

const (
	// UnwritableDeadLetter writes the record to the dead-letter topic with
	// the reason in the bloomgate-error header; if the dead-letter topic
	// cannot take it either, a small reference record in its place (see
	// docs/worker.md, "Unwritable records"). If even that is refused, the
	// partition stalls.
	UnwritableDeadLetter UnwritablePolicy = "dead-letter"
	// UnwritableStall stops the partition before the record, visibly
	// (status, bloomgate_partition_stalled, an ERROR line), and retries it
	// every UnwritableRetry: raising the topic's max.message.bytes, or
	// fixing what the broker refuses, lets it go on without a restart.
	// Other partitions keep flowing.
	UnwritableStall UnwritablePolicy = "stall"
	// UnwritableDrop counts the record in bloomgate_records_dropped_total
	// with its reason and logs its offset at ERROR.
	UnwritableDrop UnwritablePolicy = "drop"
)

// UnwritableRetry is how often a partition stalled before an unwritable
// record (UnwritableStall) tries it again.
const UnwritableRetry = 30 * time.Second

// CompressionInput writes each batch with the codec of the input batch
// its records came from last: Config.Compression's default.
const CompressionInput = "input"

// codec returns the fixed codec of Compression (None for
// CompressionInput), or why Compression names none.
func (c Config) codec() (codec producer.Codec, err error) {
	if c.Compression == "" || c.Compression == CompressionInput {
		return producer.None, nil
	}
	if codec, err = producer.ParseCodec(c.Compression); err != nil {
		return producer.None, fmt.Errorf("%w, or %s", err, CompressionInput)
	}
	return codec, nil
}

// outputCodec is the codec of a batch written with records of an input
// batch compressed with in (a kafka-go compress.Compression id).
func (c Config) outputCodec(in int8) producer.Codec {
	if c.Compression == "" || c.Compression == CompressionInput {
		return producer.Codec(in)
	}
	codec, _ := c.codec()
	return codec
}

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

// RestorePolicy says what happens when checkpoints exist but none loads,
// not even in part: every manifest is corrupt or refused (a checkpoint
// whose objects are partly bad is restored in part and rebuilt from the
// input instead; docs/checkpoints.md, "Partial restore").
type RestorePolicy string

const (
	RestoreFail  RestorePolicy = "fail"  // Run returns an error
	RestoreEmpty RestorePolicy = "empty" // start as if no checkpoint existed (replay the retained input)
)

// Config is everything the worker needs. A zero setting means its default,
// the one documented on the field (the Default constants; WithDefaults fills
// them in); a bound that can be turned off is turned off by NoBound.
type Config struct {
	Brokers []string
	Group   string // consumer group id, also the checkpoint namespace
	Input   string
	// InputMadeLikeOutput: the input is created at start with the
	// output's partition count where it does not exist (the repartition
	// hop's topic); Preflight then plans with the output's count.
	InputMadeLikeOutput bool
	Output              string
	Duplicates          string // optional: records judged duplicate; else they are dropped and counted
	DeadLetter          string // optional: records whose key cannot be extracted

	OnMissingKey MissingKeyPolicy // default DefaultOnMissingKey(DeadLetter)
	// Agreement lists settings outside this Config that the members of
	// one group must agree on (the key, its normalization, exact mode),
	// by flag name; see agreement.go.
	Agreement []Setting
	// OnUnwritable: default DefaultOnUnwritable(DeadLetter).
	OnUnwritable UnwritablePolicy
	// Compression of the batches written to every topic: none, gzip,
	// snappy, lz4, zstd, or CompressionInput (the default): each batch
	// takes the codec of the input batch its records came from last, so
	// that a stage forwarding records as read keeps what its producers
	// chose.
	Compression string
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

	CheckpointInterval time.Duration // default DefaultCheckpointInterval
	// MaxCheckpointStaleness: while no checkpoint succeeded for this long,
	// processing goes on but offset commits stop (a later recovery would
	// otherwise replay more than the bound). Zero: 10 × CheckpointInterval
	// (DefaultMaxCheckpointStaleness at the default interval); NoBound (any
	// negative duration): no bound. Otherwise at least CheckpointInterval.
	MaxCheckpointStaleness time.Duration
	CheckpointTimeout      time.Duration // one upload; default max(CheckpointInterval, 2m)
	OnRestoreFailure       RestorePolicy // default fail
	// MaxReplay bounds the records replayed when no checkpoint covers the
	// committed offset. Zero, the default, is no bound: replay the whole
	// retained partition, exact. With a bound, offsets are never committed
	// beyond the last good checkpoint plus MaxReplay (commitLimit), so a
	// restart never needs to replay more than the bound to stay exact.
	MaxReplay int64

	BatchSize int // records per read/write batch, up to MaxBatchSize; default DefaultBatchSize
	// MaxBatchBytes bounds one produce batch per partition, from
	// MinBatchBytes to LargestBatchBytes (default 1 MiB, Kafka's default
	// max.message.bytes). At start the worker reads every written topic's
	// max.message.bytes and bounds that topic's batches by it, if lower
	// (limits.go; sizes as the broker counts them, framing included). A
	// record larger than its topic's bound is unwritable: OnUnwritable
	// places it.
	MaxBatchBytes   int64
	BatchTimeout    time.Duration // how long a batch waits to fill; default DefaultBatchTimeout
	CommitInterval  time.Duration // default DefaultCommitInterval
	ShutdownTimeout time.Duration // revoke and shutdown: flush, commit, checkpoint; default DefaultShutdownTimeout
	WriteTimeout    time.Duration // one output write; default DefaultWriteTimeout

	// Group timings: zero ones take group.Timings' defaults (session
	// timeout, rebalance timeout above it, heartbeat interval below it),
	// JoinGroupBackoff DefaultJoinGroupBackoff.
	// kafka-go sends no heartbeats while a member revokes, so a revoke must
	// end within the session timeout: it flushes and commits, and leaves the
	// final checkpoint to the next owner's recovery (docs/worker.md, "Group
	// liveness").
	SessionTimeout    time.Duration
	RebalanceTimeout  time.Duration
	HeartbeatInterval time.Duration
	JoinGroupBackoff  time.Duration
	// InstanceID makes the worker a static member of the group (KIP-345):
	// restarted within the session timeout, it gets its partitions back
	// without a rebalance, and it does not leave the group when it stops.
	// Unique per member; empty: a dynamic member.
	InstanceID string
	// EagerRebalancing offers only the eager protocol: every rebalance
	// revokes every partition of every member, as before cooperative
	// rebalancing (for comparisons; a group with members that offer only
	// the eager protocol rebalances eagerly anyway).
	EagerRebalancing bool

	// Dialer is used by the consumer group and the readers, Transport by the
	// writer and metadata requests; set TLS and SASL on both. Defaults: a
	// Dialer with DefaultDialTimeout, a Transport with kafka-go's defaults.
	Dialer    *kafka.Dialer
	Transport *kafka.Transport
	// SASLUsername is the user the Transport's SASL mechanism logs in as;
	// messages about refused logins and missing ACLs name it.
	SASLUsername string

	// Owner names this worker in checkpoints (default host/pid).
	Owner string
}

// Defaults of the settings a zero value leaves to the worker. They are the
// single source of the defaults of `bloomgate run` as well: the table of
// settings in internal/config takes its defaults from here.
const (
	DefaultGroup              = "bloomgate"
	DefaultPartitioning       = PartitioningSame
	DefaultCompression        = CompressionInput
	DefaultIsolationLevel     = ReadCommitted
	DefaultOnRestoreFailure   = RestoreFail
	DefaultBatchSize          = 2000
	DefaultMaxBatchBytes      = 1 << 20 // Kafka's default max.message.bytes
	DefaultBatchTimeout       = 5 * time.Millisecond
	DefaultWriteTimeout       = 10 * time.Second
	DefaultCommitInterval     = time.Second
	DefaultShutdownTimeout    = 30 * time.Second
	DefaultCheckpointInterval = time.Minute
	// DefaultMaxCheckpointStaleness is the staleness bound at the default
	// checkpoint interval: ten intervals.
	DefaultMaxCheckpointStaleness = stalenessIntervals * DefaultCheckpointInterval
	DefaultSessionTimeout         = group.DefaultSessionTimeout
	DefaultHeartbeatInterval      = group.DefaultHeartbeatInterval
	DefaultJoinGroupBackoff       = time.Second
	DefaultDialTimeout            = 10 * time.Second
)

// NoBound turns off a bound that is on by default (MaxCheckpointStaleness).
// Any negative duration does; `bloomgate run` writes it as 0s.
const NoBound time.Duration = math.MinInt64

const (
	// stalenessIntervals is MaxCheckpointStaleness's default in checkpoint
	// intervals: a few failed uploads in a row pause nothing.
	stalenessIntervals = 10
	// minCheckpointTimeout is CheckpointTimeout's least default: uploads of
	// large generations take a while, and a short interval must not make
	// them fail.
	minCheckpointTimeout = 2 * time.Minute
)

// Ranges of the settings. internal/config checks the settings of
// `bloomgate run` against the same constants, so whatever it accepts the
// worker accepts. Those of Filter are filterplan's, the filter's too.
const (
	// MaxBatchSize bounds BatchSize.
	MaxBatchSize = 1_000_000
	// MinBatchBytes is the smallest MaxBatchBytes: below it the bound is
	// surely a slip (1 for 1 MiB), and every ordinary record would stop
	// the worker.
	MinBatchBytes = 1 << 10
	// LargestBatchBytes is the largest MaxBatchBytes, Kafka's largest
	// batch (2 GiB - 1).
	LargestBatchBytes = math.MaxInt32
)

// CheckBatchSize returns nil for a BatchSize from 1 to MaxBatchSize, else
// what is wrong, in the words `bloomgate run` shows after the setting's
// name.
func CheckBatchSize(n int) error {
	if n >= 1 && n <= MaxBatchSize {
		return nil
	}
	return fmt.Errorf("%d: must be at least 1 and at most %s (e.g. 10000)", n, quantity.Count(MaxBatchSize))
}

// CheckMaxBatchBytes returns nil for a MaxBatchBytes from MinBatchBytes to
// LargestBatchBytes, else what is wrong, as CheckBatchSize.
func CheckMaxBatchBytes(n int64) error {
	if n >= MinBatchBytes && n <= LargestBatchBytes {
		return nil
	}
	return fmt.Errorf("%s: must be between %s and %s-1 (Kafka's largest batch), at most the output topics' max.message.bytes (e.g. %s)",
		quantity.Size(uint64(max(n, 0))), quantity.Size(MinBatchBytes), quantity.Size(LargestBatchBytes+1), quantity.Size(DefaultMaxBatchBytes))
}

// The checks of the enumerated settings and MaxReplay, as CheckBatchSize:
// nil for a value Validate accepts, else what is wrong, in the words
// `bloomgate run` shows after the setting's name. Validate applies them
// with the defaults filled in (a zero value is the default);
// internal/config checks its settings with them.

// CheckOnMissingKey checks an OnMissingKey with the DeadLetter topic it
// would use.
func CheckOnMissingKey(p MissingKeyPolicy, deadLetter string) error {
	if p == MissingKeyDeadLetter && deadLetter == "" {
		return errors.New("dead-letter needs a dead-letter topic: set --dead-letter NAME or choose forward, drop or fail")
	}
	return checkOneOf(p, MissingKeyDeadLetter, MissingKeyForward, MissingKeyDrop, MissingKeyFail)
}

// CheckOnUnwritable checks an OnUnwritable with the DeadLetter topic it
// would use.
func CheckOnUnwritable(p UnwritablePolicy, deadLetter string) error {
	if p == UnwritableDeadLetter && deadLetter == "" {
		return errors.New("dead-letter needs a dead-letter topic: set --dead-letter NAME or choose stall or drop")
	}
	return checkOneOf(p, UnwritableDeadLetter, UnwritableStall, UnwritableDrop)
}

// CheckCompression checks a Compression: CompressionInput or a codec's
// name (producer.CodecNames), as written there.
func CheckCompression(s string) error {
	return checkOneOf(s, append([]string{CompressionInput}, producer.CodecNames()...)...)
}

// CheckPartitioning checks a Partitioning.
func CheckPartitioning(p Partitioning) error {
	return checkOneOf(p, PartitioningSame, PartitioningHash)
}

// CheckIsolationLevel checks an IsolationLevel.
func CheckIsolationLevel(l IsolationLevel) error {
	return checkOneOf(l, ReadCommitted, ReadUncommitted)
}

// CheckOnRestoreFailure checks an OnRestoreFailure.
func CheckOnRestoreFailure(p RestorePolicy) error { return checkOneOf(p, RestoreFail, RestoreEmpty) }

// CheckMaxReplay checks a MaxReplay.
func CheckMaxReplay(n int64) error {
	if n < 0 {
		return fmt.Errorf("%d: must be 0 (no bound) or more", n)
	}
	return nil
}

// checkOneOf returns nil for the allowed values.
func checkOneOf[T ~string](v T, allowed ...T) error {
	if slices.Contains(allowed, v) {
		return nil
	}
	names := make([]string, len(allowed))
	for i, a := range allowed {
		names[i] = string(a)
	}
	return fmt.Errorf("%q is not one of %s", v, strings.Join(names, ", "))
}

// DefaultOnMissingKey is OnMissingKey's default for a dead-letter topic
// (possibly ""): dead-letter when there is one, else forward, so that bad
// input neither stops the stream nor vanishes.
func DefaultOnMissingKey(deadLetter string) MissingKeyPolicy {
	if deadLetter != "" {
		return MissingKeyDeadLetter
	}
	return MissingKeyForward
}

// DefaultOnUnwritable is OnUnwritable's default for a dead-letter topic
// (possibly ""): dead-letter when there is one, else stall, so that a
// record the output refuses neither vanishes nor stops other partitions.
func DefaultOnUnwritable(deadLetter string) UnwritablePolicy {
	if deadLetter != "" {
		return UnwritableDeadLetter
	}
	return UnwritableStall
}

// WithDefaults returns c with every zero setting replaced by its default.
// New runs the worker with the result; Validate checks the relations
// between settings on it.
func (c Config) WithDefaults() Config {
	setDefault(&c.Group, DefaultGroup)
	setDefault(&c.OnMissingKey, DefaultOnMissingKey(c.DeadLetter))
	setDefault(&c.OnUnwritable, DefaultOnUnwritable(c.DeadLetter))
	setDefault(&c.Partitioning, DefaultPartitioning)
	setDefault(&c.Compression, DefaultCompression)
	setDefault(&c.IsolationLevel, DefaultIsolationLevel)
	setDefault(&c.CheckpointInterval, DefaultCheckpointInterval)
	setDefault(&c.MaxCheckpointStaleness, stalenessIntervals*c.CheckpointInterval)
	setDefault(&c.CheckpointTimeout, max(c.CheckpointInterval, minCheckpointTimeout))
	setDefault(&c.OnRestoreFailure, DefaultOnRestoreFailure)
	setDefault(&c.BatchSize, DefaultBatchSize)
	setDefault(&c.MaxBatchBytes, DefaultMaxBatchBytes)
	setDefault(&c.BatchTimeout, DefaultBatchTimeout)
	setDefault(&c.CommitInterval, DefaultCommitInterval)
	setDefault(&c.ShutdownTimeout, DefaultShutdownTimeout)
	setDefault(&c.WriteTimeout, DefaultWriteTimeout)
	c.SessionTimeout, c.RebalanceTimeout, c.HeartbeatInterval = group.Timings(c.SessionTimeout, c.RebalanceTimeout, c.HeartbeatInterval)
	setDefault(&c.JoinGroupBackoff, DefaultJoinGroupBackoff)
	setDefault(&c.Dialer, &kafka.Dialer{Timeout: DefaultDialTimeout, DualStack: true})
	setDefault(&c.Transport, &kafka.Transport{})
	if c.Owner == "" {
		host, _ := os.Hostname()
		c.Owner = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	return c
}

// setDefault sets *p to d if it is the zero value.
func setDefault[T comparable](p *T, d T) {
	var zero T
	if *p == zero {
		*p = d
	}
}

// Validate reports every invalid setting, each naming the setting and the
// fix. It changes nothing; the timings and their relations (staleness and
// interval, group timings) are checked on the values the worker would run
// with, defaults filled in.
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
	// Checked as the worker runs them, defaults filled in (a zero is the
	// default, which passes).
	r := c.WithDefaults()
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
	for _, e := range []struct {
		name string
		err  error
	}{
		{"on-missing-key", CheckOnMissingKey(r.OnMissingKey, c.DeadLetter)},
		{"on-unwritable", CheckOnUnwritable(r.OnUnwritable, c.DeadLetter)},
		{"partitioning", CheckPartitioning(r.Partitioning)},
		{"compression", CheckCompression(r.Compression)},
		{"isolation-level", CheckIsolationLevel(r.IsolationLevel)},
		{"on-restore-failure", CheckOnRestoreFailure(r.OnRestoreFailure)},
	} {
		if e.err != nil {
			bad("%s: %v", e.name, e.err)
		}
	}
	for _, p := range c.Filter.Check() {
		errs = append(errs, p)
	}
	for _, e := range []struct {
		name string
		err  error
	}{
		// The timings, by the rules `bloomgate run` applies to its flags
		// (timings.go).
		{"checkpoint-interval", CheckPositive(r.CheckpointInterval, DefaultCheckpointInterval)},
		{"checkpoint-timeout", CheckPositive(r.CheckpointTimeout, minCheckpointTimeout)},
		{"batch-timeout", CheckPositive(r.BatchTimeout, DefaultBatchTimeout)},
		{"commit-interval", CheckPositive(r.CommitInterval, DefaultCommitInterval)},
		{"shutdown-timeout", CheckPositive(r.ShutdownTimeout, DefaultShutdownTimeout)},
		{"write-timeout", CheckPositive(r.WriteTimeout, DefaultWriteTimeout)},
		{"join-group-backoff", CheckPositive(r.JoinGroupBackoff, DefaultJoinGroupBackoff)},
		{"max-checkpoint-staleness", CheckCheckpointStaleness(r.MaxCheckpointStaleness, r.CheckpointInterval)},
		{"session-timeout", CheckSessionTimeout(r.SessionTimeout)},
		{"heartbeat-interval", CheckHeartbeatInterval(r.HeartbeatInterval, r.SessionTimeout)},
		{"rebalance-timeout", CheckRebalanceTimeout(r.RebalanceTimeout, r.SessionTimeout)},
		{"batch-size", CheckBatchSize(r.BatchSize)}, // 0: the default, which passes
		{"max-batch-bytes", CheckMaxBatchBytes(r.MaxBatchBytes)},
		{"max-replay", CheckMaxReplay(c.MaxReplay)},
	} {
		if e.err != nil {
			bad("%s: %v", e.name, e.err)
		}
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
