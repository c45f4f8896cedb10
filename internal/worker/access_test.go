package worker

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	franzplain "github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/bloomgate/bloomgate/internal/broker"
	"github.com/bloomgate/bloomgate/internal/brokercheck"
)

// The worker's ACLs on the test topics and group: all it needs.
func fullACLs() []kfake.ACL {
	allow := func(r kmsg.ACLResourceType, name string, op kmsg.ACLOperation) kfake.ACL {
		return kfake.ACL{Resource: r, Name: name, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
	}
	acls := []kfake.ACL{allow(kmsg.ACLResourceTypeTopic, tIn, kmsg.ACLOperationRead), allow(kmsg.ACLResourceTypeGroup, "g", kmsg.ACLOperationRead)}
	for _, topic := range []string{tOut, tDup, tDLQ} {
		acls = append(acls, allow(kmsg.ACLResourceTypeTopic, topic, kmsg.ACLOperationRead), allow(kmsg.ACLResourceTypeTopic, topic, kmsg.ACLOperationWrite))
	}
	return acls
}

func accessBroker(t *testing.T, cfg broker.Config) *broker.Broker {
	t.Helper()
	for _, topic := range []string{tIn, tOut, tDup, tDLQ} {
		cfg.Topics = append(cfg.Topics, broker.TopicSpec{Name: topic, Partitions: 2})
	}
	b, err := broker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

func scramSHA512(t *testing.T, user, pass string) sasl.Mechanism {
	t.Helper()
	m, err := scram.Mechanism(scram.SHA512, user, pass)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func certFor127(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bloomgate test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

// runUntilStopped runs a worker on cfg and returns how long it took and
// Run's error; Run must end by itself within limit.
func runUntilStopped(t *testing.T, cfg Config, logger *slog.Logger, tweak func(*Worker), limit time.Duration) (time.Duration, error) {
	t.Helper()
	if logger == nil {
		logger = testLogger(t)
	}
	w, err := New(cfg, Deps{Logger: logger, Registerer: prometheus.NewRegistry(), State: newMemStore(), Extractor: keyExtractor{}})
	if err != nil {
		t.Fatal(err)
	}
	if tweak != nil {
		tweak(w)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	start := time.Now()
	err = w.Run(ctx)
	took := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("Run did not stop by itself within %s (err %v)", limit, err)
	}
	return took, err
}

// TestStartupRefused: at start a wrong password, a missing topic or group
// ACL and a TLS mismatch each stop Run on the first attempt with an error
// that names what to change, well within the start-up bound. (Before, the
// wrong password was tried 17 times over 60 s and reported as "no broker
// answered … check the addresses".)
func TestStartupRefused(t *testing.T) {
	t.Parallel()
	cert, pool := certFor127(t)
	users := []broker.User{
		{Mechanism: "SCRAM-SHA-512", Username: "w", Password: "right", ACLs: fullACLs()},
		{Mechanism: "SCRAM-SHA-512", Username: "noread", Password: "pw", ACLs: fullACLs()[1:]},                             // no READ on the input
		{Mechanism: "SCRAM-SHA-512", Username: "nogroup", Password: "pw", ACLs: append(fullACLs()[:1], fullACLs()[2:]...)}, // no group ACL
	}
	saslBroker := accessBroker(t, broker.Config{ACLs: true, Users: users})
	tlsBroker := accessBroker(t, broker.Config{TLS: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
	plainBroker := accessBroker(t, broker.Config{})
	var logins atomic.Int32
	saslBroker.Cluster().ControlKey(int16(kmsg.SASLAuthenticate), func(kmsg.Request) (kmsg.Response, error, bool) {
		saslBroker.Cluster().KeepControl()
		logins.Add(1)
		return nil, nil, false
	})
	withSASL := func(user, pass string) Config {
		cfg := testConfig([]string{saslBroker.Addr()})
		cfg.Transport = &kafka.Transport{SASL: scramSHA512(t, user, pass)}
		cfg.Dialer = &kafka.Dialer{Timeout: DefaultDialTimeout, SASLMechanism: cfg.Transport.SASL}
		cfg.SASLUsername = user
		return cfg
	}
	tlsClient := testConfig([]string{plainBroker.Addr()})
	tlsClient.Transport = &kafka.Transport{TLS: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	for _, tc := range []struct {
		name string
		cfg  Config
		kind brokercheck.Kind
		want []string
	}{
		{"wrong password", withSASL("w", "wrong"), brokercheck.Authentication, []string{
			`--sasl-username "w" with --sasl-mechanism scram-sha-512: the brokers refused the login (Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 (error 58, SASL Authentication Failed))`,
			"BLOOMGATE_SASL_PASSWORD (or --sasl-password)", "(gave up after 1 attempt: failed logins are not repeated"}},
		{"no READ on the input", withSASL("noread", "pw"), brokercheck.Authorization, []string{
			`--input topic "in": principal User:noread (--sasl-username) may not DESCRIBE it`, "the worker needs READ on it",
			"kafka-acls.sh --bootstrap-server " + saslBroker.Addr() + " --add --allow-principal User:noread --operation Read --topic in"}},
		{"no group ACL", withSASL("nogroup", "pw"), brokercheck.Authorization, []string{
			"principal User:nogroup (--sasl-username) is not authorized for a consumer group", `the worker needs READ on group "g" (--group)`}},
		{"plaintext client, TLS listener", testConfig([]string{tlsBroker.Addr()}), brokercheck.TLS, []string{
			"its listener expects TLS; set --tls-enabled (and --tls-ca-file if its certificate is signed by a private CA)"}},
		{"TLS client, plaintext listener", tlsClient, brokercheck.TLS, []string{
			"does not answer the TLS handshake but answers Kafka requests in plaintext: its listener is plaintext; drop --tls-enabled"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := logins.Load()
			took, err := runUntilStopped(t, tc.cfg, nil, nil, 45*time.Second)
			var e *brokercheck.Error
			if !errors.As(err, &e) || e.Kind != tc.kind {
				t.Fatalf("Run = %v, want a %s error", err, tc.kind)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}
			if took >= brokercheck.StartupBound/2 {
				t.Errorf("took %s, want well within the start-up bound %s", took, brokercheck.StartupBound)
			}
			if tc.name == "wrong password" {
				if n := logins.Load() - before; n != 2 {
					t.Errorf("%d SaslAuthenticate requests, want 2 (one SCRAM login)", n)
				}
			}
			t.Logf("after %s: %v", took.Round(time.Millisecond), err)
		})
	}
}

// TestRuntimeRefused: an ACL revoked under a running worker is logged at
// ERROR with the start-up text, and the worker stops once the refusals
// have lasted the runtime bound (shortened here), instead of retrying at
// debug level forever.
func TestRuntimeRefused(t *testing.T) {
	t.Parallel()
	b := accessBroker(t, broker.Config{ACLs: true, Users: []broker.User{
		{Mechanism: "SCRAM-SHA-512", Username: "w", Password: "pw", ACLs: fullACLs()},
		{Mechanism: "PLAIN", Username: "admin", Password: "admin-pw", Superuser: true},
	}})
	admin := plain.Mechanism{Username: "admin", Password: "admin-pw"}
	w := &kafka.Writer{Addr: kafka.TCP(b.Addr()), Topic: tIn, Transport: &kafka.Transport{SASL: admin}, BatchTimeout: time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte("k1"), Value: []byte("v1")}); err != nil {
		t.Fatal(err)
	}
	w.Close()

	cfg := testConfig([]string{b.Addr()})
	cfg.Transport = &kafka.Transport{SASL: scramSHA512(t, "w", "pw")}
	cfg.Dialer = &kafka.Dialer{Timeout: DefaultDialTimeout, SASLMechanism: cfg.Transport.SASL}
	cfg.SASLUsername = "w"
	var logs lockedBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	wk, err := New(cfg, Deps{Logger: logger, Registerer: prometheus.NewRegistry(), State: newMemStore(), Extractor: keyExtractor{}})
	if err != nil {
		t.Fatal(err)
	}
	const giveUp = 3 * time.Second
	wk.accessGiveUp = giveUp
	done := make(chan error, 1)
	go func() { done <- wk.Run(ctx) }()
	waitFor(t, 60*time.Second, "the first record consumed", func() bool {
		var n uint64
		for _, p := range wk.Status().Partitions {
			n += p.Consumed
		}
		return n == 1
	})

	// Deny READ on the input: fetches and commits are refused from now on.
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.SASL(franzplain.Auth{User: "admin", Pass: "admin-pw"}.AsMechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	deny := kadm.NewACLs().Deny("User:w").DenyHosts("*").Topics(tIn).Operations(kadm.OpRead).ResourcePatternType(kadm.ACLPatternLiteral)
	res, err := kadm.NewClient(cl).CreateACLs(ctx, deny)
	if err == nil {
		for _, r := range res {
			err = errors.Join(err, r.Err)
		}
	}
	if err != nil {
		t.Fatalf("denying READ: %v", err)
	}
	denied := time.Now()
	var runErr error
	select {
	case runErr = <-done:
	case <-ctx.Done():
		t.Fatalf("the worker did not stop after READ was denied; log:\n%s", logs.String())
	}
	took := time.Since(denied)
	var e *brokercheck.Error
	if !errors.As(runErr, &e) || e.Kind != brokercheck.Authorization || !strings.Contains(runErr.Error(), "while running; stopping") ||
		!strings.Contains(runErr.Error(), `READ on topic "in" (--input)`) {
		t.Fatalf("Run = %v, want the authorization error of the runtime rule", runErr)
	}
	line := ""
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "level=ERROR") && strings.Contains(l, "brokers refused access") {
			line = l
			break
		}
	}
	if line == "" || !strings.Contains(line, `is not authorized for a topic`) {
		t.Errorf("no ERROR line explaining the refusal; log:\n%s", logs.String())
	}
	if took < giveUp || took > giveUp+30*time.Second {
		t.Errorf("stopped %s after the ACL change, want after the %s bound (and soon after)", took, giveUp)
	}
	t.Logf("stopped %s after the ACL change: %v", took.Round(time.Millisecond), runErr)
}
