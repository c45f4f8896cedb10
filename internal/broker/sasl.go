package broker

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// With SASL on, every connection to the broker goes through a saslConn,
// which makes two of kfake's answers what Apache Kafka's are:
//
//   - A failed SaslAuthenticate (wrong password, unknown user, a bad SCRAM
//     proof) is answered with error 58, SASL_AUTHENTICATION_FAILED, and
//     Kafka's message, and then the connection is closed. kfake closes
//     the connection without answering, which clients report as an
//     unexpected EOF or a broken connection: indistinguishable from a
//     network failure, so they retry.
//   - ApiVersions advertises SaslHandshake from version 0, as Kafka does.
//     kfake advertises 1..1 (it serves v1 only); librdkafka (kcat) takes a
//     range without 0 for a broker without the handshake and refuses every
//     SASL mechanism but GSSAPI ("SASL Handshake not supported by broker").
//     Clients that can use v1 (librdkafka, Java, franz-go, kafka-go) use it;
//     a v0 handshake is still refused by kfake (the connection closes).
//
// kfake's control functions (Cluster.ControlKey) cannot do either: they see
// the request but not its connection, so they can neither keep a SCRAM
// conversation apart from another nor mark a connection authenticated,
// and they never see a response. The connection can: it sees the request
// frames kfake reads and the response frames it writes. kfake keeps doing
// every check; the connection only adds the answer kfake leaves out, when
// kfake closes it with a SaslAuthenticate unanswered, and lowers one number
// in ApiVersions responses. TLS, when configured, is terminated below it, so
// that it reads the protocol in the clear.

// saslListener wraps the accepted connections (see above).
type saslListener struct {
	net.Listener
	tls *tls.Config // nil: plaintext
	// closing is set when the broker shuts down: connections closed then
	// are not failed authentications.
	closing *atomic.Bool
}

func (l *saslListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if l.tls != nil {
		c = tls.Server(c, l.tls)
	}
	return &saslConn{Conn: c, closing: l.closing}, nil
}

// request is a request frame read by kfake.
type request struct {
	key, version int16
	corr         int32
}

// frameHeadMax bounds the bytes kept of a request frame: the header and,
// for SaslHandshake, the mechanism.
const frameHeadMax = 512

// maxPending bounds the requests remembered per connection.
const maxPending = 64

// saslConn is one client connection (see the top of this file). kfake reads
// from it in one goroutine and writes each response with one Write call in
// another; Close may come from either.
type saslConn struct {
	net.Conn
	closing *atomic.Bool

	mu sync.Mutex
	// The request frame being read: its size prefix, its remaining bytes
	// and the first frameHeadMax of them.
	sizeBuf  [4]byte
	sizeHave int
	remain   int
	head     []byte
	// pending are the requests read and not yet answered, in order
	// (responses come in request order).
	pending []request
	// mechanism is the one named by the last SaslHandshake request, and
	// handshaken is set once kfake accepted it.
	mechanism  string
	handshaken bool
	closed     bool
}

func (c *saslConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		c.scan(p[:n])
		c.mu.Unlock()
	}
	return n, err
}

// scan follows the request frames in the bytes kfake read.
func (c *saslConn) scan(p []byte) {
	for len(p) > 0 {
		if c.sizeHave < 4 {
			k := copy(c.sizeBuf[c.sizeHave:], p)
			c.sizeHave += k
			p = p[k:]
			if c.sizeHave == 4 {
				c.remain = int(binary.BigEndian.Uint32(c.sizeBuf[:]))
				c.head = c.head[:0]
				if c.remain == 0 {
					c.sizeHave = 0
				}
			}
			continue
		}
		k := min(len(p), c.remain)
		if room := frameHeadMax - len(c.head); room > 0 {
			c.head = append(c.head, p[:min(k, room)]...)
		}
		c.remain -= k
		p = p[k:]
		if c.remain == 0 {
			c.sizeHave = 0
			c.requestRead(c.head)
		}
	}
}

// requestRead notes a complete request frame, of which head is the start.
func (c *saslConn) requestRead(head []byte) {
	if len(head) < 8 {
		return // kfake closes the connection on it
	}
	r := request{
		key:     int16(binary.BigEndian.Uint16(head[0:2])),
		version: int16(binary.BigEndian.Uint16(head[2:4])),
		corr:    int32(binary.BigEndian.Uint32(head[4:8])),
	}
	if len(c.pending) == maxPending {
		// Requests without a response (acks=0 produce) are dropped by the
		// next response; a client sending only those must not grow this.
		c.pending = append(c.pending[:0], c.pending[1:]...)
	}
	c.pending = append(c.pending, r)
	if r.key == int16(kmsg.SASLHandshake) {
		c.mechanism, c.handshaken = handshakeMechanism(head[8:]), false
	}
}

