//go:build !nodev

package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/bloomgate/bloomgate/internal/broker"
	"github.com/bloomgate/bloomgate/internal/config"
)

// devCommands are the commands built on the embedded broker (kfake). A
// build with -tags nodev, as the container image is, leaves them out: they
// are ~7 MB of the executable, whose mapped pages count in a worker's
// resident memory (docs/benchmarks-journal.md, "The worker's executable").
func devCommands() []command {
	return []command{
		{"dev", "local demo: embedded broker, worker and producer in one process", cmdDev},
		{"broker", "run an embedded Kafka-protocol broker for local use and tests", cmdBroker},
	}
}

// devQuickStart are the usage's quick-start lines for devCommands.
const devQuickStart = `  bloomgate dev                                   # everything in one process
  bloomgate broker --topic orders:8 --topic deduped:8 &
`

// notBuilt reports whether name is a command this build leaves out: none.
func notBuilt(string) bool { return false }

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
