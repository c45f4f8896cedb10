package deploy

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/proctest"
)

// TestSecretsNotLogged runs the binary with a SASL password and S3 keys at
// debug level, against a broker that refuses connections, and checks that
// no secret reaches the log.
func TestSecretsNotLogged(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary; not in -short")
	}
	const (
		saslSecret = "sasl-pw-Zq81"
		awsSecret  = "aws-secret-Xk27"
		awsKeyID   = "AKIADEPLOYTEST"
	)
	p := proctest.Start(t, proctest.Config{Name: "bloomgate run", Path: binary, Args: []string{"run",
		"--brokers", "127.0.0.1:1", "--input", "in", "--output", "out",
		"--sasl-mechanism", "scram-sha-512", "--sasl-username", "bloomgate",
		"--checkpoint-url", "s3://bucket/prefix?endpoint=http://127.0.0.1:1&region=us-east-1",
		"--metrics-addr", "127.0.0.1:0", "--log-level", "debug", "--log-format", "json"},
		Env: append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
			return strings.HasPrefix(kv, "BLOOMGATE_") || strings.HasPrefix(kv, "AWS_")
		}), "BLOOMGATE_SASL_PASSWORD="+saslSecret, "AWS_ACCESS_KEY_ID="+awsKeyID, "AWS_SECRET_ACCESS_KEY="+awsSecret),
		Keep: 64 << 20, // the whole log is searched for secrets
	})
	// Wait (bounded) until the worker has logged its settings and tried
	// the brokers, then stop it.
	if _, err := p.WaitFor(regexp.MustCompile(`brokers unreachable`), 15*time.Second); err != nil {
		t.Fatalf("no connection attempt logged: %v", err)
	}
	_ = p.Stop(15 * time.Second)
	log := p.Output()
	if !strings.Contains(log, `"sasl_password":"[redacted]"`) {
		t.Errorf("settings not logged with a redacted password:\n%s", log)
	}
	for _, secret := range []string{saslSecret, awsSecret} {
		if strings.Contains(log, secret) {
			t.Errorf("log contains the secret %q:\n%s", secret, log)
		}
	}
}
