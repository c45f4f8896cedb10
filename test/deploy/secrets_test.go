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
// debug level and checks that no secret reaches the log: once failing on
// the unreachable checkpoint store (the create-only check at start-up),
// once with that check skipped, failing on a broker that refuses
// connections.
func TestSecretsNotLogged(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary; not in -short")
	}
	const (
		saslSecret = "sasl-pw-Zq81"
		awsSecret  = "aws-secret-Xk27"
		awsKeyID   = "AKIADEPLOYTEST"
	)
	for _, tc := range []struct {
		name  string
		extra []string
		wait  string // the failure the run must reach (bounded)
	}{
		{"store unreachable", nil, `create-only check of s3://bucket/prefix.*unavailable`},
		{"brokers unreachable", []string{"--checkpoint-skip-create-only-check"}, `brokers unreachable`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"run",
				"--brokers", "127.0.0.1:1", "--input", "in", "--output", "out",
				"--sasl-mechanism", "scram-sha-512", "--sasl-username", "bloomgate",
				"--checkpoint-url", "s3://bucket/prefix?endpoint=http://127.0.0.1:1&region=us-east-1",
				"--metrics-addr", "127.0.0.1:0", "--log-level", "debug", "--log-format", "json"}, tc.extra...)
			p := proctest.Start(t, proctest.Config{Name: "bloomgate run", Path: binary, Args: args,
				Env: append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
					return strings.HasPrefix(kv, "BLOOMGATE_") || strings.HasPrefix(kv, "AWS_")
				}), "BLOOMGATE_SASL_PASSWORD="+saslSecret, "AWS_ACCESS_KEY_ID="+awsKeyID, "AWS_SECRET_ACCESS_KEY="+awsSecret),
				Keep: 64 << 20, // the whole log is searched for secrets
			})
			if _, err := p.WaitFor(regexp.MustCompile(tc.wait), 30*time.Second); err != nil {
				t.Fatalf("failure %q not logged: %v", tc.wait, err)
			}
			_ = p.Stop(15 * time.Second)
			log := p.Output()
			if !strings.Contains(log, `"sasl-password":"[redacted]"`) {
				t.Errorf("settings not logged with a redacted password:\n%s", log)
			}
			for _, secret := range []string{saslSecret, awsSecret, awsKeyID} {
				if strings.Contains(log, secret) {
					t.Errorf("log contains the secret %q:\n%s", secret, log)
				}
			}
		})
	}
}
