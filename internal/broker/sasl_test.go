package broker

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	franzplain "github.com/twmb/franz-go/pkg/sasl/plain"
)

// saslUsers are one user per mechanism.
var saslUsers = []User{
	{Mechanism: "PLAIN", Username: "alice", Password: "pw-plain"},
	{Mechanism: "SCRAM-SHA-256", Username: "bob", Password: "pw-256"},
	{Mechanism: "SCRAM-SHA-512", Username: "carol", Password: "pw-512"},
}

func mechanism(t *testing.T, name, user, pass string) sasl.Mechanism {
	t.Helper()
	switch name {
	case "PLAIN":
		return plain.Mechanism{Username: user, Password: pass}
	case "SCRAM-SHA-256", "SCRAM-SHA-512":
		algo := scram.SHA256
		if name == "SCRAM-SHA-512" {
			algo = scram.SHA512
		}
		m, err := scram.Mechanism(algo, user, pass)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	t.Fatalf("mechanism %s", name)
	return nil
}

// wantKafkaMessage is Apache Kafka's message for a failed authentication.
func wantKafkaMessage(mechanism string) string {
	if mechanism == "PLAIN" {
		return "Authentication failed: Invalid username or password"
	}
	return "Authentication failed during authentication due to invalid credentials with SASL mechanism " + mechanism
}

// TestSASLFailureAnswered: a wrong password, or an unknown user, gets error
// 58 (SASL_AUTHENTICATION_FAILED) with Kafka's message, through both of
// kafka-go's connection paths (Transport: writers and clients; Dialer:
// readers and groups); the right password works for every mechanism.
func TestSASLFailureAnswered(t *testing.T) {
	b, _, _ := start(t, Config{Topics: []TopicSpec{{"t", 1}}, Users: saslUsers})
	for _, u := range saslUsers {
		t.Run(u.Mechanism, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			good := mechanism(t, u.Mechanism, u.Username, u.Password)
			w := &kafka.Writer{Addr: kafka.TCP(b.Addr()), Topic: "t", Transport: &kafka.Transport{SASL: good}, BatchTimeout: time.Millisecond}
			err := w.WriteMessages(ctx, kafka.Message{Value: []byte("x")})
			w.Close()
			if err != nil {
				t.Fatalf("producing with the right password: %v", err)
			}
			for _, bad := range []struct{ what, user, pass string }{
				{"wrong password", u.Username, "wrong"},
				{"unknown user", "mallory", u.Password},
			} {
				m := mechanism(t, u.Mechanism, bad.user, bad.pass)
				cl := &kafka.Client{Addr: kafka.TCP(b.Addr()), Transport: &kafka.Transport{SASL: m}}
				_, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{"t"}})
				if !errors.Is(err, kafka.SASLAuthenticationFailed) || !strings.Contains(err.Error(), wantKafkaMessage(u.Mechanism)) {
					t.Errorf("%s, transport: got %v, want error 58 with %q", bad.what, err, wantKafkaMessage(u.Mechanism))
				}
				d := &kafka.Dialer{Timeout: 5 * time.Second, SASLMechanism: m}
				conn, err := d.DialContext(ctx, "tcp", b.Addr())
				if err == nil {
					conn.Close()
				}
				if !errors.Is(err, kafka.SASLAuthenticationFailed) {
					t.Errorf("%s, dialer: got %v, want error 58", bad.what, err)
				}
			}
		})
	}
}

// TestSASLKcat: librdkafka (kcat) authenticates with every mechanism (it
// needs SaslHandshake v0 in the advertised range), and reports Kafka's
// message for a wrong password at once.
func TestSASLKcat(t *testing.T) {
	kcat := kcatPath(t)
	b, _, _ := start(t, Config{Topics: []TopicSpec{{"t", 1}}, Users: saslUsers})
	// librdkafka retries a failed authentication until the metadata
	// timeout (-m): short for the wrong password, ample for the right one.
	run := func(mech, user, pass, timeout string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, kcat, "-b", b.Addr(), "-L", "-t", "t", "-m", timeout,
			"-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms="+mech,
			"-X", "sasl.username="+user, "-X", "sasl.password="+pass).CombinedOutput()
		return string(out), err
	}
	for _, u := range saslUsers {
		t.Run(u.Mechanism, func(t *testing.T) {
			out, err := run(u.Mechanism, u.Username, u.Password, "20")
			if err != nil || !strings.Contains(out, `topic "t" with 1 partitions`) {
				t.Fatalf("kcat with the right password: %v\n%s", err, out)
			}
			out, err = run(u.Mechanism, u.Username, "wrong", "2")
			if err == nil {
				t.Fatalf("kcat with a wrong password succeeded:\n%s", out)
			}
			if want := "SASL authentication error: " + wantKafkaMessage(u.Mechanism); !strings.Contains(out, want) {
				t.Errorf("kcat with a wrong password says\n%s\nwant %q", out, want)
			}
		})
	}
}

