package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// storeErrorEnv is the environment of `bloomgate run` without any AWS
// credentials: no variables, no shared files, no instance metadata.
func storeErrorEnv(home string) []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "AWS_") || strings.HasPrefix(kv, "BLOOMGATE_") || strings.HasPrefix(kv, "HOME=")
	})
	return append(env, "HOME="+home, "AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE="+filepath.Join(home, "none"), "AWS_SHARED_CREDENTIALS_FILE="+filepath.Join(home, "none"))
}

// runBinary runs the built binary with env in dir.
func runBinary(t *testing.T, dir string, env []string, args ...string) (stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir, cmd.Env = dir, env
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return errb.String(), code
}

// TestCheckpointStoreErrors: what `bloomgate run` says when the checkpoint
// store cannot be used, pinned by testdata/checkpoint-store-errors.txt:
// every message names --checkpoint-url (or --exact-dir) and the fix, with
// exit code 2, and nothing else reaches stderr (no SDK log line, no raw
// credential chain). A path instead of a URL suggests the file:// URL;
// missing S3 credentials name the variables and the Secret; a directory
// the process may not write names the user and the fix (as root, the
// binary runs as user nobody for it).
func TestCheckpointStoreErrors(t *testing.T) {
	dir := t.TempDir()
	base := []string{"run", "--brokers", "127.0.0.1:1", "--input", "in", "--output", "out", "--metrics-addr", "", "--log-level", "warn"}
	readOnly := filepath.Join(dir, "read-only")
	if err := os.Mkdir(readOnly, 0o555); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		args   []string
		nobody bool // needs a user who may not write readOnly
	}{
		{"an absolute path", []string{"--checkpoint-url", "/var/lib/bloomgate"}, false},
		{"a relative path", []string{"--checkpoint-url", "ck/orders"}, false},
		{"a bare name", []string{"--checkpoint-url", "my-bucket"}, false},
		{"no S3 credentials", []string{"--checkpoint-url", "s3://my-bucket/ck?endpoint=http://127.0.0.1:1&region=us-east-1"}, false},
		{"a read-only directory", []string{"--checkpoint-url", "file://" + readOnly + "/ck"}, true},
		{"a read-only exact-dir", []string{"--checkpoint-url", "mem://ck", "--exact", "--exact-dir", readOnly + "/exact"}, true},
	}
	timestamp := regexp.MustCompile(`(?m)^time=\S+ `)
	uid := regexp.MustCompile(`\buid \d+|chown \d+`)
	var got strings.Builder
	for _, tc := range cases {
		var stderr string
		var code int
		args := append(slices.Clone(base), tc.args...)
		if tc.nobody && os.Geteuid() == 0 {
			_, stderr, code = asNobody(t, dir, args...)
		} else {
			stderr, code = runBinary(t, dir, storeErrorEnv(dir), args...)
		}
		if code != exitUsage {
			t.Errorf("%s: exit %d, want %d:\n%s", tc.name, code, exitUsage, stderr)
		}
		if strings.Contains(stderr, "SDK ") || strings.Contains(stderr, "failed to refresh cached credentials") {
			t.Errorf("%s: the AWS SDK's own words reached stderr:\n%s", tc.name, stderr)
		}
		stderr = timestamp.ReplaceAllString(stderr, "")
		stderr = strings.ReplaceAll(stderr, dir, "/DIR")
		stderr = uid.ReplaceAllStringFunc(stderr, func(m string) string { return strings.Fields(m)[0] + " UID" })
		fmt.Fprintf(&got, "== %s: bloomgate run … %s\n%s\n", tc.name, strings.Join(tc.args, " "), stderr)
	}
	golden(t, "checkpoint-store-errors.txt", strings.ReplaceAll(got.String(), dir, "/DIR"))
}
