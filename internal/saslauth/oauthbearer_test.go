package saslauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/oidctest"
)

// TestInitialResponse: RFC 7628's client message, extensions in key order.
func TestInitialResponse(t *testing.T) {
	got, err := InitialResponse("abc.def.ghi", map[string]string{"logicalCluster": "lkc-1", "identityPoolId": "pool-2"})
	if err != nil {
		t.Fatal(err)
	}
	want := "n,,\x01auth=Bearer abc.def.ghi\x01identityPoolId=pool-2\x01logicalCluster=lkc-1\x01\x01"
	if string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
	for _, bad := range []map[string]string{{"auth": "x"}, {"a-b": "x"}, {"k": "\x01"}} {
		if _, err := InitialResponse("t", bad); err == nil {
			t.Errorf("extensions %q accepted", bad)
		}
	}
	if _, err := InitialResponse("a b", nil); err == nil {
		t.Error("a token with a space accepted")
	}
}

// TestOAuthSessionErrorChallenge: an empty server message ends the
// exchange; an error challenge is answered with ^A, and the exchange fails
// with the broker's JSON if it goes on.
func TestOAuthSessionErrorChallenge(t *testing.T) {
	m := &OAuthBearer{Source: &FileToken{Path: writeToken(t, "tok")}, Settings: "--sasl-oauth-token-file x"}
	sm, ir, err := m.Start(context.Background())
	if err != nil || string(ir) != "n,,\x01auth=Bearer tok\x01\x01" {
		t.Fatalf("start: %q, %v", ir, err)
	}
	if done, resp, err := sm.Next(context.Background(), nil); !done || resp != nil || err != nil {
		t.Errorf("empty challenge: %v %q %v, want done", done, resp, err)
	}
	sm, _, _ = m.Start(context.Background())
	done, resp, err := sm.Next(context.Background(), []byte(`{"status":"invalid_token"}`))
	if done || string(resp) != "\x01" || err != nil {
		t.Fatalf("error challenge: %v %q %v, want ^A", done, resp, err)
	}
	_, _, err = sm.Next(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), `{"status":"invalid_token"}`) || !strings.Contains(err.Error(), "--sasl-oauth-token-file") {
		t.Errorf("after the error: %v", err)
	}
}

