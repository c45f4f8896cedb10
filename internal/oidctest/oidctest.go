// Package oidctest is an OAuth 2 / OIDC token endpoint for tests, on
// 127.0.0.1: it issues RS256-signed JWTs to a client that presents its
// client credentials (RFC 6749 section 4.4), publishes its key as a JWKS,
// and verifies tokens against that JWKS, fetched over HTTP as a broker
// fetches its issuer's keys (Kafka's sasl.oauthbearer.jwks.endpoint.url).
package oidctest

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Audience is the aud claim of the tokens issued and required by Verify.
const Audience = "kafka-test"

// Server is a running token endpoint.
type Server struct {
	ClientID     string
	ClientSecret string
	// Lifetime of the tokens issued.
	Lifetime time.Duration

	key    *rsa.PrivateKey
	kid    string
	srv    *httptest.Server
	issued atomic.Int64
	mu     sync.Mutex
	scopes []string
}

// New starts a token endpoint that issues tokens of the given lifetime to
// the client clientID with secret.
func New(clientID, secret string, lifetime time.Duration) (*Server, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	s := &Server{ClientID: clientID, ClientSecret: secret, Lifetime: lifetime, key: key, kid: "test-key-1"}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /token", s.token)
	mux.HandleFunc("GET /jwks", s.jwks)
	s.srv = httptest.NewUnstartedServer(mux)
	s.srv.Listener.Close()
	s.srv.Listener = ln
	s.srv.Start()
	return s, nil
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// TokenURL is the token endpoint.
func (s *Server) TokenURL() string { return s.srv.URL + "/token" }

// JWKSURL is where the signing key is published.
func (s *Server) JWKSURL() string { return s.srv.URL + "/jwks" }

// Issuer is the iss claim of the tokens.
func (s *Server) Issuer() string { return s.srv.URL }

// Issued is how many tokens the endpoint issued.
func (s *Server) Issued() int { return int(s.issued.Load()) }

// Scopes are the scopes asked for, one entry per issued token.
func (s *Server) Scopes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.scopes...)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "client_credentials" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "unsupported_grant_type"})
		return
	}
	id, secret, ok := r.BasicAuth()
	if ok {
		// RFC 6749 section 2.3.1: form-encoded inside the Basic header.
		id, secret = unescape(id), unescape(secret)
	} else {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	if id != s.ClientID || subtle.ConstantTimeCompare([]byte(secret), []byte(s.ClientSecret)) != 1 {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_client", "error_description": "client authentication failed"})
		return
	}
	scope := r.PostForm.Get("scope")
	tok, err := s.Mint(id, scope, s.Lifetime)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "server_error"})
		return
	}
	s.issued.Add(1)
	s.mu.Lock()
	s.scopes = append(s.scopes, scope)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": s.Lifetime.Seconds()})
}

func unescape(s string) string {
	out, err := url.QueryUnescape(s)
	if err != nil {
		return s
	}
	return out
}

func (s *Server) jwks(w http.ResponseWriter, _ *http.Request) {
	pub := s.key.PublicKey
	writeJSON(w, http.StatusOK, map[string]any{"keys": []map[string]string{{
		"kty": "RSA", "use": "sig", "alg": "RS256", "kid": s.kid,
		"n": b64(pub.N.Bytes()), "e": b64(big.NewInt(int64(pub.E)).Bytes()),
	}}})
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// Mint signs a token for subject, valid for lifetime from now.
func (s *Server) Mint(subject, scope string, lifetime time.Duration) (string, error) {
	now := time.Now()
	return s.Sign(map[string]any{
		"iss": s.Issuer(), "aud": Audience, "sub": subject, "scope": scope,
		"iat": now.Unix(), "nbf": now.Unix() - 1, "exp": now.Add(lifetime).Unix(),
		"jti": fmt.Sprintf("%d-%d", now.UnixNano(), s.issued.Load()),
	})
}

// Sign signs any claims with the endpoint's key.
func (s *Server) Sign(claims map[string]any) (string, error) {
	head, _ := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT", "kid": s.kid})
	body, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	input := b64(head) + "." + b64(body)
	sum := sha256.Sum256([]byte(input))
	sig, err := rsa.SignPKCS1v15(rand.Reader, s.key, crypto.SHA256, sum[:])
	if err != nil {
		return "", err
	}
	return input + "." + b64(sig), nil
}

// Verifier checks tokens as a broker configured with this issuer does: the
// signature against the keys of the JWKS URL (fetched over HTTP, once),
// the issuer, the audience and the time bounds. It returns the subject and
// the expiry.
type Verifier struct {
	JWKSURL string
	Issuer  string

	mu   sync.Mutex
	keys map[string]*rsa.PublicKey
}

// NewVerifier verifies the tokens of s.
func (s *Server) NewVerifier() *Verifier { return &Verifier{JWKSURL: s.JWKSURL(), Issuer: s.Issuer()} }

func (v *Verifier) key(kid string) (*rsa.PublicKey, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.keys == nil {
		resp, err := http.Get(v.JWKSURL) //nolint:gosec // a test URL
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var set struct {
			Keys []struct{ Kty, Kid, N, E string }
		}
		if err := json.NewDecoder(resp.Body).Decode(&set); err != nil {
			return nil, fmt.Errorf("JWKS: %w", err)
		}
		v.keys = map[string]*rsa.PublicKey{}
		for _, k := range set.Keys {
			n, err1 := base64.RawURLEncoding.DecodeString(k.N)
			e, err2 := base64.RawURLEncoding.DecodeString(k.E)
			if k.Kty != "RSA" || err1 != nil || err2 != nil {
				continue
			}
			v.keys[k.Kid] = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		}
	}
	k, ok := v.keys[kid]
	if !ok {
		return nil, fmt.Errorf("no key %q in the JWKS", kid)
	}
	return k, nil
}

// Verify checks token and returns its subject and expiry.
func (v *Verifier) Verify(token string) (string, time.Time, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", time.Time{}, errors.New("not a JWT")
	}
	var head struct{ Alg, Kid string }
	if err := decode(parts[0], &head); err != nil {
		return "", time.Time{}, err
	}
	if head.Alg != "RS256" {
		return "", time.Time{}, fmt.Errorf("alg %q", head.Alg)
	}
	key, err := v.key(head.Kid)
	if err != nil {
		return "", time.Time{}, err
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return "", time.Time{}, err
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err := rsa.VerifyPKCS1v15(key, crypto.SHA256, sum[:], sig); err != nil {
		return "", time.Time{}, errors.New("bad signature")
	}
	var c struct {
		Iss, Aud, Sub string
		Exp, Nbf      int64
	}
	if err := decode(parts[1], &c); err != nil {
		return "", time.Time{}, err
	}
	now := time.Now()
	switch {
	case c.Iss != v.Issuer:
		return "", time.Time{}, fmt.Errorf("issuer %q", c.Iss)
	case c.Aud != Audience:
		return "", time.Time{}, fmt.Errorf("audience %q", c.Aud)
	case c.Sub == "":
		return "", time.Time{}, errors.New("no subject")
	case c.Exp == 0 || !now.Before(time.Unix(c.Exp, 0)):
		return "", time.Time{}, errors.New("expired")
	case c.Nbf != 0 && now.Before(time.Unix(c.Nbf, 0)):
		return "", time.Time{}, errors.New("not yet valid")
	}
	return c.Sub, time.Unix(c.Exp, 0), nil
}

func decode(part string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(part)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
