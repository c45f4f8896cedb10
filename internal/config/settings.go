package config

import (
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/filterplan"
	"github.com/bloomgate/bloomgate/internal/group"
	"github.com/bloomgate/bloomgate/internal/keys"
	"github.com/bloomgate/bloomgate/internal/saslauth"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// A setting of `bloomgate run`, described once: its flag name (also its
// YAML key; its environment variable is envName(name)), the section of
// --help it is listed in, the component that owns it (whose Config takes
// it, whose constant is its default and whose checks bound it), the Run
// field it sets with its default, and its help words. The flags
// (FlagSet), Default, --help (WriteSettings), the YAML keys, the start-up
// log (LogValue), the settings the members of a group announce
// (Agreement) and the reference in docs/settings.md (WriteReference) all
// come from settings.
type setting struct {
	name    string
	section string
	owner   string
	field   field
	help    string
	// agree, if set, announces the setting to the other members of the
	// group, which must agree on it (worker.Config.Agreement): its value
	// as the members compare it, from the value as a flag shows it.
	agree func(c *Run, value string) string
	// doc adds words for docs/settings.md only: what is too long for
	// --help.
	doc string
	// log, if set, is how the start-up log shows the value: a secret as
	// [redacted] (secret), a URL without what may be secret in it.
	log func(value string) string
}

// The sections of --help, in their order.
const (
	secKafka       = "Kafka"
	secTLSSASL     = "Kafka TLS and SASL"
	secKeys        = "Keys"
	secFilter      = "Filter"
	secCheckpoints = "Checkpoints"
	secOperations  = "Operations"
)

var sectionOrder = []string{secKafka, secTLSSASL, secKeys, secFilter, secCheckpoints, secOperations}

// The owners of settings: the package whose Config takes the setting and
// whose constants are its default and bounds; config owns what only
// `bloomgate run` reads.
const (
	ownerConfig     = "config"
	ownerWorker     = "worker"
	ownerGroup      = "group"
	ownerKeys       = "keys"
	ownerFilterplan = "filterplan"
	ownerMemory     = "memory"
	ownerCheckpoint = "checkpoint"
)

// secret logs a secret's value, when set, as [redacted].
func secret(v string) string {
	if v == "" {
		return ""
	}
	return "[redacted]"
}

// asWritten announces a setting as a flag shows its value.
func asWritten(_ *Run, v string) string { return v }

// settings is every setting of `bloomgate run`, in the order of --help.
var settings = []setting{
	{name: "brokers", section: secKafka, owner: ownerWorker,
		field: list(func(c *Run) *[]string { return &c.Brokers }),
		help:  "Kafka bootstrap brokers, `host:port`, comma-separated or repeated (required)"},
	{name: "client-id", section: secKafka, owner: ownerConfig,
		field: text(func(c *Run) *string { return &c.ClientID }, DefaultClientID),
		help:  "client id of every connection to the brokers (their request logs, quotas and ACL audit logs, the consumer group's member ids)"},
	{name: "group", section: secKafka, owner: ownerWorker,
		field: text(func(c *Run) *string { return &c.Group }, worker.DefaultGroup),
		help:  "consumer group `id`; also names the checkpoint prefix"},
	{name: "input", section: secKafka, owner: ownerWorker,
		field: text(func(c *Run) *string { return &c.Input }, ""),
		help:  "input `topic` (required)",
		agree: asWritten},
	{name: "output", section: secKafka, owner: ownerWorker,
		field: text(func(c *Run) *string { return &c.Output }, ""),
		help:  "output `topic` for first occurrences (required)"},
	{name: "duplicates", section: secKafka, owner: ownerWorker,
		field: text(func(c *Run) *string { return &c.Duplicates }, ""),
		help:  "optional `topic` for events judged duplicate (else they are dropped and counted)"},
	{name: "dead-letter", section: secKafka, owner: ownerWorker,
		field: text(func(c *Run) *string { return &c.DeadLetter }, ""),
		help:  "optional `topic` for events whose key cannot be extracted"},
	{name: "partitioning", section: secKafka, owner: ownerWorker,
		field: text(func(c *Run) *string { return &c.Partitioning }, string(worker.DefaultPartitioning)).checked(enum(worker.CheckPartitioning)),
		help:  "output partition: same (= input partition, counts must match) or hash (of the Kafka key)"},
	{name: "compression", section: secKafka, owner: ownerWorker,
		field: text(func(c *Run) *string { return &c.Compression }, worker.DefaultCompression).checked(only(worker.CheckCompression)),
		help:  "compression of every topic the worker writes (output, duplicates, dead letters, the repartition hop): input (each batch with the codec of the input batch its records came from: a stage that forwards records as read keeps what their producers chose), none, gzip, snappy, lz4 or zstd"},
	{name: "isolation-level", section: secKafka, owner: ownerWorker,
		field: text(func(c *Run) *string { return &c.IsolationLevel }, string(worker.DefaultIsolationLevel)).checked(enum(worker.CheckIsolationLevel)),
		help:  "read_committed (skip records of aborted transactions; wait for open ones) or read_uncommitted (read everything written); transaction markers are never events"},
	{name: "start-from", section: secKafka, owner: ownerWorker,
		field: text(func(c *Run) *string { return &c.StartFrom }, "earliest"),
		help:  "where a new group (no committed offset, no checkpoint) starts forwarding: earliest, latest, an RFC 3339 time, or a duration before now (72h, 3d)"},
	{name: "seed-from", section: secKafka, owner: ownerWorker,
		field: text(func(c *Run) *string { return &c.SeedFrom }, ""),
		help:  "with --start-from: remember (without forwarding) the input from this position up to the start: a time or a duration before now (e.g. 72h); empty: no seeding. With --seed-topic also where that topic is read from"},
	{name: "seed-topic", section: secKafka, owner: ownerWorker,
		field: text(func(c *Run) *string { return &c.SeedTopic }, ""),
		help:  "for a new group: first remember (without forwarding) the keys of this topic, e.g. the deduplicated topic an earlier system wrote; partition p of it seeds input partition p, so it must be partitioned like the input",
		doc:   `See docs/operations.md, "Putting bloomgate into an existing pipeline"`},
	{name: "seed-key", section: secKafka, owner: ownerKeys,
		field: text(func(c *Run) *string { return &c.SeedKey }, ""),
		help:  "the dedup key in --seed-topic's records, as --key (default: --key); normalized as --normalize"},
	{name: "repartition", section: secKafka, owner: ownerConfig,
		field: boolean(func(c *Run) *bool { return &c.Repartition }),
		help:  "the input is not keyed by the dedup key: run a first hop (group <group>-repartition) that writes every record to the topic <group>-repartition keyed by the hash of its canonical key (created if missing), and dedup that topic",
		agree: asWritten,
		doc:   "See docs/keys.md. The hop takes --compression, --batch-size, --max-batch-bytes (lowered to the repartition topic's max.message.bytes), --write-timeout, --commit-interval, --dead-letter and --on-unwritable as well"},
	{name: "batch-size", section: secKafka, owner: ownerWorker,
		field: count(func(c *Run) *int { return &c.BatchSize }, worker.DefaultBatchSize).checked(only(worker.CheckBatchSize)),
		help:  "max records per produce batch"},
	{name: "batch-timeout", section: secKafka, owner: ownerWorker,
		field: duration(func(c *Run) *time.Duration { return &c.BatchTimeout }, worker.DefaultBatchTimeout).checked(worker.CheckPositive),
		help:  "max wait to fill a produce batch"},
	{name: "max-batch-bytes", section: secKafka, owner: ownerWorker,
		field: size(func(c *Run) *int64 { return &c.MaxBatchBytes }, worker.DefaultMaxBatchBytes).checked(only(worker.CheckMaxBatchBytes)),
		help:  "max bytes of one produce batch per partition (1MiB, 1MB or 1048576); lowered at start, per written topic, to its max.message.bytes (sizes as the broker counts them); a larger record is unwritable (see --on-unwritable); batches are cut at 256KiB below it",
		doc:   "The topics' max.message.bytes are read with DescribeConfigs and logged; a record between 256 KiB and the bound goes in a batch of its own"},
	{name: "on-unwritable", section: secKafka, owner: ownerWorker,
		field: text(func(c *Run) *string { return &c.OnUnwritable }, ""),
		help:  "record its topic cannot take (over the batch bound, or refused by the broker, e.g. a null key on a compacted topic): dead-letter (with its reason; a reference record if the dead-letter topic cannot hold it), stall (its partition waits before it, retried every 30s; other partitions go on) or drop (counted) (default: dead-letter if --dead-letter is set, else stall)",
		doc:   `See docs/operations.md, "Records the output refuses"`},
	{name: "write-timeout", section: secKafka, owner: ownerWorker,
		field: duration(func(c *Run) *time.Duration { return &c.WriteTimeout }, worker.DefaultWriteTimeout).checked(worker.CheckPositive),
		help:  "bound of one produce request; a batch write that fails, or is unanswered after twice this, is followed by an exact recovery of the partition"},
	{name: "commit-interval", section: secKafka, owner: ownerWorker,
		field: duration(func(c *Run) *time.Duration { return &c.CommitInterval }, worker.DefaultCommitInterval).checked(worker.CheckPositive),
		help:  "time between offset commits of the records whose output writes are acknowledged"},
	{name: "session-timeout", section: secKafka, owner: ownerGroup,
		field: duration(func(c *Run) *time.Duration { return &c.SessionTimeout }, group.DefaultSessionTimeout).checked(only(worker.CheckSessionTimeout)),
		help:  "consumer group session timeout: how long the partitions of a crashed worker wait before moving"},
	{name: "heartbeat-interval", section: secKafka, owner: ownerGroup,
		field: duration(func(c *Run) *time.Duration { return &c.HeartbeatInterval }, group.DefaultHeartbeatInterval),
		help:  "consumer group heartbeat interval (well below --session-timeout)"},
	{name: "rebalance-timeout", section: secKafka, owner: ownerGroup,
		field: duration(func(c *Run) *time.Duration { return &c.RebalanceTimeout }, 0),
		help:  fmt.Sprintf("how long the group waits for members to rejoin in a rebalance; must exceed --session-timeout (0s: session-timeout + %v)", group.RebalanceOverSession),
		doc:   `A revoked partition's final commit and checkpoint get at most half of it (heartbeats go on meanwhile; docs/worker.md, "Group membership")`},
	{name: "join-group-backoff", section: secKafka, owner: ownerWorker,
		field: duration(func(c *Run) *time.Duration { return &c.JoinGroupBackoff }, worker.DefaultJoinGroupBackoff).checked(worker.CheckPositive),
		help:  "wait before re-joining the group after an error"},
	{name: "group-instance-id", section: secKafka, owner: ownerGroup,
		field: text(func(c *Run) *string { return &c.GroupInstanceID }, "auto"),
		help: "static group membership: a restart within --session-timeout keeps the member's partitions, no rebalance; " +
			"auto: the pod name where it is stable (a StatefulSet's NAME-N, from POD_NAME, or from HOSTNAME inside Kubernetes), else a dynamic member; none: always dynamic; else the id, unique per member",
		doc: "A static member does not leave the group when it stops (KIP-345)"},
	{name: "tls-enabled", section: secTLSSASL, owner: ownerConfig,
		field: boolean(func(c *Run) *bool { return &c.TLS.Enabled }),
		help:  "connect to Kafka over TLS"},
	{name: "tls-ca-file", section: secTLSSASL, owner: ownerConfig,
		field: text(func(c *Run) *string { return &c.TLS.CAFile }, ""),
		help:  "PEM `file` of CA certificates to trust (default: system roots)"},
	{name: "tls-cert-file", section: secTLSSASL, owner: ownerConfig,
		field: text(func(c *Run) *string { return &c.TLS.CertFile }, ""),
		help:  "PEM client certificate `file` for mutual TLS (with --tls-key-file)"},
	{name: "tls-key-file", section: secTLSSASL, owner: ownerConfig,
		field: text(func(c *Run) *string { return &c.TLS.KeyFile }, ""),
		help:  "PEM client key `file` for mutual TLS (with --tls-cert-file)"},
	{name: "tls-insecure-skip-verify", section: secTLSSASL, owner: ownerConfig,
		field: boolean(func(c *Run) *bool { return &c.TLS.InsecureSkipVerify }),
		help:  "do not verify the broker certificate (testing only)"},
	{name: "sasl-mechanism", section: secTLSSASL, owner: ownerConfig,
		field: text(func(c *Run) *string { return &c.SASL.Mechanism }, ""),
		help: "SASL mechanism: plain, scram-sha-256 or scram-sha-512 (with --sasl-username and --sasl-password), " +
			"oauthbearer (with --sasl-oauth-token-file, or --sasl-oauth-token-endpoint and a client id and secret), aws-msk-iam (AWS credentials from the SDK's default chain) " +
			"(empty: no SASL); a refused login stops the start, it is not retried",
		doc: "Settings for AWS MSK, Confluent Cloud, Azure Event Hubs and Redpanda: docs/kafka.md"},
	{name: "sasl-username", section: secTLSSASL, owner: ownerConfig,
		field: text(func(c *Run) *string { return &c.SASL.Username }, ""),
		help:  "SASL user `name`"},
	{name: "sasl-password", section: secTLSSASL, owner: ownerConfig,
		field: text(func(c *Run) *string { return &c.SASL.Password }, ""),
		help:  "SASL `password` (prefer the environment variable; never logged)",
		log:   secret},
	{name: "sasl-oauth-token-file", section: secTLSSASL, owner: ownerConfig,
		field: text(func(c *Run) *string { return &c.SASL.OAuthTokenFile }, ""),
		help:  "oauthbearer: `file` holding the bearer token, read again for every new connection (whatever renews it, e.g. a sidecar or a projected volume, needs no restart)"},
	{name: "sasl-oauth-token-endpoint", section: secTLSSASL, owner: ownerConfig,
		field: text(func(c *Run) *string { return &c.SASL.OAuthTokenEndpoint }, ""),
		help: "oauthbearer: OAuth 2 / OIDC token endpoint `URL` for the client credentials grant (KIP-768); " +
			fmt.Sprintf("the token is cached and replaced after %.0f %% of its lifetime", saslauth.RefreshAt*100)},
	{name: "sasl-oauth-client-id", section: secTLSSASL, owner: ownerConfig,
		field: text(func(c *Run) *string { return &c.SASL.OAuthClientID }, ""),
		help:  "oauthbearer: client `id` at the token endpoint"},
	{name: "sasl-oauth-client-secret", section: secTLSSASL, owner: ownerConfig,
		field: text(func(c *Run) *string { return &c.SASL.OAuthClientSecret }, ""),
		help:  "oauthbearer: client `secret`, from the environment variable or the YAML file only (a command line shows in ps); never logged",
		log:   secret},
	{name: "sasl-oauth-client-secret-file", section: secTLSSASL, owner: ownerConfig,
		field: text(func(c *Run) *string { return &c.SASL.OAuthClientSecretFile }, ""),
		help:  "oauthbearer: `file` holding the client secret (instead of --sasl-oauth-client-secret)"},
	{name: "sasl-oauth-scope", section: secTLSSASL, owner: ownerConfig,
		field: text(func(c *Run) *string { return &c.SASL.OAuthScope }, ""),
		help:  "oauthbearer: `scope` asked of the token endpoint, space-separated (empty: none sent)"},
	{name: "sasl-oauth-extensions", section: secTLSSASL, owner: ownerConfig,
		field: text(func(c *Run) *string { return &c.SASL.OAuthExtensions }, ""),
		help:  "oauthbearer: SASL extensions sent with the token, `key=value,...` (KIP-342), e.g. Confluent Cloud's logicalCluster=lkc-…,identityPoolId=pool-…"},
	{name: "sasl-aws-region", section: secTLSSASL, owner: ownerConfig,
		field: text(func(c *Run) *string { return &c.SASL.AWSRegion }, ""),
		help:  "aws-msk-iam: AWS `region` of the cluster (default: AWS_REGION or the AWS profile's)"},
	{name: "key", section: secKeys, owner: ownerKeys,
		field: text(func(c *Run) *string { return &c.Key }, "key").checked(only(keys.ValidateSpec)),
		help:  "dedup key: key (Kafka message key), header:NAME, json:PATH (e.g. json:order.id); comma-separated parts form a compound key",
		agree: asWritten},
	{name: "normalize", section: secKeys, owner: ownerKeys,
		field: text(func(c *Run) *string { return &c.Normalize }, "none"),
		help:  "key normalization: none, trim, lower or url (canonical crawler URL)",
		agree: asWritten},
	{name: "url-rules", section: secKeys, owner: ownerKeys,
		field: list(func(c *Run) *[]string { return &c.URLRules }),
		help: "with --normalize url: opt-in canonicalization `rules`, comma-separated: " +
			strings.Join(keys.URLRuleNames()[:len(keys.URLRuleNames())-1], ", ") + ", or the preset " + keys.PresetCrawler +
			" (strip-userinfo, strip-www, strip-session-ids: what Heritrix applies by default); each merges spellings that are usually, not always, one page (docs/urls.md). Part of the key definition: a memory written with other rules is refused",
		agree: func(c *Run, _ string) string { return c.KeyIdentity().URLRules },
		doc:   `See docs/keys.md, "URL rules"`},
	{name: "url-strip-params", section: secKeys, owner: ownerKeys,
		field: list(func(c *Run) *[]string { return &c.URLStripParams }),
		help:  "with --normalize url: query `parameters` to drop, comma-separated names, '*' matching any run of characters (utm_*, ref), ASCII case ignored; strip-tracking adds its built-in list. Part of the key definition",
		agree: func(c *Run, _ string) string { return c.KeyIdentity().URLStripParams }},
	{name: "max-key-bytes", section: secKeys, owner: ownerKeys,
		field: size(func(c *Run) *int { return &c.MaxKeyBytes }, keys.DefaultMaxKeyBytes).checked(only(checkMaxKeyBytes)),
		help:  "longest accepted key after normalization; longer ones are bad input (too_large)"},
	{name: "json-validation", section: secKeys, owner: ownerKeys,
		field: text(func(c *Run) *string { return &c.JSONValidation }, JSONValidationStrict).checked(oneOf(JSONValidationStrict, JSONValidationLazy)),
		help:  "strict (validate every JSON value) or lazy (only when the key field is unusable; faster)"},
	{name: "on-missing-key", section: secKeys, owner: ownerWorker,
		field: text(func(c *Run) *string { return &c.OnMissingKey }, ""),
		help:  "event without a usable key: dead-letter, forward, drop or fail (default: dead-letter if --dead-letter is set, else forward)"},
	{name: "filter", section: secFilter, owner: ownerMemory,
		field: text(func(c *Run) *string { return &c.Filter }, FilterRing).checked(oneOf(FilterRing, FilterFingerprint)),
		help:  "filter kind: ring (G blocked Bloom generations) or fingerprint (age-tagged fingerprints: the newest generation in a quotient table, the sealed ones in a static set; ~22 % less memory at 1 %, ~32 % at 0.1 % from ~200 k keys per partition, slower inserts; best with --generations 8). A memory keeps its kind: a checkpoint of the other kind is refused",
		doc:   "See docs/sizing.md and docs/filter.md, \"Choosing the kind\""},
	{name: "window", section: secFilter, owner: ownerFilterplan,
		field: duration(func(c *Run) *time.Duration { return &c.Window }, 24*time.Hour),
		help:  "dedup window: a key is remembered for at least this much event time"},
	{name: "generations", section: secFilter, owner: ownerFilterplan,
		field: count(func(c *Run) *int { return &c.Generations }, 4),
		help:  fmt.Sprintf("filter generations in the rotating ring, %d to %d; memory = capacity x generations/(generations-1)", filterplan.MinGenerations, filterplan.MaxGenerations)},
	{name: "capacity", section: secFilter, owner: ownerFilterplan,
		field: count(func(c *Run) *uint64 { return &c.Capacity }, 10_000_000),
		help:  fmt.Sprintf("expected distinct keys per window for the whole input topic; a plan needing more than %s of filter memory is refused (docs/settings.md)", formatMemory(MaxPlannedFilterBytes))},
	{name: "fpr", section: secFilter, owner: ownerFilterplan,
		field: rate(func(c *Run) *float64 { return &c.FPR }, 0.01),
		help:  "target false-positive rate, a fraction or a percentage in (0,1): 0.01 or 1%"},
	{name: "max-time-jump", section: secFilter, owner: ownerMemory,
		field: duration(func(c *Run) *time.Duration { return &c.MaxTimeJump }, time.Hour).checked(notNegative),
		help:  "how far one record may move a partition's event time forward; a record stamped further ahead is filed at that bound, so one bad timestamp cannot make the filter forget (0s: unbounded)"},
	{name: "exact", section: secFilter, owner: ownerMemory,
		field: boolean(func(c *Run) *bool { return &c.Exact }),
		help:  "exact mode: confirm every positive of the filter in a local store of the keys' 128-bit hashes (16 B per key on disk, checkpointed with the filter); a refuted one (a false positive) is forwarded: no false positives",
		agree: asWritten,
		doc:   "See docs/exact.md"},
	{name: "exact-dir", section: secFilter, owner: ownerMemory,
		field: text(func(c *Run) *string { return &c.ExactDir }, DefaultExactDir),
		help:  "local `directory` of exact mode's stores, one subdirectory per group/topic/partition; a cache of the checkpoints (rebuilt from them when lost); one per worker process"},
	{name: "checkpoint-url", section: secCheckpoints, owner: ownerCheckpoint,
		field: text(func(c *Run) *string { return &c.CheckpointURL }, "file://./.bloomgate/checkpoints").checked(only(checkCheckpointURL)),
		help:  "where filter checkpoints go: s3://bucket/prefix?endpoint=…&region=…, file:///dir (files 0600), mem://name; logged with other query values REDACTED",
		log:   checkpoint.RedactURL},
	{name: "checkpoint-interval", section: secCheckpoints, owner: ownerWorker,
		field: duration(func(c *Run) *time.Duration { return &c.CheckpointInterval }, worker.DefaultCheckpointInterval).checked(worker.CheckPositive),
		help:  "time between periodic checkpoints of each partition",
		doc:   "A new memory's or a seeding's first checkpoints come sooner: after 10 s, 20 s, 40 s, …"},
	{name: "checkpoint-retain", section: secCheckpoints, owner: ownerCheckpoint,
		field: count(func(c *Run) *int { return &c.CheckpointRetain }, checkpoint.DefaultRetain).checked(atLeastOne),
		help:  "checkpoints (manifests) kept per partition"},
	{name: "max-checkpoint-staleness", section: secCheckpoints, owner: ownerWorker,
		field: bound(func(c *Run) *time.Duration { return &c.MaxCheckpointStaleness }, worker.DefaultMaxCheckpointStaleness),
		help:  "stop committing offsets when the last good checkpoint is older than this (0s: no bound)",
		doc:   "Processing goes on meanwhile"},
	{name: "on-restore-failure", section: secCheckpoints, owner: ownerWorker,
		field: text(func(c *Run) *string { return &c.OnRestoreFailure }, string(worker.DefaultOnRestoreFailure)).checked(enum(worker.CheckOnRestoreFailure)),
		help:  "checkpoints exist but none loads, not even in part (every manifest corrupt, or written with other --key/--normalize/--url-rules/--filter): fail (stop the worker), or empty (start such a partition with an empty filter, rebuilt from the retained input: for one start, then remove it)",
		doc:   "Other key settings than the checkpoints' are found at start and exit 2 naming the partitions and the fix. empty is an escape hatch for one start: each partition it empties is logged at ERROR and counted (bloomgate_checkpoint_restores_discarded_total), a start that needs it for nothing warns; remove it after the rebuild (docs/worker.md, \"--on-restore-failure empty\"). A corrupt or missing generation object does not get here: see docs/guarantees.md, 7"},
	{name: "max-replay", section: secCheckpoints, owner: ownerWorker,
		field: count(func(c *Run) *int64 { return &c.MaxReplay }, 0).checked(only(worker.CheckMaxReplay)),
		help:  "most input records a partition replays into its filter when no checkpoint covers its committed offset; keys of older records are forgotten; offsets are never committed beyond the last checkpoint plus this bound (0: replay all that is retained, exact)",
		doc:   "A warning says when keys are forgotten. While checkpoints fail, commits wait at the bound (the status page shows commits paused)"},
	{name: "checkpoint-skip-create-only-check", section: secCheckpoints, owner: ownerCheckpoint,
		field: boolean(func(c *Run) *bool { return &c.CheckpointSkipCreateOnlyCheck }),
		help:  "start even if the checkpoint store ignores create-only writes (If-None-Match); fencing of a stale partition owner is then OFF: only for a location one worker alone writes"},
	{name: "metrics-addr", section: secOperations, owner: ownerConfig,
		field: text(func(c *Run) *string { return &c.MetricsAddr }, "127.0.0.1:9464"),
		help:  "listen address for /metrics, /healthz, /readyz, `host:port` (empty: disabled)",
		doc:   "Also serves the status page"},
	{name: "shutdown-timeout", section: secOperations, owner: ownerWorker,
		field: duration(func(c *Run) *time.Duration { return &c.ShutdownTimeout }, worker.DefaultShutdownTimeout).checked(worker.CheckPositive),
		help:  "max time for the ordered shutdown on SIGTERM/SIGINT"},
	{name: "log-format", section: secOperations, owner: ownerConfig,
		field: text(func(c *Run) *string { return &c.LogFormat }, "text").checked(oneOf("text", "json")),
		help:  "log format: text or json"},
	{name: "log-level", section: secOperations, owner: ownerConfig,
		field: text(func(c *Run) *string { return &c.LogLevel }, "info").checked(anyCase(oneOf("debug", "info", "warn", "error"))),
		help:  "log level: debug, info, warn or error"},
	{name: "config", section: secOperations, owner: ownerConfig,
		field: text(func(c *Run) *string { return &c.ConfigFile }, ""),
		help:  "YAML `file` with settings; keys are the flag names"},
}

// field binds a setting to its Run field and holds its default.
type field interface {
	// register defines the flag name on fs, writing into c's field; the
	// field's value at the time is the flag's default.
	register(fs *flag.FlagSet, c *Run, name, usage string)
	// setDefault writes the default into c's field.
	setDefault(c *Run)
	// check returns what is wrong with c's value alone (nil: nothing);
	// Validate places it where the setting was set. Checks of relations
	// between settings are Validate's own.
	check(c *Run) error
}

type fieldOf[T any] struct {
	ptr func(*Run) *T
	def T
	reg func(fs *flag.FlagSet, p *T, name, usage string)
	// chk, if set, checks a value; def is the default, an example of a
	// value that works.
	chk func(v, def T) error
}

// checked returns f with the check chk.
func (f fieldOf[T]) checked(chk func(v, def T) error) fieldOf[T] {
	f.chk = chk
	return f
}

func (f fieldOf[T]) check(c *Run) error {
	if f.chk == nil {
		return nil
	}
	return f.chk(*f.ptr(c), f.def)
}

// only is a check of the value alone.
func only[T any](chk func(T) error) func(v, def T) error {
	return func(v, _ T) error { return chk(v) }
}

// enum is a check of an enumerated setting by the owning package's check
// of its type.
func enum[E ~string](chk func(E) error) func(v, def string) error {
	return func(v, _ string) error { return chk(E(v)) }
}

// anyCase is chk of the value in lower case.
func anyCase(chk func(v, def string) error) func(v, def string) error {
	return func(v, def string) error { return chk(strings.ToLower(v), def) }
}

// oneOf is a check that the value is one of allowed.
func oneOf(allowed ...string) func(v, def string) error {
	return func(v, _ string) error {
		if !slices.Contains(allowed, v) {
			return fmt.Errorf("%q is not one of %s", v, strings.Join(allowed, ", "))
		}
		return nil
	}
}

func (f fieldOf[T]) register(fs *flag.FlagSet, c *Run, name, usage string) {
	f.reg(fs, f.ptr(c), name, usage)
}

func (f fieldOf[T]) setDefault(c *Run) { *f.ptr(c) = f.def }

func text(p func(*Run) *string, def string) fieldOf[string] {
	return fieldOf[string]{ptr: p, def: def, reg: func(fs *flag.FlagSet, p *string, name, usage string) { fs.StringVar(p, name, *p, usage) }}
}

// boolean settings default to false: a flag turns them on.
func boolean(p func(*Run) *bool) fieldOf[bool] {
	return fieldOf[bool]{ptr: p, def: false, reg: func(fs *flag.FlagSet, p *bool, name, usage string) { fs.BoolVar(p, name, *p, usage) }}
}

// list settings default to none.
func list(p func(*Run) *[]string) fieldOf[[]string] {
	return fieldOf[[]string]{ptr: p, def: nil, reg: func(fs *flag.FlagSet, p *[]string, name, usage string) { fs.Var(&listValue{p: p}, name, usage) }}
}

func duration(p func(*Run) *time.Duration, def time.Duration) fieldOf[time.Duration] {
	return fieldOf[time.Duration]{ptr: p, def: def, reg: func(fs *flag.FlagSet, p *time.Duration, name, usage string) { DurationVar(fs, p, name, *p, usage) }}
}

// bound is a duration whose 0 the user writes for worker.NoBound.
func bound(p func(*Run) *time.Duration, def time.Duration) fieldOf[time.Duration] {
	return fieldOf[time.Duration]{ptr: p, def: def, reg: func(fs *flag.FlagSet, p *time.Duration, name, usage string) { BoundVar(fs, p, name, *p, usage) }}
}

func count[T Counter](p func(*Run) *T, def T) fieldOf[T] {
	return fieldOf[T]{ptr: p, def: def, reg: func(fs *flag.FlagSet, p *T, name, usage string) { CountVar(fs, p, name, *p, usage) }}
}

func rate(p func(*Run) *float64, def float64) fieldOf[float64] {
	return fieldOf[float64]{ptr: p, def: def, reg: func(fs *flag.FlagSet, p *float64, name, usage string) { RateVar(fs, p, name, *p, usage) }}
}

func size[T ~int | ~int64](p func(*Run) *T, def T) fieldOf[T] {
	return fieldOf[T]{ptr: p, def: def, reg: func(fs *flag.FlagSet, p *T, name, usage string) { ByteSizeVar(fs, p, name, *p, usage) }}
}

// FlagSet registers every setting of c as a flag of a new set whose values
// write into c; c's values are the flags' defaults.
func (c *Run) FlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	for _, s := range settings {
		s.field.register(fs, c, s.name, s.help)
	}
	return fs
}

// Default returns the defaults of every setting (the table's). The
// settings another package owns take their defaults from its constants
// (worker.Default…, group.Default…, keys.DefaultMaxKeyBytes,
// checkpoint.DefaultRetain), so that a setting left at its default and one
// left unset in that package's Config mean the same.
func Default() Run {
	var c Run
	for _, s := range settings {
		s.field.setDefault(&c)
	}
	return c
}

// Agreement lists the settings of c outside worker.Config that the
// members of one group announce and must agree on (the table's agree
// column), by flag name.
func (c *Run) Agreement() []worker.Setting {
	cp := *c // FlagSet binds the values it reads: bind a copy
	fs := cp.FlagSet("agreement")
	var out []worker.Setting
	for _, s := range settings {
		if s.agree != nil {
			out = append(out, worker.Setting{Name: s.name, Value: s.agree(c, fs.Lookup(s.name).Value.String())})
		}
	}
	return out
}
