package brokercheck

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"
)

// A TLS client at a plaintext listener, and the reverse, fail in ways that
// also have other causes: the plaintext listener reads the TLS ClientHello
// as the size of a huge request and waits for the rest (Apache Kafka closes
// the connection: the client sees EOF; the embedded broker waits: the
// handshake times out), and a Go TLS listener closes the connection on a
// plaintext request (EOF) where a Java one answers with a TLS alert. So a
// timeout or EOF at the first step alone is no proof; Retry then asks the
// listener in the other protocol (probe), and only an answer in it is
// reported as a mismatch. Without one, the failure is retried like any
// network failure, and the final error says the listener "may" expect the
// other protocol.

// explainTLS recognizes TLS failures that need no probe: a certificate the
// client does not trust, a broker that refused the handshake with an
// alert, a TLS listener answering a plaintext request with a TLS record,
// and a plaintext listener answering a TLS handshake with something else.
func (c *Client) explainTLS(err error) *Error {
	var se *stepError
	if !errors.As(err, &se) {
		return nil
	}
	tlsErr := func(format string, args ...any) *Error {
		return &Error{Kind: TLS, err: err, msg: fmt.Sprintf(format, args...)}
	}
	if se.tlsRecord {
		return tlsErr("the broker at %s answered a plaintext request with a TLS record: its listener expects TLS; "+
			"set --tls-enabled (and --tls-ca-file if its certificate is signed by a private CA)", se.addr)
	}
	if se.step != stepTLSHandshake {
		return nil
	}
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		record    tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &unknownCA):
		return tlsErr("--tls-enabled: the certificate of the broker at %s is signed by a CA this host does not trust (%v); "+
			"set --tls-ca-file to the PEM file of that CA", se.addr, se.err)
	case errors.As(err, &hostname):
		return tlsErr("--tls-enabled: the certificate of the broker at %s is not valid for that name (%v); "+
			"give --brokers the names the certificate holds", se.addr, se.err)
	case errors.As(err, &invalid):
		return tlsErr("--tls-enabled: the certificate of the broker at %s is not valid (%v); check its dates and usage, "+
			"or --tls-ca-file", se.addr, se.err)
	case errors.As(err, &record):
		return tlsErr("--tls-enabled: the broker at %s answered the TLS handshake with bytes that are not TLS: "+
			"its listener may be plaintext; drop --tls-enabled or use the brokers' TLS port", se.addr)
	case strings.Contains(se.err.Error(), "remote error: tls:"):
		return tlsErr("--tls-enabled: the broker at %s refused the TLS handshake (%v); check --tls-cert-file and "+
			"--tls-key-file (brokers that require client certificates) and the TLS versions the brokers accept", se.addr, se.err)
	}
	return nil
}

// Diagnose is Explain, and for a failure Explain leaves open that a probe
// can settle (a silent or closed first step), the probe: one check for a
// caller that does not retry. It returns nil when waiting may help.
func (c *Client) Diagnose(ctx context.Context, err error) *Error {
	if e := c.Explain(err); e != nil {
		return e
	}
	if err == nil {
		return nil
	}
	return c.probe(ctx, err)
}

// probeTimeout bounds one probe.
const probeTimeout = 3 * time.Second

// probe asks the listener of a failed first step in the other protocol; an
// answer proves a mismatch. It returns nil when there is no proof.
func (c *Client) probe(ctx context.Context, err error) *Error {
	var se *stepError
	if !errors.As(err, &se) || !silentOrClosed(se.err) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	switch {
	case c.TLS != nil && se.step == stepTLSHandshake:
		if answersPlaintext(ctx, se.addr) {
			return &Error{Kind: TLS, err: err, msg: fmt.Sprintf("--tls-enabled: the broker at %s does not answer the TLS "+
				"handshake but answers Kafka requests in plaintext: its listener is plaintext; drop --tls-enabled, "+
				"or use the brokers' TLS port", se.addr)}
		}
	case c.TLS == nil && se.step == stepAPIVersions:
		if answersTLS(ctx, se.addr) {
			return &Error{Kind: TLS, err: err, msg: fmt.Sprintf("the broker at %s closed the connection at the first "+
				"plaintext request but completes a TLS handshake: its listener expects TLS; set --tls-enabled "+
				"(and --tls-ca-file if its certificate is signed by a private CA)", se.addr)}
		}
	case c.SASL == nil && se.step == stepMetadata:
		if mechs, ok := answersSASL(ctx, se.addr, c.TLS); ok {
			return &Error{Kind: SASLRequired, err: err, msg: fmt.Sprintf("the broker at %s answered the first request and closed "+
				"the connection at the next, and its listener offers SASL (%s): it requires SASL; set --sasl-mechanism (%s), "+
				"--sasl-username and %s", se.addr, strings.Join(mechs, ", "), strings.ToLower(strings.Join(mechs, " or ")), PasswordSource)}
		}
	}
	return nil
}

