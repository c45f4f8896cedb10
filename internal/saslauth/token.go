package saslauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// FileToken reads the token from a file for every new connection, so that
// a token renewed by whatever writes the file (a sidecar, a Kubernetes
// projected volume) is used from the next connection on.
type FileToken struct {
	Path     string
	Settings string // e.g. "--sasl-oauth-token-file /run/token"
	Now      func() time.Time
}

// Token implements TokenSource.
func (f *FileToken) Token(context.Context) (Token, error) {
	b, err := os.ReadFile(f.Path)
	if err != nil {
		return Token{}, &Error{Settings: f.Settings, Err: err}
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		// Possibly caught while being rewritten: the next connection reads
		// it again.
		return Token{}, &TransientError{Settings: f.Settings, Err: errors.New("the file is empty")}
	}
	tok := Token{Value: v}
	if c, ok := ParseClaims(v); ok && c.Expiry > 0 {
		tok.Expires = time.Unix(c.Expiry, 0)
		if now := now(f.Now); !now.Before(tok.Expires) {
			return Token{}, &TransientError{Settings: f.Settings, Err: fmt.Errorf(
				"the token in the file expired at %s (%s ago): whatever writes the file has not renewed it",
				tok.Expires.UTC().Format(time.RFC3339), now.Sub(tok.Expires).Round(time.Second))}
		}
	}
	return tok, nil
}

func now(f func() time.Time) time.Time {
	if f != nil {
		return f()
	}
	return time.Now()
}

// RefreshAt is the share of a token's lifetime after which a new one is
// fetched, as Kafka's sasl.login.refresh.window.factor (0.8).
const RefreshAt = 0.8

// UnknownLifetime is how long a token is used when neither the endpoint
// (expires_in) nor the token (a JWT exp claim) says when it expires.
const UnknownLifetime = time.Minute

// retryMin and retryMax bound the wait between failed refreshes while the
// cached token is still valid (jittered, doubling).
const (
	retryMin = time.Second
	retryMax = 30 * time.Second
)

// ClientCredentials fetches tokens from an OAuth 2 / OIDC token endpoint
// with the client credentials grant (RFC 6749 section 4.4), as Kafka's
// OAUTHBEARER OIDC login does (KIP-768): the client ID and secret in an
// HTTP Basic Authorization header, the scope in the form. A token is
// cached and replaced once RefreshAt of its lifetime has passed; while a
// replacement fails, the cached token is used (the endpoint is asked
// again after a jittered, growing wait) until it expires.
type ClientCredentials struct {
	Endpoint     string
	ClientID     string
	ClientSecret string
	Scope        string
	// Settings names the settings for error messages, e.g.
	// "--sasl-oauth-token-endpoint …, --sasl-oauth-client-id … and the
	// secret in …".
	Settings string
	// Client sends the requests; default: 10 s timeout.
	Client *http.Client
	Now    func() time.Time

	mu        sync.Mutex
	tok       Token
	refreshAt time.Time
	retryAt   time.Time
	backoff   time.Duration
	fetches   int
}

var defaultHTTP = &http.Client{Timeout: 10 * time.Second}

// Token implements TokenSource.
func (c *ClientCredentials) Token(ctx context.Context) (Token, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := now(c.Now)
	valid := c.tok.Value != "" && t.Before(c.tok.Expires)
	if valid && (t.Before(c.refreshAt) || t.Before(c.retryAt)) {
		return c.tok, nil
	}
	tok, lifetime, err := c.fetch(ctx, t)
	if err != nil {
		if valid {
			// Keep using the cached token; ask again later.
			c.backoff = min(max(2*c.backoff, retryMin), retryMax)
			c.retryAt = t.Add(time.Duration(float64(c.backoff) * (0.5 + rand.Float64())))
			return c.tok, nil
		}
		return Token{}, err
	}
	c.tok, c.backoff, c.retryAt = tok, 0, time.Time{}
	c.refreshAt = t.Add(time.Duration(float64(lifetime) * RefreshAt))
	c.fetches++
	return tok, nil
}

