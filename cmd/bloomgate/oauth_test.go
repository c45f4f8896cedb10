package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/bloomgate/bloomgate/internal/broker"
	"github.com/bloomgate/bloomgate/internal/oidctest"
	"github.com/bloomgate/bloomgate/internal/proctest"
	"github.com/bloomgate/bloomgate/internal/saslauth"
)

// The embedded broker (kfake) has no OAUTHBEARER: these tests put the
// broker package's OAUTHBEARER front before it (internal/broker/oauth.go),
// which verifies every token against the JWKS of a local token endpoint
// (internal/oidctest) and closes a connection at its first request after
// its token expired, as Kafka does with connections.max.reauth.ms.

const oauthSecret = "client-secret-1"

// oauthBroker starts a token endpoint issuing tokens of the given lifetime
// to client "bloomgate" and a broker that verifies them.
func oauthBroker(t *testing.T, lifetime time.Duration, topics ...broker.TopicSpec) (*broker.Broker, *oidctest.Server) {
	t.Helper()
	idp, err := oidctest.New("bloomgate", oauthSecret, lifetime)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(idp.Close)
	v := idp.NewVerifier()
	b, err := broker.New(broker.Config{Topics: topics, OAuthBearer: &broker.OAuthBearer{
		Verify: func(token string, _ map[string]string) (string, time.Time, error) { return v.Verify(token) },
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b, idp
}

type staticToken string

func (s staticToken) Token(context.Context) (saslauth.Token, error) {
	return saslauth.Token{Value: string(s)}, nil
}

// TestRunOAuthBearerAcrossExpiries: `bloomgate run --repartition` with
// OIDC client credentials and 3 s tokens keeps deduplicating while its
// sessions expire and the broker closes them: every connection of the
// binary (group coordinators, fetches, writes, admin requests, the
// repartition hop) gets a fresh token, and every unique key written over
// several token lifetimes reaches the output.
func TestRunOAuthBearerAcrossExpiries(t *testing.T) {
	const lifetime = 3 * time.Second
	b, idp := oauthBroker(t, lifetime, broker.TopicSpec{Name: "in", Partitions: 2}, broker.TopicSpec{Name: "out", Partitions: 2})
	worker := proctest.Start(t, proctest.Config{Name: "worker", Path: binary, Args: []string{"run", "--brokers", b.Addr(),
		"--group", "g", "--input", "in", "--output", "out", "--repartition", "--checkpoint-url", "file://" + t.TempDir(),
		"--metrics-addr", "", "--commit-interval", "1s",
		"--sasl-mechanism", "oauthbearer", "--sasl-oauth-token-endpoint", idp.TokenURL(), "--sasl-oauth-client-id", "bloomgate"},
		Env: append(os.Environ(), "BLOOMGATE_SASL_OAUTH_CLIENT_SECRET="+oauthSecret)})
	t.Cleanup(func() { _ = worker.Stop(10 * time.Second) })

	// The test's own clients use one long-lived token of another subject,
	// so that the endpoint's count and the expired sessions are the
	// worker's.
	tok, err := idp.Mint("tester", "", 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	mech := &saslauth.OAuthBearer{Source: staticToken(tok)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := &kafka.Writer{Addr: kafka.TCP(b.Addr()), Topic: "in", Transport: &kafka.Transport{SASL: mech}, BatchTimeout: time.Millisecond}
	defer w.Close()
	// Four token lifetimes of input: a batch of unique keys (and a copy of
	// each, which the worker drops) every second.
	const rounds, perRound = 12, 100
	for r := range rounds {
		msgs := make([]kafka.Message, 0, 2*perRound)
		for i := range perRound {
			k := fmt.Appendf(nil, "k-%d-%d", r, i)
			msgs = append(msgs, kafka.Message{Key: k, Value: k}, kafka.Message{Key: k, Value: k})
		}
		if err := w.WriteMessages(ctx, msgs...); err != nil {
			t.Fatalf("round %d: %v", r, err)
		}
		if !worker.Running() {
			t.Fatalf("the worker stopped:\n%s", worker.Tail(40))
		}
		time.Sleep(time.Second)
	}

	// Every unique key reaches the output.
	produced := time.Now()
	seen, read := map[string]int{}, 0
	rctx, rcancel := context.WithTimeout(ctx, 90*time.Second)
	defer rcancel()
	keys := make(chan string)
	for p := range 2 {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{b.Addr()}, Topic: "out", Partition: p,
			Dialer: &kafka.Dialer{SASLMechanism: mech, Timeout: 5 * time.Second}, MaxWait: 200 * time.Millisecond})
		defer r.Close()
		go func() {
			for {
				m, err := r.ReadMessage(rctx)
				if err != nil {
					return
				}
				select {
				case keys <- string(m.Key):
				case <-rctx.Done():
					return
				}
			}
		}()
	}
	total := 0
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for total < rounds*perRound && rctx.Err() == nil {
		select {
		case k := <-keys:
			read++
			if seen[k]++; seen[k] == 1 {
				total++
			}
		case <-tick.C:
			if !worker.Running() {
				t.Fatalf("the worker stopped:\n%s", worker.Tail(40))
			}
		case <-rctx.Done():
		}
	}
	if total != rounds*perRound {
		t.Fatalf("%d of %d unique keys reached the output in time; worker:\n%s", total, rounds*perRound, worker.Tail(40))
	}
	st := b.OAuthStats()
	t.Logf("all %d keys out %s after the last write (%d records read); tokens issued to the worker %d, sessions accepted %d, expired sessions closed %d",
		total, time.Since(produced).Round(time.Millisecond), read, idp.Issued(), st.Accepted.Load(), st.Expired.Load())
	if idp.Issued() < 4 {
		t.Errorf("the worker fetched %d tokens over %d s of 3 s tokens, want at least 4", idp.Issued(), rounds)
	}
	if st.Expired.Load() == 0 {
		t.Error("no session of the worker expired: the test did not cross a token's end")
	}
}

// TestCheckOAuthBearer: `bloomgate check` passes with the right client
// credentials; a wrong client secret, and a token the broker refuses,
// fail within 5 s with exit 1 and name the settings to fix.
func TestCheckOAuthBearer(t *testing.T) {
	b, idp := oauthBroker(t, time.Minute, broker.TopicSpec{Name: "in", Partitions: 2}, broker.TopicSpec{Name: "out", Partitions: 2})
	base := []string{"--brokers", b.Addr(), "--input", "in", "--output", "out", "--checkpoint-url", "file://" + t.TempDir(), "--sasl-mechanism", "oauthbearer"}
	oidc := append(append([]string{}, base...), "--sasl-oauth-token-endpoint", idp.TokenURL(), "--sasl-oauth-client-id", "bloomgate")

	t.Setenv("BLOOMGATE_SASL_OAUTH_CLIENT_SECRET", oauthSecret)
	if out, errOut, code := runCheck(t, oidc...); code != exitOK {
		t.Fatalf("right credentials: exit %d:\n%s%s", code, out, errOut)
	}

	t.Setenv("BLOOMGATE_SASL_OAUTH_CLIENT_SECRET", "wrong")
	start := time.Now()
	out, errOut, code := runCheck(t, oidc...)
	took := time.Since(start)
	all := out + errOut
	if code == exitOK {
		t.Fatalf("wrong secret: exit 0:\n%s", all)
	}
	for _, want := range []string{"--sasl-mechanism oauthbearer", "--sasl-oauth-token-endpoint " + idp.TokenURL(), `--sasl-oauth-client-id "bloomgate"`,
		"BLOOMGATE_SASL_OAUTH_CLIENT_SECRET", "401", "invalid_client"} {
		if !strings.Contains(all, want) {
			t.Errorf("wrong secret: output lacks %q:\n%s", want, all)
		}
	}
	if took > 5*time.Second {
		t.Errorf("wrong secret: took %s, want at most 5 s", took)
	}

	// A token of another issuer in a token file: the broker refuses it.
	other, err := oidctest.New("x", "y", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	forged, _ := other.Mint("bloomgate", "", time.Minute)
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(forged), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Unsetenv("BLOOMGATE_SASL_OAUTH_CLIENT_SECRET")
	start = time.Now()
	out, errOut, code = runCheck(t, append(append([]string{}, base...), "--sasl-oauth-token-file", file)...)
	took = time.Since(start)
	all = out + errOut
	if code == exitOK {
		t.Fatalf("refused token: exit 0:\n%s", all)
	}
	for _, want := range []string{"--sasl-mechanism oauthbearer with --sasl-oauth-token-file " + file, "the brokers refused the login", `{"status":"invalid_token"}`} {
		if !strings.Contains(all, want) {
			t.Errorf("refused token: output lacks %q:\n%s", want, all)
		}
	}
	if took > 5*time.Second {
		t.Errorf("refused token: took %s, want at most 5 s", took)
	}
}

// TestCheckAWSMSKIAMNotOffered: aws-msk-iam reaches `bloomgate check`'s
// connections; a listener without it is named with the ports MSK uses.
func TestCheckAWSMSKIAMNotOffered(t *testing.T) {
	b, _ := oauthBroker(t, time.Minute, broker.TopicSpec{Name: "in", Partitions: 1}, broker.TopicSpec{Name: "out", Partitions: 1})
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	out, errOut, code := runCheck(t, "--brokers", b.Addr(), "--input", "in", "--output", "out", "--checkpoint-url", "file://"+t.TempDir(),
		"--sasl-mechanism", "aws-msk-iam", "--sasl-aws-region", "eu-west-1")
	all := out + errOut
	if code == exitOK || !strings.Contains(all, "--sasl-mechanism aws-msk-iam: the brokers do not offer this mechanism") || !strings.Contains(all, "9098") {
		t.Errorf("exit %d:\n%s", code, all)
	}
}

// TestRunOAuthWrongSecret: `bloomgate run` with a refused client secret
// stops at once with exit 2, naming the settings.
func TestRunOAuthWrongSecret(t *testing.T) {
	b, idp := oauthBroker(t, time.Minute, broker.TopicSpec{Name: "in", Partitions: 1}, broker.TopicSpec{Name: "out", Partitions: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "run", "--brokers", b.Addr(), "--input", "in", "--output", "out",
		"--sasl-mechanism", "oauthbearer", "--sasl-oauth-token-endpoint", idp.TokenURL(), "--sasl-oauth-client-id", "bloomgate",
		"--checkpoint-url", "file://"+t.TempDir(), "--metrics-addr", "")
	cmd.Env = append(os.Environ(), "BLOOMGATE_SASL_OAUTH_CLIENT_SECRET=wrong")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	_ = cmd.Run()
	took := time.Since(start)
	if code := cmd.ProcessState.ExitCode(); code != exitUsage {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitUsage, stderr.String())
	}
	for _, want := range []string{"--sasl-oauth-token-endpoint", "--sasl-oauth-client-id", "BLOOMGATE_SASL_OAUTH_CLIENT_SECRET", "invalid_client"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	if took > 5*time.Second {
		t.Errorf("took %s, want at most 5 s", took)
	}
}

// TestLoadgenOAuthTokenFile: loadgen writes with a token from a file.
func TestLoadgenOAuthTokenFile(t *testing.T) {
	b, idp := oauthBroker(t, time.Minute, broker.TopicSpec{Name: "t", Partitions: 1})
	tok, err := idp.Mint("loadgen", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, "loadgen", "--brokers", b.Addr(), "--topic", "t", "--count", "100", "--quiet",
		"--sasl-mechanism", "oauthbearer", "--sasl-oauth-token-file", file).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "events=100 ") {
		t.Fatalf("loadgen with a token file: %v\n%s", err, out)
	}
	if p := b.OAuthStats().Principals(); len(p) == 0 || p[0] != "loadgen" {
		t.Errorf("principals %v, want loadgen", p)
	}
}
