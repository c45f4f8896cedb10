// Package config holds the user-facing settings of `bloomgate run`.
//
// Every setting comes from, in rising precedence: a YAML file (--config,
// keys are the flag names, e.g. `checkpoint-url: s3://…`; nested maps are
// joined with "-", so `tls: {ca-file: x}` sets tls-ca-file), an environment
// variable (BLOOMGATE_ + the flag name in upper snake case, e.g.
// BLOOMGATE_CHECKPOINT_URL) and a command-line flag. Parsing is done by
// github.com/peterbourgon/ff/v3, which implements exactly this layering over
// the standard flag package. The file is read with gopkg.in/yaml.v3 and
// every value is taken as written (no YAML 1.1 booleans: `output: no` is the
// topic "no"). Validate checks the result and names the setting and the fix
// in every error.
//
// Each setting is one entry of the table in settings.go: its name, section,
// owner, Run field, default, help words and check. The flags, the
// defaults, --help, the YAML keys, the variables, the start-up log, the
// settings a group's members announce and the reference in
// docs/settings.md are derived from it.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/peterbourgon/ff/v3"

	"github.com/bloomgate/bloomgate/internal/filterplan"
	"github.com/bloomgate/bloomgate/internal/memory"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// EnvPrefix prefixes every environment variable.
const EnvPrefix = "BLOOMGATE"

// DefaultExactDir is where exact mode keeps its stores by default, beside
// the default file:// checkpoints.
const DefaultExactDir = "./.bloomgate/exact"

// Enumerated values. Those the worker takes are its own.
const (
	OnMissingDeadLetter = string(worker.MissingKeyDeadLetter)
	OnMissingForward    = string(worker.MissingKeyForward)
	OnMissingDrop       = string(worker.MissingKeyDrop)
	OnMissingFail       = string(worker.MissingKeyFail)

	OnUnwritableDeadLetter = string(worker.UnwritableDeadLetter)
	OnUnwritableStall      = string(worker.UnwritableStall)
	OnUnwritableDrop       = string(worker.UnwritableDrop)

	PartitioningSame = string(worker.PartitioningSame)
	PartitioningHash = string(worker.PartitioningHash)

	// DefaultClientID is --client-id's default.
	DefaultClientID = "bloomgate"

	ReadCommitted   = string(worker.ReadCommitted)
	ReadUncommitted = string(worker.ReadUncommitted)

	OnRestoreFail  = string(worker.RestoreFail)
	OnRestoreEmpty = string(worker.RestoreEmpty)

	JSONValidationStrict = "strict"
	JSONValidationLazy   = "lazy"

	FilterRing        = memory.KindRing
	FilterFingerprint = memory.KindFingerprint

	SASLPlain       = "plain"
	SASLScramSHA256 = "scram-sha-256"
	SASLScramSHA512 = "scram-sha-512"
	SASLOAuthBearer = "oauthbearer"
	SASLAWSMSKIAM   = "aws-msk-iam"
)

// TLS are the Kafka client TLS settings.
type TLS struct {
	Enabled            bool
	CAFile             string
	CertFile           string
	KeyFile            string
	InsecureSkipVerify bool
}

// SASL are the Kafka client SASL settings. Password and OAuthClientSecret
// are never logged.
type SASL struct {
	Mechanism string // "" (none), plain, scram-sha-256, scram-sha-512, oauthbearer, aws-msk-iam
	Username  string
	Password  string

	// OAUTHBEARER: a token file, or an OIDC token endpoint with client
	// credentials (KIP-768).
	OAuthTokenFile        string
	OAuthTokenEndpoint    string
	OAuthClientID         string
	OAuthClientSecret     string // from the environment or the YAML file, not a flag
	OAuthClientSecretFile string
	OAuthScope            string
	OAuthExtensions       string // key=value,key=value

	// AWS MSK IAM.
	AWSRegion string
}

