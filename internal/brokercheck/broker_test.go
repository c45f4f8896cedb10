package brokercheck

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go/sasl/scram"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/bloomgate/bloomgate/internal/broker"
)

func startBroker(t *testing.T, cfg broker.Config) *broker.Broker {
	t.Helper()
	b, err := broker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// countLogins counts the SaslAuthenticate requests the broker receives.
func countLogins(b *broker.Broker) *atomic.Int32 {
	var n atomic.Int32
	c := b.Cluster()
	c.ControlKey(int16(kmsg.SASLAuthenticate), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		n.Add(1)
		return nil, nil, false
	})
	return &n
}

// TestWrongPasswordNotRetried: a wrong password ends Retry at the first
// attempt, with one login sent (SCRAM sends two messages per login) and an
// error naming the settings; the right one reads the topics.
func TestWrongPasswordNotRetried(t *testing.T) {
	b := startBroker(t, broker.Config{
		Topics: []broker.TopicSpec{{Name: "orders", Partitions: 3}},
		Users:  []broker.User{{Mechanism: "SCRAM-SHA-512", Username: "bob", Password: "right"}},
	})
	logins := countLogins(b)
	client := func(pass string) *Client {
		m, err := scram.Mechanism(scram.SHA512, "bob", pass)
		if err != nil {
			t.Fatal(err)
		}
		return &Client{Brokers: []string{b.Addr()}, SASL: m, Username: "bob"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	c := client("wrong")
	err := c.Retry(ctx, nil, func(ctx context.Context) error { _, err := c.Topics(ctx, []string{"orders"}); return err })
	took := time.Since(start)
	var e *Error
	if !errors.As(err, &e) || e.Kind != Authentication || e.Attempts != 1 {
		t.Fatalf("got %v, want an authentication error after 1 attempt", err)
	}
	for _, want := range []string{"--sasl-username \"bob\"", "--sasl-mechanism scram-sha-512", "BLOOMGATE_SASL_PASSWORD (or --sasl-password)",
		"gave up after 1 attempt", "invalid credentials with SASL mechanism SCRAM-SHA-512 (error 58"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if n := logins.Load(); n != 2 {
		t.Errorf("the broker received %d SaslAuthenticate requests, want 2 (one SCRAM login)", n)
	}
	t.Logf("wrong password: %v after %d attempt(s), %s", took.Round(time.Millisecond), e.Attempts, err)

	topics, err := client("right").Topics(ctx, []string{"orders"})
	if err != nil || len(topics) != 1 || topics[0].Partitions != 3 || topics[0].Err != nil {
		t.Fatalf("right password: %+v, %v", topics, err)
	}
}

// TestTopicACLs: a topic the principal may not describe reads as forbidden
// (not missing), and one it may describe but not read or write names the
// missing operation; every problem is in one error.
func TestTopicACLs(t *testing.T) {
	acl := func(topic string, op kmsg.ACLOperation) kfake.ACL {
		return kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: topic, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
	}
	b := startBroker(t, broker.Config{
		Topics: []broker.TopicSpec{{Name: "orders", Partitions: 2}, {Name: "orders-unique", Partitions: 2}, {Name: "open", Partitions: 2}},
		ACLs:   true,
		Users: []broker.User{{Mechanism: "SCRAM-SHA-256", Username: "worker", Password: "pw", ACLs: []kfake.ACL{
			acl("orders", kmsg.ACLOperationDescribe), acl("open", kmsg.ACLOperationRead), acl("open", kmsg.ACLOperationWrite),
		}}},
	})
	m, err := scram.Mechanism(scram.SHA256, "worker", "pw")
	if err != nil {
		t.Fatal(err)
	}
	c := &Client{Brokers: []string{b.Addr()}, SASL: m, Username: "worker", Component: "the worker", Needs: workerNeeds}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topics, err := c.Topics(ctx, []string{"orders", "orders-unique"})
	if err != nil {
		t.Fatal(err)
	}
	want := `--input topic "orders": principal User:worker (--sasl-username) lacks READ on it, which the worker needs; ` +
		`--output topic "orders-unique": principal User:worker (--sasl-username) may not DESCRIBE it ([29] Topic Authorization Failed: ` +
		`the client is not authorized to access the requested topic); the worker needs WRITE on it; grant what is missing, ` +
		`e.g. kafka-acls.sh --bootstrap-server ` + b.Addr() + ` --add --allow-principal User:worker --operation Read --topic orders`
	if e := c.CheckTopics(topics); e == nil || e.Kind != Authorization || e.Error() != want {
		t.Errorf("got  %v\nwant %s", e, want)
	}
	// With READ and WRITE granted there is nothing to say.
	c.Needs = []Need{{Resource: TopicResource, Name: "open", Op: Read}, {Resource: TopicResource, Name: "open", Op: Write}}
	if topics, err = c.Topics(ctx, []string{"open"}); err != nil {
		t.Fatal(err)
	}
	if e := c.CheckTopics(topics); e != nil {
		t.Errorf("topic with READ and WRITE granted: %v", e)
	}
}

func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
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

// TestTLSMismatch: a plaintext client at a TLS listener and a TLS client at
// a plaintext listener each end Retry on the first attempt with a TLS
// error saying what to change, well within the start-up bound; with the
// matching setting the topics are read.
func TestTLSMismatch(t *testing.T) {
	cert, pool := selfSigned(t)
	tlsBroker := startBroker(t, broker.Config{Topics: []broker.TopicSpec{{Name: "t", Partitions: 1}},
		TLS: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
	plainBroker := startBroker(t, broker.Config{Topics: []broker.TopicSpec{{Name: "t", Partitions: 1}}})
	clientTLS := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	for _, tc := range []struct {
		name string
		c    *Client
		want string
	}{
		{"plaintext client, TLS listener", &Client{Brokers: []string{tlsBroker.Addr()}}, "its listener expects TLS; set --tls-enabled"},
		{"TLS client, plaintext listener", &Client{Brokers: []string{plainBroker.Addr()}, TLS: clientTLS}, "its listener is plaintext; drop --tls-enabled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			err := tc.c.Retry(ctx, nil, func(ctx context.Context) error { _, err := tc.c.Topics(ctx, []string{"t"}); return err })
			var e *Error
			if !errors.As(err, &e) || e.Kind != TLS || e.Attempts != 1 || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a TLS error after 1 attempt saying %q", err, tc.want)
			}
			t.Logf("%s after %s", err, time.Since(start).Round(time.Millisecond))
		})
	}
	for _, c := range []*Client{{Brokers: []string{tlsBroker.Addr()}, TLS: clientTLS}, {Brokers: []string{plainBroker.Addr()}}} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		topics, err := c.Topics(ctx, []string{"t"})
		cancel()
		if err != nil || len(topics) != 1 || topics[0].Partitions != 1 {
			t.Errorf("matching TLS setting (TLS %v): %+v, %v", c.TLS != nil, topics, err)
		}
	}
}

// TestSASLListenerWithoutSASL: a client without SASL settings at a
// listener that requires SASL (the first request answered, the next one's
// connection closed) is told at once, naming the mechanisms the listener
// offers and the settings to set; before, it retried for the start-up
// bound (a minute) and then said the listener "may" require SASL.
func TestSASLListenerWithoutSASL(t *testing.T) {
	b := startBroker(t, broker.Config{
		Topics: []broker.TopicSpec{{Name: "orders", Partitions: 3}},
		Users:  []broker.User{{Mechanism: "SCRAM-SHA-512", Username: "bob", Password: "pw"}},
	})
	c := &Client{Brokers: []string{b.Addr()}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	err := c.Retry(ctx, nil, func(ctx context.Context) error { _, err := c.Topics(ctx, []string{"orders"}); return err })
	took := time.Since(start)
	var e *Error
	if !errors.As(err, &e) || e.Kind != SASLRequired || !strings.Contains(err.Error(), "requires SASL") ||
		!strings.Contains(err.Error(), "SCRAM-SHA-512") || !strings.Contains(err.Error(), "scram-sha-512)") ||
		!strings.Contains(err.Error(), "--sasl-username") {
		t.Fatalf("%v (%T)", err, err)
	}
	if took > 5*time.Second {
		t.Errorf("told after %v, want within 5 s", took)
	}
}
