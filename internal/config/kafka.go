package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/bloomgate/bloomgate/internal/keys"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// Extractor builds the key extractor of --key, --normalize, --url-rules,
// --url-strip-params, --max-key-bytes and --json-validation: the one
// extractor of the repartition hop and of the dedup stage.
func (c *Run) Extractor() (*keys.Extractor, error) {
	return c.extractor(c.Key)
}

func (c *Run) extractor(spec string) (*keys.Extractor, error) {
	rules, err := c.urlRules()
	if err != nil {
		return nil, err
	}
	var opts []keys.Option
	if c.JSONValidation == JSONValidationLazy {
		opts = append(opts, keys.LazyJSONValidation())
	}
	if rules != nil {
		opts = append(opts, keys.WithURLRules(rules))
	}
	return keys.NewExtractor(spec, c.Normalize, c.MaxKeyBytes, opts...)
}

// urlRules parses --url-rules and --url-strip-params (nil: none); an
// error is a *urlRulesError naming the setting.
func (c *Run) urlRules() (*keys.URLRules, error) {
	if _, err := keys.ParseURLRules(c.URLRules, nil); err != nil {
		return nil, &urlRulesError{"url-rules", err}
	}
	r, err := keys.ParseURLRules(c.URLRules, c.URLStripParams)
	if err != nil {
		return nil, &urlRulesError{"url-strip-params", err}
	}
	return r, nil
}

type urlRulesError struct {
	setting string
	err     error
}

func (e *urlRulesError) Error() string { return e.err.Error() }
func (e *urlRulesError) Unwrap() error { return e.err }

// urlRulesSetting names the setting of an error of urlRules.
func urlRulesSetting(err error) string {
	if e, ok := err.(*urlRulesError); ok {
		return e.setting
	}
	return "url-rules"
}

// SeedExtractor is the extractor of --seed-topic's records: --seed-key (or
// --key) with the input's normalization and limits, so that a key found
// there equals the same key found in the input.
func (c *Run) SeedExtractor() (*keys.Extractor, error) {
	spec := c.SeedKey
	if spec == "" {
		spec = c.Key
	}
	return c.extractor(spec)
}

// TLSConfig builds the client TLS configuration, or nil when TLS is off.
func (c *Run) TLSConfig() (*tls.Config, error) {
	t := c.TLS
	if !t.Enabled {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // opt-in for tests
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading --tls-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca-file %q holds no PEM certificate", t.CAFile)
		}
		cfg.RootCAs = pool
	}
	if t.CertFile != "" || t.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("loading --tls-cert-file/--tls-key-file: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// SASLMechanism builds the kafka-go SASL mechanism, or nil when SASL is off.
func (c *Run) SASLMechanism() (sasl.Mechanism, error) {
	s := c.SASL
	switch strings.ToLower(s.Mechanism) {
	case "":
		return nil, nil
	case SASLPlain:
		return plain.Mechanism{Username: s.Username, Password: s.Password}, nil
	case SASLScramSHA256:
		return scram.Mechanism(scram.SHA256, s.Username, s.Password)
	case SASLScramSHA512:
		return scram.Mechanism(scram.SHA512, s.Username, s.Password)
	}
	return nil, fmt.Errorf("--sasl-mechanism %q: use plain, scram-sha-256 or scram-sha-512", s.Mechanism)
}

// Dialer returns a kafka-go dialer with the TLS and SASL settings, for
// consumer groups and readers.
func (c *Run) Dialer() (*kafka.Dialer, error) {
	tc, err := c.TLSConfig()
	if err != nil {
		return nil, err
	}
	m, err := c.SASLMechanism()
	if err != nil {
		return nil, err
	}
	return &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true, TLS: tc, SASLMechanism: m, ClientID: c.ClientID}, nil
}

// Transport returns a kafka-go transport with the TLS and SASL settings, for
// writers and clients (a plain transport when both are off).
func (c *Run) Transport() (*kafka.Transport, error) {
	tc, err := c.TLSConfig()
	if err != nil {
		return nil, err
	}
	m, err := c.SASLMechanism()
	if err != nil {
		return nil, err
	}
	return &kafka.Transport{TLS: tc, SASL: m, ClientID: c.ClientID}, nil
}
