package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/bloomgate/bloomgate/internal/bloom"
	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/filterplan"
	"github.com/bloomgate/bloomgate/internal/keys"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// Validate checks every setting; it changes nothing (Resolve fills the
// derived defaults). It reports all problems at once, joined; each is a
// *SettingError placed where the setting was set (a flag, a variable, a
// line of the config file; "not set" for a default). Its ranges are the
// worker's (worker.CheckBatchSize, …) and, for the filter, filterplan's, so
// a Run it accepts maps to a worker.Config that worker.Config.Validate
// accepts.
func (c *Run) Validate() error {
	p := &problems{run: c}
	for _, s := range settings {
		p.check(s.name, s.field.check(c))
	}
	c.validateKafka(p)
	c.validateSeeding(p)
	c.validateOutput(p)
	c.validateTLS(p)
	c.validateSASL(p)
	c.validateKeys(p)
	c.validateFilter(p)
	c.validateCheckpoints(p)
	c.validateGroup(p)
	c.validateOperations(p)
	return errors.Join(p.errs...)
}

// problems collects what Validate finds, each problem placed where its
// setting was set.
type problems struct {
	run  *Run
	errs []error
}

// bad reports a problem of setting, in the words of format and args.
func (p *problems) bad(setting, format string, args ...any) {
	o := p.run.origin(setting)
	p.errs = append(p.errs, &SettingError{Setting: setting, Problem: fmt.Sprintf(format, args...), Source: o.source, File: o.file, Line: o.line})
}

// check reports err, if any, as a problem of setting.
func (p *problems) check(setting string, err error) {
	if err != nil {
		p.bad(setting, "%v", err)
	}
}

// topicSetting is a topic and the flag that names it.
type topicSetting struct{ setting, name string }

// topics lists the topics the worker reads and writes, the two required
// first.
func (c *Run) topics() []topicSetting {
	return []topicSetting{{"input", c.Input}, {"output", c.Output}, {"duplicates", c.Duplicates}, {"dead-letter", c.DeadLetter}}
}

// validateKafka checks the brokers, the group and the topics.
func (c *Run) validateKafka(p *problems) {
	if len(c.Brokers) == 0 {
		p.bad("brokers", "no brokers: set --brokers host:port (e.g. 127.0.0.1:9092)")
	}
	for _, b := range c.Brokers {
		if err := checkHostPort(b); err != nil {
			p.bad("brokers", "%q: %v; use host:port", b, err)
		}
	}
	if strings.TrimSpace(c.Group) == "" {
		p.bad("group", "empty consumer group id: set --group (default bloomgate)")
	}
	topics := c.topics()
	for i, t := range topics {
		if t.name == "" {
			if i < 2 {
				p.bad(t.setting, "no %s topic: set --%s NAME", t.setting, t.setting)
			}
			continue
		}
		if err := checkTopic(t.name); err != nil {
			p.bad(t.setting, "topic %q: %v", t.name, err)
		}
		for _, u := range topics[:i] {
			if u.name == t.name {
				p.bad(t.setting, "topic %q is also --%s: each topic must be different (writing the %s to the %s would loop or mix streams)", t.name, u.setting, t.setting, u.setting)
			}
		}
	}
	if c.Repartition {
		for _, t := range topics {
			if t.name != "" && t.name == c.RepartitionTopic() {
				p.bad(t.setting, "topic %q is the repartition topic of group %q; choose another name or group", t.name, c.Group)
			}
		}
	}
}

// validateSeeding checks where a new group starts and what it remembers
// before the start.
func (c *Run) validateSeeding(p *problems) {
	start, err := ParsePosition(c.StartFrom)
	if err != nil {
		p.bad("start-from", "%v", err)
	}
	if c.SeedFrom != "" {
		c.validateSeedFrom(p, start)
	}
	if c.SeedTopic != "" {
		if err := checkTopic(c.SeedTopic); err != nil {
			p.bad("seed-topic", "topic %q: %v", c.SeedTopic, err)
		}
		if c.SeedTopic == c.Input {
			p.bad("seed-topic", "%q is the input: to remember the input before the start use --seed-from instead", c.SeedTopic)
		}
		if c.Repartition {
			p.bad("seed-topic", "not with --repartition: the dedup stage reads the repartition topic, partitioned by the hash of the canonical key, "+
				"and a seed topic would have to be partitioned the same way; seed from the input instead (--start-from and --seed-from)")
		}
	} else if c.SeedKey != "" {
		p.bad("seed-key", "%q without --seed-topic: name the topic whose records it reads", c.SeedKey)
	}
	if c.SeedKey != "" {
		if _, err := keys.NewExtractor(c.SeedKey, "none", 0); err != nil {
			p.bad("seed-key", "%v (e.g. key, header:order-id or json:order.id)", err)
		}
	}
}

