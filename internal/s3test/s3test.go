// Package s3test runs a real S3-compatible server (versitygw with its posix
// backend) on 127.0.0.1 for tests, and an HTTP proxy that injects faults in
// front of it.
//
// The versitygw binary is found through the environment variable
// BLOOMGATE_VERSITYGW, else on PATH. When it is absent the test is skipped
// with the reason, or fails when BLOOMGATE_REQUIRE_TOOLS=1 (how `make test`
// runs, after installing the binary).
//
// Starting a server costs ~50-200 ms; each server has its own data directory
// and port, so tests using it may run in parallel.
package s3test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// Default credentials of the root user of a test server.
const (
	AccessKey = "bloomgate-test"
	SecretKey = "bloomgate-test-secret"
	Region    = "us-east-1"
	Bucket    = "bloomgate"
)

// Server is a running versitygw process serving one bucket.
type Server struct {
	t      testing.TB
	bin    string
	dir    string
	addr   string // 127.0.0.1:PORT
	logBuf *lockedBuffer

	mu  sync.Mutex
	cmd *exec.Cmd
	// exited is closed when the current process has exited.
	exited chan struct{}
}

// Binary returns the path of the versitygw binary, or an error saying why
// none was found.
func Binary() (string, error) {
	if p := os.Getenv("BLOOMGATE_VERSITYGW"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("BLOOMGATE_VERSITYGW=%s: %w", p, err)
		}
		return p, nil
	}
	p, err := exec.LookPath("versitygw")
	if err != nil {
		return "", fmt.Errorf("versitygw not found (set BLOOMGATE_VERSITYGW or put it on PATH; `make deps` installs it): %w", err)
	}
	return p, nil
}

// SkipOrFatal skips the test with reason, or fails it when the environment
// demands every tool (BLOOMGATE_REQUIRE_TOOLS=1).
func SkipOrFatal(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv("BLOOMGATE_REQUIRE_TOOLS") == "1" {
		t.Fatalf("required tool missing: %s", reason)
	}
	t.Skip(reason)
}

// Start launches versitygw on a free 127.0.0.1 port with a fresh data
// directory, waits until it answers, creates the bucket Bucket and stops the
// server when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		SkipOrFatal(t, err.Error())
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir(), logBuf: &lockedBuffer{}}
	addr, err := freeAddr()
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	s.addr = addr
	if err := s.start(); err != nil {
		t.Fatalf("starting versitygw: %v\n%s", err, s.logBuf.String())
	}
	t.Cleanup(s.Stop)
	// Created through the API (not as a directory) so that the bucket's
	// metadata (owner, ACL) exists.
	if err := s.createBucket(); err != nil {
		t.Fatalf("creating bucket: %v\n%s", err, s.logBuf.String())
	}
	return s
}

// Endpoint is the base URL of the S3 API, e.g. http://127.0.0.1:40123.
func (s *Server) Endpoint() string { return "http://" + s.addr }

// Addr is the listen address host:port.
func (s *Server) Addr() string { return s.addr }

// Dir is the posix root directory; the bucket is the directory Dir()/Bucket.
func (s *Server) Dir() string { return s.dir }

// URL returns an s3:// URL for prefix in the test bucket, pointing at this
// server (path-style, region us-east-1). Credentials come from the
// environment: call SetEnv first, or use the AWS_* variables you need.
func (s *Server) URL(prefix string) string {
	return URLFor(s.Endpoint(), prefix)
}

// URLFor builds an s3:// URL of the test bucket for an endpoint, e.g. a
// fault-injecting proxy in front of the server.
func URLFor(endpoint, prefix string) string {
	u := "s3://" + Bucket
	if prefix = strings.Trim(prefix, "/"); prefix != "" {
		u += "/" + prefix
	}
	return u + "?endpoint=" + endpoint + "&region=" + Region
}

// SetEnv points the standard AWS credential chain at the server's root user
// for the rest of the test (t.Setenv: not for parallel tests).
func (s *Server) SetEnv(t testing.TB) {
	t.Helper()
	SetEnv(t)
}

// SetEnv sets AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_REGION to the test
// credentials and isolates the test from ~/.aws files.
func SetEnv(t testing.TB) {
	t.Helper()
	type setenver interface{ Setenv(k, v string) }
	se, ok := t.(setenver)
	if !ok {
		t.Fatalf("s3test.SetEnv needs *testing.T or *testing.B")
	}
	se.Setenv("AWS_ACCESS_KEY_ID", AccessKey)
	se.Setenv("AWS_SECRET_ACCESS_KEY", SecretKey)
	se.Setenv("AWS_REGION", Region)
	se.Setenv("AWS_SESSION_TOKEN", "")
	se.Setenv("AWS_PROFILE", "")
	se.Setenv("AWS_CONFIG_FILE", filepath.Join(os.DevNull, "none"))
	se.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(os.DevNull, "none"))
	se.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// Log returns what the server printed so far (for failure messages).
func (s *Server) Log() string { return s.logBuf.String() }

func (s *Server) start() error {
	cmd := exec.Command(s.bin,
		"--access", AccessKey, "--secret", SecretKey,
		"--region", Region,
		"--port", s.addr, "--keep-alive", "--quiet",
		"posix", s.dir)
	cmd.Stdout = s.logBuf
	cmd.Stderr = s.logBuf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("running %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	return s.waitReady(exited)
}

func (s *Server) waitReady(exited chan struct{}) error {
	deadline := time.Now().Add(15 * time.Second)
	client := &http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errors.New("versitygw exited during start")
		default:
		}
		// Any HTTP answer (even 403 for an unsigned request) means the
		// listener is up.
		resp, err := client.Get(s.Endpoint() + "/")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("versitygw not answering after 15s")
}

// Stop kills the server and waits for it; safe to call more than once.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// Restart stops the server (if running) and starts it again on the same
// address and data directory.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	// The port may linger briefly after kill; retry for a moment.
	var err error
	for i := 0; i < 50; i++ {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("restarting versitygw: %v\n%s", err, s.logBuf.String())
}

func (s *Server) createBucket() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := s.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(Bucket)})
	var owned *types.BucketAlreadyOwnedByYou
	var exists *types.BucketAlreadyExists
	if err != nil && !errors.As(err, &owned) && !errors.As(err, &exists) {
		return fmt.Errorf("creating bucket %s: %w", Bucket, err)
	}
	return nil
}

// Client returns an S3 client for the server with the root credentials,
// path-style addressing and no retries (tests see every error).
func (s *Server) Client() *s3.Client {
	return ClientFor(s.Endpoint())
}

// ClientFor returns an S3 client with the test credentials for endpoint.
func ClientFor(endpoint string) *s3.Client {
	return s3.New(s3.Options{
		Region:       Region,
		BaseEndpoint: aws.String(endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(AccessKey, SecretKey, ""),
		Retryer:      aws.NopRetryer{},
	})
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	l.Close()
	return addr, nil
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 1<<20 { // keep the last MiB-ish; servers can be chatty
		b.buf.Reset()
	}
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