// Fetches is how many tokens were fetched.
func (c *ClientCredentials) Fetches() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fetches
}

// tokenResponse is RFC 6749 section 5.1 and 5.2.
type tokenResponse struct {
	AccessToken      string          `json:"access_token"`
	TokenType        string          `json:"token_type"`
	ExpiresIn        json.RawMessage `json:"expires_in"`
	Error            string          `json:"error"`
	ErrorDescription string          `json:"error_description"`
}

func (c *ClientCredentials) fetch(ctx context.Context, t time.Time) (Token, time.Duration, error) {
	form := url.Values{"grant_type": {"client_credentials"}}
	if c.Scope != "" {
		form.Set("scope", c.Scope)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return Token{}, 0, &Error{Settings: c.Settings, Err: err}
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	// RFC 6749 section 2.3.1: both form-encoded before Basic.
	req.SetBasicAuth(url.QueryEscape(c.ClientID), url.QueryEscape(c.ClientSecret))
	hc := c.Client
	if hc == nil {
		hc = defaultHTTP
	}
	resp, err := hc.Do(req)
	if err != nil {
		return Token{}, 0, &TransientError{Settings: c.Settings, Err: fmt.Errorf("token endpoint: %w", err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Token{}, 0, &TransientError{Settings: c.Settings, Err: fmt.Errorf("token endpoint: reading the answer: %w", err)}
	}
	var tr tokenResponse
	jerr := json.Unmarshal(body, &tr)
	if resp.StatusCode != http.StatusOK {
		what := fmt.Sprintf("token endpoint answered %s", resp.Status)
		if jerr == nil && tr.Error != "" {
			what += ": " + tr.Error
			if tr.ErrorDescription != "" {
				what += " (" + tr.ErrorDescription + ")"
			}
		}
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusRequestTimeout {
			return Token{}, 0, &TransientError{Settings: c.Settings, Err: errors.New(what)}
		}
		// 400 invalid_client, invalid_scope, unauthorized_client; 401;
		// 403; 404 (a wrong URL): the settings must change.
		return Token{}, 0, &Error{Settings: c.Settings, Err: errors.New(what)}
	}
	if jerr != nil || tr.AccessToken == "" {
		return Token{}, 0, &Error{Settings: c.Settings, Err: errors.New("token endpoint answered 200 without an access_token in JSON: is the URL the token endpoint?")}
	}
	if tt := tr.TokenType; tt != "" && !strings.EqualFold(tt, "bearer") {
		return Token{}, 0, &Error{Settings: c.Settings, Err: fmt.Errorf("token endpoint issued a %q token, not a bearer token", tt)}
	}
	lifetime := time.Duration(0)
	if len(tr.ExpiresIn) > 0 {
		var n json.Number
		if json.Unmarshal(tr.ExpiresIn, &n) == nil {
			if f, err := n.Float64(); err == nil && f > 0 {
				lifetime = time.Duration(f * float64(time.Second))
			}
		} else {
			var s string // some endpoints send a string
			if json.Unmarshal(tr.ExpiresIn, &s) == nil {
				if d, err := time.ParseDuration(s + "s"); err == nil && d > 0 {
					lifetime = d
				}
			}
		}
	}
	// A JWT's exp (whole seconds) may come before expires_in says: the
	// earlier one counts.
	if cl, ok := ParseClaims(tr.AccessToken); ok && cl.Expiry > 0 {
		d := time.Unix(cl.Expiry, 0).Sub(t)
		if d <= 0 {
			return Token{}, 0, &TransientError{Settings: c.Settings, Err: fmt.Errorf(
				"the token endpoint issued a token that expired at %s, before it arrived: check this host's clock", time.Unix(cl.Expiry, 0).UTC().Format(time.RFC3339))}
		}
		if lifetime == 0 || d < lifetime {
			lifetime = d
		}
	}
	if lifetime <= 0 {
		lifetime = UnknownLifetime
	}
	return Token{Value: tr.AccessToken, Expires: t.Add(lifetime)}, lifetime, nil
}
