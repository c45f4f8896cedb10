package brokercheck

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/apiversions"
	metadataapi "github.com/segmentio/kafka-go/protocol/metadata"
	"github.com/segmentio/kafka-go/protocol/saslauthenticate"
	"github.com/segmentio/kafka-go/protocol/saslhandshake"
	"github.com/segmentio/kafka-go/sasl"
)

// step is where opening a connection or a request failed.
type step string

const (
	stepDial         step = "connecting"
	stepTLSHandshake step = "TLS handshake"
	stepAPIVersions  step = "first request (ApiVersions)"
	stepSASL         step = "SASL authentication"
	stepMetadata     step = "metadata request"
)

// stepError is a failure at one step of talking to one broker.
type stepError struct {
	addr string
	step step
	err  error
	// tlsRecord: the broker answered a plaintext request with bytes that
	// start a TLS record (an alert): its listener speaks TLS.
	tlsRecord bool
}

func (e *stepError) Error() string {
	return fmt.Sprintf("%s: %s: %v", e.addr, e.step, e.err)
}

func (e *stepError) Unwrap() error { return e.err }

// connect opens one connection to addr as the component's clients do
// (kafka-go's Transport: TCP, TLS, ApiVersions, SASL) with every step
// explicit, so that a failure says where it happened.
func (c *Client) connect(ctx context.Context, addr string) (*protocol.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, c.dialTimeout())
	defer cancel()
	deadline, _ := ctx.Deadline()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, &stepError{addr: addr, step: stepDial, err: err}
	}
	if c.TLS != nil {
		cfg := c.TLS
		if cfg.ServerName == "" {
			host, _, _ := net.SplitHostPort(addr)
			cfg = cfg.Clone()
			cfg.ServerName = host
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, &stepError{addr: addr, step: stepTLSHandshake, err: err}
		}
		nc = tc
	}
	pc := protocol.NewConn(nc, clientID)
	_ = pc.SetDeadline(deadline)
	versions, err := apiVersions(pc)
	if err != nil {
		pc.Close()
		var se *stepError
		if errors.As(err, &se) {
			se.addr = addr
			return nil, se
		}
		return nil, &stepError{addr: addr, step: stepAPIVersions, err: err}
	}
	pc.SetVersions(versions)
	if c.SASL != nil {
		if err := authenticate(ctx, pc, addr, c.SASL); err != nil {
			pc.Close()
			return nil, &stepError{addr: addr, step: stepSASL, err: err}
		}
	}
	_ = pc.SetDeadline(time.Time{})
	return pc, nil
}

// clientID is the client ID of the connections opened here.
const clientID = "bloomgate-check"

// apiVersions sends the first request and negotiates versions. It looks at
// the first bytes of the answer before decoding them: a TLS listener
// answers a plaintext request with a TLS alert record (type 21, version
// 3.x), which would otherwise read as a frame size of about 350 MB.
func apiVersions(pc *protocol.Conn) (map[protocol.ApiKey]int16, error) {
	req := &apiversions.Request{}
	if err := protocol.WriteRequest(pc, 0, 1, clientID, req); err != nil {
		return nil, err
	}
	if head, err := pc.Peek(3); err == nil && (head[0] == 21 || head[0] == 22) && head[1] == 3 && head[2] <= 4 {
		return nil, &stepError{step: stepAPIVersions, err: errors.New("the answer is a TLS record, not a Kafka response"), tlsRecord: true}
	}
	_, msg, err := protocol.ReadResponse(pc, req.ApiKey(), 0)
	if err != nil {
		return nil, err
	}
	res := msg.(*apiversions.Response)
	if res.ErrorCode != 0 {
		return nil, kafka.Error(res.ErrorCode)
	}
	versions := make(map[protocol.ApiKey]int16, len(res.ApiKeys))
	for _, k := range res.ApiKeys {
		key := protocol.ApiKey(k.ApiKey)
		versions[key] = key.SelectVersion(k.MinVersion, k.MaxVersion)
	}
	return versions, nil
}

