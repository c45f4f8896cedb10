package broker

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/bloomgate/bloomgate/internal/oidctest"
	"github.com/bloomgate/bloomgate/internal/saslauth"
)

// staticToken is a token source with one token.
type staticToken string

func (s staticToken) Token(context.Context) (saslauth.Token, error) {
	return saslauth.Token{Value: string(s)}, nil
}

// oauthBroker starts a token endpoint and a broker whose OAUTHBEARER front
// verifies tokens against the endpoint's JWKS; exts records the SASL
// extensions of the accepted tokens.
func oauthBroker(t *testing.T, lifetime time.Duration) (*Broker, *oidctest.Server, func() []map[string]string) {
	t.Helper()
	idp, err := oidctest.New("bloomgate", "client-secret-1", lifetime)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(idp.Close)
	v := idp.NewVerifier()
	var mu sync.Mutex
	var exts []map[string]string
	b, _, _ := start(t, Config{Topics: []TopicSpec{{"t", 1}}, OAuthBearer: &OAuthBearer{
		Verify: func(token string, ext map[string]string) (string, time.Time, error) {
			sub, exp, err := v.Verify(token)
			if err == nil {
				mu.Lock()
				exts = append(exts, ext)
				mu.Unlock()
			}
			return sub, exp, err
		},
	}})
	return b, idp, func() []map[string]string {
		mu.Lock()
		defer mu.Unlock()
		return append([]map[string]string(nil), exts...)
	}
}

// TestOAuthBearer: a token from the OIDC endpoint (client credentials) is
// accepted through both kafka-go connection paths (Transport: writers;
// Dialer: readers), with its extensions; a token signed by another key
// gets RFC 7628's error challenge and fails with error 58 carrying the
// JSON status; a client without SASL is disconnected at its first request
// past ApiVersions.
func TestOAuthBearer(t *testing.T) {
	b, idp, exts := oauthBroker(t, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m := &saslauth.OAuthBearer{
		Source:     &saslauth.ClientCredentials{Endpoint: idp.TokenURL(), ClientID: "bloomgate", ClientSecret: "client-secret-1", Scope: "kafka"},
		Extensions: map[string]string{"logicalCluster": "lkc-1"},
	}
	w := &kafka.Writer{Addr: kafka.TCP(b.Addr()), Topic: "t", Transport: &kafka.Transport{SASL: m}, BatchTimeout: time.Millisecond}
	if err := w.WriteMessages(ctx, kafka.Message{Value: []byte("x")}); err != nil {
		t.Fatalf("producing with a valid token: %v", err)
	}
	w.Close()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{b.Addr()}, Topic: "t", Dialer: &kafka.Dialer{SASLMechanism: m, Timeout: 5 * time.Second}})
	msg, err := r.ReadMessage(ctx)
	r.Close()
	if err != nil || string(msg.Value) != "x" {
		t.Fatalf("consuming with a valid token: %q, %v", msg.Value, err)
	}
	if got := b.OAuthStats().Principals(); len(got) == 0 || got[0] != "bloomgate" {
		t.Errorf("principals %v, want bloomgate (the token's sub)", got)
	}
	if e := exts(); len(e) == 0 || e[0]["logicalCluster"] != "lkc-1" {
		t.Errorf("extensions %v, want logicalCluster=lkc-1", e)
	}
	if idp.Issued() != 1 || idp.Scopes()[0] != "kafka" {
		t.Errorf("%d tokens issued with scopes %v: want one (cached across connections) with scope kafka", idp.Issued(), idp.Scopes())
	}

	// A token of another issuer (another key).
	other, err := oidctest.New("x", "y", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	forged, err := other.Mint("bloomgate", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	cl := &kafka.Client{Addr: kafka.TCP(b.Addr()), Transport: &kafka.Transport{SASL: &saslauth.OAuthBearer{Source: staticToken(forged)}}}
	_, err = cl.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{"t"}})
	if !errors.Is(err, kafka.SASLAuthenticationFailed) || !strings.Contains(err.Error(), `{"status":"invalid_token"}`) {
		t.Errorf("a forged token: %v, want SASL_AUTHENTICATION_FAILED with the JSON status", err)
	}
	if b.OAuthStats().Refused.Load() == 0 {
		t.Error("the front counted no refused token")
	}

	// No SASL: the first request after ApiVersions closes the connection.
	cl = &kafka.Client{Addr: kafka.TCP(b.Addr()), Transport: &kafka.Transport{}, Timeout: 5 * time.Second}
	if _, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{"t"}}); err == nil {
		t.Error("metadata without SASL answered")
	}
}

// TestOAuthBearerSessionExpiry: a connection whose token expired is closed
// at its next request, as Kafka does with connections.max.reauth.ms; a new
// connection with a new token works.
func TestOAuthBearerSessionExpiry(t *testing.T) {
	const lifetime = 2 * time.Second
	b, idp, _ := oauthBroker(t, lifetime)
	m := &saslauth.OAuthBearer{Source: &saslauth.ClientCredentials{Endpoint: idp.TokenURL(), ClientID: "bloomgate", ClientSecret: "client-secret-1"}}
	d := &kafka.Dialer{SASLMechanism: m, Timeout: 5 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ReadPartitions("t"); err != nil {
		t.Fatalf("before expiry: %v", err)
	}
	time.Sleep(lifetime + 200*time.Millisecond) // past the token's exp (whole seconds)
	if _, err := conn.ReadPartitions("t"); err == nil {
		t.Fatal("the expired session answered")
	}
	if b.OAuthStats().Expired.Load() != 1 {
		t.Errorf("expired sessions closed: %d, want 1", b.OAuthStats().Expired.Load())
	}
	conn2, err := d.DialContext(ctx, "tcp", b.Addr())
	if err != nil {
		t.Fatalf("a new connection after expiry: %v", err)
	}
	defer conn2.Close()
	if _, err := conn2.ReadPartitions("t"); err != nil {
		t.Fatalf("a new connection after expiry: %v", err)
	}
	if idp.Issued() != 2 {
		t.Errorf("%d tokens issued, want 2 (the first expired)", idp.Issued())
	}
}

// TestOAuthBearerKcat: librdkafka (kcat), a client no one here wrote,
// through the front. Debian's librdkafka is built without OIDC
// (sasl.oauthbearer.method=oidc needs libcurl), so kcat sends its built-in
// unsigned token (enable.sasl.oauthbearer.unsecure.jwt, alg none, with an
// extension): the front reads librdkafka's message, the verifier refuses
// the unsigned token, and kcat reports Kafka's error with the JSON status.
func TestOAuthBearerKcat(t *testing.T) {
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Skip("kcat not installed (.ci/deps.sh installs it)")
	}
	b, _, _ := oauthBroker(t, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "kcat", "-b", b.Addr(), "-L", "-t", "t", "-m", "2",
		"-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=OAUTHBEARER",
		"-X", "enable.sasl.oauthbearer.unsecure.jwt=true",
		"-X", "sasl.oauthbearer.config=principal=bloomgate extension_logicalCluster=lkc-1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "invalid_token") {
		t.Fatalf("kcat -L with an unsigned token: %v, want a failure naming invalid_token\n%s", err, out)
	}
	if b.OAuthStats().Refused.Load() == 0 || b.OAuthStats().Accepted.Load() != 0 {
		t.Errorf("refused %d, accepted %d: want the unsigned token refused", b.OAuthStats().Refused.Load(), b.OAuthStats().Accepted.Load())
	}
}
