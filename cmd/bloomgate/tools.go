package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/bloomgate/bloomgate/internal/broker"
	"github.com/bloomgate/bloomgate/internal/brokercheck"
	"github.com/bloomgate/bloomgate/internal/config"
	"github.com/bloomgate/bloomgate/internal/loadgen"
)

// parseFlags parses args into fs. It returns done=true with the exit code
// when the command must not go on: --help (usage on stdout), or a usage
// error (one line naming the flag, and where to find every flag).
func parseFlags(fs *flag.FlagSet, args []string, header string, stdout, stderr io.Writer) (done bool, code int) {
	err := config.ParseFlags(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fmt.Fprint(stdout, header)
		fs.PrintDefaults()
		return true, exitOK
	case err != nil:
		printUsageError(stderr, fs.Name(), err, "flag")
		return true, exitUsage
	case fs.NArg() > 0:
		printUsageError(stderr, fs.Name(), fmt.Errorf("unexpected argument %q", fs.Arg(0)), "flag")
		return true, exitUsage
	}
	return false, exitOK
}

type userList []broker.User

func (l *userList) String() string { return fmt.Sprintf("%d users", len(*l)) }

func (l *userList) Set(v string) error {
	parts := strings.SplitN(v, ":", 3)
	if len(parts) != 3 || parts[1] == "" {
		return errors.New("want MECHANISM:USER:PASSWORD, e.g. SCRAM-SHA-256:alice:secret")
	}
	*l = append(*l, broker.User{Mechanism: strings.ToUpper(parts[0]), Username: parts[1], Password: parts[2]})
	return nil
}

type topicList []broker.TopicSpec

func (l *topicList) String() string {
	s := make([]string, len(*l))
	for i, t := range *l {
		s[i] = fmt.Sprintf("%s:%d", t.Name, t.Partitions)
	}
	return strings.Join(s, ",")
}

func (l *topicList) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		t, err := broker.ParseTopicSpec(part)
		if err != nil {
			return err
		}
		*l = append(*l, t)
	}
	return nil
}