// Run is the configuration of `bloomgate run`.
type Run struct {
	ConfigFile string // the YAML file the settings were read from, if any
	// origins says where each setting was set (Parse fills it; nil in a
	// Run built in code), so that Validate's messages name the flag, the
	// variable or the line the user wrote.
	origins map[string]origin
	// sasl is the mechanism SASLMechanism built (nil before).
	sasl *saslOnce

	// Kafka.
	Brokers []string
	// ClientID names every connection to the brokers (their request logs,
	// quotas, ACL audit logs, the group's member ids).
	ClientID     string
	Group        string
	Input        string
	Output       string
	Duplicates   string // optional topic for events judged duplicate
	DeadLetter   string // optional topic for events without a usable key
	Partitioning string // same | hash
	// Compression of every topic the worker writes: input (each batch
	// with the codec of the input batch its records came from), none,
	// gzip, snappy, lz4 or zstd.
	Compression string
	// IsolationLevel is read_committed (records of aborted transactions
	// and transaction markers are skipped; reading stops at the last
	// stable offset) or read_uncommitted (everything but markers).
	IsolationLevel string
	// StartFrom and SeedFrom (see ParsePosition) apply to partitions with
	// neither a committed offset nor a checkpoint: forwarding starts at
	// StartFrom; the input from SeedFrom up to there is only remembered.
	StartFrom string
	SeedFrom  string // "": no seeding
	// SeedTopic, if set, is read first into such a partition's filter
	// (partition p of it for input partition p, from SeedFrom or its
	// start), without forwarding: e.g. the deduplicated topic an earlier
	// system wrote. SeedKey is its key spec ("": Key).
	SeedTopic string
	SeedKey   string
	// Repartition runs a first hop in the same process that re-keys the
	// input by the hash of the canonical key into RepartitionTopic(); the
	// dedup stage reads that topic.
	Repartition  bool
	BatchSize    int
	BatchTimeout time.Duration
	// MaxBatchBytes bounds one produce batch per partition; the worker
	// lowers it to the written topics' max.message.bytes (less the batch
	// framing) when that is lower. A record larger than the bound is
	// unwritable (OnUnwritable).
	MaxBatchBytes int64
	// OnUnwritable is what happens to a record the topic it is meant for
	// cannot take (larger than the bound, or refused by the broker). Unset
	// (""), it is dead-letter if a dead-letter topic is set, else stall;
	// Resolve writes that choice in.
	OnUnwritable   string
	WriteTimeout   time.Duration // one produce request
	CommitInterval time.Duration // between offset commits
	TLS            TLS
	SASL           SASL

	// Keys.
	Key       string // keys spec: key | header:NAME | json:PATH, comma-separated parts
	Normalize string // none | trim | lower | url
	// URLRules and URLStripParams are the opt-in canonicalization rules
	// on top of --normalize url and the query parameters it drops
	// (keys.ParseURLRules); part of the key definition.
	URLRules       []string
	URLStripParams []string
	MaxKeyBytes    int
	JSONValidation string // strict | lazy
	// OnMissingKey is what happens to an event whose key cannot be extracted.
	// Unset (""), it is dead-letter if a dead-letter topic is set, else
	// forward (the event passes through undeduplicated and is counted, so
	// bad input neither stops the stream nor vanishes); Resolve, which Load
	// calls, writes that choice in.
	OnMissingKey string

	// Filter.
	// Filter is the kind: ring (G blocked Bloom generations) or
	// fingerprint (age-tagged fingerprints per partition: the newest
	// generation in a quotient table, the sealed ones in a static set;
	// less memory, slower). docs/filter.md, "Choosing the kind".
	Filter string
	// Params are --window, --generations, --capacity (the expected
	// distinct keys per window of the whole input topic) and --fpr, as the
	// worker takes them (worker.Config.Filter).
	filterplan.Params
	MaxTimeJump time.Duration // 0: unbounded

	// Exact mode: an exact store of the keys' hashes per partition, in a
	// subdirectory of ExactDir, confirms the filter's positives.
	Exact    bool
	ExactDir string // after Load, absolute

	// Checkpoints.
	CheckpointURL      string // after Load, a file URL is absolute
	CheckpointInterval time.Duration
	CheckpointRetain   int
	// MaxCheckpointStaleness is worker.NoBound for no bound, which users
	// write 0s; zero, the worker's default (ten checkpoint intervals).
	MaxCheckpointStaleness time.Duration
	OnRestoreFailure       string // fail | empty
	// MaxReplay bounds the records a partition replays into its filter
	// when no checkpoint covers its committed offset (0: no bound).
	MaxReplay int64
	// CheckpointSkipCreateOnlyCheck starts even when the store ignores
	// create-only writes: fencing of a stale partition owner is then off.
	CheckpointSkipCreateOnlyCheck bool

	// Operations.
	MetricsAddr     string // "" disables the HTTP endpoint
	ShutdownTimeout time.Duration

	// Consumer group timings.
	SessionTimeout    time.Duration // a crashed worker's partitions wait this long before moving
	HeartbeatInterval time.Duration
	RebalanceTimeout  time.Duration // 0: session-timeout + 10s
	JoinGroupBackoff  time.Duration
	// GroupInstanceID makes the worker a static member of its group
	// (KIP-345): "auto" (the default) takes the pod name where it is
	// stable (a StatefulSet's NAME-N from POD_NAME or HOSTNAME), else
	// none; "none" or "" a dynamic member; anything else is the id.
	GroupInstanceID string
	LogFormat       string // text | json
	LogLevel        string // debug | info | warn | error
}