// validateSeedFrom checks --seed-from against --start-from (start).
func (c *Run) validateSeedFrom(p *problems, start Position) {
	seed, err := ParsePosition(c.SeedFrom)
	switch {
	case err != nil:
		p.bad("seed-from", "%v", err)
	case seed.Latest:
		p.bad("seed-from", "latest would seed nothing; use a time or a duration before now (e.g. 72h)")
	case start.IsEarliest() && c.SeedTopic == "":
		p.bad("seed-from", "needs --start-from latest, a time or a duration: from earliest every record is forwarded, none is left to seed")
	case !seed.At.IsZero() && !start.At.IsZero() && seed.At.After(start.At),
		seed.Ago > 0 && start.Ago > 0 && seed.Ago < start.Ago:
		p.bad("seed-from", "%s lies after --start-from %s; seeding covers the input before the start", c.SeedFrom, c.StartFrom)
	}
}

// validateOutput checks how records are batched, written and committed.
func (c *Run) validateOutput(p *problems) {
	// Unset, it is resolved from the dead-letter topic: always valid.
	if c.OnUnwritable != "" {
		p.check("on-unwritable", worker.CheckOnUnwritable(worker.UnwritablePolicy(c.OnUnwritable), c.DeadLetter))
	}
}

// validateKeys checks how the dedup key is extracted and what happens
// without one.
func (c *Run) validateKeys(p *problems) {
	norm, err := keys.ParseNormalize(c.Normalize)
	if err != nil {
		p.bad("normalize", "%v", err)
	}
	if _, err := c.urlRules(); err != nil {
		p.bad(urlRulesSetting(err), "%v", err)
	} else if (len(c.URLRules) > 0 || len(c.URLStripParams) > 0) && norm != keys.NormURL && norm != "" {
		p.bad("url-rules", "apply to --normalize url only (normalize is %s): set --normalize url, or remove --url-rules and --url-strip-params", norm)
	}
	// Unset, it is resolved from the dead-letter topic: always valid.
	if c.OnMissingKey != "" {
		p.check("on-missing-key", worker.CheckOnMissingKey(worker.MissingKeyPolicy(c.OnMissingKey), c.DeadLetter))
	}
}

// validateFilter checks the filter: its kind, the ranges of its settings
// (filterplan's, which the worker and the filter apply as well), the plan
// they make, and exact mode.
func (c *Run) validateFilter(p *problems) {
	planned := true
	for _, r := range c.Params.Check() {
		p.bad(r.Setting, "%s", r.Problem)
		if r.Setting == filterplan.Generations || r.Setting == filterplan.FPR {
			planned = false // no memory to compute
		}
	}
	if planned {
		c.validatePlan(p)
	}
	if c.Exact && c.ExactDir == "" {
		p.bad("exact-dir", "empty: exact mode needs a local directory for its stores (e.g. %s)", DefaultExactDir)
	}
}

// validateCheckpoints checks where and how often checkpoints are written,
// and how they are restored.
func (c *Run) validateCheckpoints(p *problems) {
	switch s := c.MaxCheckpointStaleness; {
	case s == worker.NoBound, s == 0: // no bound (written 0s); the worker's default
	case s < 0:
		p.bad("max-checkpoint-staleness", "%v: must be 0 (no bound) or positive", fd(c.MaxCheckpointStaleness))
	default:
		if err := worker.CheckCheckpointStaleness(s, c.CheckpointInterval); err != nil {
			p.bad("max-checkpoint-staleness", "%v", err)
		}
	}
}

// validateGroup checks the consumer group's timings.
func (c *Run) validateGroup(p *problems) {
	if err := worker.CheckHeartbeatInterval(c.HeartbeatInterval, c.SessionTimeout); err != nil {
		p.bad("heartbeat-interval", "%v", err)
	}
	if err := worker.CheckRebalanceTimeout(c.RebalanceTimeout, c.SessionTimeout); err != nil {
		p.bad("rebalance-timeout", "%v", err)
	}
}

