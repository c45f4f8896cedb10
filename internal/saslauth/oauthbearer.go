// Package saslauth holds the SASL mechanisms that kafka-go lacks or that
// need more than a user name and a password: OAUTHBEARER (RFC 7628, KIP-255)
// with a token read from a file or fetched from an OIDC token endpoint with
// the client credentials grant (KIP-768), and AWS MSK IAM.
//
// Each mechanism is asked for credentials once per new connection, so a
// renewed token or rotated AWS credentials reach every connection opened
// after the change; connections already authenticated keep their session
// until the broker ends it (kafka-go does not re-authenticate, KIP-368).
package saslauth

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go/sasl"
)

// MechanismOAuthBearer is the SASL name of OAUTHBEARER.
const MechanismOAuthBearer = "OAUTHBEARER"

// Token is a bearer token and when it expires (zero: not known).
type Token struct {
	Value   string
	Expires time.Time
}

// TokenSource gives the token for a new connection.
type TokenSource interface {
	Token(ctx context.Context) (Token, error)
}

// OAuthBearer is the OAUTHBEARER mechanism: the client's first message
// carries the token (RFC 7628 section 3.1, KIP-255).
type OAuthBearer struct {
	Source TokenSource
	// Extensions are SASL extensions sent with the token (KIP-342), e.g.
	// Confluent Cloud's logicalCluster and identityPoolId.
	Extensions map[string]string
	// Settings names the settings that supply the token, for error
	// messages ("--sasl-oauth-token-file /run/token").
	Settings string

	subject atomic.Pointer[string]
}

// Subject is the sub claim of the last token sent, if it was a JWT: the
// principal Kafka's default OAUTHBEARER validation takes.
func (m *OAuthBearer) Subject() string {
	if p := m.subject.Load(); p != nil {
		return *p
	}
	return ""
}

// Name implements sasl.Mechanism.
func (m *OAuthBearer) Name() string { return MechanismOAuthBearer }

// Describe names the mechanism's settings, for error messages.
func (m *OAuthBearer) Describe() string { return m.Settings }

// Start implements sasl.Mechanism: it asks the source for a token and
// returns the client's first message.
func (m *OAuthBearer) Start(ctx context.Context) (sasl.StateMachine, []byte, error) {
	tok, err := m.Source.Token(ctx)
	if err != nil {
		return nil, nil, err
	}
	if c, ok := ParseClaims(tok.Value); ok && c.Subject != "" {
		m.subject.Store(&c.Subject)
	}
	msg, err := InitialResponse(tok.Value, m.Extensions)
	if err != nil {
		return nil, nil, &Error{Settings: m.Settings, Err: err}
	}
	return &oauthSession{settings: m.Settings}, msg, nil
}

// extKey and extValue are RFC 7628's key and value grammar.
var (
	extKey   = regexp.MustCompile(`^[A-Za-z]+$`)
	extValue = regexp.MustCompile(`^[\x21-\x7E \t\r\n]*$`)
)

// ValidExtension reports why an extension cannot be sent, or nil.
func ValidExtension(k, v string) error {
	if !extKey.MatchString(k) || k == "auth" {
		return fmt.Errorf("extension key %q: letters only, not \"auth\" (RFC 7628)", k)
	}
	if !extValue.MatchString(v) {
		return fmt.Errorf("extension %q: value has characters RFC 7628 does not allow", k)
	}
	return nil
}

// InitialResponse is the client's first OAUTHBEARER message: the GS2
// header without authorization identity, the token, the extensions in
// key order, each part ended by ^A.
func InitialResponse(token string, extensions map[string]string) ([]byte, error) {
	if token == "" {
		return nil, errors.New("empty token")
	}
	if strings.ContainsAny(token, "\x01 \t\r\n") {
		return nil, errors.New("the token contains white space or control characters")
	}
	var b bytes.Buffer
	b.WriteString("n,,\x01auth=Bearer ")
	b.WriteString(token)
	b.WriteByte(1)
	keys := make([]string, 0, len(extensions))
	for k := range extensions {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := ValidExtension(k, extensions[k]); err != nil {
			return nil, err
		}
		b.WriteString(k + "=" + extensions[k])
		b.WriteByte(1)
	}
	b.WriteByte(1)
	return b.Bytes(), nil
}

// oauthSession is the client side after the first message. The broker
// either accepts (an empty challenge, or kafka-go's exchange ends with the
// broker's success) or sends an error challenge: a JSON status (RFC 7628
// section 3.2.2), which the client answers with ^A; the broker then fails
// the authentication (Kafka with error 58 and the JSON as the message).
type oauthSession struct {
	settings string
	failed   []byte // the broker's error challenge, once received
}

func (s *oauthSession) Next(_ context.Context, challenge []byte) (bool, []byte, error) {
	if s.failed != nil {
		// The broker accepted the ^A after an error: the exchange failed
		// all the same.
		return true, nil, &Error{Settings: s.settings, Err: fmt.Errorf("the broker refused the token: %s", s.failed)}
	}
	if len(challenge) == 0 {
		return true, nil, nil
	}
	s.failed = bytes.Clone(challenge)
	return false, []byte{1}, nil
}

// Error is a failure to obtain or use credentials that the settings cause
// (a refused client secret, an unreadable token file), as opposed to an
// endpoint that does not answer: retrying does not help.
type Error struct {
	Settings string // the settings involved, as the user writes them
	Err      error
}

func (e *Error) Error() string {
	if e.Settings == "" {
		return e.Err.Error()
	}
	return e.Settings + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// TransientError is a failure to obtain credentials that may pass (a token
// endpoint that does not answer or answers 5xx).
type TransientError struct {
	Settings string
	Err      error
}

func (e *TransientError) Error() string { return e.Settings + ": " + e.Err.Error() }
func (e *TransientError) Unwrap() error { return e.Err }

// Claims are the JWT claims the worker reads (without verifying them: the
// broker verifies).
type Claims struct {
	Subject string `json:"sub"`
	Expiry  int64  `json:"exp"`
}

// ParseClaims reads the claims of a JWT; ok is false if token is not one.
func ParseClaims(token string) (Claims, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return Claims{}, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return Claims{}, false
	}
	var c Claims
	if json.Unmarshal(raw, &c) != nil {
		return Claims{}, false
	}
	return c, true
}
