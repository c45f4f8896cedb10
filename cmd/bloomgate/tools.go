package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

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
	fs.StringVar(&sec.SASL.Mechanism, "sasl-mechanism", "", "SASL `mechanism`: plain, scram-sha-256, scram-sha-512, oauthbearer, aws-msk-iam")
	fs.StringVar(&sec.SASL.Username, "sasl-username", "", "SASL user name")
	// No default from the environment here: the flag package prints defaults.
	fs.StringVar(&sec.SASL.Password, "sasl-password", "", "SASL password (default: $BLOOMGATE_SASL_PASSWORD)")
	fs.StringVar(&sec.SASL.OAuthTokenFile, "sasl-oauth-token-file", "", "oauthbearer: `file` holding the token")
	fs.StringVar(&sec.SASL.OAuthTokenEndpoint, "sasl-oauth-token-endpoint", "", "oauthbearer: OIDC token endpoint `URL` (client credentials; the secret in $BLOOMGATE_SASL_OAUTH_CLIENT_SECRET or --sasl-oauth-client-secret-file)")
	fs.StringVar(&sec.SASL.OAuthClientID, "sasl-oauth-client-id", "", "oauthbearer: client `id`")
	fs.StringVar(&sec.SASL.OAuthClientSecretFile, "sasl-oauth-client-secret-file", "", "oauthbearer: `file` holding the client secret")
	fs.StringVar(&sec.SASL.OAuthScope, "sasl-oauth-scope", "", "oauthbearer: `scope`")
	fs.StringVar(&sec.SASL.OAuthExtensions, "sasl-oauth-extensions", "", "oauthbearer: SASL extensions, `key=value,...`")
	fs.StringVar(&sec.SASL.AWSRegion, "sasl-aws-region", "", "aws-msk-iam: AWS `region` (default: AWS_REGION or the profile's)")
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
	if sec.SASL.OAuthTokenEndpoint != "" && sec.SASL.OAuthClientSecretFile == "" {
		sec.SASL.OAuthClientSecret = os.Getenv("BLOOMGATE_SASL_OAUTH_CLIENT_SECRET")
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
