package broker

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kfake has no OAUTHBEARER. With Config.OAuthBearer, every connection goes
// through an oauthConn, which plays the SASL part of a Kafka listener with
// sasl.enabled.mechanisms=OAUTHBEARER in front of kfake (whose own SASL is
// then off):
//
//   - it answers SaslHandshake and SaslAuthenticate itself, and verifies the
//     token with OAuthBearer.Verify (a JWKS check, in the tests); a refused
//     token gets RFC 7628's error challenge, {"status":"invalid_token"},
//     and after the client's ^A, error 58 with that JSON as the message,
//     then the connection closes, as Kafka's OAuthBearerSaslServer does;
//   - before authentication it passes only ApiVersions to kfake; any other
//     request closes the connection (Kafka: "Unexpected Kafka request of
//     type … during SASL handshake");
//   - the session ends when the token expires: SaslAuthenticate (v1+)
//     tells the client the session lifetime, and the first request after
//     it closes the connection unless the client re-authenticated (KIP-368),
//     as Kafka does with connections.max.reauth.ms set.
//
// Every byte after the authentication goes to kfake unchanged.

// OAuthBearer configures the OAUTHBEARER front (see above).
type OAuthBearer struct {
	// Verify checks a token with its SASL extensions and returns the
	// principal and the end of the session. Required.
	Verify func(token string, extensions map[string]string) (principal string, expires time.Time, err error)
}

// OAuthStats count what the OAUTHBEARER front did.
type OAuthStats struct {
	Accepted atomic.Int64 // tokens accepted
	Refused  atomic.Int64 // tokens refused
	Expired  atomic.Int64 // connections closed at a request after their session ended
	// Principals are the principals accepted, in order.
	mu         sync.Mutex
	principals []string
}

// Principals are the principals of the accepted tokens, in order.
func (s *OAuthStats) Principals() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.principals...)
}

type oauthListener struct {
	net.Listener
	tls   *tls.Config
	cfg   *OAuthBearer
	stats *OAuthStats
}

func (l *oauthListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if l.tls != nil {
		c = tls.Server(c, l.tls)
	}
	return &oauthConn{Conn: c, cfg: l.cfg, stats: l.stats, r: bufio.NewReaderSize(c, 64<<10)}, nil
}

// maxFrame bounds a request frame (kfake's own bound is larger; the
// front keeps whole frames).
const maxFrame = 256 << 20

type oauthConn struct {
	net.Conn
	cfg   *OAuthBearer
	stats *OAuthStats
	r     *bufio.Reader

	// Read side, kfake's reading goroutine only.
	pending    []byte // request bytes for kfake
	handshaken bool   // an OAUTHBEARER handshake awaits its SaslAuthenticate
	errSent    string // the error challenge sent, awaiting the client's ^A
	authed     bool
	expires    time.Time
	closedByUs bool
	wmu        sync.Mutex // kfake writes responses from another goroutine
	// apiVersions are the ApiVersions requests passed to kfake and not yet
	// answered (correlation ID to version), under wmu: their answers
	// advertise SaslHandshake from v0, as in sasl.go, for librdkafka.
	apiVersions map[int32]int16
	closeOnce   sync.Once
	closeResult error
}

func (c *oauthConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	out := p
	if len(c.apiVersions) > 0 && len(p) >= 8 {
		corr := int32(binary.BigEndian.Uint32(p[4:8]))
		if v, ok := c.apiVersions[corr]; ok {
			delete(c.apiVersions, corr)
			out = withHandshakeV0(p, v)
		}
	}
	if _, err := c.Conn.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *oauthConn) Close() error {
	c.closeOnce.Do(func() { c.closeResult = c.Conn.Close() })
	return c.closeResult
}

// answer writes a response of the front.
func (c *oauthConn) answer(corr int32, resp kmsg.Response) error {
	_, err := c.Write(frame(corr, resp))
	return err
}

