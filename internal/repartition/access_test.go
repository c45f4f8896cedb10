package repartition

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/bloomgate/bloomgate/internal/broker"
	"github.com/bloomgate/bloomgate/internal/brokercheck"
	"github.com/bloomgate/bloomgate/internal/keys"
)

// TestStartupRefused: the hop's start (EnsureOutput) shares the worker's
// rule: a wrong password and a missing WRITE on the repartition topic end
// it at the first attempt, naming the settings.
func TestStartupRefused(t *testing.T) {
	t.Parallel()
	allow := func(topic string, op kmsg.ACLOperation) kfake.ACL {
		return kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: topic, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
	}
	b, err := broker.New(broker.Config{
		Topics: []broker.TopicSpec{{Name: "in", Partitions: 2}, {Name: "g-repartition", Partitions: 2}},
		ACLs:   true,
		Users:  []broker.User{{Mechanism: "PLAIN", Username: "hop", Password: "pw", ACLs: []kfake.ACL{allow("in", kmsg.ACLOperationRead), allow("g-repartition", kmsg.ACLOperationRead)}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	ex, err := keys.NewExtractor("key", "none", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pass string
		kind brokercheck.Kind
		want string
	}{
		{"wrong", brokercheck.Authentication, `--sasl-username "hop" with --sasl-mechanism plain: the brokers refused the login (Authentication failed: Invalid username or password (error 58`},
		{"pw", brokercheck.Authorization, `--repartition topic "g-repartition": principal User:hop (--sasl-username) lacks WRITE on it, which the repartition hop needs`},
	} {
		m := plain.Mechanism{Username: "hop", Password: tc.pass}
		hop, err := New(Config{Brokers: []string{b.Addr()}, Group: "g-repartition", Input: "in", Output: "g-repartition",
			Dialer: &kafka.Dialer{Timeout: 10 * time.Second, SASLMechanism: m}, Transport: &kafka.Transport{SASL: m}, SASLUsername: "hop"}, ex, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := time.Now()
		err = hop.EnsureOutput(ctx)
		cancel()
		var e *brokercheck.Error
		if !errors.As(err, &e) || e.Kind != tc.kind || e.Attempts != 1 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("password %q: EnsureOutput = %v, want a %s error after 1 attempt containing %q", tc.pass, err, tc.kind, tc.want)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("password %q: took %s, want an answer at once", tc.pass, took)
		}
	}
}