// validateOperations checks the metrics endpoint, the shutdown and the logs.
func (c *Run) validateOperations(p *problems) {
	if c.MetricsAddr != "" {
		if _, port, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			p.bad("metrics-addr", "%q: %v; use host:port (e.g. 127.0.0.1:9464) or empty to disable", c.MetricsAddr, err)
		} else if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			p.bad("metrics-addr", "%q: bad port; use host:port (e.g. 127.0.0.1:9464)", c.MetricsAddr)
		}
	}
}

// MaxPlannedFilterBytes bounds the filter memory a plan may need for the
// whole input topic, summed over its partitions: 1 TiB. The bound is a
// sanity check, not a tuned limit. It lies about 500 times above the
// largest plan docs/sizing.md's table shows (1 billion keys at 1 %: 2.1
// GiB) and holds ~490 billion keys per window at 1 % or ~340 billion at
// 0.1 %; at 1 TiB a restore after losing every worker fetches 1 TiB of
// checkpoints, and one partition's filter is limited to 64 GiB
// (bloom.MaxFilterBytes), so such a plan needs at least 16 partitions
// already. Past the bound a capacity is almost always a slip of a unit
// (1e12 for 1e9, 1t for 1g), which would otherwise be found only once
// partitions are assigned and each fails to build its filter.
const MaxPlannedFilterBytes = 1 << 40

// validatePlan refuses a --capacity and --fpr whose filters would need more
// than MaxPlannedFilterBytes for the topic, or whose rate the filter cannot
// reach. The per-partition limit needs the partition count and is checked
// by the worker at start.
func (c *Run) validatePlan(p *problems) {
	bitsPerKey := bloom.BitsPerKey
	if c.Filter == FilterFingerprint {
		bitsPerKey = bloom.FingerprintBitsPerKey
	}
	bits, err := bitsPerKey(c.FPR, c.Generations)
	switch {
	case err != nil && c.Filter == FilterFingerprint:
		p.bad("fpr", "%s: the fingerprint filter cannot be planned at this rate with %d generations (%v): raise --fpr", FormatRate(c.FPR), c.Generations, err)
		return
	case err != nil:
		p.bad("fpr", "%s is smaller than the filter can reach with %d generations (512-bit blocks, at most 32 probes): use 1e-9 or more", FormatRate(c.FPR), c.Generations)
		return
	}
	if need := float64(c.Capacity) * bits / 8; need > MaxPlannedFilterBytes {
		p.bad("capacity", "%s keys per window at --fpr %s with %d generations need %s of filter memory for the whole topic, more than the %s bound on any plan (docs/settings.md): "+
			"use the expected distinct keys per window of the whole topic (e.g. 1G), or raise --fpr",
			FormatCount(c.Capacity), FormatRate(c.FPR), c.Generations, formatMemory(need), formatMemory(MaxPlannedFilterBytes))
	}
}

// checkMaxKeyBytes bounds --max-key-bytes.
func checkMaxKeyBytes(n int) error {
	if n < 1 || n > 1<<20 {
		return fmt.Errorf("%d: must be between 1 and 1048576", n)
	}
	return nil
}

// atLeastOne checks a count that must be 1 or more.
func atLeastOne(n, def int) error {
	if n < 1 {
		return fmt.Errorf("%d: must be at least 1 (e.g. %d)", n, def)
	}
	return nil
}

// notNegative checks a duration that 0 turns off.
func notNegative(d, def time.Duration) error {
	if d < 0 {
		return fmt.Errorf("%v: must be >= 0 (0: unbounded; e.g. %s)", fd(d), fd(def))
	}
	return nil
}

// fd formats a duration for a message.
func fd(d time.Duration) string { return FormatDuration(d) }

// validateTLS checks the TLS settings: files only with TLS on, readable,
// and a certificate with its key.
func (c *Run) validateTLS(p *problems) {
	t := c.TLS
	files := []struct{ setting, path string }{
		{"tls-ca-file", t.CAFile}, {"tls-cert-file", t.CertFile}, {"tls-key-file", t.KeyFile},
	}
	for _, f := range files {
		if f.path == "" {
			continue
		}
		if !t.Enabled {
			p.bad(f.setting, "set but TLS is off: add --tls-enabled")
		}
		if _, err := os.ReadFile(f.path); err != nil {
			p.bad(f.setting, "cannot read %q: %v", f.path, err)
		}
	}
	if t.InsecureSkipVerify && !t.Enabled {
		p.bad("tls-insecure-skip-verify", "set but TLS is off: add --tls-enabled")
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		p.bad("tls-cert-file", "a client certificate needs both --tls-cert-file and --tls-key-file")
	}
	if t.Enabled {
		if _, err := c.TLSConfig(); err != nil {
			p.bad("tls-enabled", "%v", err)
		}
	}
}

