package config

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/bloomgate/bloomgate/internal/filterplan"
	"github.com/bloomgate/bloomgate/internal/group"
	"github.com/bloomgate/bloomgate/internal/keys"
	"github.com/bloomgate/bloomgate/internal/saslauth"
)

// section groups flags in the help output.
type section struct {
	title string
	flags []string
}

var sections = []section{
	{"Kafka", []string{"brokers", "client-id", "group", "input", "output", "duplicates", "dead-letter", "partitioning", "compression", "isolation-level", "start-from", "seed-from", "seed-topic", "seed-key", "repartition", "batch-size", "batch-timeout", "max-batch-bytes", "on-unwritable", "write-timeout", "commit-interval", "session-timeout", "heartbeat-interval", "rebalance-timeout", "join-group-backoff", "group-instance-id"}},
	{"Kafka TLS and SASL", []string{"tls-enabled", "tls-ca-file", "tls-cert-file", "tls-key-file", "tls-insecure-skip-verify", "sasl-mechanism", "sasl-username", "sasl-password",
		"sasl-oauth-token-file", "sasl-oauth-token-endpoint", "sasl-oauth-client-id", "sasl-oauth-client-secret", "sasl-oauth-client-secret-file",
		"sasl-oauth-scope", "sasl-oauth-extensions", "sasl-aws-region"}},
	{"Keys", []string{"key", "normalize", "url-rules", "url-strip-params", "max-key-bytes", "json-validation", "on-missing-key"}},
	{"Filter", []string{"filter", "window", "generations", "capacity", "fpr", "max-time-jump", "exact", "exact-dir"}},
	{"Checkpoints", []string{"checkpoint-url", "checkpoint-interval", "checkpoint-retain", "max-checkpoint-staleness", "on-restore-failure", "max-replay", "checkpoint-skip-create-only-check"}},
	{"Operations", []string{"metrics-addr", "shutdown-timeout", "log-format", "log-level", "config"}},
}