// ErrHelp is returned by Load when -h or --help was given; the usage has
// been written to the output.
var ErrHelp = flag.ErrHelp

// Load parses the settings of `bloomgate run` from args, the environment and
// the --config file, validates them and resolves the derived defaults
// (Resolve). Usage goes to out on --help only.
// A returned error other than ErrHelp is a usage or config error (exit code
// 2); each of its lines is one problem (see Parse and Validate). When the
// config file has problems, the *FileError lists Validate's problems with
// them, each where its value was set (a line of the file, a flag, a
// variable), so that one run shows everything to fix.
func Load(args []string, out io.Writer) (*Run, error) {
	cfg, err := parse(args, out)
	var fe *FileError
	switch {
	case errors.As(err, &fe) && cfg != nil:
		return nil, fe.withInvalid(cfg.Validate())
	case err != nil:
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Resolve()
	return cfg, nil
}

// Resolve writes in the defaults that depend on other settings: an unset
// OnMissingKey or OnUnwritable becomes the worker's choice for the
// dead-letter topic (worker.DefaultOnMissingKey, DefaultOnUnwritable).
// Validate accepts a Run before and after.
func (c *Run) Resolve() {
	if c.OnMissingKey == "" {
		c.OnMissingKey = string(worker.DefaultOnMissingKey(c.DeadLetter))
	}
	if c.OnUnwritable == "" {
		c.OnUnwritable = string(worker.DefaultOnUnwritable(c.DeadLetter))
	}
}

// Parse is Load without Validate. The command line is read first and stops
// at its first mistake: a *SettingError or *UnknownFlagError. Then the
// environment (a *SettingError naming the variable), then the config file,
// whose problems all come at once in a *FileError.
func Parse(args []string, out io.Writer) (*Run, error) {
	cfg, err := parse(args, out)
	if err != nil {
		return nil, err
	}
	return cfg, nil
}

// parse is Parse, but with a *FileError from a config file that parsed as
// YAML it also returns the settings read (the file's bad values left at
// their defaults), for Load to validate.
func parse(args []string, out io.Writer) (*Run, error) {
	cfg := Default()
	fs := cfg.FlagSet("run")
	rec := recordSets(fs)
	defer rec.restore()
	if err := rec.parseArgs(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			rec.restore()
			WriteUsage(out, fs)
			return nil, ErrHelp
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		arg := fs.Arg(0)
		if fs.Lookup(normalizeName(arg)) != nil {
			return nil, fmt.Errorf("unexpected argument %q: flags start with --; did you mean --%s?", arg, normalizeName(arg))
		}
		return nil, fmt.Errorf("unexpected argument %q: bloomgate run takes only flags", arg)
	}
	// Flags are parsed: ff reads only the environment and the file, for
	// the flags not given.
	rec.at, rec.failed = origin{source: FromEnv}, nil
	err := ff.Parse(fs, nil,
		ff.WithEnvVarPrefix(EnvPrefix),
		ff.WithConfigFileFlag("config"),
		ff.WithConfigFileParser(yamlParser(fs, &cfg.ConfigFile, rec)),
	)
	cfg.origins = rec.origins
	if err != nil {
		var fe *FileError
		var pe *iofs.PathError
		switch {
		case errors.As(err, &fe) && fe.parsed:
			cfg.absPaths()
			return &cfg, fe
		case errors.As(err, &fe):
			return nil, fe
		case rec.failed != nil:
			return nil, rec.failed
		case errors.As(err, &pe):
			o := cfg.origin("config")
			return nil, &SettingError{Setting: "config", Problem: fmt.Sprintf("cannot read %q: %v", cfg.ConfigFile, pe.Err), Source: o.source}
		}
		return nil, fmt.Errorf("reading settings: %w", err)
	}
	cfg.absPaths()
	return &cfg, nil
}

// absPaths makes the checkpoint URL's directory and the exact directory
// absolute, so that the stores and the logs see where the files go.
func (c *Run) absPaths() {
	c.CheckpointURL = AbsFileURL(c.CheckpointURL)
	if c.ExactDir != "" {
		if abs, err := filepath.Abs(c.ExactDir); err == nil {
			c.ExactDir = abs
		}
	}
}

// origin says where setting was set: Parse knows; a Run built in code
// does not (FromAny).
func (c *Run) origin(setting string) origin {
	if c.origins == nil {
		return origin{source: FromAny}
	}
	if o, ok := c.origins[setting]; ok {
		return o
	}
	return origin{source: FromDefault}
}

// AbsFileURLArg is AbsFileURL that also takes a plain directory path, as
// a command-line argument may be.
func AbsFileURLArg(raw string) string {
	if raw != "" && !strings.Contains(raw, ":") {
		raw = "file:" + raw
	}
	return AbsFileURL(raw)
}

// AbsFileURL turns file://./rel, file://rel-with-no-host-meaning and file:rel
// into file:///absolute/rel, so that the checkpoint store and the logs see
// where the files really go.
func AbsFileURL(u string) string {
	var p string
	switch {
	case strings.HasPrefix(u, "file:///"):
		return u
	case strings.HasPrefix(u, "file://./"), strings.HasPrefix(u, "file://../"):
		p = strings.TrimPrefix(u, "file://")
	case strings.HasPrefix(u, "file:") && !strings.HasPrefix(u, "file://"):
		p = strings.TrimPrefix(u, "file:")
	default:
		return u
	}
	if abs, err := filepath.Abs(p); err == nil {
		return "file://" + filepath.ToSlash(abs)
	}
	return u
}

// NewLogger builds the logger selected by --log-format and --log-level.
func (c *Run) NewLogger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", c.LogLevel)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch c.LogFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", c.LogFormat)
}