// validateSASL checks that a SASL mechanism comes with its credentials,
// and credentials with a mechanism that uses them.
func (c *Run) validateSASL(p *problems) {
	s := c.SASL
	mech := strings.ToLower(s.Mechanism)
	switch mech {
	case "", SASLPlain, SASLScramSHA256, SASLScramSHA512, SASLOAuthBearer, SASLAWSMSKIAM:
	default:
		p.bad("sasl-mechanism", "%q is not one of plain, scram-sha-256, scram-sha-512, oauthbearer, aws-msk-iam", s.Mechanism)
		return
	}
	if c.origin("sasl-oauth-client-secret").source == FromFlag {
		p.bad("sasl-oauth-client-secret", "a secret on the command line shows in ps and in the shell history: set %s or --sasl-oauth-client-secret-file",
			envName("sasl-oauth-client-secret"))
	}
	password := mech == SASLPlain || mech == SASLScramSHA256 || mech == SASLScramSHA512
	oauth := []struct{ name, value string }{
		{"sasl-oauth-token-file", s.OAuthTokenFile}, {"sasl-oauth-token-endpoint", s.OAuthTokenEndpoint},
		{"sasl-oauth-client-id", s.OAuthClientID}, {"sasl-oauth-client-secret", s.OAuthClientSecret},
		{"sasl-oauth-client-secret-file", s.OAuthClientSecretFile}, {"sasl-oauth-scope", s.OAuthScope},
		{"sasl-oauth-extensions", s.OAuthExtensions},
	}
	// A setting the mechanism does not use is a mistake in the settings
	// (another mechanism meant, or a leftover): say so rather than ignore it.
	unused := func(name, value, uses string) {
		if value != "" {
			if mech == "" {
				p.bad("sasl-mechanism", "--%s is set but no mechanism: set --sasl-mechanism %s", name, uses)
			} else {
				p.bad(name, "not used with --sasl-mechanism %s, only with %s", s.Mechanism, uses)
			}
		}
	}
	if !password {
		unused("sasl-username", s.Username, "plain, scram-sha-256 or scram-sha-512")
		unused("sasl-password", s.Password, "plain, scram-sha-256 or scram-sha-512")
	}
	if mech != SASLOAuthBearer {
		for _, o := range oauth {
			unused(o.name, o.value, SASLOAuthBearer)
		}
	}
	if mech != SASLAWSMSKIAM {
		unused("sasl-aws-region", s.AWSRegion, SASLAWSMSKIAM)
	}
	switch mech {
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		if s.Username == "" {
			p.bad("sasl-username", "empty: SASL %s needs a user name", s.Mechanism)
		}
		if s.Password == "" {
			p.bad("sasl-password", "empty: SASL %s needs a password (set %s)", s.Mechanism, envName("sasl-password"))
		}
	case SASLOAuthBearer:
		c.validateOAuth(p)
	}
}

// validateOAuth checks that OAUTHBEARER has one source of tokens, complete.
func (c *Run) validateOAuth(p *problems) {
	s := c.SASL
	file, endpoint := s.OAuthTokenFile != "", s.OAuthTokenEndpoint != ""
	switch {
	case file && endpoint:
		p.bad("sasl-oauth-token-file", "set together with --sasl-oauth-token-endpoint: the token comes from one of them")
	case !file && !endpoint:
		p.bad("sasl-oauth-token-endpoint", "empty: SASL oauthbearer needs --sasl-oauth-token-file, or --sasl-oauth-token-endpoint with --sasl-oauth-client-id and a client secret (%s or --sasl-oauth-client-secret-file)",
			envName("sasl-oauth-client-secret"))
	case file:
		for _, o := range []struct{ name, value string }{{"sasl-oauth-client-id", s.OAuthClientID}, {"sasl-oauth-client-secret", s.OAuthClientSecret},
			{"sasl-oauth-client-secret-file", s.OAuthClientSecretFile}, {"sasl-oauth-scope", s.OAuthScope}} {
			if o.value != "" {
				p.bad(o.name, "not used with --sasl-oauth-token-file, only with --sasl-oauth-token-endpoint")
			}
		}
		if st, err := os.Stat(s.OAuthTokenFile); err != nil {
			p.bad("sasl-oauth-token-file", "%v", err)
		} else if st.IsDir() {
			p.bad("sasl-oauth-token-file", "%s is a directory, not the token file", s.OAuthTokenFile)
		}
	case endpoint:
		if u, err := url.Parse(s.OAuthTokenEndpoint); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			p.bad("sasl-oauth-token-endpoint", "%q is not an http(s) URL, e.g. https://login.example.com/oauth2/token", s.OAuthTokenEndpoint)
		}
		if s.OAuthClientID == "" {
			p.bad("sasl-oauth-client-id", "empty: the client credentials grant needs a client id")
		}
		switch {
		case s.OAuthClientSecret != "" && s.OAuthClientSecretFile != "":
			p.bad("sasl-oauth-client-secret-file", "set together with %s: the secret comes from one of them", envName("sasl-oauth-client-secret"))
		case s.OAuthClientSecret == "" && s.OAuthClientSecretFile == "":
			p.bad("sasl-oauth-client-secret", "empty: the client credentials grant needs a secret: set %s or --sasl-oauth-client-secret-file", envName("sasl-oauth-client-secret"))
		case s.OAuthClientSecretFile != "":
			if _, err := c.oauthClientSecret(); err != nil {
				p.bad("sasl-oauth-client-secret-file", "%v", err)
			}
		}
	}
	if _, err := parseExtensions(s.OAuthExtensions); err != nil {
		p.bad("sasl-oauth-extensions", "%v", err)
	}
}

