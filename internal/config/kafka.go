package config

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/bloomgate/bloomgate/internal/keys"
	"github.com/bloomgate/bloomgate/internal/saslauth"
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

// SASLMechanism builds the kafka-go SASL mechanism, or nil when SASL is
// off. Every connection the binary makes to the brokers (consumer groups,
// fetches, writes, admin requests, the repartition hop, `bloomgate check`)
// authenticates with it, through Dialer and Transport. The mechanism is
// built once per Run: an OIDC token is shared by all of them.
func (c *Run) SASLMechanism() (sasl.Mechanism, error) {
	if c.sasl == nil {
		c.sasl = new(saslOnce)
	}
	c.sasl.once.Do(func() { c.sasl.m, c.sasl.err = c.newSASLMechanism() })
	return c.sasl.m, c.sasl.err
}

// saslOnce holds the mechanism built by SASLMechanism.
type saslOnce struct {
	once sync.Once
	m    sasl.Mechanism
	err  error
}

func (c *Run) newSASLMechanism() (sasl.Mechanism, error) {
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
	case SASLOAuthBearer:
		ext, err := parseExtensions(s.OAuthExtensions)
		if err != nil {
			return nil, fmt.Errorf("--sasl-oauth-extensions: %w", err)
		}
		m := &saslauth.OAuthBearer{Extensions: ext, Settings: c.OAuthSettings()}
		if s.OAuthTokenFile != "" {
			m.Source = &saslauth.FileToken{Path: s.OAuthTokenFile, Settings: m.Settings}
			return m, nil
		}
		secret, err := c.oauthClientSecret()
		if err != nil {
			return nil, fmt.Errorf("--sasl-oauth-client-secret-file: %w", err)
		}
		m.Source = &saslauth.ClientCredentials{Endpoint: s.OAuthTokenEndpoint, ClientID: s.OAuthClientID,
			ClientSecret: secret, Scope: s.OAuthScope, Settings: m.Settings}
		return m, nil
	case SASLAWSMSKIAM:
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return saslauth.NewMSKIAM(ctx, s.AWSRegion, c.OAuthSettings())
	}
	return nil, fmt.Errorf("--sasl-mechanism %q: use plain, scram-sha-256, scram-sha-512, oauthbearer or aws-msk-iam", s.Mechanism)
}

// OAuthSettings names the settings that supply the credentials of
// --sasl-mechanism oauthbearer or aws-msk-iam, for error messages.
func (c *Run) OAuthSettings() string {
	s := c.SASL
	switch strings.ToLower(s.Mechanism) {
	case SASLAWSMSKIAM:
		region := "the region of AWS_REGION or the AWS profile"
		if s.AWSRegion != "" {
			region = fmt.Sprintf("--sasl-aws-region %s", s.AWSRegion)
		}
		return fmt.Sprintf("the AWS SDK's default credentials (AWS_* variables, shared files, web identity, container or instance role) and %s", region)
	case SASLOAuthBearer:
		if s.OAuthTokenFile != "" {
			return fmt.Sprintf("--sasl-oauth-token-file %s", s.OAuthTokenFile)
		}
		secret := envName("sasl-oauth-client-secret")
		if s.OAuthClientSecretFile != "" {
			secret = "--sasl-oauth-client-secret-file " + s.OAuthClientSecretFile
		}
		out := fmt.Sprintf("--sasl-oauth-token-endpoint %s, --sasl-oauth-client-id %q and the secret in %s", s.OAuthTokenEndpoint, s.OAuthClientID, secret)
		if s.OAuthScope != "" {
			out += fmt.Sprintf(" (--sasl-oauth-scope %q)", s.OAuthScope)
		}
		return out
	}
	return ""
}

// oauthClientSecret is the client secret: --sasl-oauth-client-secret, or
// the content of --sasl-oauth-client-secret-file without surrounding
// white space.
func (c *Run) oauthClientSecret() (string, error) {
	s := c.SASL
	if s.OAuthClientSecretFile == "" {
		return s.OAuthClientSecret, nil
	}
	b, err := os.ReadFile(s.OAuthClientSecretFile)
	if err != nil {
		return "", err
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("%s is empty", s.OAuthClientSecretFile)
	}
	return v, nil
}

// parseExtensions reads key=value,key=value.
func parseExtensions(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return nil, fmt.Errorf("%q is not key=value", kv)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("extension %q given twice", k)
		}
		if err := saslauth.ValidExtension(k, v); err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, nil
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
