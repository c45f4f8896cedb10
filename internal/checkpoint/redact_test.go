package checkpoint

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

// TestRedactURL pins what logs and errors show of a checkpoint URL.
func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"s3://bucket/prefix?endpoint=http://127.0.0.1:7070&region=us-east-1", "s3://bucket/prefix?endpoint=http://127.0.0.1:7070&region=us-east-1"},
		{"file:///var/lib/bloomgate/checkpoints", "file:///var/lib/bloomgate/checkpoints"},
		{"mem://name/p", "mem://name/p"},
		{"s3://AKIAEXAMPLE:s3cr3t@bucket/p", "s3://bucket/p"},
		{"s3://bucket/p?region=eu-west-1&aws_secret_access_key=s3cr3t", "s3://bucket/p?region=eu-west-1&aws_secret_access_key=REDACTED"},
		{"s3://bucket/p?token=a&token=b&region=x", "s3://bucket/p?token=REDACTED&token=REDACTED&region=x"},
		{"s3://bucket/p?endpoint=http://minio:s3cr3t@minio:9000", "s3://bucket/p?endpoint=http://minio:9000"},
		{"s3://bucket/p?endpoint=http%3A%2F%2Fu%3As3cr3t%40minio%3A9000", "s3://bucket/p?endpoint=http://minio:9000"},
		{"s3://bucket/p?endpoint=http://minio:9000?key%3Ds3cr3t", "s3://bucket/p?endpoint=http://minio:9000?key=REDACTED"},
		{"file:///dir?secret=s3cr3t", "file:///dir?secret=REDACTED"},
		{"s3://bucket/p?flag&empty=", "s3://bucket/p?flag&empty="},
		{"s3://bucket/p?s3cr3t%40x=1", "s3://bucket/p?REDACTED"},
		{"s3://bucket/p?x=%zz", "s3://bucket/p?x=REDACTED"},
		{"s3://bucket/p#s3cr3t", "s3://bucket/p#REDACTED"},
		{"s3://AKIA:s3cr3t/p", "s3:(a URL that does not parse; not shown)"},
		{"::s3cr3t", "(a URL that does not parse; not shown)"},
	} {
		if got := RedactURL(tc.in); got != tc.want {
			t.Errorf("RedactURL(%q)\n got  %q\n want %q", tc.in, got, tc.want)
		}
	}
}

// TestUnknownParameterNotEchoed: a mistyped parameter carrying a secret is
// refused by name, and its value appears neither in the error nor in the
// store's log.
func TestUnknownParameterNotEchoed(t *testing.T) {
	const secret = "wJalrXUtnFEMI-K7MDENG"
	var logs bytes.Buffer
	for _, raw := range []string{
		"s3://bucket/p?region=eu-west-1&aws_secret_access_key=" + secret,
		"file:///tmp/x?aws_secret_access_key=" + secret,
		"mem://m?aws_secret_access_key=" + secret,
		"s3://bucket/p?aws_secret_access_key=%zz" + secret,
	} {
		_, err := Open(context.Background(), raw, Options{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
		if err == nil {
			t.Fatalf("Open(%s) accepted an unknown parameter", raw)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("Open's error repeats the secret: %v", err)
		}
		if !strings.Contains(err.Error(), "aws_secret_access_key") {
			t.Errorf("Open's error does not name the parameter: %v", err)
		}
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("the log repeats the secret:\n%s", logs.String())
	}
}