// handshakeMechanism reads the mechanism of a SaslHandshake request (v0 and
// v1 are not flexible): after the header's client ID, a string.
func handshakeMechanism(b []byte) string {
	str := func() (string, bool) {
		if len(b) < 2 {
			return "", false
		}
		n := int(int16(binary.BigEndian.Uint16(b)))
		b = b[2:]
		if n < 0 {
			return "", true // null
		}
		if len(b) < n {
			return "", false
		}
		s := string(b[:n])
		b = b[n:]
		return s, true
	}
	if _, ok := str(); !ok { // client ID
		return ""
	}
	m, _ := str()
	return m
}

// Write passes one response frame on, after noting which request it
// answers and, for ApiVersions, advertising SaslHandshake v0.
func (c *saslConn) Write(p []byte) (int, error) {
	out := p
	c.mu.Lock()
	if len(p) >= 8 && int(binary.BigEndian.Uint32(p)) == len(p)-4 {
		corr := int32(binary.BigEndian.Uint32(p[4:8]))
		for i, r := range c.pending {
			if r.corr != corr {
				continue
			}
			c.pending = c.pending[i+1:]
			switch r.key {
			case int16(kmsg.ApiVersions):
				out = withHandshakeV0(p, r.version)
			case int16(kmsg.SASLHandshake):
				// Not flexible: the error code follows the correlation ID.
				c.handshaken = len(p) >= 10 && binary.BigEndian.Uint16(p[8:10]) == 0
			}
			break
		}
	}
	c.mu.Unlock()
	if _, err := c.Conn.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close answers a SaslAuthenticate that kfake left unanswered, as Kafka
// does when it fails, then closes the connection.
func (c *saslConn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	var answer []byte
	if len(c.pending) > 0 && c.pending[0].key == int16(kmsg.SASLAuthenticate) && c.handshaken && !c.closing.Load() {
		answer = authenticationFailed(c.pending[0], c.mechanism)
	}
	c.mu.Unlock()
	if answer != nil {
		_ = c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.Conn.Write(answer)
	}
	return c.Conn.Close()
}

// authenticationFailed is Kafka's answer to a failed SaslAuthenticate, with
// its message (PlainSaslServer for PLAIN; SaslServerAuthenticator for the
// others, which does not say whether the user exists).
func authenticationFailed(r request, mechanism string) []byte {
	resp := kmsg.NewPtrSASLAuthenticateResponse()
	resp.SetVersion(r.version)
	resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
	msg := "Authentication failed during authentication due to invalid credentials with SASL mechanism " + mechanism
	if mechanism == "PLAIN" {
		msg = "Authentication failed: Invalid username or password"
	}
	resp.ErrorMessage = &msg
	return frame(r.corr, resp)
}

// frame encodes a response as kfake does: size, correlation ID, the
// header's empty tag section when flexible (never for ApiVersions), body.
func frame(corr int32, resp kmsg.Response) []byte {
	buf := make([]byte, 8, 64)
	if resp.IsFlexible() && resp.Key() != int16(kmsg.ApiVersions) {
		buf = append(buf, 0)
	}
	buf = resp.AppendTo(buf)
	binary.BigEndian.PutUint32(buf[0:4], uint32(len(buf)-4))
	binary.BigEndian.PutUint32(buf[4:8], uint32(corr))
	return buf
}

// withHandshakeV0 returns the ApiVersions response frame p with
// SaslHandshake advertised from version 0. It returns p itself when p does
// not decode at version v into exactly the same bytes (kfake answers a
// version it does not serve at v0) or needs no change.
func withHandshakeV0(p []byte, v int16) []byte {
	corr := int32(binary.BigEndian.Uint32(p[4:8]))
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(v)
	if err := resp.ReadFrom(p[8:]); err != nil || !bytes.Equal(frame(corr, resp), p) {
		return p
	}
	for i := range resp.ApiKeys {
		if k := &resp.ApiKeys[i]; k.ApiKey == int16(kmsg.SASLHandshake) && k.MinVersion > 0 {
			k.MinVersion = 0
			return frame(corr, resp)
		}
	}
	return p
}