// FlagSet registers every setting of c as a flag of a new set whose values
// write into c.
func (c *Run) FlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.StringVar(&c.ConfigFile, "config", c.ConfigFile, "YAML `file` with settings; keys are the flag names")

	fs.Var(&listValue{p: &c.Brokers}, "brokers", "Kafka bootstrap brokers, `host:port`, comma-separated or repeated (required)")
	fs.StringVar(&c.ClientID, "client-id", c.ClientID, "client id of every connection to the brokers (their request logs, quotas and ACL audit logs, the consumer group's member ids)")
	fs.StringVar(&c.Group, "group", c.Group, "consumer group `id`; also names the checkpoint prefix")
	fs.StringVar(&c.Input, "input", c.Input, "input `topic` (required)")
	fs.StringVar(&c.Output, "output", c.Output, "output `topic` for first occurrences (required)")
	fs.StringVar(&c.Duplicates, "duplicates", c.Duplicates, "optional `topic` for events judged duplicate (else they are dropped and counted)")
	fs.StringVar(&c.DeadLetter, "dead-letter", c.DeadLetter, "optional `topic` for events whose key cannot be extracted")
	fs.StringVar(&c.Partitioning, "partitioning", c.Partitioning, "output partition: same (= input partition, counts must match) or hash (of the Kafka key)")
	fs.StringVar(&c.Compression, "compression", c.Compression, "compression of every topic the worker writes (output, duplicates, dead letters, the repartition hop): input (each batch with the codec of the input batch its records came from: a stage that forwards records as read keeps what their producers chose), none, gzip, snappy, lz4 or zstd")
	fs.StringVar(&c.IsolationLevel, "isolation-level", c.IsolationLevel, "read_committed (skip records of aborted transactions; wait for open ones) or read_uncommitted (read everything written); transaction markers are never events")
	fs.StringVar(&c.StartFrom, "start-from", c.StartFrom, "where a new group (no committed offset, no checkpoint) starts forwarding: earliest, latest, an RFC 3339 time, or a duration before now (72h, 3d)")
	fs.StringVar(&c.SeedFrom, "seed-from", c.SeedFrom, "with --start-from: remember (without forwarding) the input from this position up to the start: a time or a duration before now (e.g. 72h); empty: no seeding. With --seed-topic also where that topic is read from")
	fs.StringVar(&c.SeedTopic, "seed-topic", c.SeedTopic, "for a new group: first remember (without forwarding) the keys of this topic, e.g. the deduplicated topic an earlier system wrote; partition p of it seeds input partition p, so it must be partitioned like the input")
	fs.StringVar(&c.SeedKey, "seed-key", c.SeedKey, "the dedup key in --seed-topic's records, as --key (default: --key); normalized as --normalize")
	fs.BoolVar(&c.Repartition, "repartition", c.Repartition, "the input is not keyed by the dedup key: run a first hop (group <group>-repartition) that writes every record to the topic <group>-repartition keyed by the hash of its canonical key (created if missing), and dedup that topic")
	CountVar(fs, &c.BatchSize, "batch-size", c.BatchSize, "max records per produce batch")
	DurationVar(fs, &c.BatchTimeout, "batch-timeout", c.BatchTimeout, "max wait to fill a produce batch")
	ByteSizeVar(fs, &c.MaxBatchBytes, "max-batch-bytes", c.MaxBatchBytes, "max bytes of one produce batch per partition (1MiB, 1MB or 1048576); lowered at start, per written topic, to its max.message.bytes (sizes as the broker counts them); a larger record is unwritable (see --on-unwritable); batches are cut at 256KiB below it")
	fs.StringVar(&c.OnUnwritable, "on-unwritable", c.OnUnwritable, "record its topic cannot take (over the batch bound, or refused by the broker, e.g. a null key on a compacted topic): dead-letter (with its reason; a reference record if the dead-letter topic cannot hold it), stall (its partition waits before it, retried every 30s; other partitions go on) or drop (counted) (default: dead-letter if --dead-letter is set, else stall)")
	DurationVar(fs, &c.WriteTimeout, "write-timeout", c.WriteTimeout, "bound of one produce request; a batch write that fails, or is unanswered after twice this, is followed by an exact recovery of the partition")
	DurationVar(fs, &c.CommitInterval, "commit-interval", c.CommitInterval, "time between offset commits of the records whose output writes are acknowledged")
	DurationVar(fs, &c.SessionTimeout, "session-timeout", c.SessionTimeout, "consumer group session timeout: how long the partitions of a crashed worker wait before moving")
	DurationVar(fs, &c.RebalanceTimeout, "rebalance-timeout", c.RebalanceTimeout, fmt.Sprintf("how long the group waits for members to rejoin in a rebalance; must exceed --session-timeout (0s: session-timeout + %v)", group.RebalanceOverSession))
	DurationVar(fs, &c.JoinGroupBackoff, "join-group-backoff", c.JoinGroupBackoff, "wait before re-joining the group after an error")
	fs.StringVar(&c.GroupInstanceID, "group-instance-id", c.GroupInstanceID, "static group membership: a restart within --session-timeout keeps the member's partitions, no rebalance; "+
		"auto: the pod name where it is stable (a StatefulSet's NAME-N, from POD_NAME, or from HOSTNAME inside Kubernetes), else a dynamic member; none: always dynamic; else the id, unique per member")
	DurationVar(fs, &c.HeartbeatInterval, "heartbeat-interval", c.HeartbeatInterval, "consumer group heartbeat interval (well below --session-timeout)")

	fs.BoolVar(&c.TLS.Enabled, "tls-enabled", c.TLS.Enabled, "connect to Kafka over TLS")
	fs.StringVar(&c.TLS.CAFile, "tls-ca-file", c.TLS.CAFile, "PEM `file` of CA certificates to trust (default: system roots)")
	fs.StringVar(&c.TLS.CertFile, "tls-cert-file", c.TLS.CertFile, "PEM client certificate `file` for mutual TLS (with --tls-key-file)")
	fs.StringVar(&c.TLS.KeyFile, "tls-key-file", c.TLS.KeyFile, "PEM client key `file` for mutual TLS (with --tls-cert-file)")
	fs.BoolVar(&c.TLS.InsecureSkipVerify, "tls-insecure-skip-verify", c.TLS.InsecureSkipVerify, "do not verify the broker certificate (testing only)")
	fs.StringVar(&c.SASL.Mechanism, "sasl-mechanism", c.SASL.Mechanism, "SASL mechanism: plain, scram-sha-256 or scram-sha-512 (with --sasl-username and --sasl-password), "+
		"oauthbearer (with --sasl-oauth-token-file, or --sasl-oauth-token-endpoint and a client id and secret), aws-msk-iam (AWS credentials from the SDK's default chain) "+
		"(empty: no SASL); a refused login stops the start, it is not retried")
	fs.StringVar(&c.SASL.Username, "sasl-username", c.SASL.Username, "SASL user `name`")
	fs.StringVar(&c.SASL.Password, "sasl-password", c.SASL.Password, "SASL `password` (prefer the environment variable; never logged)")
	fs.StringVar(&c.SASL.OAuthTokenFile, "sasl-oauth-token-file", c.SASL.OAuthTokenFile, "oauthbearer: `file` holding the bearer token, read again for every new connection (whatever renews it, e.g. a sidecar or a projected volume, needs no restart)")
	fs.StringVar(&c.SASL.OAuthTokenEndpoint, "sasl-oauth-token-endpoint", c.SASL.OAuthTokenEndpoint, "oauthbearer: OAuth 2 / OIDC token endpoint `URL` for the client credentials grant (KIP-768); "+
		fmt.Sprintf("the token is cached and replaced after %.0f %% of its lifetime", saslauth.RefreshAt*100))
	fs.StringVar(&c.SASL.OAuthClientID, "sasl-oauth-client-id", c.SASL.OAuthClientID, "oauthbearer: client `id` at the token endpoint")
	fs.StringVar(&c.SASL.OAuthClientSecret, "sasl-oauth-client-secret", c.SASL.OAuthClientSecret, "oauthbearer: client `secret`, from the environment variable or the YAML file only (a command line shows in ps); never logged")
	fs.StringVar(&c.SASL.OAuthClientSecretFile, "sasl-oauth-client-secret-file", c.SASL.OAuthClientSecretFile, "oauthbearer: `file` holding the client secret (instead of --sasl-oauth-client-secret)")
	fs.StringVar(&c.SASL.OAuthScope, "sasl-oauth-scope", c.SASL.OAuthScope, "oauthbearer: `scope` asked of the token endpoint, space-separated (empty: none sent)")
	fs.StringVar(&c.SASL.OAuthExtensions, "sasl-oauth-extensions", c.SASL.OAuthExtensions, "oauthbearer: SASL extensions sent with the token, `key=value,...` (KIP-342), e.g. Confluent Cloud's logicalCluster=lkc-…,identityPoolId=pool-…")
	fs.StringVar(&c.SASL.AWSRegion, "sasl-aws-region", c.SASL.AWSRegion, "aws-msk-iam: AWS `region` of the cluster (default: AWS_REGION or the AWS profile's)")

	fs.StringVar(&c.Key, "key", c.Key, "dedup key: key (Kafka message key), header:NAME, json:PATH (e.g. json:order.id); comma-separated parts form a compound key")
	fs.StringVar(&c.Normalize, "normalize", c.Normalize, "key normalization: none, trim, lower or url (canonical crawler URL)")
	fs.Var(&listValue{p: &c.URLRules}, "url-rules", "with --normalize url: opt-in canonicalization `rules`, comma-separated: "+
		strings.Join(keys.URLRuleNames()[:len(keys.URLRuleNames())-1], ", ")+", or the preset "+keys.PresetCrawler+
		" (strip-userinfo, strip-www, strip-session-ids: what Heritrix applies by default); each merges spellings that are usually, not always, one page (docs/urls.md). Part of the key definition: a memory written with other rules is refused")
	fs.Var(&listValue{p: &c.URLStripParams}, "url-strip-params", "with --normalize url: query `parameters` to drop, comma-separated names, '*' matching any run of characters (utm_*, ref), ASCII case ignored; strip-tracking adds its built-in list. Part of the key definition")
	ByteSizeVar(fs, &c.MaxKeyBytes, "max-key-bytes", c.MaxKeyBytes, "longest accepted key after normalization; longer ones are bad input (too_large)")
	fs.StringVar(&c.JSONValidation, "json-validation", c.JSONValidation, "strict (validate every JSON value) or lazy (only when the key field is unusable; faster)")
	fs.StringVar(&c.OnMissingKey, "on-missing-key", c.OnMissingKey, "event without a usable key: dead-letter, forward, drop or fail (default: dead-letter if --dead-letter is set, else forward)")

	fs.StringVar(&c.Filter, "filter", c.Filter, "filter kind: ring (G blocked Bloom generations) or fingerprint (age-tagged fingerprints: the newest generation in a quotient table, the sealed ones in a static set; ~22 % less memory at 1 %, ~32 % at 0.1 % from ~200 k keys per partition, slower inserts; best with --generations 8). A memory keeps its kind: a checkpoint of the other kind is refused")
	DurationVar(fs, &c.Window, "window", c.Window, "dedup window: a key is remembered for at least this much event time")
	CountVar(fs, &c.Generations, "generations", c.Generations, fmt.Sprintf("filter generations in the rotating ring, %d to %d; memory = capacity x generations/(generations-1)", filterplan.MinGenerations, filterplan.MaxGenerations))
	CountVar(fs, &c.Capacity, "capacity", c.Capacity, fmt.Sprintf("expected distinct keys per window for the whole input topic; a plan needing more than %s of filter memory is refused (docs/settings.md)", formatMemory(MaxPlannedFilterBytes)))
	RateVar(fs, &c.FPR, "fpr", c.FPR, "target false-positive rate, a fraction or a percentage in (0,1): 0.01 or 1%")
	DurationVar(fs, &c.MaxTimeJump, "max-time-jump", c.MaxTimeJump, "how far one record may move a partition's event time forward; a record stamped further ahead is filed at that bound, so one bad timestamp cannot make the filter forget (0s: unbounded)")

	fs.BoolVar(&c.Exact, "exact", c.Exact, "exact mode: confirm every positive of the filter in a local store of the keys' 128-bit hashes (16 B per key on disk, checkpointed with the filter); a refuted one (a false positive) is forwarded: no false positives")
	fs.StringVar(&c.ExactDir, "exact-dir", c.ExactDir, "local `directory` of exact mode's stores, one subdirectory per group/topic/partition; a cache of the checkpoints (rebuilt from them when lost); one per worker process")

	fs.StringVar(&c.CheckpointURL, "checkpoint-url", c.CheckpointURL, "where filter checkpoints go: s3://bucket/prefix?endpoint=…&region=…, file:///dir (files 0600), mem://name; logged with other query values REDACTED")
	DurationVar(fs, &c.CheckpointInterval, "checkpoint-interval", c.CheckpointInterval, "time between periodic checkpoints of each partition")
	CountVar(fs, &c.CheckpointRetain, "checkpoint-retain", c.CheckpointRetain, "checkpoints (manifests) kept per partition")
	BoundVar(fs, &c.MaxCheckpointStaleness, "max-checkpoint-staleness", c.MaxCheckpointStaleness, "stop committing offsets when the last good checkpoint is older than this (0s: no bound)")
	fs.StringVar(&c.OnRestoreFailure, "on-restore-failure", c.OnRestoreFailure, "checkpoints exist but none loads, not even in part (every manifest corrupt, or written with other --key/--normalize/--url-rules/--filter): fail (stop the worker), or empty (start such a partition with an empty filter, rebuilt from the retained input: for one start, then remove it)")
	CountVar(fs, &c.MaxReplay, "max-replay", c.MaxReplay, "most input records a partition replays into its filter when no checkpoint covers its committed offset; keys of older records are forgotten; offsets are never committed beyond the last checkpoint plus this bound (0: replay all that is retained, exact)")
	fs.BoolVar(&c.CheckpointSkipCreateOnlyCheck, "checkpoint-skip-create-only-check", c.CheckpointSkipCreateOnlyCheck,
		"start even if the checkpoint store ignores create-only writes (If-None-Match); fencing of a stale partition owner is then OFF: only for a location one worker alone writes")

	fs.StringVar(&c.MetricsAddr, "metrics-addr", c.MetricsAddr, "listen address for /metrics, /healthz, /readyz, `host:port` (empty: disabled)")
	DurationVar(fs, &c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "max time for the ordered shutdown on SIGTERM/SIGINT")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "log format: text or json")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "log level: debug, info, warn or error")
	return fs
}

