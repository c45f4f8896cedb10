package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/brokercheck"
	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/s3test"
)

// TestRunChecksCreateOnly: `bloomgate run` refuses a checkpoint store that
// ignores create-only writes (versitygw behind a proxy dropping
// If-None-Match) with exit code 2 and a message naming the store and the
// way out; starts on the same store with the check skipped (warning) and on
// a healthy store (info line). The brokers are unreachable: every case
// ends before or while contacting them. (An unreachable store:
// TestCreateOnlyCheckRetriesUnreachable.)
func TestRunChecksCreateOnly(t *testing.T) {
	srv := s3test.Start(t)
	s3test.SetEnv(t)
	proxy := s3test.NewFaultProxy(t, srv.Endpoint())
	proxy.Inject(func(*http.Request) s3test.Fault { return s3test.Fault{StripIfNoneMatch: true} })
	start := func(timeout time.Duration, url string, extra ...string) (int, string, time.Duration) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		args := append([]string{"run", "--brokers", "127.0.0.1:1", "--input", "in", "--output", "out",
			"--metrics-addr", "", "--checkpoint-url", url}, extra...)
		var stdout, stderr bytes.Buffer
		began := time.Now()
		code := run(ctx, args, &stdout, &stderr)
		return code, stderr.String(), time.Since(began)
	}

	stripped := s3test.URLFor(proxy.Endpoint(), "ck")
	code, stderr, _ := start(30*time.Second, stripped)
	if code != exitUsage {
		t.Fatalf("store ignoring create-only writes: exit %d, want %d; stderr:\n%s", code, exitUsage, stderr)
	}
	for _, want := range []string{"ignores create-only writes", "fencing cannot work", proxy.Endpoint(), "--checkpoint-skip-create-only-check"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}

	// Skipped: no check, a warning, and the worker goes on to the brokers.
	_, stderr, _ = start(2*time.Second, stripped, "--checkpoint-skip-create-only-check")
	if !strings.Contains(stderr, "create-only check of the checkpoint store SKIPPED") || strings.Contains(stderr, "fencing cannot work") {
		t.Errorf("with the check skipped, stderr:\n%s", stderr)
	}
	if !strings.Contains(stderr, "level=WARN") {
		t.Errorf("skipping is not logged as a warning:\n%s", stderr)
	}

	_, stderr, _ = start(2*time.Second, srv.URL("ck"))
	_, line, ok := strings.Cut(stderr, `level=INFO msg="checkpoint store honours create-only writes"`)
	if !ok {
		t.Errorf("healthy store: no info line of the check:\n%s", stderr)
	}
	line, _, _ = strings.Cut(line, "\n")
	t.Logf("healthy store:%s", line)

}

// TestCreateOnlyCheckRetriesUnreachable: a store that refuses connections
// is retried, each retry logged with the time left, until the start-up
// bound (brokercheck.StartupBound in run; 2 s here), then reported naming
// --checkpoint-url, the attempts, the bound and the refused connection.
func TestCreateOnlyCheckRetriesUnreachable(t *testing.T) {
	if createOnlyCheckTimeout != brokercheck.StartupBound {
		t.Errorf("the store's start-up bound %s is not the brokers' %s", createOnlyCheckTimeout, brokercheck.StartupBound)
	}
	s3test.SetEnv(t)
	ctx := context.Background()
	store, err := checkpoint.Open(ctx, s3test.URLFor("http://127.0.0.1:1", "ck"), checkpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var log bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	start := time.Now()
	err = checkCreateOnly(ctx, store, false, 2*time.Second, logger)
	took := time.Since(start)
	retries := strings.Count(log.String(), `msg="checkpoint store unreachable; retrying until the start-up bound, then stopping"`)
	var ue usageError
	if err == nil || errors.As(err, &ue) || retries < 1 || took < 2*time.Second || took > 10*time.Second {
		t.Fatalf("refused store: %v after %s (%d retries logged, usage error: %v)\n%s", err, took, retries, errors.As(err, &ue), log.String())
	}
	for _, want := range []string{"--checkpoint-url s3://", "the store did not answer in ", "over 2s (the start-up bound, as for --brokers)",
		"connection refused", "check the endpoint"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if !strings.Contains(log.String(), "gives_up_in=") {
		t.Errorf("retries do not say when the check gives up:\n%s", log.String())
	}
}

// TestCreateOnlyCheckTimeout: a store that accepts connections and never
// answers ends the check at its time bound with an error saying so.
func TestCreateOnlyCheckTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() { // accept and hold every connection, answer nothing
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	s3test.SetEnv(t)
	ctx := context.Background()
	store, err := checkpoint.Open(ctx, s3test.URLFor("http://"+ln.Addr().String(), "ck"), checkpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	start := time.Now()
	err = checkCreateOnly(ctx, store, false, 300*time.Millisecond, logger)
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "the store did not answer in 1 attempt over 300ms (the start-up bound, as for --brokers)") ||
		!strings.Contains(err.Error(), ln.Addr().String()) || took > 5*time.Second {
		t.Fatalf("check of a silent store: %v after %s", err, took)
	}
	t.Logf("silent store: %v after %s", err, took.Round(time.Millisecond))
}