func (c *oauthConn) Read(p []byte) (int, error) {
	for len(c.pending) == 0 {
		if c.closedByUs {
			return 0, io.EOF
		}
		if err := c.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// next reads one request frame and passes it on, answers it, or closes
// the connection.
func (c *oauthConn) next() error {
	var size [4]byte
	if _, err := io.ReadFull(c.r, size[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n < 8 || n > maxFrame {
		return c.shut()
	}
	buf := make([]byte, 4+n)
	copy(buf, size[:])
	if _, err := io.ReadFull(c.r, buf[4:]); err != nil {
		return err
	}
	body := buf[4:]
	key := int16(binary.BigEndian.Uint16(body[0:2]))
	version := int16(binary.BigEndian.Uint16(body[2:4]))
	corr := int32(binary.BigEndian.Uint32(body[4:8]))
	switch key {
	case int16(kmsg.SASLHandshake):
		return c.handshake(body, version, corr)
	case int16(kmsg.SASLAuthenticate):
		return c.authenticate(body, version, corr)
	case int16(kmsg.ApiVersions):
		if !c.authed || !c.expired() {
			c.wmu.Lock()
			if c.apiVersions == nil {
				c.apiVersions = map[int32]int16{}
			}
			if len(c.apiVersions) < maxPending {
				c.apiVersions[corr] = version
			}
			c.wmu.Unlock()
			c.pending = buf
			return nil
		}
	default:
		if c.authed && !c.expired() && c.errSent == "" && !c.handshaken {
			c.pending = buf
			return nil
		}
	}
	if c.authed && c.expired() {
		c.stats.Expired.Add(1)
	}
	return c.shut()
}

func (c *oauthConn) expired() bool { return !time.Now().Before(c.expires) }

// shut closes the connection: kfake reads EOF.
func (c *oauthConn) shut() error {
	c.closedByUs = true
	_ = c.Close()
	return io.EOF
}

// parseRequest decodes the body of a request frame into req.
func parseRequest(body []byte, version int16, req kmsg.Request) error {
	req.SetVersion(version)
	b := body[8:]
	if len(b) < 2 {
		return errors.New("short request")
	}
	if n := int(int16(binary.BigEndian.Uint16(b))); n > 0 {
		if len(b) < 2+n {
			return errors.New("short request")
		}
		b = b[2+n:]
	} else {
		b = b[2:]
	}
	if req.IsFlexible() {
		tags, k := binary.Uvarint(b)
		if k <= 0 {
			return errors.New("bad tags")
		}
		b = b[k:]
		for range tags {
			_, k1 := binary.Uvarint(b)
			if k1 <= 0 {
				return errors.New("bad tags")
			}
			size, k2 := binary.Uvarint(b[k1:])
			if k2 <= 0 || uint64(len(b)) < uint64(k1+k2)+size {
				return errors.New("bad tags")
			}
			b = b[uint64(k1+k2)+size:]
		}
	}
	return req.ReadFrom(b)
}

func (c *oauthConn) handshake(body []byte, version int16, corr int32) error {
	req := kmsg.NewPtrSASLHandshakeRequest()
	if version != 1 || parseRequest(body, version, req) != nil || c.errSent != "" {
		// v0 (raw SASL bytes after it) is not served, as kfake does not.
		return c.shut()
	}
	resp := kmsg.NewPtrSASLHandshakeResponse()
	resp.SetVersion(version)
	resp.SupportedMechanisms = []string{"OAUTHBEARER"}
	if req.Mechanism != "OAUTHBEARER" {
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
	} else {
		c.handshaken = true
	}
	return c.answer(corr, resp)
}

func (c *oauthConn) authenticate(body []byte, version int16, corr int32) error {
	req := kmsg.NewPtrSASLAuthenticateRequest()
	if parseRequest(body, version, req) != nil {
		return c.shut()
	}
	resp := kmsg.NewPtrSASLAuthenticateResponse()
	resp.SetVersion(version)
	if c.errSent != "" {
		// RFC 7628 section 3.2.3: the client's ^A after the error
		// challenge; Kafka then fails with the JSON as the message.
		msg := c.errSent
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		resp.ErrorMessage = &msg
		_ = c.answer(corr, resp)
		return c.shut()
	}
	if !c.handshaken {
		resp.ErrorCode = kerr.IllegalSaslState.Code
		_ = c.answer(corr, resp)
		return c.shut()
	}
	c.handshaken = false
	token, ext, err := parseClientFirst(req.SASLAuthBytes)
	var principal string
	var expires time.Time
	if err == nil {
		principal, expires, err = c.cfg.Verify(token, ext)
	}
	if err != nil {
		c.stats.Refused.Add(1)
		c.errSent = `{"status":"invalid_token"}`
		if strings.HasPrefix(err.Error(), "invalid_request") {
			c.errSent = `{"status":"invalid_request"}`
		}
		resp.SASLAuthBytes = []byte(c.errSent)
		return c.answer(corr, resp)
	}
	c.stats.Accepted.Add(1)
	c.stats.mu.Lock()
	c.stats.principals = append(c.stats.principals, principal)
	c.stats.mu.Unlock()
	c.authed, c.expires = true, expires
	resp.SessionLifetimeMillis = max(time.Until(expires).Milliseconds(), 1)
	return c.answer(corr, resp)
}

// parseClientFirst reads the client's first OAUTHBEARER message (RFC 7628
// section 3.1): gs2 header, ^A, key=value pairs each ended by ^A, ^A.
func parseClientFirst(b []byte) (string, map[string]string, error) {
	gs2, rest, ok := bytes.Cut(b, []byte{1})
	if !ok || !bytes.HasPrefix(gs2, []byte("n,")) && !bytes.HasPrefix(gs2, []byte("y,")) {
		return "", nil, errors.New("invalid_request: no GS2 header")
	}
	if !bytes.HasSuffix(rest, []byte{1, 1}) {
		return "", nil, errors.New("invalid_request: not ended by ^A^A")
	}
	var token string
	ext := map[string]string{}
	for _, kv := range bytes.Split(rest[:len(rest)-2], []byte{1}) {
		k, v, ok := bytes.Cut(kv, []byte("="))
		if !ok {
			return "", nil, fmt.Errorf("invalid_request: %q is not key=value", kv)
		}
		if string(k) == "auth" {
			t, ok := strings.CutPrefix(string(v), "Bearer ")
			if !ok {
				return "", nil, errors.New("invalid_request: auth is not Bearer")
			}
			token = t
			continue
		}
		ext[string(k)] = string(v)
	}
	if token == "" {
		return "", nil, errors.New("invalid_request: no token")
	}
	return token, ext, nil
}