// WriteUsage writes the help of `bloomgate run`: every flag with its
// default and its environment variable, grouped by concern.
func WriteUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, `Usage: bloomgate run [flags]

Reads the input topic with a consumer group, drops events whose key was seen
within the window, forwards the rest to the output topic.

Settings come from a YAML file (--config), environment variables and flags,
in rising precedence. Each flag --name has the environment variable
%s_NAME (upper case, '-' becomes '_'); YAML keys are the flag names.

Values:
  duration   a number and a unit, combined and with fractions: 90s, 15m, 36h,
             7d, 2w, 1.5d, 1d12h. Units ns, us, ms, s, m, h, d (24h), w (7d),
             in any case, except M: write m for minutes, days for months.
  count      10000000, 10_000_000, 1e7, or a suffix in any case: k (thousand),
             m (million), g or b (billion), t (trillion): 10M, 2.5k.
  rate       a fraction or a percentage: 0.01, 1%%, 0.1 %%.
  size       bytes: 1048576, or with B, kB, MB, GB (powers of 1000) or KiB,
             MiB, GiB (powers of 1024): 1MiB = 1048576, 1MB = 1000000.

`, EnvPrefix)
	WriteSettings(w, fs)
}

// WriteSettings writes every setting of fs with its default and its
// environment variable, grouped by concern (the body of WriteUsage).
func WriteSettings(w io.Writer, fs *flag.FlagSet) {
	listed := map[string]bool{}
	for _, s := range sections {
		fmt.Fprintf(w, "%s:\n", s.title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, name := range s.flags {
			f := fs.Lookup(name)
			if f == nil {
				continue
			}
			listed[name] = true
			writeFlag(tw, f)
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	var rest []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if !listed[f.Name] {
			rest = append(rest, f)
		}
	})
	if len(rest) > 0 {
		fmt.Fprintln(w, "Other:")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, f := range rest {
			writeFlag(tw, f)
		}
		tw.Flush()
	}
}

func writeFlag(tw io.Writer, f *flag.Flag) {
	kind, usage := flag.UnquoteUsage(f)
	if k, ok := f.Value.(interface{ Kind() string }); ok && kind == "value" {
		kind = k.Kind()
	}
	def := f.DefValue
	if def == "" {
		def = `""`
	}
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		fmt.Fprintf(tw, "  --%s\t%s\n", f.Name, usage)
	} else {
		fmt.Fprintf(tw, "  --%s %s\t%s\n", f.Name, kind, usage)
	}
	fmt.Fprintf(tw, "  \tdefault %s, env %s\n", def, envName(f.Name))
}
