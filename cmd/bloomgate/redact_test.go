package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestCheckpointURLSecretNotEchoed: a checkpoint URL with an unknown
// parameter carrying a secret is refused by run, dev and inspect with exit
// code 2, naming the parameter, and the secret appears in none of their
// output.
func TestCheckpointURLSecretNotEchoed(t *testing.T) {
	const secret = "wJalrXUtnFEMI-K7MDENG"
	url := "s3://bucket/prefix?region=eu-west-1&aws_secret_access_key=" + secret
	for _, args := range [][]string{
		{"run", "--brokers", "127.0.0.1:1", "--input", "in", "--output", "out", "--metrics-addr", "", "--checkpoint-url", url},
		{"dev", "--events", "10", "--metrics-addr", "", "--checkpoint-url", url},
		{"inspect", url},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var stdout, stderr bytes.Buffer
		code := run(ctx, args, &stdout, &stderr)
		cancel()
		out := stdout.String() + stderr.String()
		if code != exitUsage || strings.Contains(out, secret) || !strings.Contains(out, `unknown parameter "aws_secret_access_key"`) {
			t.Errorf("bloomgate %s: exit %d (want %d), output:\n%s", args[0], code, exitUsage, out)
		}
	}
}