func checkHostPort(hp string) error {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return err
	}
	if host == "" {
		return errors.New("empty host")
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("bad port %q", port)
	}
	return nil
}

// checkTopic applies Kafka's topic name rules.
func checkTopic(name string) error {
	if len(name) > 249 {
		return errors.New("longer than 249 characters")
	}
	if name == "." || name == ".." {
		return errors.New(`"." and ".." are not topic names`)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("character %q not allowed (use letters, digits, '.', '_', '-')", r)
		}
	}
	return nil
}

func checkCheckpointURL(raw string) error {
	if raw == "" {
		return errors.New("empty: set a checkpoint store, e.g. file:///var/lib/bloomgate or s3://bucket/prefix")
	}
	u, err := url.Parse(raw)
	if err != nil {
		// The parser's message repeats part of the URL (the whole of it,
		// an invalid port or escape), which may be a secret.
		return errors.New(checkpoint.UnparsableURL)
	}
	hasUser := u.User != nil
	if ep := u.Query().Get("endpoint"); ep != "" {
		if eu, err := url.Parse(ep); err == nil && eu.User != nil {
			hasUser = true
		}
	}
	if hasUser {
		// Never echo the URL here: it holds a secret.
		return errors.New("credentials in the URL are not supported (and would end up in logs): " +
			"give them through the AWS chain, e.g. AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a shared config profile or an IAM role")
	}
	shown := checkpoint.RedactURL(raw) // a query may hold a secret
	switch u.Scheme {
	case "file":
		if u.Path == "" || u.Path == "/" {
			return fmt.Errorf("%s: no directory; use file:///absolute/dir or file://./relative/dir", shown)
		}
	case "s3":
		if u.Host == "" {
			return fmt.Errorf("%s: no bucket; use s3://bucket/prefix", shown)
		}
	case "mem":
	case "":
		if p, ok := localPath(raw); ok && !strings.Contains(raw, "/") {
			return fmt.Errorf("%s has no scheme: write file://%s for a directory, or s3://%s for a bucket", shown, p, raw)
		} else if ok {
			return fmt.Errorf("%s is a path, not a URL: write file://%s", shown, p)
		}
		return fmt.Errorf("%s: no scheme; use s3://bucket/prefix, file:///dir or mem://name", shown)
	default:
		return fmt.Errorf("%s: scheme must be s3, file or mem", shown)
	}
	// What the store would refuse when opened (parameters, a file URL's
	// host), now rather than after the start-up log line.
	if err := checkpoint.CheckURL(AbsFileURL(raw)); err != nil {
		return err
	}
	return nil
}

// localPath reports whether a checkpoint URL without a scheme is a local
// path (/var/lib/x, ./x, ../x, ~/x, x/y), and returns it absolute, as a
// file:// URL needs it.
func localPath(raw string) (string, bool) {
	if raw == "" || strings.ContainsAny(raw, "?#") {
		return "", false
	}
	p := raw
	if rest, ok := strings.CutPrefix(raw, "~/"); ok {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", false
		}
		p = filepath.Join(home, rest)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", false
	}
	return filepath.ToSlash(abs), true
}