// authenticate runs the SASL exchange as kafka-go does, keeping the
// broker's error message.
func authenticate(ctx context.Context, pc *protocol.Conn, addr string, m sasl.Mechanism) error {
	msg, err := pc.RoundTrip(&saslhandshake.Request{Mechanism: m.Name()})
	if err != nil {
		return err
	}
	if code := msg.(*saslhandshake.Response).ErrorCode; code != 0 {
		return kafka.Error(code)
	}
	host, portText, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portText)
	ctx = sasl.WithMetadata(ctx, &sasl.Metadata{Host: host, Port: port})
	sess, state, err := m.Start(ctx)
	if err != nil {
		return err
	}
	for done := false; !done; {
		msg, err := pc.RoundTrip(&saslauthenticate.Request{AuthBytes: state})
		if err != nil {
			return err
		}
		res := msg.(*saslauthenticate.Response)
		if res.ErrorCode != 0 {
			return &brokerError{err: kafka.Error(res.ErrorCode), msg: res.ErrorMessage}
		}
		if done, state, err = sess.Next(ctx, res.AuthBytes); err != nil {
			return err
		}
	}
	return nil
}

// brokerError is a Kafka error code with the broker's message.
type brokerError struct {
	err kafka.Error
	msg string
}

func (e *brokerError) Error() string {
	if e.msg == "" {
		return e.err.Error()
	}
	return fmt.Sprintf("%s (error %d, %s)", e.msg, int(e.err), e.err.Title())
}

func (e *brokerError) Unwrap() error { return e.err }

// Topic is what a broker says about one topic.
type Topic struct {
	Name       string
	Partitions int
	// Err is the topic's error (a kafka.Error), e.g. UnknownTopicOrPartition
	// or TopicAuthorizationFailed; nil if none.
	Err error
	// ops is the bit set of operations the client may perform on the topic
	// (KIP-430: bit n for ACL operation n), 0 when the broker did not say.
	ops int32
}

// Allows reports whether the client may perform op on the topic, and
// whether the broker said (brokers before Kafka 2.3 do not).
func (t Topic) Allows(op Op) (allowed, known bool) {
	if t.ops <= 0 { // 0: not asked or not answered; INT32_MIN: not computed
		return false, false
	}
	return t.ops&(1<<op) != 0, true
}

// Topics asks one broker about the topics, over a connection of its own.
// Not through kafka-go's Client: its Transport answers metadata requests
// from a cache filled by listing every topic, from which brokers leave out
// the topics the client may not DESCRIBE, so that those read as missing
// instead of forbidden. The brokers are tried in order until one answers.
func (c *Client) Topics(ctx context.Context, names []string) ([]Topic, error) {
	var last error
	for _, addr := range c.Brokers {
		topics, err := c.topicsAt(ctx, addr, names)
		if err == nil {
			return topics, nil
		}
		last = err
		if ctx.Err() != nil || c.explain(err) != nil {
			break // credentials and ACLs are the cluster's, not one broker's
		}
	}
	if last == nil {
		last = errors.New("no broker address")
	}
	return nil, last
}

func (c *Client) topicsAt(ctx context.Context, addr string, names []string) ([]Topic, error) {
	pc, err := c.connect(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer pc.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = pc.SetDeadline(deadline)
	} else {
		_ = pc.SetDeadline(time.Now().Add(c.requestTimeout()))
	}
	msg, err := pc.RoundTrip(&metadataapi.Request{TopicNames: names, IncludeTopicAuthorizedOperations: true})
	if err != nil {
		return nil, &stepError{addr: addr, step: stepMetadata, err: err}
	}
	res := msg.(*metadataapi.Response)
	topics := make([]Topic, 0, len(res.Topics))
	for _, t := range res.Topics {
		tp := Topic{Name: t.Name, Partitions: len(t.Partitions), ops: t.TopicAuthorizedOperations}
		if t.ErrorCode != 0 {
			tp.Err = kafka.Error(t.ErrorCode)
		}
		topics = append(topics, tp)
	}
	return topics, nil
}