// TestACLs: with Config.ACLs a user may do what its ACLs allow (READ
// implies DESCRIBE) and is refused the rest; a superuser everything.
func TestACLs(t *testing.T) {
	b, _, _ := start(t, Config{
		Topics: []TopicSpec{{"allowed", 1}, {"denied", 1}},
		ACLs:   true,
		Users: []User{
			{Mechanism: "PLAIN", Username: "limited", Password: "pw", ACLs: []kfake.ACL{{
				Resource: kmsg.ACLResourceTypeTopic, Name: "allowed", Pattern: kmsg.ACLResourcePatternTypeLiteral,
				Operation: kmsg.ACLOperationRead, Allow: true,
			}}},
			{Mechanism: "PLAIN", Username: "admin", Password: "pw", Superuser: true},
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Asked by name, not through kafka-go's Client: its metadata cache
	// lists only the topics a client may describe.
	topicErrs := func(user string) map[string]error {
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.SASL(franzplain.Auth{User: user, Pass: "pw"}.AsMechanism()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		req := kmsg.NewPtrMetadataRequest()
		for _, name := range []string{"allowed", "denied"} {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(name)
			req.Topics = append(req.Topics, rt)
		}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("%s: metadata: %v", user, err)
		}
		errs := map[string]error{}
		for _, tp := range resp.Topics {
			errs[*tp.Topic] = kerr.ErrorForCode(tp.ErrorCode)
		}
		return errs
	}
	if errs := topicErrs("limited"); errs["allowed"] != nil || !errors.Is(errs["denied"], kerr.TopicAuthorizationFailed) {
		t.Errorf("limited user: topic errors %v, want none for allowed and TOPIC_AUTHORIZATION_FAILED for denied", errs)
	}
	if errs := topicErrs("admin"); errs["allowed"] != nil || errs["denied"] != nil {
		t.Errorf("superuser: topic errors %v, want none", errs)
	}
}

// TestSASLConnFrames: the connection follows request frames however the
// reads split them, and passes a response it cannot decode unchanged.
func TestSASLConnFrames(t *testing.T) {
	req := func(key, version int16, corr int32, body ...byte) []byte {
		b := []byte{0, 0, 0, 0, byte(key >> 8), byte(key), byte(version >> 8), byte(version), byte(corr >> 24), byte(corr >> 16), byte(corr >> 8), byte(corr), 0xff, 0xff}
		b = append(b, body...)
		n := len(b) - 4
		b[0], b[1], b[2], b[3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
		return b
	}
	var stream []byte
	stream = append(stream, req(18, 3, 1)...)
	stream = append(stream, req(17, 1, 2, 0, 5, 'P', 'L', 'A', 'I', 'N')...)
	stream = append(stream, req(36, 2, 3, 1, 2, 3)...)
	c := &saslConn{}
	for i := range stream { // one byte per read
		c.scan(stream[i : i+1])
	}
	want := []request{{18, 3, 1}, {17, 1, 2}, {36, 2, 3}}
	if len(c.pending) != len(want) {
		t.Fatalf("pending %v, want %v", c.pending, want)
	}
	for i := range want {
		if c.pending[i] != want[i] {
			t.Errorf("pending[%d] = %v, want %v", i, c.pending[i], want[i])
		}
	}
	if c.mechanism != "PLAIN" {
		t.Errorf("mechanism %q, want PLAIN", c.mechanism)
	}
	garbage := []byte{0, 0, 0, 6, 0, 0, 0, 1, 0xde, 0xad}
	if got := withHandshakeV0(garbage, 3); string(got) != string(garbage) {
		t.Errorf("an undecodable ApiVersions response was changed: % x", got)
	}
}
