package brokercheck

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/saslauth"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

func scram512(t *testing.T, user, pass string) *Client {
	t.Helper()
	m, err := scram.Mechanism(scram.SHA512, user, pass)
	if err != nil {
		t.Fatal(err)
	}
	return &Client{Brokers: []string{"k1:9093", "k2:9093"}, SASL: m, Username: user, Component: "the worker", Needs: workerNeeds}
}

var workerNeeds = []Need{
	{Resource: TopicResource, Name: "orders", Setting: "--input", Op: Read},
	{Resource: TopicResource, Name: "orders-unique", Setting: "--output", Op: Write},
	{Resource: GroupResource, Name: "dedup", Setting: "--group", Op: Read},
}

// TestExplain pins the messages: each names the settings to change.
func TestExplain(t *testing.T) {
	c := scram512(t, "bob", "pw")
	step := func(s step, err error) error { return &stepError{addr: "k1:9093", step: s, err: err} }
	for _, tc := range []struct {
		name string
		c    *Client
		err  error
		kind Kind
		want string
	}{
		{"wrong password", c, step(stepSASL, &brokerError{err: kafka.SASLAuthenticationFailed,
			msg: "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"}),
			Authentication, `--sasl-username "bob" with --sasl-mechanism scram-sha-512: the brokers refused the login ` +
				`(Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 (error 58, SASL Authentication Failed)); ` +
				`check the user name, the password in BLOOMGATE_SASL_PASSWORD (or --sasl-password), and that the brokers have this user for scram-sha-512`},
		{"mechanism not offered", c, step(stepSASL, kafka.UnsupportedSASLMechanism), Authentication,
			`--sasl-mechanism scram-sha-512: the brokers do not offer this mechanism on this listener ` +
				`(k1:9093: SASL authentication: [33] Unsupported SASL Mechanism: the broker does not support the requested SASL mechanism); ` +
				`use one they enable (their sasl.enabled.mechanisms), or check the port`},
		{"SASL at a listener without it", c, step(stepSASL, kafka.IllegalSASLState), Authentication,
			`--sasl-mechanism scram-sha-512: the brokers refused the SASL exchange ([34] Illegal SASL State: the request is not ` +
				`valid given the current SASL state); their listener may not expect SASL: drop --sasl-mechanism or use the brokers' SASL port`},
		{"group", c, kafka.GroupAuthorizationFailed, Authorization,
			`principal User:bob (--sasl-username) is not authorized for a consumer group ([30] Group Authorization Failed: ` +
				`the client is not authorized to access a particular group id); the worker needs READ on group "dedup" (--group): ` +
				`grant what is missing, e.g. kafka-acls.sh --bootstrap-server k1:9093 --add --allow-principal User:bob --operation Read --group dedup`},
		{"topic", c, fmt.Errorf("writing: %w", kafka.TopicAuthorizationFailed), Authorization,
			`principal User:bob (--sasl-username) is not authorized for a topic (writing: [29] Topic Authorization Failed: ` +
				`the client is not authorized to access the requested topic); the worker needs READ on topic "orders" (--input), ` +
				`WRITE on topic "orders-unique" (--output): grant what is missing, e.g. kafka-acls.sh --bootstrap-server k1:9093 ` +
				`--add --allow-principal User:bob --operation Read --topic orders`},
		{"a writer's error per message", c, kafka.WriteErrors{nil, fmt.Errorf("writing: %w", kafka.TopicAuthorizationFailed)}, Authorization,
			`principal User:bob (--sasl-username) is not authorized for a topic (writing: [29] Topic Authorization Failed: ` +
				`the client is not authorized to access the requested topic); the worker needs READ on topic "orders" (--input), ` +
				`WRITE on topic "orders-unique" (--output): grant what is missing, e.g. kafka-acls.sh --bootstrap-server k1:9093 ` +
				`--add --allow-principal User:bob --operation Read --topic orders`},
		{"cluster, nothing needed", &Client{Brokers: []string{"k1:9092"}}, kafka.ClusterAuthorizationFailed, Authorization,
			`principal User:ANONYMOUS (no --sasl-mechanism) is not authorized for a cluster operation ([31] Cluster Authorization Failed: ` +
				`the client is not authorized to use an inter-broker or administrative API); bloomgate needs no such ACL: check the brokers' ACLs for this principal`},
		{"untrusted certificate", &Client{TLS: &tls.Config{}}, step(stepTLSHandshake, &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), TLS,
			`--tls-enabled: the certificate of the broker at k1:9093 is signed by a CA this host does not trust ` +
				`(tls: failed to verify certificate: x509: certificate signed by unknown authority); set --tls-ca-file to the PEM file of that CA`},
		{"plaintext listener, TLS client", &Client{TLS: &tls.Config{}}, step(stepTLSHandshake, tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), TLS,
			`--tls-enabled: the broker at k1:9093 answered the TLS handshake with bytes that are not TLS: its listener may be plaintext; ` +
				`drop --tls-enabled or use the brokers' TLS port`},
		{"TLS alert to a plaintext request", &Client{}, &stepError{addr: "k1:9093", step: stepAPIVersions, tlsRecord: true, err: errors.New("x")}, TLS,
			`the broker at k1:9093 answered a plaintext request with a TLS record: its listener expects TLS; ` +
				`set --tls-enabled (and --tls-ca-file if its certificate is signed by a private CA)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.c.Explain(tc.err)
			if e == nil {
				t.Fatalf("Explain(%v) = nil, want a %s error", tc.err, tc.kind)
			}
			var we kafka.WriteErrors
			wraps := errors.As(e, &we) // a slice: errors.Is cannot compare it
			if _, ok := tc.err.(kafka.WriteErrors); !ok {
				wraps = errors.Is(e, tc.err)
			}
			if e.Kind != tc.kind || e.Error() != tc.want || !wraps {
				t.Errorf("got  %s: %v\nwant %s: %s", e.Kind, e, tc.kind, tc.want)
			}
		})
	}
	for _, err := range []error{
		step(stepDial, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}),
		step(stepAPIVersions, errors.New("unexpected EOF")),
		kafka.LeaderNotAvailable, kafka.RequestTimedOut,
	} {
		if e := c.Explain(err); e != nil {
			t.Errorf("Explain(%v) = %v, want nil: it may pass", err, e)
		}
	}
}

// TestErrorAttempts: at start-up the message says how many attempts were
// made and why no more.
func TestErrorAttempts(t *testing.T) {
	c := &Client{SASL: plain.Mechanism{Username: "u", Password: "p"}, Username: "u"}
	e := c.Explain(kafka.SASLAuthenticationFailed)
	e.Attempts = 1
	want := `--sasl-username "u" with --sasl-mechanism plain: the brokers refused the login ([58] SASL Authentication Failed: ` +
		`SASL Authentication failed); check the user name, the password in BLOOMGATE_SASL_PASSWORD (or --sasl-password), ` +
		`and that the brokers have this user for plain (gave up after 1 attempt: failed logins are not repeated, as they count towards an account lockout)`
	if e.Error() != want {
		t.Errorf("got  %v\nwant %s", e, want)
	}
}

// TestUnreachableError: the error after the start-up retries names
// --brokers, what was tried and what to check.
func TestUnreachableError(t *testing.T) {
	refused := &stepError{addr: "a:1", step: stepDial, err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}}
	dns := &stepError{addr: "a:1", step: stepDial, err: &net.DNSError{Err: "no such host", Name: "kafka.invalid", IsNotFound: true}}
	eof := &stepError{addr: "a:1", step: stepAPIVersions, err: errors.New("unexpected EOF")}
	eof.err = fmt.Errorf("reading: %w", io.ErrUnexpectedEOF)
	for _, tc := range []struct {
		last error
		want string
	}{
		{refused, "--brokers a:1,b:2: no broker answered in 14 attempts over 1m0s (the start-up bound is 1m0s); last error: a:1: connecting: dial tcp: connect: connection refused; check the addresses and that this host can reach the brokers"},
		{dns, `--brokers a:1,b:2: no broker answered in 14 attempts over 1m0s (the start-up bound is 1m0s); last error: a:1: connecting: lookup kafka.invalid: no such host; check the host name "kafka.invalid", which does not resolve`},
		{eof, "--brokers a:1,b:2: no broker answered in 14 attempts over 1m0s (the start-up bound is 1m0s); last error: a:1: first request (ApiVersions): reading: unexpected EOF; the brokers closed the connection at the first request: their listener may expect TLS (set --tls-enabled, and --tls-ca-file if its CA is private); else check the addresses"},
	} {
		c := &Client{Brokers: []string{"a:1", "b:2"}}
		err := c.unreachable(14, time.Minute+300*time.Millisecond, tc.last)
		if err.Error() != tc.want || !errors.Is(err, tc.last) {
			t.Errorf("got  %v\nwant %s", err, tc.want)
		}
		var e *Error
		if errors.As(err, &e) {
			t.Errorf("unreachable brokers reported as a failure that waiting does not fix: %v", err)
		}
	}
}

// TestExplainSASLAuth: the mechanisms of saslauth name their settings: a
// refused token, credentials that cannot be had (not retried) and an
// endpoint that does not answer (retried, its settings in the hint).
func TestExplainSASLAuth(t *testing.T) {
	oauth := &Client{Brokers: []string{"k1:9093"}, Component: "the worker", Needs: workerNeeds,
		SASL: &saslauth.OAuthBearer{Settings: "--sasl-oauth-token-file /run/token"}}
	step := func(err error) error { return &stepError{addr: "k1:9093", step: stepSASL, err: err} }
	e := oauth.Explain(step(&brokerError{err: kafka.SASLAuthenticationFailed, msg: `{"status":"invalid_token"}`}))
	if e == nil || e.Kind != Authentication || !strings.Contains(e.Error(),
		`--sasl-mechanism oauthbearer with --sasl-oauth-token-file /run/token: the brokers refused the login ({"status":"invalid_token"} (error 58`) {
		t.Errorf("refused token: %v", e)
	}
	e = oauth.Explain(kafka.GroupAuthorizationFailed)
	if e == nil || !strings.Contains(e.Error(), "the principal of the token (its sub claim") || !strings.Contains(e.Error(), "User:<principal>") {
		t.Errorf("group refused, token subject unknown: %v", e)
	}

	bad := &saslauth.Error{Settings: "--sasl-oauth-token-endpoint https://idp/token, --sasl-oauth-client-id \"c\" and the secret in BLOOMGATE_SASL_OAUTH_CLIENT_SECRET",
		Err: errors.New("token endpoint answered 401 Unauthorized: invalid_client")}
	e = oauth.Explain(fmt.Errorf("dial: %w", bad))
	if e == nil || e.Kind != Authentication || !strings.Contains(e.Error(), "--sasl-mechanism oauthbearer: no credentials for the brokers: --sasl-oauth-token-endpoint https://idp/token") ||
		!strings.Contains(e.Error(), "invalid_client") {
		t.Errorf("refused client: %v", e)
	}
	transient := &saslauth.TransientError{Settings: "--sasl-oauth-token-endpoint https://idp/token", Err: errors.New("token endpoint: connection refused")}
	if e := oauth.Explain(transient); e != nil {
		t.Errorf("an endpoint that does not answer: %v, want nil (retried)", e)
	}
	if hint := oauth.check(transient); !strings.Contains(hint, "--sasl-oauth-token-endpoint https://idp/token") {
		t.Errorf("hint after the retries: %q", hint)
	}

	msk := &Client{Brokers: []string{"k1:9098"}, SASL: saslauth.NewMSKIAMWith(nil, "eu-west-1", "the AWS SDK's default credentials")}
	e = msk.Explain(step(&brokerError{err: kafka.SASLAuthenticationFailed, msg: "[access denied]"}))
	if e == nil || !strings.Contains(e.Error(), "--sasl-mechanism aws-msk-iam with the AWS SDK's default credentials: the brokers refused the login") ||
		!strings.Contains(e.Error(), "kafka-cluster:Connect") {
		t.Errorf("MSK refused: %v", e)
	}
	e = msk.Explain(kafka.TopicAuthorizationFailed)
	if e == nil || !strings.Contains(e.Error(), "IAM identity") {
		t.Errorf("MSK topic refused: %v", e)
	}
}