func cmdBroker(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("broker", flag.ContinueOnError)
	var (
		topics          topicList
		users           userList
		cfg             broker.Config
		level           string
		sessMin         time.Duration
		restoreHold     time.Duration
		tlsCert, tlsKey string
	)
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:9092", "TCP `address` to listen on (port 0: any free port)")
	fs.StringVar(&cfg.AdvertisedHost, "advertised-host", "", "`host` clients are told to connect to (default: the listen host, 127.0.0.1 for a wildcard)")
	fs.Var(&topics, "topic", "topic to create at start, `NAME:PARTITIONS` (repeatable or comma-separated)")
	fs.StringVar(&cfg.DataDir, "data-dir", "", "`directory` that keeps topics, records and committed offsets across restarts (default: memory only)")
	fs.BoolVar(&cfg.SyncWrites, "sync-writes", false, "fsync every produced batch (with --data-dir): survive power loss, not only a crash")
	fs.BoolVar(&cfg.AutoCreateTopics, "auto-create-topics", false, "let clients create unknown topics")
	config.CountVar(fs, &cfg.DefaultPartitions, "default-partitions", 1, "partitions of auto-created topics, a `count`")
	config.DurationVar(fs, &sessMin, "group-min-session-timeout", 100*time.Millisecond, "smallest consumer-group session timeout accepted, a `duration`")
	config.DurationVar(fs, &restoreHold, "group-restore-hold", broker.DefaultGroupRestoreHold, "with --data-dir, after a restart: how long consumer groups restored from it refuse joins (COORDINATOR_LOAD_IN_PROGRESS), so that members from before the restart learn they lost their partitions before others get them; the longest session timeout in use, a `duration` (0: none)")
	fs.Var(&users, "user", "SASL user, `MECHANISM:USER:PASSWORD` with PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (repeatable; enables SASL)")
	fs.StringVar(&tlsCert, "tls-cert-file", "", "PEM server certificate `file`: serve TLS (with --tls-key-file)")
	fs.StringVar(&tlsKey, "tls-key-file", "", "PEM server key `file`")
	fs.StringVar(&level, "log-level", "warn", "log `level` on stderr: debug, info, warn, error")
	header := `Usage: bloomgate broker [flags]

An embedded Kafka-protocol broker (github.com/twmb/franz-go/pkg/kfake) for
local use and tests, not for production data. Any Kafka client can use it:
kcat and other librdkafka clients, kafka-go, franz-go, Java clients, with
SASL PLAIN and SCRAM (--user) and TLS as well. Prints "broker listening on
HOST:PORT" on stderr once ready; stops on SIGINT/SIGTERM (persisting state
when --data-dir is set).

  bloomgate broker --topic orders:8 &
  kcat -b 127.0.0.1:9092 -L
  bloomgate broker --listen 127.0.0.1:9093 --user SCRAM-SHA-512:alice:secret &
  kcat -b 127.0.0.1:9093 -X security.protocol=SASL_PLAINTEXT -X sasl.mechanisms=SCRAM-SHA-512 \
       -X sasl.username=alice -X sasl.password=secret -L

Flags:
`
	if done, code := parseFlags(fs, args, header, stdout, stderr); done {
		return code
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return exitCode(stderr, "broker", usageError{fmt.Errorf("--log-level %q: use debug, info, warn or error", level)})
	}
	cfg.Topics = topics
	cfg.Users = users
	cfg.GroupMinSessionTimeout = sessMin
	cfg.GroupRestoreHold = restoreHold
	if restoreHold == 0 {
		cfg.GroupRestoreHold = -1
	}
	if tlsCert != "" || tlsKey != "" {
		cert, err := tls.LoadX509KeyPair(tlsCert, tlsKey)
		if err != nil {
			return exitCode(stderr, "broker", usageError{fmt.Errorf("--tls-cert-file/--tls-key-file: %w", err)})
		}
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
	b, err := broker.New(cfg)
	if err != nil {
		return exitCode(stderr, "broker", err)
	}
	fmt.Fprintf(stderr, "broker listening on %s\n", b.Addr())
	for _, t := range topics {
		fmt.Fprintf(stderr, "topic %s with %d partitions\n", t.Name, t.Partitions)
	}
	if err := b.Run(ctx); err != nil {
		return exitCode(stderr, "broker", err)
	}
	fmt.Fprintln(stderr, "broker stopped")
	return exitOK
}

func cmdLoadgen(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	var (
		cfg       loadgen.Config
		brokers   string
		keyspace  string
		startTime string
		quiet     bool
		sec       config.Run // TLS and SASL settings only
	)
	fs.StringVar(&brokers, "brokers", "127.0.0.1:9092", "Kafka bootstrap brokers, comma-separated `host:port` list")
	fs.StringVar(&cfg.Topic, "topic", "", "topic to write to (required)")
	fs.StringVar(&cfg.Kind, "kind", loadgen.KindOrder, "event kind: order (JSON with order_id) or url (crawler URL in varying spellings)")
	config.CountVar(fs, &cfg.Count, "count", 100000, "events to write, a `count` (e.g. 100k, 1M)")
	config.CountVar(fs, &cfg.Rate, "rate", 0, "events per second, a `count` (0: as fast as possible)")
	config.RateVar(fs, &cfg.Duplicates, "duplicates", 0.2, "share of events that repeat an earlier key, a `rate` in [0,1) (0.2 or 20%)")
	config.RateVar(fs, &cfg.AdjacentFraction, "adjacent", 0.5, "share of duplicates that repeat one of the last 8 keys (the rest reach back anywhere), a `rate` (0.5 or 50%)")
	fs.StringVar(&keyspace, "keyspace", "0", "key IDs are drawn from [0, keyspace) without repetition, e.g. 1e6 (0: 1e12)")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "random seed: the same seed writes the same events")
	fs.StringVar(&cfg.KeyMode, "key-mode", loadgen.KeyModeDedup, "Kafka message key: dedup (the dedup key, duplicates share a partition) or none")
	fs.StringVar(&startTime, "start-time", "", "RFC 3339 timestamp of the first event (default: wall clock at write time)")
	config.DurationVar(fs, &cfg.TimeStep, "time-step", time.Millisecond, "event-time distance between events when --start-time is set, a `duration`")
	config.CountVar(fs, &cfg.BatchSize, "batch-size", 10000, "events per produce call and batch, a `count`")
	config.DurationVar(fs, &cfg.BatchTimeout, "batch-timeout", time.Millisecond, "max wait to fill a produce batch, a `duration`")
	fs.StringVar(&cfg.Compression, "compression", "none", "codec of the written batches: "+loadgen.Compressions)
	fs.BoolVar(&quiet, "quiet", false, "no progress on stderr")
	fs.BoolVar(&sec.TLS.Enabled, "tls-enabled", false, "connect over TLS")
	fs.StringVar(&sec.TLS.CAFile, "tls-ca-file", "", "PEM CA `file` to trust")
	fs.StringVar(&sec.TLS.CertFile, "tls-cert-file", "", "PEM client certificate `file`")
	fs.StringVar(&sec.TLS.KeyFile, "tls-key-file", "", "PEM client key `file`")
	fs.BoolVar(&sec.TLS.InsecureSkipVerify, "tls-insecure-skip-verify", false, "do not verify the broker certificate")
	fs.StringVar(&sec.SASL.Mechanism, "sasl-mechanism", "", "SASL `mechanism`: plain, scram-sha-256, scram-sha-512")
	fs.StringVar(&sec.SASL.Username, "sasl-username", "", "SASL user name")
	// No default from the environment here: the flag package prints defaults.
	fs.StringVar(&sec.SASL.Password, "sasl-password", "", "SASL password (default: $BLOOMGATE_SASL_PASSWORD)")
	header := `Usage: bloomgate loadgen [flags]

Writes synthetic events with an exact, known number of duplicates. Progress
goes to stderr; the final counts go to stdout as key=value pairs:
events, unique, duplicates, adjacent_duplicates, bytes, seconds, rate.

Flags:
`
	if done, code := parseFlags(fs, args, header, stdout, stderr); done {
		return code
	}
	if sec.SASL.Password == "" {
		sec.SASL.Password = os.Getenv("BLOOMGATE_SASL_PASSWORD")
	}
	for _, b := range strings.Split(brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			cfg.Brokers = append(cfg.Brokers, b)
		}
	}
	ks, err := config.ParseCount(keyspace)
	if err != nil {
		return exitCode(stderr, "loadgen", usageError{fmt.Errorf("--keyspace: %w", err)})
	}
	cfg.KeySpace = ks
	if startTime != "" {
		t, err := time.Parse(time.RFC3339Nano, startTime)
		if err != nil {
			return exitCode(stderr, "loadgen", usageError{fmt.Errorf("--start-time: %w", err)})
		}
		cfg.StartTime = t
	}
	if sec.TLS.Enabled || sec.SASL.Mechanism != "" {
		tr, err := sec.Transport()
		if err != nil {
			return exitCode(stderr, "loadgen", usageError{err})
		}
		cfg.Transport = tr
		cfg.SASLUsername = sec.SASL.Username
	}
	if cfg.AdjacentFraction == 0 {
		cfg.AdjacentFraction = -1 // explicit zero
	}
	if err := cfg.Validate(); err != nil {
		return exitCode(stderr, "loadgen", usageError{err})
	}
	if !quiet {
		cfg.Progress = func(s loadgen.Stats) {
			fmt.Fprintf(stderr, "loadgen: %d/%d events (%.0f%%), %d duplicates, %.0f ev/s\n",
				s.Events, cfg.Count, 100*float64(s.Events)/float64(cfg.Count), s.Duplicates, s.Rate())
		}
	}
	st, err := loadgen.Run(ctx, cfg)
	fmt.Fprintf(stdout, "events=%d unique=%d duplicates=%d adjacent_duplicates=%d bytes=%d seconds=%.3f rate=%.0f\n",
		st.Events, st.Unique, st.Duplicates, st.AdjacentDuplicates, st.Bytes, st.Elapsed.Seconds(), st.Rate())
	var refused *brokercheck.Error
	if errors.As(err, &refused) {
		err = usageError{err} // credentials, ACLs or TLS settings
	}
	if err != nil {
		return exitCode(stderr, "loadgen", err)
	}
	return exitOK
}