// LogValue logs every setting under its flag name (the YAML key), in the
// order of --help, with its value as a flag would take it (24h, 10M,
// 1MiB); secrets show as [redacted] when set, and the checkpoint URL
// without user information or query values other than region and endpoint
// (checkpoint.RedactURL).
func (c *Run) LogValue() slog.Value {
	cp := *c // FlagSet binds the values it reads: bind a copy
	fs := cp.FlagSet("log")
	var attrs []slog.Attr
	for _, s := range settings {
		f := fs.Lookup(s.name)
		v := f.Value.String()
		switch {
		case s.log != nil:
			attrs = append(attrs, slog.String(s.name, s.log(v)))
		case isBoolValue(f.Value):
			attrs = append(attrs, slog.Bool(s.name, v == "true"))
		default:
			attrs = append(attrs, slog.String(s.name, v))
		}
	}
	return slog.GroupValue(attrs...)
}

// envName is the environment variable of a flag.
func envName(flagName string) string {
	return EnvPrefix + "_" + strings.NewReplacer("-", "_", ".", "_").Replace(strings.ToUpper(flagName))
}

// LookupEnvName returns the environment variable that sets flag name.
func LookupEnvName(flagName string) string { return envName(flagName) }

// RepartitionTopic is the internal topic of --repartition: <group>-repartition.
func (c *Run) RepartitionTopic() string { return c.Group + "-repartition" }