// answersSASL sends a SaslHandshake (v1) for a mechanism nobody offers and
// reports the mechanisms the listener answers that it offers (Kafka's
// UNSUPPORTED_SASL_MECHANISM answer lists them); a listener without SASL
// answers ILLEGAL_SASL_STATE. tc, if set, is the TLS the listener is
// spoken to with. (The embedded broker lists its mechanisms on every
// listener: what proves SASL is this answer after a closed request.)
func answersSASL(ctx context.Context, addr string, tc *tls.Config) ([]string, bool) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, false
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	if tc != nil {
		c := tls.Client(conn, tc)
		if err := c.HandshakeContext(ctx); err != nil {
			return nil, false
		}
		conn = c
	}
	// size, api key 17, version 1, correlation ID, client ID (null),
	// mechanism "BLOOMGATE-PROBE"
	const corr = 0x5a5100
	req := binary.BigEndian.AppendUint32(nil, 0)
	req = binary.BigEndian.AppendUint16(req, 17)
	req = binary.BigEndian.AppendUint16(req, 1)
	req = binary.BigEndian.AppendUint32(req, corr)
	req = binary.BigEndian.AppendUint16(req, 0xffff)
	const probeMechanism = "BLOOMGATE-PROBE"
	req = binary.BigEndian.AppendUint16(req, uint16(len(probeMechanism)))
	req = append(req, probeMechanism...)
	binary.BigEndian.PutUint32(req, uint32(len(req)-4))
	if _, err := conn.Write(req); err != nil {
		return nil, false
	}
	var head [4]byte
	if _, err := io.ReadFull(conn, head[:]); err != nil {
		return nil, false
	}
	size := binary.BigEndian.Uint32(head[:])
	if size < 10 || size > 1<<16 {
		return nil, false
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(conn, body); err != nil || binary.BigEndian.Uint32(body) != corr {
		return nil, false
	}
	const illegalSASLState = 34
	if int16(binary.BigEndian.Uint16(body[4:6])) == illegalSASLState {
		return nil, false
	}
	n := int(int32(binary.BigEndian.Uint32(body[6:10])))
	b := body[10:]
	var mechs []string
	for range max(n, 0) {
		if len(b) < 2 {
			return nil, false
		}
		l := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+l {
			return nil, false
		}
		mechs = append(mechs, string(b[2:2+l]))
		b = b[2+l:]
	}
	return mechs, len(mechs) > 0
}

// silentOrClosed: the peer closed or reset the connection, or did not
// answer in time.
func silentOrClosed(err error) bool {
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// answersPlaintext sends an ApiVersions v0 request in plaintext and reports
// whether a Kafka response came back.
func answersPlaintext(ctx context.Context, addr string) bool {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	// size, api key 18, version 0, correlation ID, client ID (null)
	const corr = 0x0b100c
	req := make([]byte, 14)
	binary.BigEndian.PutUint32(req[0:4], 10)
	binary.BigEndian.PutUint16(req[4:6], 18)
	binary.BigEndian.PutUint32(req[8:12], corr)
	binary.BigEndian.PutUint16(req[12:14], 0xffff)
	if _, err := conn.Write(req); err != nil {
		return false
	}
	var head [8]byte
	if _, err := io.ReadFull(conn, head[:]); err != nil {
		return false
	}
	size := binary.BigEndian.Uint32(head[0:4])
	return size >= 4 && size < 1<<20 && binary.BigEndian.Uint32(head[4:8]) == corr
}

// answersTLS reports whether a TLS handshake gets a TLS answer: it
// completes (the certificate is not checked: this only asks which protocol
// the listener speaks), or the server sends a TLS alert.
func answersTLS(ctx context.Context, addr string) bool {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	host, _, _ := net.SplitHostPort(addr)
	tc := tls.Client(conn, &tls.Config{ServerName: host, InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // a probe of the protocol, not a connection
	err = tc.HandshakeContext(ctx)
	return err == nil || strings.Contains(err.Error(), "remote error: tls:")
}