func writeToken(t *testing.T, tok string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFileToken: the file is read for every connection, so a renewed
// token is used at once; an expired JWT and a missing file are errors that
// name the setting.
func TestFileToken(t *testing.T) {
	idp, err := oidctest.New("c", "s", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer idp.Close()
	first, _ := idp.Mint("a", "", time.Minute)
	path := writeToken(t, first)
	f := &FileToken{Path: path, Settings: "--sasl-oauth-token-file " + path}
	tok, err := f.Token(context.Background())
	if err != nil || tok.Value != first || tok.Expires.IsZero() {
		t.Fatalf("first: %+v, %v", tok, err)
	}
	second, _ := idp.Mint("b", "", time.Minute)
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(second), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil { // as a projected volume swaps it
		t.Fatal(err)
	}
	if tok, err := f.Token(context.Background()); err != nil || tok.Value != second {
		t.Fatalf("after the renewal: %v, want the new token", err)
	}
	expired, _ := idp.Sign(map[string]any{"sub": "a", "exp": time.Now().Add(-time.Minute).Unix()})
	if err := os.WriteFile(path, []byte(expired), 0o600); err != nil {
		t.Fatal(err)
	}
	var te *TransientError
	if _, err := f.Token(context.Background()); !errors.As(err, &te) || !strings.Contains(err.Error(), "expired") || !strings.Contains(err.Error(), path) {
		t.Errorf("an expired token: %v", err)
	}
	os.Remove(path)
	var pe *Error
	if _, err := f.Token(context.Background()); !errors.As(err, &pe) || !strings.Contains(err.Error(), "--sasl-oauth-token-file") {
		t.Errorf("a missing file: %v", err)
	}
}

// TestClientCredentials: one token serves every connection until 80 % of
// its lifetime; then a new one is fetched; while the endpoint fails, the
// valid token is kept and the endpoint asked again only after a wait;
// a refused secret is an *Error naming the settings, a 5xx transient.
func TestClientCredentials(t *testing.T) {
	var issued, calls atomic.Int64
	var down atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if id, secret, _ := r.BasicAuth(); id != "bloomgate" || secret != "right" || r.FormValue("grant_type") != "client_credentials" {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":"invalid_client"}`))
			return
		}
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Write(fmt.Appendf(nil, `{"access_token":"opaque-%d","token_type":"Bearer","expires_in":100}`, issued.Add(1)))
	}))
	defer srv.Close()
	clock := time.Now()
	now := func() time.Time { return clock }
	c := &ClientCredentials{Endpoint: srv.URL, ClientID: "bloomgate", ClientSecret: "right", Settings: "SETTINGS", Now: now}
	ctx := context.Background()
	first, err := c.Token(ctx)
	if err != nil || first.Value != "opaque-1" || first.Expires != clock.Add(100*time.Second) {
		t.Fatalf("first: %+v, %v", first, err)
	}
	clock = clock.Add(79 * time.Second)
	for range 5 {
		if tok, _ := c.Token(ctx); tok != first {
			t.Fatal("a second token before 80 % of the lifetime")
		}
	}
	clock = clock.Add(2 * time.Second)
	second, err := c.Token(ctx)
	if err != nil || second.Value != "opaque-2" {
		t.Fatalf("after 81 %% of the lifetime: %+v, %v: want a new token", second, err)
	}

	// The endpoint fails: the valid token is kept, retried after a wait.
	down.Store(true)
	calls.Store(0)
	clock = clock.Add(81 * time.Second)
	for range 3 {
		if tok, err := c.Token(ctx); err != nil || tok != second {
			t.Fatalf("endpoint down, token valid: %+v, %v", tok, err)
		}
	}
	if calls.Load() != 1 {
		t.Errorf("endpoint asked %d times within the retry wait, want 1", calls.Load())
	}
	clock = clock.Add(2 * retryMin)
	if _, err := c.Token(ctx); err != nil || calls.Load() != 2 {
		t.Errorf("after the retry wait: %v, asked %d times, want 2", err, calls.Load())
	}
	clock = second.Expires
	var te *TransientError
	if _, err := c.Token(ctx); !errors.As(err, &te) || !strings.Contains(err.Error(), "503") {
		t.Errorf("endpoint down, token expired: %v, want a transient error", err)
	}
	down.Store(false)
	if tok, err := c.Token(ctx); err != nil || tok.Value != "opaque-3" {
		t.Errorf("endpoint back: %+v, %v", tok, err)
	}

	wrong := &ClientCredentials{Endpoint: srv.URL, ClientID: "bloomgate", ClientSecret: "wrong", Settings: "SETTINGS"}
	var pe *Error
	if _, err := wrong.Token(ctx); !errors.As(err, &pe) || !strings.Contains(err.Error(), "SETTINGS") || !strings.Contains(err.Error(), "invalid_client") {
		t.Errorf("a wrong secret: %v, want an *Error naming the settings and invalid_client", err)
	}
}

// TestClientCredentialsJWTExpiry: a JWT's exp (whole seconds) that comes
// before expires_in bounds the token's use.
func TestClientCredentialsJWTExpiry(t *testing.T) {
	idp, err := oidctest.New("bloomgate", "right", 100*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer idp.Close()
	c := &ClientCredentials{Endpoint: idp.TokenURL(), ClientID: "bloomgate", ClientSecret: "right"}
	start := time.Now()
	tok, err := c.Token(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cl, _ := ParseClaims(tok.Value)
	if tok.Expires.After(time.Unix(cl.Expiry, 0)) || tok.Expires.Before(start.Add(98*time.Second)) {
		t.Errorf("expires %s, the JWT at %s", tok.Expires, time.Unix(cl.Expiry, 0))
	}
}
